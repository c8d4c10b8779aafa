/* tt_rows.h — requantization of many int32 sums at once for the host build's channel-vectorized kernels
 * (kernels/conv2d_rows.c.j2), in loops gcc vectorizes: the same int8 outputs as the kernels' per-output helpers
 * (tt_fixedpoint.h), bit for bit (docs/design.md §3: a kernel may compute a requantization any way whose bits equal
 * its spec).
 *
 * onnxruntime's float32 rounding (tt_requantize_fp32) is computed as its spec states it, in IEEE float32:
 * nearbyint((float)acc * scale), ties to even. scale = multiplier * 2^(shift - 31) is a float32 (24-bit significand
 * multiplier >> 7, 0 <= multiplier < 2^31, -32 <= shift <= -2: bindings/common.py rq_helper, so |product| < 2^29),
 * (float)acc and the product round to nearest even, and a product p with |p| <= 2^22 rounds to an integer
 * ties-to-even exactly as (p + 1.5 * 2^23) - 1.5 * 2^23 (the sum lies in [2^23, 2^24], where float32 spacing is 1;
 * 1.5 * 2^23 is even). A larger |p| gives an integer within 2 of p, beyond any int8 output: it clamps to act_min or
 * act_max as the spec's does. Needs float32 evaluation in float32 (FLT_EVAL_METHOD 0: x86-64 SSE, AArch64) and
 * -ffp-contract=off (tinytrain/engine_c.py builds so).
 */
#ifndef TT_ROWS_H
#define TT_ROWS_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "tt_fixedpoint.h"

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0

/* The float32 scale of a float32-rounding requantization from the second column of its table: the scale's bits
 * (bindings/common.py rq_operand). */
static inline float tt_fp32_scale(int32_t scale_bits) {
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return scale;
}

/* clamp(nearbyint(v) + out_zp, lo, hi) for v = (float)acc * scale. */
static inline int8_t tt_fp32_round_s8(float v, int32_t out_zp, int32_t lo, int32_t hi) {
    const float magic = 12582912.0f;  /* 1.5 * 2^23 */
    const int32_t r = (int32_t)((v + magic) - magic) + out_zp;
    return (int8_t)(r < lo ? lo : (r > hi ? hi : r));
}

/* y[t] = clamp(tt_requantize_fp32(acc[t], multiplier, shift) + out_zp, lo, hi), t < n, one channel (scale). */
static inline void tt_requantize_fp32_col_s8(int8_t *restrict y, const int32_t *restrict acc, float scale, int n,
                                             int32_t out_zp, int32_t lo, int32_t hi) {
    for (int t = 0; t < n; t++) {
        float v = (float)acc[t] * scale;
        v = v < -4194304.0f ? -4194304.0f : (v > 4194304.0f ? 4194304.0f : v);  /* +-2^22: same outputs; gcc 12 */
        y[t] = tt_fp32_round_s8(v, out_zp, lo, hi);                               /* vectorizes the tile better */
    }
}

/* The same for n channels, channel o with scale[o]. */
static inline void tt_requantize_fp32_row_s8(int8_t *restrict y, const int32_t *restrict acc,
                                             const float *restrict scale, int n, int32_t out_zp, int32_t lo,
                                             int32_t hi) {
#pragma GCC unroll 1  /* (not unrolled for a constant n: vectorized) */
    for (int o = 0; o < n; o++) {
        y[o] = tt_fp32_round_s8((float)acc[o] * scale[o], out_zp, lo, hi);
    }
}

#endif /* FLT_EVAL_METHOD == 0 */

/* ---- a host build's residual add (kernels/add.c.j2, host) ---- */

#if defined(__AVX2__)
#include <immintrin.h>
#define TT_ADD_V 1
#else
#define TT_ADD_V 0
#endif

/* The add's first n - n % 8 outputs (AVX2; else none), where its requantization is tt_requantize_single_s8's 32-bit
 * form (shift <= -2; else none): out[i] = clamp(tt_requantize_single_s8(term1[b1[i]] + term2[b2[i]], multiplier,
 * shift) + out_zp, lo, hi) with int8 bounds lo, hi, eight at a time: the sums of the terms read from their tables
 * one at a time (VPGATHERDD is slower: 0.91 against 0.51 ns an output on AMD Zen 3), the product's high word from
 * two 32 x 32 -> 64-bit multiplies (the even lanes, then the odd ones), rounded and shifted as there, clamped, then
 * packed to int8 with saturation (which leaves values already within int8). Each pass reads its eight inputs before
 * it writes its eight outputs: out may be in1 or in2 (in place). Returns how many it wrote. */
static inline int tt_add_single_s8_v(int8_t *out, const uint8_t *b1, const uint8_t *b2, const int32_t *term1,
                                     const int32_t *term2, int n, int32_t multiplier, int32_t shift, int32_t out_zp,
                                     int32_t lo, int32_t hi) {
#if TT_ADD_V
    if (shift > -2) {
        return 0;
    }
    const int t = -1 - (int)shift;
    const __m256i m = _mm256_set1_epi32(multiplier), round = _mm256_set1_epi32((int32_t)1 << (t - 1));
    const __m256i zp = _mm256_set1_epi32(out_zp), vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    const __m128i count = _mm_cvtsi32_si128(t);
    const int n8 = n - n % 8;
    for (int i = 0; i < n8; i += 8) {
        int32_t sum[8];
        for (int j = 0; j < 8; j++) {
            sum[j] = term1[b1[i + j]] + term2[b2[i + j]];
        }
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)sum);
        const __m256i even = _mm256_mul_epi32(raw, m);                          /* lanes 0, 2, 4, 6: 64-bit */
        const __m256i odd = _mm256_mul_epi32(_mm256_srli_epi64(raw, 32), m);  /* lanes 1, 3, 5, 7 */
        const __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
        __m256i r = _mm256_add_epi32(_mm256_sra_epi32(_mm256_add_epi32(high, round), count), zp);
        r = _mm256_min_epi32(_mm256_max_epi32(r, vlo), vhi);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(void *)(out + i), _mm_packs_epi16(w, w));
    }
    return n8;
#else
    (void)out; (void)b1; (void)b2; (void)term1; (void)term2; (void)n; (void)multiplier; (void)shift; (void)out_zp;
    (void)lo; (void)hi;
    return 0;
#endif
}

#endif /* TT_ROWS_H */
