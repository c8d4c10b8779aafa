/* tt_simd_dot.h — the inner products of pointwise / regular convolution rows and fully connected layers: tt_dot_s8, tt_dot2_s8,
 * the widened inputs (tt_widen_s8, tt_widen2_s8) and their products (tt_dot4w_s8, tt_dot4wp_s8, tt_dot2x2w_s8,
 * tt_dot2x2p_s8, tt_dot2x2_s8).
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_DOT_H
#define TT_SIMD_DOT_H

#if TT_ARM_DSP

/* A widened input vector (tt_widen_s8): int16 pairs, TT_XW_LEN(n) of them for n channels. */
typedef uint32_t tt_xw_t;
#define TT_XW_LEN(n) (((n) + 1) / 2)

static inline uint32_t tt_read_u32(const int8_t *p) {  /* may be unaligned: one LDR on ARMv7E-M */
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* sum_c (x[c] - in_zp) * w[c], c < n: 4 channels per step (bytes 0,2 then 1,3 of each word), then the rest. */
static inline int32_t tt_dot_s8(const int8_t *x, const int8_t *w, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t acc = 0;
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        const uint32_t xv = tt_read_u32(x + c), wv = tt_read_u32(w + c);
        acc = tt_smlad(tt_sxtab16(off, xv), tt_sxtb16(wv), acc);
        acc = tt_smlad(tt_sxtab16_ror8(off, xv), tt_sxtb16_ror8(wv), acc);
    }
    for (; c < n; c++) {
        acc += ((int32_t)x[c] - in_zp) * (int32_t)w[c];
    }
    return acc;
}

/* Two rows at once, sharing the widened input: acc[0] += x . w0, acc[1] += x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t acc[2]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t a0 = acc[0], a1 = acc[1];
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        const uint32_t xv = tt_read_u32(x + c);
        const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
        const uint32_t v0 = tt_read_u32(w0 + c), v1 = tt_read_u32(w1 + c);
        a0 = tt_smlad(xa, tt_sxtb16(v0), a0);
        a0 = tt_smlad(xb, tt_sxtb16_ror8(v0), a0);
        a1 = tt_smlad(xa, tt_sxtb16(v1), a1);
        a1 = tt_smlad(xb, tt_sxtb16_ror8(v1), a1);
    }
    for (; c < n; c++) {
        const int32_t xc = (int32_t)x[c] - in_zp;
        a0 += xc * (int32_t)w0[c];
        a1 += xc * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* The input vector of one output pixel widened once for all its output channels: xw holds x[c] - in_zp, c < n, as
 * int16 pairs, four channels a group in the order SXTB16 splits a weight word (x0, x2 | x1, x3), the last n % 4 in
 * order. */
static inline void tt_widen_s8(tt_xw_t *xw, const int8_t *x, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const int rest = n % 4;
    const int8_t *end4 = x + (n - rest);
    for (; x != end4; x += 4, xw += 2) {
        const uint32_t xv = tt_read_u32(x);
        xw[0] = tt_sxtab16(off, xv);
        xw[1] = tt_sxtab16_ror8(off, xv);
    }
    for (int c = 0; c < rest; c += 2) {
        xw[c / 2] = tt_pack16((int32_t)x[c] - in_zp, c + 1 < rest ? (int32_t)x[c + 1] - in_zp : 0);
    }
}

/* Four consecutive rows against a widened input (tt_widen_s8): acc[q] += xw . w[q * stride ..], q < 4, over n
 * channels. Rows 2 and 3 are read at an offset from rows 0 and 1: one pointer register fewer. */
