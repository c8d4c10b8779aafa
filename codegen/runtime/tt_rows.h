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

/* TT_ROWS_AVX2: whether the host compiler targets AVX2 (-march=native on a host that has it): the helpers below then
 * take eight int32 lanes at a time in intrinsics; elsewhere the same arithmetic in C. */
#if defined(__AVX2__)
#include <immintrin.h>
#define TT_ROWS_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define TT_PAIRS_DP(a, x, w) _mm256_dpwssd_epi32((a), (x), (w))
#else
#define TT_PAIRS_DP(a, x, w) _mm256_add_epi32((a), _mm256_madd_epi16((x), (w)))
#endif
#else
#define TT_ROWS_AVX2 0
#endif

/* Four int32 lanes (a GCC vector type, as in clang: lowered to whatever SIMD the target has): the C paths' blocks. */
typedef int32_t tt_i32x4 __attribute__((vector_size(16)));

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

#if TT_ROWS_AVX2
/* Outputs c .. c+15 of tt_requantize_fp32_row_s8: VCVTDQ2PS, VMULPS, VCVTPS2DQ (round to nearest even, the MXCSR
 * default; |v| < 2^29: no overflow), the zero point added, saturated to int16 and then to int8 (VPACKSSDW /
 * VPACKSSWB: beyond int8 either way, as lo >= -128 and hi <= 127) and clamped: tt_fp32_round_s8's outputs. */
static inline void tt_requantize_fp32_row16_s8(int8_t *y, const int32_t *acc, const float *scale, int c,
                                               __m256i zp, __m128i lo, __m128i hi) {
    const __m256i a0 = _mm256_loadu_si256((const __m256i *)(const void *)(acc + c));
    const __m256i a1 = _mm256_loadu_si256((const __m256i *)(const void *)(acc + c + 8));
    const __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(a0), _mm256_loadu_ps(scale + c));
    const __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(a1), _mm256_loadu_ps(scale + c + 8));
    const __m256i r0 = _mm256_add_epi32(_mm256_cvtps_epi32(v0), zp), r1 = _mm256_add_epi32(_mm256_cvtps_epi32(v1), zp);
    const __m256i r = _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8);  /* int16, in order */
    const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)(void *)(y + c), _mm_min_epi8(_mm_max_epi8(b, lo), hi));
}
#endif

/* y[o] = clamp(tt_requantize_fp32(acc[o], multiplier, shift) + out_zp, lo, hi), o < n, channel o with scale[o].
 * With AVX2 and n >= 16 sixteen at a time, the last sixteen overlapping the ones before where n is not a multiple of
 * 16 (the same outputs stored twice: y must not overlap acc or scale). */
static inline void tt_requantize_fp32_row_s8(int8_t *restrict y, const int32_t *restrict acc,
                                             const float *restrict scale, int n, int32_t out_zp, int32_t lo,
                                             int32_t hi) {
#if TT_ROWS_AVX2
    if (n >= 16) {
        const __m256i zp = _mm256_set1_epi32(out_zp);
        const __m128i l = _mm_set1_epi8((char)lo), h = _mm_set1_epi8((char)hi);
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
    for (int o = 0; o < n; o++) {
        y[o] = tt_fp32_round_s8((float)acc[o] * scale[o], out_zp, lo, hi);
    }
}

/* ---- the host build's depthwise convolution (kernels/conv2d_rows.c.j2 "depthwise") ---- */

#if TT_ROWS_AVX2
/* Channels c .. c+15 of tt_dw_sums_s8: a pair's inputs interleaved channel by channel (bytes, then widened to int16),
 * less in_zp, against the pair's weights, two products summed into each channel's int32 lane (TT_PAIRS_DP). */
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
        lo = TT_PAIRS_DP(lo, ul, _mm256_loadu_si256((const __m256i *)(const void *)wk));
        hi = TT_PAIRS_DP(hi, uh, _mm256_loadu_si256((const __m256i *)(const void *)(wk + 16)));
    }
    _mm256_storeu_si256((__m256i *)(void *)(acc + c), lo);
    _mm256_storeu_si256((__m256i *)(void *)(acc + c + 8), hi);
}
#endif

