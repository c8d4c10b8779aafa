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

/* ---- the host build's depthwise convolution (kernels/conv2d_rows.c.j2 "depthwise") ---- */

/* TT_ROWS_V: whether the helpers below take sixteen channels at a time in AVX2 registers (x86-64 built with
 * -march=native on a core that has it); elsewhere, and for fewer than sixteen channels, they are plain C loops with
 * the same results (integer sums; the float32 requantization the same operations per output). */
#if defined(__AVX2__)
#include <immintrin.h>
#define TT_ROWS_V 1
#else
#define TT_ROWS_V 0
#endif

#if TT_ROWS_V
/* Channels c .. c+15 of tt_dw_sums_s8: a pair's inputs interleaved channel by channel (bytes, then widened to int16),
 * less in_zp, against the pair's weights, two products summed into each channel's int32 lane (VPMADDWD). */
static inline void tt_dw_sums16_s8(int32_t *acc, const int8_t *const *x, const int *q, int n, const int16_t *w,
                                   const int32_t *b, int co, int32_t in_zp, int c) {
    const __m256i zx = _mm256_set1_epi16((int16_t)in_zp);
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(b + c));     /* channels c .. c+7 */
    __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(b + c + 8)); /* c+8 .. c+15 */
    for (int k = 0; k < n; k++) {
        const __m128i u = _mm_loadu_si128((const __m128i *)(const void *)(x[2 * k] + c));
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(x[2 * k + 1] + c));
        const int16_t *wk = w + 2 * ((q != NULL ? q[k] : k) * co + c);
        const __m256i ul = _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(u, v)), zx);
        const __m256i uh = _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_unpackhi_epi8(u, v)), zx);
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(ul, _mm256_loadu_si256((const __m256i *)(const void *)wk)));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(uh, _mm256_loadu_si256((const __m256i *)(const void *)(wk + 16))));
    }
    _mm256_storeu_si256((__m256i *)(void *)(acc + c), lo);
    _mm256_storeu_si256((__m256i *)(void *)(acc + c + 8), hi);
}
#endif

/* tt_dw_sums_s8(acc, x, q, n, w, b, co, in_zp): the co int32 sums of a depthwise output pixel (multiplier 1) over n
 * pairs of taps, acc[o] = b[o] + sum_k (x[2k][o] - in_zp) * w[2 (q[k] co + o)] + (x[2k+1][o] - in_zp) * w[2 (q[k] co + o) + 1]:
 * x[2k], x[2k+1] the (co,) int8 inputs of pair k's two taps, q[k] its weights' pair in w, the (pairs,co,2) int16
 * weights (a pair's two side by side per channel). Integer sums: the order of their terms changes no bit
 * (docs/design.md §4). With TT_ROWS_V and co >= 16 sixteen channels at a time, the last sixteen overlapping the
 * ones before where co is not a multiple of 16 (the same sums stored twice). */
static inline void tt_dw_sums_s8(int32_t *restrict acc, const int8_t *const *x, const int *q, int n,
                                 const int16_t *restrict w, const int32_t *restrict b, int co, int32_t in_zp) {
#if TT_ROWS_V
    if (co >= 16) {
        int c = 0;
        for (; c + 16 <= co; c += 16) {
            tt_dw_sums16_s8(acc, x, q, n, w, b, co, in_zp, c);
        }
        if (c < co) {
            tt_dw_sums16_s8(acc, x, q, n, w, b, co, in_zp, co - 16);
        }
        return;
    }
#endif
#pragma GCC unroll 1
    for (int o = 0; o < co; o++) {
        acc[o] = b[o];
    }
    for (int k = 0; k < n; k++) {
        const int8_t *restrict u = x[2 * k], *restrict v = x[2 * k + 1];
        const int16_t *restrict wk = w + 2 * (q != NULL ? q[k] : k) * co;
#pragma GCC unroll 1
        for (int o = 0; o < co; o++) {
            acc[o] += (u[o] - in_zp) * wk[2 * o] + (v[o] - in_zp) * wk[2 * o + 1];
        }
    }
}

#if TT_ROWS_V
/* Outputs c .. c+15 of tt_requantize_fp32_rows_s8: the same float32 operations on eight lanes at a time. */
static inline void tt_requantize_fp32_row16_s8(int8_t *y, const int32_t *acc, const float *scale, int c,
                                               __m256i zp, __m256i lo, __m256i hi) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);  /* 1.5 * 2^23 (tt_fp32_round_s8) */
    __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)(acc + c))),
                              _mm256_loadu_ps(scale + c));
    __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)(acc + c + 8))),
                              _mm256_loadu_ps(scale + c + 8));
    v0 = _mm256_sub_ps(_mm256_add_ps(v0, magic), magic);
    v1 = _mm256_sub_ps(_mm256_add_ps(v1, magic), magic);
    const __m256i r0 = _mm256_add_epi32(_mm256_cvttps_epi32(v0), zp), r1 = _mm256_add_epi32(_mm256_cvttps_epi32(v1), zp);
    /* int16 with saturation (beyond int16, beyond int8: clamped to lo or hi all the same), in order, clamped */
    __m256i r = _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8);
    r = _mm256_min_epi16(_mm256_max_epi16(r, lo), hi);
    _mm_storeu_si128((__m128i *)(void *)(y + c),
                     _mm_packs_epi16(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
#endif

/* tt_requantize_fp32_rows_s8: tt_requantize_fp32_row_s8 for the host depthwise convolution's n channels, with
 * TT_ROWS_V and n >= 16 sixteen at a time (the last sixteen overlapping the ones before: the same outputs stored
 * twice). Every output is stored after all of acc is read from... its own sums only: y may not overlap acc. */
static inline void tt_requantize_fp32_rows_s8(int8_t *restrict y, const int32_t *restrict acc,
                                              const float *restrict scale, int n, int32_t out_zp, int32_t lo,
                                              int32_t hi) {
#if TT_ROWS_V
    if (n >= 16) {
        const __m256i zp = _mm256_set1_epi32(out_zp), l = _mm256_set1_epi16((int16_t)lo);
        const __m256i h = _mm256_set1_epi16((int16_t)hi);
        int c = 0;
        for (; c + 16 <= n; c += 16) {
            tt_requantize_fp32_row16_s8(y, acc, scale, c, zp, l, h);
        }
        if (c < n) {
            tt_requantize_fp32_row16_s8(y, acc, scale, n - 16, zp, l, h);
        }
        return;
    }
#endif
    tt_requantize_fp32_row_s8(y, acc, scale, n, out_zp, lo, hi);
}

#endif /* FLT_EVAL_METHOD == 0 */

#endif /* TT_ROWS_H */