static inline void tt_dot4w_s8(const tt_xw_t *xw, const int8_t *w, int stride, int n, int32_t acc[4]) {
    const int8_t *w0 = w, *w1 = w + stride, *end4 = w0 + (n - n % 4), *end = w0 + n;
    const int d = 2 * stride;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT4W_ASM
    if (w0 != end4) {
        TT_DOT4W_ASM(xw, w0, w1, d, end4, a0, a1, a2, a3);
    }
#endif
    for (; w0 != end4; w0 += 4, w1 += 4, xw += 2) {
        const uint32_t xa = xw[0], xb = xw[1];
        uint32_t v = tt_read_u32(w0);
        a0 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a0));
        v = tt_read_u32(w1);
        a1 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a1));
        v = tt_read_u32(w0 + d);
        a2 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a2));
        v = tt_read_u32(w1 + d);
        a3 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a3));
    }
    for (int c = 0; w0 != end; w0++, w1++, c++) {
        const int32_t xc = (int16_t)(xw[c / 2] >> (16 * (c % 2)));
        a0 += xc * (int32_t)w0[0];
        a1 += xc * (int32_t)w1[0];
        a2 += xc * (int32_t)w0[d];
        a3 += xc * (int32_t)w1[d];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot4w_s8 with four rows packed as int16 halfwords and interleaved (bindings/conv2d.py packed_quads: per group of
 * four channels c..c+3 and row q < 4, the words (w_q[c], w_q[c+2]) and (w_q[c+1], w_q[c+3]), the pairs tt_widen_s8
 * makes of the input), n % 4 == 0: per 4 channels 2 widened words and 8 weight words at constant offsets from one
 * pointer (LDRD pairs), 8 SMLAD, no SXTB16 (tt_dot4w_s8: 4 weight words from two pointers, 8 SXTB16). */
static inline void tt_dot4wp_s8(const tt_xw_t *xw, const uint32_t *w, int n, int32_t acc[4]) {
    const uint32_t *end = w + 2 * n;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT4WP_ASM
    if ((n / 4) & 1) {  /* an odd group count: the first group here, then the asm loop's pairs of groups */
        a0 = tt_smlad(xw[1], w[1], tt_smlad(xw[0], w[0], a0));
        a1 = tt_smlad(xw[1], w[3], tt_smlad(xw[0], w[2], a1));
        a2 = tt_smlad(xw[1], w[5], tt_smlad(xw[0], w[4], a2));
        a3 = tt_smlad(xw[1], w[7], tt_smlad(xw[0], w[6], a3));
        xw += 2;
        w += 8;
    }
    if (w != end) {
        TT_DOT4WP_ASM(xw, w, end, a0, a1, a2, a3);
    }
#else
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 2  /* the loop's pointer updates and branch once per 8 channels */
#endif
    for (; w != end; w += 8, xw += 2) {
        const uint32_t xa = xw[0], xb = xw[1];
        a0 = tt_smlad(xb, w[1], tt_smlad(xa, w[0], a0));
        a1 = tt_smlad(xb, w[3], tt_smlad(xa, w[2], a1));
        a2 = tt_smlad(xb, w[5], tt_smlad(xa, w[4], a2));
        a3 = tt_smlad(xb, w[7], tt_smlad(xa, w[6], a3));
    }
#endif
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* Two output pixels' input vectors widened once for all their output channels (tt_dot2x2w_s8): per group of four
 * channels tt_widen_s8's two words of pixel 0, then of pixel 1; the last n % 4 channels one more such group, padded
 * with zeros. TT_XW2_LEN(n) words. */
typedef uint32_t tt_xw2_t;
#define TT_XW2_LEN(n) (4 * (((n) + 3) / 4))

static inline void tt_widen2_s8(tt_xw2_t *xw, const int8_t *x0, const int8_t *x1, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
#ifdef TT_WIDEN2_ASM
    if (__builtin_constant_p(n) && n % 4 == 0 && n <= 252) {  /* conv2d.c.j2 "ci"; STRD offsets within 1020 bytes */
        TT_WIDEN2_ASM(xw, x0, x1, off, n / 4);
        return;
    }
#endif
    const int rest = n % 4, n4 = n - rest;
    for (int c = 0; c < n4; c += 4, xw += 4) {
        const uint32_t v0 = tt_read_u32(x0 + c), v1 = tt_read_u32(x1 + c);
        xw[0] = tt_sxtab16(off, v0);
        xw[1] = tt_sxtab16_ror8(off, v0);
        xw[2] = tt_sxtab16(off, v1);
        xw[3] = tt_sxtab16_ror8(off, v1);
    }
    if (rest) {
        int32_t a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
        for (int c = 0; c < rest; c++) {
            a[c] = (int32_t)x0[n4 + c] - in_zp;
            b[c] = (int32_t)x1[n4 + c] - in_zp;
        }
        xw[0] = tt_pack16(a[0], a[2]);
        xw[1] = tt_pack16(a[1], a[3]);
        xw[2] = tt_pack16(b[0], b[2]);
        xw[3] = tt_pack16(b[1], b[3]);
    }
}

/* Two rows w0, w1 at two pixels against a tt_widen2_s8 buffer: acc[0] += x0 . w0, acc[1] += x0 . w1, acc[2] += x1 . w0,
 * acc[3] += x1 . w1 over n channels. Each weight word is widened once for both pixels, each widened input word read
 * once for both rows: per 4 channels 2 weight loads, 4 SXTB16, 4 widened words, 8 SMLAD. */
/* always_inline: with the asm blocks gcc made it an outlined function of its own (a call per 2 x 2 tile, the
 * accumulators through memory). */
static inline __attribute__((always_inline)) void tt_dot2x2w_s8(const tt_xw2_t *xw, const int8_t *w0, const int8_t *w1,
                                                                 int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT2X2W_ASM
    /* A constant n, a multiple of 4 (conv2d.c.j2 "ci"): the asm block, its LDRD offsets within 1020 bytes. Row w1 at
     * a constant distance from w0 (pair_outputs' rows o, o + 1 of one weight) is read at offsets from w0's
     * register: one fewer. */
    if (__builtin_constant_p(n) && n % 4 == 0 && n <= 252) {
        if (__builtin_constant_p(w1 - w0) && w1 - w0 >= 0 && w1 - w0 + n <= 4095) {
            TT_DOT2X2W_ASM(xw, w0, w0, w1 - w0, n / 4, a0, a1, a2, a3);
        } else {
            TT_DOT2X2W_ASM(xw, w0, w1, 0, n / 4, a0, a1, a2, a3);
        }
        n = 0;
    }
#endif
    const int8_t *end4 = w0 + (n - n % 4);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 16  /* whole, when n is a constant (conv2d.c.j2 "ci"); else in groups of 16 */
#endif
    for (; w0 != end4; w0 += 4, w1 += 4, xw += 4) {
        uint32_t v = tt_read_u32(w0);
        uint32_t wa = tt_sxtb16(v), wb = tt_sxtb16_ror8(v);
        a0 = tt_smlad(xw[1], wb, tt_smlad(xw[0], wa, a0));
        a2 = tt_smlad(xw[3], wb, tt_smlad(xw[2], wa, a2));
        v = tt_read_u32(w1);
        wa = tt_sxtb16(v);
        wb = tt_sxtb16_ror8(v);
        a1 = tt_smlad(xw[1], wb, tt_smlad(xw[0], wa, a1));
        a3 = tt_smlad(xw[3], wb, tt_smlad(xw[2], wa, a3));
    }
    for (int c = 0; c < n % 4; c++) {  /* the rest group: channel c in word c % 2, halfword c / 2 */
        const int32_t x0c = (int16_t)(xw[c % 2] >> (16 * (c / 2))), x1c = (int16_t)(xw[2 + c % 2] >> (16 * (c / 2)));
        a0 += x0c * (int32_t)w0[c];
        a1 += x0c * (int32_t)w1[c];
        a2 += x1c * (int32_t)w0[c];
        a3 += x1c * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with the rows packed as int16 halfwords, per group of four channels (w[c], w[c+2]) and
 * (w[c+1], w[c+3]) (bindings/conv2d.py packed_rows: the words SXTB16 would make of a weight word), n % 4 == 0: per
 * 4 channels 4 weight words (pairs: LDRD), no SXTB16, 4 widened words, 8 SMLAD. */
static inline void tt_dot2x2p_s8(const tt_xw2_t *xw, const uint32_t *w0, const uint32_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT2X2P_ASM
    /* A constant n (conv2d.c.j2 "ci", "kpad"): the asm block, its LDRD offsets within 1020 bytes. Row w1 at a
     * constant distance from w0 (pair_outputs' rows o, o + 1) is read at offsets from w0's register: one fewer. */
    if (__builtin_constant_p(n) && n <= 252) {
        if (__builtin_constant_p(w1 - w0) && w1 - w0 >= 0 && 4 * (w1 - w0) + 2 * n - 8 <= 1020) {
            TT_DOT2X2P_ASM(xw, w0, w0, 4 * (w1 - w0), n / 4, a0, a1, a2, a3);
        } else {
            TT_DOT2X2P_ASM(xw, w0, w1, 0, n / 4, a0, a1, a2, a3);
        }
        n = 0;
    }
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 16  /* whole, when n is a constant (conv2d.c.j2 "ci"); else in groups of 16 */
#endif
    for (int c = 0; c < n; c += 4, w0 += 2, w1 += 2, xw += 4) {
        a0 = tt_smlad(xw[1], w0[1], tt_smlad(xw[0], w0[0], a0));
        a2 = tt_smlad(xw[3], w0[1], tt_smlad(xw[2], w0[0], a2));
        a1 = tt_smlad(xw[1], w1[1], tt_smlad(xw[0], w1[0], a1));
        a3 = tt_smlad(xw[3], w1[1], tt_smlad(xw[2], w1[0], a3));
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with both pixels' inputs widened on the way, x0 and x1 their int8 inputs (too long for a stack
 * buffer, or beside rows of a split weight): acc[0] += (x0 - in_zp) . w0, acc[1] += (x0 - in_zp) . w1, acc[2] +=
 * (x1 - in_zp) . w0, acc[3] += (x1 - in_zp) . w1 over n channels. Per 4 channels 2 input loads and 4 SXTAB16,
 * 2 weight loads and 4 SXTB16, 8 SMLAD: each widened word feeds two SMLAD, where one pixel's two rows
 * (tt_dot2_s8) widen each input word for 2 and each weight word for 2. */
static inline void tt_dot2x2_s8(const int8_t *x0, const int8_t *x1, const int8_t *w0, const int8_t *w1, int n,
                                int32_t in_zp, int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int c = 0;
#ifdef TT_DOT2X2_ASM
    if (__builtin_constant_p(in_zp) && in_zp == 0 && __builtin_constant_p(n) && n > 0 && n % 16 == 0 && n <= 4080 &&
        __builtin_constant_p(w1 - w0) && w1 - w0 == n && x1 == x0 + n) {  /* conv2d.c.j2 "zb", two pixels */
        TT_DOT2X2_ASM(x0, w0, n, a0, a1, a2, a3);
        c = n;
    } else if (__builtin_constant_p(n) && n > 0 && n % 16 == 0 && n <= 4080 && __builtin_constant_p(w1 - w0) &&
               w1 - w0 == n && x1 == x0 + n) {  /* a split weight's pair of rows, two pixels */
        TT_DOT2X2Z_ASM(x0, w0, n, off, a0, a1, a2, a3);
        c = n;
    }
#endif
    for (; c + 4 <= n; c += 4) {
        uint32_t v = tt_read_u32(x0 + c);
        const uint32_t p0 = tt_sxtab16(off, v), p1 = tt_sxtab16_ror8(off, v);
        v = tt_read_u32(x1 + c);
        const uint32_t q0 = tt_sxtab16(off, v), q1 = tt_sxtab16_ror8(off, v);
        v = tt_read_u32(w0 + c);
        uint32_t wa = tt_sxtb16(v), wb = tt_sxtb16_ror8(v);
        a0 = tt_smlad(p1, wb, tt_smlad(p0, wa, a0));
        a2 = tt_smlad(q1, wb, tt_smlad(q0, wa, a2));
        v = tt_read_u32(w1 + c);
        wa = tt_sxtb16(v);
        wb = tt_sxtb16_ror8(v);
        a1 = tt_smlad(p1, wb, tt_smlad(p0, wa, a1));
        a3 = tt_smlad(q1, wb, tt_smlad(q0, wa, a3));
    }
    for (; c < n; c++) {
        const int32_t xc = (int32_t)x0[c] - in_zp, yc = (int32_t)x1[c] - in_zp;
        a0 += xc * (int32_t)w0[c];
        a1 += xc * (int32_t)w1[c];
        a2 += yc * (int32_t)w0[c];
        a3 += yc * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

#else /* portable C: the reference */

/* sum_c (x[c] - in_zp) * w[c], c < n. 16-bit operands (x - in_zp fits int16) so vectorizers use 16x16->32
 * multiply-adds. */
static inline int32_t tt_dot_s8(const int8_t *x, const int8_t *w, int n, int32_t in_zp) {
    const int16_t zp = (int16_t)in_zp;
    int32_t acc = 0;
    for (int c = 0; c < n; c++) {
        acc += (int16_t)(x[c] - zp) * (int16_t)w[c];
    }
    return acc;
}

/* Two rows at once, sharing the input: acc[0] += x . w0, acc[1] += x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t acc[2]) {
    const int16_t zp = (int16_t)in_zp;
    int32_t a0 = acc[0], a1 = acc[1];
    for (int c = 0; c < n; c++) {
        const int16_t xc = (int16_t)(x[c] - zp);
        a0 += xc * (int16_t)w0[c];
        a1 += xc * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* The portable "widened input" is a view of the int8 input and its zero point (tt_widen_s8 copies nothing; the
 * inner products widen on the way, as tt_dot2_s8, in loops gcc vectorizes). */
typedef struct {
    const int8_t *x;
    int32_t in_zp;
} tt_xw_t;
#define TT_XW_LEN(n) 1

static inline void tt_widen_s8(tt_xw_t *xw, const int8_t *x, int n, int32_t in_zp) {
    (void)n;
    xw->x = x;
    xw->in_zp = in_zp;
}

/* Four consecutive rows against a widened input (tt_widen_s8): acc[q] += (x - in_zp) . w[q * stride ..], q < 4,
 * over n channels. */
static inline void tt_dot4w_s8(const tt_xw_t *xw, const int8_t *w, int stride, int n, int32_t acc[4]) {
    tt_dot2_s8(xw->x, w, w + stride, n, xw->in_zp, acc);
    tt_dot2_s8(xw->x, w + 2 * stride, w + 3 * stride, n, xw->in_zp, acc + 2);
}

/* tt_dot4w_s8 with four rows packed as int16 halfwords and interleaved (the DSP form's order), n % 4 == 0. */
static inline void tt_dot4wp_s8(const tt_xw_t *xw, const uint32_t *w, int n, int32_t acc[4]) {
    for (int c = 0; c < n; c++) {
        const int32_t xc = (int16_t)(xw->x[c] - xw->in_zp);
        const int word = c / 4 * 8 + c % 2, shift = 16 * (c % 4 / 2);  /* channel c's halfword of row 0 */
        for (int q = 0; q < 4; q++) {
            acc[q] += xc * (int32_t)(int16_t)(w[word + 2 * q] >> shift);
        }
    }
}

/* Two output pixels' input vectors, x - in_zp as int16: pixel 0's n channels, then pixel 1's (a copy, so that the
 * pixels' outputs may be stored over their inputs once this is made). */
typedef int16_t tt_xw2_t;
#define TT_XW2_LEN(n) (2 * (n))

static inline void tt_widen2_s8(tt_xw2_t *xw, const int8_t *x0, const int8_t *x1, int n, int32_t in_zp) {
    const int16_t zp = (int16_t)in_zp;
    for (int c = 0; c < n; c++) {
        xw[c] = (int16_t)(x0[c] - zp);
        xw[n + c] = (int16_t)(x1[c] - zp);
    }
}

/* Two rows w0, w1 at two pixels against a tt_widen2_s8 buffer: acc[0] += x0 . w0, acc[1] += x0 . w1, acc[2] += x1 . w0,
 * acc[3] += x1 . w1 over n channels. */
static inline void tt_dot2x2w_s8(const tt_xw2_t *xw, const int8_t *w0, const int8_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        a0 += xw[c] * (int16_t)w0[c];
        a1 += xw[c] * (int16_t)w1[c];
        a2 += xw[n + c] * (int16_t)w0[c];
        a3 += xw[n + c] * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with the rows packed as int16 halfwords (the DSP form's order), n % 4 == 0. */
static inline void tt_dot2x2p_s8(const tt_xw2_t *xw, const uint32_t *w0, const uint32_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        const int word = c / 4 * 2 + c % 2, shift = 16 * (c % 4 / 2);  /* channel c's halfword */
        const int32_t w0c = (int16_t)(w0[word] >> shift), w1c = (int16_t)(w1[word] >> shift);
        a0 += xw[c] * w0c;
        a1 += xw[c] * w1c;
        a2 += xw[n + c] * w0c;
        a3 += xw[n + c] * w1c;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with both pixels' inputs widened on the way. */
static inline void tt_dot2x2_s8(const int8_t *x0, const int8_t *x1, const int8_t *w0, const int8_t *w1, int n,
                                int32_t in_zp, int32_t acc[4]) {
    const int16_t zp = (int16_t)in_zp;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        const int16_t xc = (int16_t)(x0[c] - zp), yc = (int16_t)(x1[c] - zp);
        a0 += xc * (int16_t)w0[c];
        a1 += xc * (int16_t)w1[c];
        a2 += yc * (int16_t)w0[c];
        a3 += yc * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

#endif /* TT_ARM_DSP */

#endif /* TT_SIMD_DOT_H */