/* tt_dw_sums_s8(acc, x, q, n, w, b, co, in_zp): the co int32 sums of a depthwise output pixel (multiplier 1) over n
 * pairs of taps, acc[o] = b[o] + sum_k (x[2k][o] - in_zp) * w[2 (q[k] co + o)] + (x[2k+1][o] - in_zp) * w[2 (q[k] co + o) + 1]:
 * x[2k], x[2k+1] the (co,) int8 inputs of pair k's two taps, q[k] its weights' pair in w, the (pairs,co,2) int16
 * weights (a pair's two side by side per channel). Integer sums: the order of their terms changes no bit
 * (docs/design.md §4). With TT_ROWS_AVX2 and co >= 16 sixteen channels at a time, the last sixteen overlapping the
 * ones before where co is not a multiple of 16 (the same sums stored twice). */
static inline void tt_dw_sums_s8(int32_t *restrict acc, const int8_t *const *x, const int *q, int n,
                                 const int16_t *restrict w, const int32_t *restrict b, int co, int32_t in_zp) {
#if TT_ROWS_AVX2
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
    const int c4 = co - co % 4;  /* (an explicit bound: gcc's clones warn of impossible iterations otherwise) */
    for (int c = 0; c < c4; c += 4) {  /* in C, four channels a block in GCC vector types */
        tt_i32x4 a;
        memcpy(&a, b + c, sizeof a);
        for (int k = 0; k < n; k++) {
            const int8_t *u = x[2 * k] + c, *v = x[2 * k + 1] + c;
            const int16_t *wk = w + 2 * ((q != NULL ? q[k] : k) * co + c);
            const tt_i32x4 uu = {u[0], u[1], u[2], u[3]}, vv = {v[0], v[1], v[2], v[3]};
            const tt_i32x4 we = {wk[0], wk[2], wk[4], wk[6]}, wo = {wk[1], wk[3], wk[5], wk[7]};
            a += (uu - in_zp) * we + (vv - in_zp) * wo;
        }
        memcpy(acc + c, &a, sizeof a);
    }
    for (int c = c4; c < co; c++) {
        int32_t a = b[c];
        for (int k = 0; k < n; k++) {
            const int16_t *wk = w + 2 * ((q != NULL ? q[k] : k) * co + c);
            a += (x[2 * k][c] - in_zp) * wk[0] + (x[2 * k + 1][c] - in_zp) * wk[1];
        }
        acc[c] = a;
    }
}

#endif /* FLT_EVAL_METHOD == 0 */

/* tt_dot_pairs4(acc, x, w, bias, k2, cp): the int32 sums of four pixels across cp output channels (cp a multiple of
 * 8), for a host build's convolution across channels (kernels/conv2d_rows.c.j2 "channels"):
 *     acc[t * cp + o] = bias[o] + sum_{j < k2} (x[t * 2k2 + 2j] * w[(j * cp + o) * 2] + x[t * 2k2 + 2j + 1] * w[(j * cp + o) * 2 + 1])
 * x (4, 2 * k2): each pixel's inputs minus in_zp, 0 past its K; w (k2, cp, 2): weight[o, 2j + e] - w_zp[o] as pairs of
 * inputs, 0 past K or Co. Every factor is within +-255, so each product and pair of products is exact (VPMADDWD
 * never saturates), and the int32 sums are the device kernels' in another order (docs/design.md §4). With AVX2 each pair of inputs is one multiply-add
 * of halfword pairs (VPMADDWD + VPADDD, or VPDPWSSD with AVX512-VNNI) for eight channels, four pixels sharing each
 * weight load and their sums of sixteen channels held in registers; elsewhere the same in C. */

/* Inputs 2j and 2j + 1 of pixel row x as one int32 (a pair of halfwords). */
static inline int32_t tt_pair_s16(const int16_t *x, int j) {
    int32_t v;
    memcpy(&v, x + 2 * j, sizeof v);
    return v;
}

