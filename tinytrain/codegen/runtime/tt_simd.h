/* tt_simd.h — the int8 inner products of the forward kernels (pointwise / regular convolution rows, fully
 * connected): sum_c (x[c] - in_zp) * w[c] in int32.
 *
 * Two implementations of the same integers, chosen ONCE per project by TT_ARM_DSP, which the generated
 * tinytrain_model.c defines from the compile's --target (codegen/emit.py: arm_dsp) before including this file:
 *   TT_ARM_DSP 0: portable C99, the reference. Plain loops over contiguous channels with 16-bit operands and
 *                 int32 accumulators, which gcc -O3 vectorizes on the host (pmaddwd) and compiles to tight
 *                 loops on any core.
 *   TT_ARM_DSP 1: the Arm DSP extension (Cortex-M4/M7/M55), as CMSIS-NN: 4 int8 per 32-bit load, SXTB16 /
 *                 SXTAB16 widen them to two pairs of int16 (SXTAB16 subtracts the input zero point on the way),
 *                 SMLAD does two multiply-accumulates. Compiled for a core without the extension (a host), the
 *                 same algorithm runs on C models of those instructions, so the DSP path is also testable there.
 * Both give the same int32 for every input: the products (x - in_zp) * w fit 17 bits and the sums are the
 * same integers, only added in another order (int32 addition is associative; accumulators never approach
 * 2^31 for the layer sizes int8 models have). Kernels call tt_dot_s8 / tt_dot2_s8 and never test TT_ARM_DSP.
 */
#ifndef TT_SIMD_H
#define TT_SIMD_H

#include <stdint.h>
#include <string.h>

#ifndef TT_ARM_DSP
#define TT_ARM_DSP 0
#endif

static inline uint32_t tt_pack16(int32_t lo, int32_t hi) {  /* two int16 in one word, lo in bits 0..15 */
    return ((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16);
}

#if TT_ARM_DSP && defined(__ARM_FEATURE_DSP)
/* The instructions: ACLE intrinsics, the rotated forms as inline asm (ACLE has none). */
#include <arm_acle.h>
static inline uint32_t tt_sxtb16(uint32_t x) { return (uint32_t)__sxtb16((int32_t)x); }
static inline uint32_t tt_sxtab16(uint32_t a, uint32_t x) { return (uint32_t)__sxtab16((int32_t)a, (int32_t)x); }
static inline int32_t tt_smlad(uint32_t a, uint32_t b, int32_t acc) { return __smlad((int32_t)a, (int32_t)b, acc); }
static inline uint32_t tt_sxtb16_ror8(uint32_t x) {
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}
static inline uint32_t tt_sxtab16_ror8(uint32_t a, uint32_t x) {
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
    return r;
}
#elif TT_ARM_DSP
/* C models of SXTAB16 (halfword sums wrap mod 2^16), SXTB16 and SMLAD (the sum wraps mod 2^32). */
static inline uint32_t tt_sxtab16(uint32_t a, uint32_t x) {
    return tt_pack16((int32_t)(a & 0xFFFFu) + (int8_t)(x & 0xFFu), (int32_t)(a >> 16) + (int8_t)((x >> 16) & 0xFFu));
}
static inline uint32_t tt_sxtb16(uint32_t x) { return tt_sxtab16(0, x); }
static inline uint32_t tt_sxtb16_ror8(uint32_t x) { return tt_sxtab16(0, (x >> 8) | (x << 24)); }
static inline uint32_t tt_sxtab16_ror8(uint32_t a, uint32_t x) { return tt_sxtab16(a, (x >> 8) | (x << 24)); }
static inline int32_t tt_smlad(uint32_t a, uint32_t b, int32_t acc) {
    const int32_t lo = (int32_t)(int16_t)(a & 0xFFFFu) * (int16_t)(b & 0xFFFFu);
    const int32_t hi = (int32_t)(int16_t)(a >> 16) * (int16_t)(b >> 16);
    return (int32_t)((uint32_t)acc + (uint32_t)lo + (uint32_t)hi);
}
#endif

#if TT_ARM_DSP

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

/* Two rows at once, sharing the widened input: acc0 = x . w0, acc1 = x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t *acc0, int32_t *acc1) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t a0 = 0, a1 = 0;
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
    *acc0 = a0;
    *acc1 = a1;
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

/* Two rows at once, sharing the input: acc0 = x . w0, acc1 = x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t *acc0, int32_t *acc1) {
    const int16_t zp = (int16_t)in_zp;
    int32_t a0 = 0, a1 = 0;
    for (int c = 0; c < n; c++) {
        const int16_t xc = (int16_t)(x[c] - zp);
        a0 += xc * (int16_t)w0[c];
        a1 += xc * (int16_t)w1[c];
    }
    *acc0 = a0;
    *acc1 = a1;
}

#endif /* TT_ARM_DSP */

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

#endif /* TT_SIMD_H */
