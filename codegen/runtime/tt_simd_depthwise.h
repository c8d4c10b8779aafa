/* tt_simd_depthwise.h — the depthwise taps: four neighbouring channels (tt_mac4_s8, tt_mac4p_s8) and, on the DSP cores, one channel's
 * rows (tt_gather16_s8, tt_dwrow2_s1, tt_dwrow2_s2).
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_DEPTHWISE_H
#define TT_SIMD_DEPTHWISE_H

#if TT_ARM_DSP

/* One depthwise tap of four neighbouring channels: acc[q] += (x[q] - in_zp) * w_q, q < 4, |w_q| < 2^15. One load
 * feeds the four channels: SXTAB16 gives x0, x2 and (rotated) x1, x3 as halfwords, SMLABB / SMLATB multiply one. */
static inline void tt_mac4_s8(const int8_t *x, int32_t in_zp, int32_t w0, int32_t w1, int32_t w2, int32_t w3,
                              int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const uint32_t xv = tt_read_u32(x);
    const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
    acc[0] = tt_smlabb(xa, w0, acc[0]);
    acc[1] = tt_smlabb(xb, w1, acc[1]);
    acc[2] = tt_smlatb(xa, w2, acc[2]);
    acc[3] = tt_smlatb(xb, w3, acc[3]);
}

/* tt_mac4_s8 with the four weights packed as two words of int16 halfwords, w02 = (w_0, w_2) and w13 = (w_1, w_3)
 * (bindings/conv2d.py packed_taps): two weight loads instead of four, SMLABB / SMLATT pick the halves. */
static inline void tt_mac4p_s8(const int8_t *x, int32_t in_zp, uint32_t w02, uint32_t w13, int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const uint32_t xv = tt_read_u32(x);
    const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
    acc[0] = tt_smlabb(xa, (int32_t)w02, acc[0]);
    acc[1] = tt_smlabb(xb, (int32_t)w13, acc[1]);
    acc[2] = tt_smlatt(xa, w02, acc[2]);
    acc[3] = tt_smlatt(xb, w13, acc[3]);
}

/* One channel of a depthwise convolution (kernels/depthwise_planar.c.j2): the products of one window row of
 * kw = 2m + 1 taps with two neighbouring outputs, from a row r of int16 inputs as words P_k = (r[2k], r[2k + 1])
 * whose halfword 0 is the first output's first tap. w: the row's taps as halfword pairs (tt_pack16), m words
 * E_k = (w_2k, w_2k+1) then m words O_k = (w_2k-1, w_2k), k = 1 .. m.
 * Stride 1, outputs at r[0] and r[1]: acc0 += sum_j w_j r[j] = sum_k<m P_k . E_k + r[2m] w_2m, acc1 += sum_j w_j
 * r[j + 1] = r[1] w_0 + sum_k>=1 P_k . O_k: m + 1 words, 2m + 2 multiply-accumulates (SMLAD, and SMLABT / SMLATB
 * for the halves). */
static inline void tt_dwrow2_s1(const uint32_t *r, const uint32_t *w, int m, int32_t *acc0, int32_t *acc1) {
    int32_t a0 = *acc0, a1 = tt_smlatb(r[0], (int32_t)w[0], *acc1);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8  /* whole: m is a constant */
#endif
    for (int k = 0; k < m; k++) {
        a0 = tt_smlad(r[k], w[k], a0);
        a1 = tt_smlad(r[k + 1], w[m + k], a1);
    }
    *acc0 = tt_smlabt(r[m], w[2 * m - 1], a0);
    *acc1 = a1;
}

/* tt_dwrow2_s1 at stride 2, outputs at r[0] and r[2]: acc0 += sum_k<m P_k . E_k + r[2m] w_2m, acc1 the same from
 * P_k+1: m + 2 words, 2m + 2 multiply-accumulates (E_k and the top of O_m only). */
static inline void tt_dwrow2_s2(const uint32_t *r, const uint32_t *w, int m, int32_t *acc0, int32_t *acc1) {
    int32_t a0 = *acc0, a1 = *acc1;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8  /* whole: m is a constant */
#endif
    for (int k = 0; k < m; k++) {
        a0 = tt_smlad(r[k], w[k], a0);
        a1 = tt_smlad(r[k + 1], w[k], a1);
    }
    *acc0 = tt_smlabt(r[m], w[2 * m - 1], a0);
    *acc1 = tt_smlabt(r[m + 1], w[2 * m - 1], a1);
}

/* d[k] = (s[2k c], s[(2k + 1) c]) as int16 halfwords, low first, k < n: 2n inputs c bytes apart gathered into
 * the ring of the planar depthwise kernel (kernels/depthwise_planar.c.j2), d word-aligned; four words at a time as
 * asm blocks (TT_GATHER16_ASM), c a constant of at most 585 (the blocks' offsets, up to 7c, are LDRSB immediates:
 * bindings/conv2d.py PLANAR_C_MAX). */
static inline void tt_gather16_s8(uint32_t *d, const int8_t *s, int c, int n) {
    int k = 0;
#ifdef TT_GATHER16_ASM
    for (; k + 4 <= n; k += 4) {
        TT_GATHER16_ASM(d + k, s + 2 * k * c, c);
    }
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#endif
    for (; k < n; k++) {
        d[k] = tt_pkhbt(s[2 * k * c], s[(2 * k + 1) * c]);
    }
}

#else /* portable C: the reference */

/* One depthwise tap of four neighbouring channels: acc[q] += (x[q] - in_zp) * w_q, q < 4. */
static inline void tt_mac4_s8(const int8_t *x, int32_t in_zp, int32_t w0, int32_t w1, int32_t w2, int32_t w3,
                              int32_t acc[4]) {
    acc[0] += ((int32_t)x[0] - in_zp) * w0;
    acc[1] += ((int32_t)x[1] - in_zp) * w1;
    acc[2] += ((int32_t)x[2] - in_zp) * w2;
    acc[3] += ((int32_t)x[3] - in_zp) * w3;
}

/* tt_mac4_s8 with the weights packed as int16 halfwords: w02 = (w_0, w_2), w13 = (w_1, w_3). */
static inline void tt_mac4p_s8(const int8_t *x, int32_t in_zp, uint32_t w02, uint32_t w13, int32_t acc[4]) {
    tt_mac4_s8(x, in_zp, (int16_t)(w02 & 0xFFFFu), (int16_t)(w13 & 0xFFFFu), (int16_t)(w02 >> 16), (int16_t)(w13 >> 16),
               acc);
}

#endif /* TT_ARM_DSP */

#endif /* TT_SIMD_DEPTHWISE_H */
