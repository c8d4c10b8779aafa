/* tt_simd_loops.h — whole loops and window helpers the kernels call: a pointwise kernel's channel pairs with their float32
 * requantization (tt_pw2x2p_fp32_sat_s8), the zero point's sum (tt_sum_s8), a window's clipped taps (tt_tap_begin,
 * tt_tap_end).
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_LOOPS_H
#define TT_SIMD_LOOPS_H

/* Every output channel pair of two pixels (a pointwise kernel's, conv2d.c.j2 "ci" with "packed", float32
 * requantization, the full int8 range): channels o, o + 1 at both pixels (tt_dot2x2p_s8 from the bias pair against
 * rows o, o + 1 of wpk, n / 2 words each), requantized (tt_requantize_fp32_s8x2), out_zp added, saturated to int8
 * and stored at y[o], y[o + 1] and y1[o], y1[o + 1]; Co even, n a constant multiple of 4. */
static inline void tt_pw2x2p_fp32_sat_s8(const tt_xw2_t *xw, const uint32_t *wpk, const int32_t *bias,
                                         const int32_t *rq, int n, int Co, int32_t out_zp, int8_t *y, int8_t *y1) {
#ifdef TT_PW2X2P_ASM
    if (__builtin_constant_p(n) && n <= 252) {  /* LDRD offsets within 1020 bytes */
        const int8_t *const yend4 = y + (Co & ~3), *const yend = y + Co;
        if (out_zp == -128) {
            TT_PW2X2P_ASM(xw, wpk, bias, rq, y, y1, yend4, yend, out_zp, n / 4, n <= 48, TT_PW2X2P_USAT);
        } else {
            TT_PW2X2P_ASM(xw, wpk, bias, rq, y, y1, yend4, yend, out_zp, n / 4, n <= 48, TT_PW2X2P_SSAT);
        }
        return;
    }
#endif
    for (int o = 0; o < Co; o += 2, wpk += n, bias += 2, rq += 4, y += 2, y1 += 2) {
        int32_t a[4] = {bias[0], bias[1], bias[0], bias[1]}, r[4];  /* channel o at both pixels, then o + 1 */
        tt_dot2x2p_s8(xw, wpk, wpk + n / 2, n, a);
        tt_requantize_fp32_s8x2(a[0], rq[0], rq[1], a[2], rq[0], rq[1], r);
        tt_requantize_fp32_s8x2(a[1], rq[2], rq[3], a[3], rq[2], rq[3], r + 2);
        tt_store2_sat_s8(y, r[0] + out_zp, r[2] + out_zp);
        tt_store2_sat_s8(y1, r[1] + out_zp, r[3] + out_zp);
    }
}

/* sum_c (x[c] - in_zp), c < n: the weight zero point's term, (x - in_zp) . (w - w_zp) = x . w - w_zp * this. */
static inline int32_t tt_sum_s8(const int8_t *x, int n, int32_t in_zp) {
    int32_t acc = 0;
    for (int c = 0; c < n; c++) {
        acc += (int32_t)x[c] - in_zp;
    }
    return acc;
}

/* The taps t in [begin, end) of one window dimension whose input index o0 + t * d lies in [0, n), o0 being the
 * first tap's (negative in the padding): one clipped range per output pixel instead of a check per tap. */
static inline int tt_tap_begin(int o0, int d) {
    return o0 < 0 ? (-o0 + d - 1) / d : 0;
}

static inline int tt_tap_end(int o0, int n, int taps, int d) {
    const int room = n - o0;
    const int t = room <= 0 ? 0 : (room + d - 1) / d;
    return t < taps ? t : taps;
}

#endif /* TT_SIMD_LOOPS_H */