static inline void tt_dot_pairs4(int32_t *restrict acc, const int16_t *restrict x, const int16_t *restrict w,
                                 const int32_t *restrict bias, int k2, int cp) {
    int o = 0;
#if TT_ROWS_AVX2
    const int16_t *x0 = x, *x1 = x + 2 * k2, *x2 = x + 4 * k2, *x3 = x + 6 * k2;
    for (; o + 16 <= cp; o += 16) {  /* sixteen channels: two vectors of eight sums a pixel */
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(bias + o));
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(const void *)(bias + o + 8));
        __m256i a0 = b0, a1 = b0, a2 = b0, a3 = b0, c0 = b1, c1 = b1, c2 = b1, c3 = b1;
        for (int j = 0; j < k2; j++) {
            const int16_t *wj = w + (j * cp + o) * 2;
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)wj);
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(wj + 16));
            __m256i v = _mm256_set1_epi32(tt_pair_s16(x0, j));
            a0 = TT_PAIRS_DP(a0, v, w0);
            c0 = TT_PAIRS_DP(c0, v, w1);
            v = _mm256_set1_epi32(tt_pair_s16(x1, j));
            a1 = TT_PAIRS_DP(a1, v, w0);
            c1 = TT_PAIRS_DP(c1, v, w1);
            v = _mm256_set1_epi32(tt_pair_s16(x2, j));
            a2 = TT_PAIRS_DP(a2, v, w0);
            c2 = TT_PAIRS_DP(c2, v, w1);
            v = _mm256_set1_epi32(tt_pair_s16(x3, j));
            a3 = TT_PAIRS_DP(a3, v, w0);
            c3 = TT_PAIRS_DP(c3, v, w1);
        }
        const __m256i lo[4] = {a0, a1, a2, a3}, hi[4] = {c0, c1, c2, c3};
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_si256((__m256i *)(void *)(acc + t * cp + o), lo[t]);
            _mm256_storeu_si256((__m256i *)(void *)(acc + t * cp + o + 8), hi[t]);
        }
    }
    if (o < cp) {  /* the last eight */
        const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(bias + o));
        __m256i a0 = b, a1 = b, a2 = b, a3 = b;
        for (int j = 0; j < k2; j++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(w + (j * cp + o) * 2));
            a0 = TT_PAIRS_DP(a0, _mm256_set1_epi32(tt_pair_s16(x0, j)), w0);
            a1 = TT_PAIRS_DP(a1, _mm256_set1_epi32(tt_pair_s16(x1, j)), w0);
            a2 = TT_PAIRS_DP(a2, _mm256_set1_epi32(tt_pair_s16(x2, j)), w0);
            a3 = TT_PAIRS_DP(a3, _mm256_set1_epi32(tt_pair_s16(x3, j)), w0);
        }
        const __m256i s[4] = {a0, a1, a2, a3};
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_si256((__m256i *)(void *)(acc + t * cp + o), s[t]);
        }
        o = cp;
    }
#endif
    for (; o < cp; o += 4) {  /* in C, four channels a block in GCC vector types (SIMD registers where there are) */
        tt_i32x4 a[4];
        for (int t = 0; t < 4; t++) {
            memcpy(&a[t], bias + o, sizeof a[t]);
        }
        for (int j = 0; j < k2; j++) {
            const int16_t *wj = w + (j * cp + o) * 2;
            const tt_i32x4 we = {wj[0], wj[2], wj[4], wj[6]}, wo = {wj[1], wj[3], wj[5], wj[7]};
            for (int t = 0; t < 4; t++) {
                a[t] += x[t * 2 * k2 + 2 * j] * we + x[t * 2 * k2 + 2 * j + 1] * wo;
            }
        }
        for (int t = 0; t < 4; t++) {
            memcpy(acc + t * cp + o, &a[t], sizeof a[t]);
        }
    }
}

/* ---- a host build's residual add (kernels/add.c.j2, host) ---- */

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
#if TT_ROWS_AVX2
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
