/* tt_float_masks.h — a host build's clamp masks.
 * A part of tt_float.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_FLOAT_MASKS_H
#define TT_FLOAT_MASKS_H

/* ---- a host build's clamp masks (kernels/clamp_mask.c.j2, clamp_mask_packed.c.j2, mean_grad_masked.c.j2,
 * pack_clamp_mask.c.j2: host) ---- */

/* A selected element keeps its value's bits, the others become +0: the C select `in ? g : 0.0f`. With AVX2, eight at
 * a time as g's bits ANDed with a word mask of all ones or all zeros, the same bits. Each group of eight is read
 * before it is written, so out may be g, or start before it (ops' elementwise min_read). */
#if defined(__AVX2__)
#include <immintrin.h>
#define TT_MASK_V 1
#else
#define TT_MASK_V 0
#endif

/* out[i] = g[i] where act_min < y[i] < act_max, else +0, i < n; int8 bounds (-128 <= act_min, act_max <= 127: an
 * int8 output's clamp, ops/clamp_mask.py). AVX2: 32 elements a pass, the range as two signed byte comparisons. */
static inline void tt_select_inside_f32(float *out, const float *g, const int8_t *y, int n, int32_t act_min,
                                        int32_t act_max) {
    const int i0 = TT_MASK_V ? n - n % 32 : 0;  /* elements in vector registers: i < i0 */
#if TT_MASK_V
    const __m256i lo = _mm256_set1_epi8((char)act_min), hi = _mm256_set1_epi8((char)act_max);
    for (int i = 0; i < i0; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(y + i));
        const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi8(v, lo), _mm256_cmpgt_epi8(hi, v));  /* bytes 0 / -1 */
        const __m128i half[2] = {_mm256_castsi256_si128(in), _mm256_extracti128_si256(in, 1)};
        for (int q = 0; q < 4; q++) {
            const __m128i b = q & 1 ? _mm_srli_si128(half[q >> 1], 8) : half[q >> 1];
            const __m256 m = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(b));  /* words 0 / -1 */
            _mm256_storeu_ps(out + i + 8 * q, _mm256_and_ps(_mm256_loadu_ps(g + i + 8 * q), m));
        }
    }
#endif
    for (int i = i0; i < n; i++) {
        out[i] = y[i] > act_min && y[i] < act_max ? g[i] : 0.0f;
    }
}

/* The clamp mask packed (kernels/pack_clamp_mask.c.j2): bit i % 8 of bits[i / 8] = act_min < y[i] < act_max for
 * i < n - n % 32 (AVX2: 32 elements a pass, the byte comparisons' signs gathered by VPMOVMSKB, element i's at bit i,
 * stored little-endian as four bytes; else none), int8 bounds. Returns how many bytes it wrote. */
static inline int tt_pack_inside_s8(uint8_t *bits, const int8_t *y, int n, int32_t act_min, int32_t act_max) {
#if TT_MASK_V
    const __m256i lo = _mm256_set1_epi8((char)act_min), hi = _mm256_set1_epi8((char)act_max);
    const int n32 = n - n % 32;
    for (int i = 0; i < n32; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(y + i));
        const uint32_t m = (uint32_t)_mm256_movemask_epi8(_mm256_and_si256(_mm256_cmpgt_epi8(v, lo),
                                                                           _mm256_cmpgt_epi8(hi, v)));
        const uint8_t b[4] = {(uint8_t)m, (uint8_t)(m >> 8), (uint8_t)(m >> 16), (uint8_t)(m >> 24)};
        memcpy(bits + i / 8, b, 4);
    }
    return n32 / 8;
#else
    (void)bits; (void)y; (void)n; (void)act_min; (void)act_max;
    return 0;
#endif
}

/* out[i] = g[i] where bit i % 8 of bits[i / 8] is 1, else +0, i < n. AVX2: a byte's bits against 1, 2, .., 128 in
 * the eight words. */
static inline void tt_select_bits_f32(float *out, const float *g, const uint8_t *bits, int n) {
    const int i0 = TT_MASK_V ? n - n % 8 : 0;  /* elements in vector registers: i < i0 */
#if TT_MASK_V
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int i = 0; i < i0; i += 8) {
        const __m256i in = _mm256_and_si256(_mm256_set1_epi32(bits[i >> 3]), bit);
        const __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(in, bit));  /* words 0 / -1 */
        _mm256_storeu_ps(out + i, _mm256_and_ps(_mm256_loadu_ps(g + i), m));
    }
#endif
    for (int i = i0; i < n; i++) {
        out[i] = ((bits[i >> 3] >> (i & 7)) & 1u) ? g[i] : 0.0f;
    }
}

#endif /* TT_FLOAT_MASKS_H */
