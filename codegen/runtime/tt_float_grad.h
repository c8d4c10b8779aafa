/* tt_float_grad.h — the input gradients' register tiles and a host build's rows and taps.
 * A part of tt_float.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_FLOAT_GRAD_H
#define TT_FLOAT_GRAD_H

/* ---- the pointwise input gradient's register tiles (kernels/conv2d_grad_input.c.j2) ---- */

/* *p != 0 (either zero's sign) as a word: nonzero exactly when *p is. Its bits less the sign, read by one integer
 * load: the kernels' scans for nonzero gradients test it in core registers, without a float compare. */
static inline uint32_t tt_nonzero_bits(const float *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u << 1;
}

/* TT_FMA_TILES: whether the compiler targets an Arm core whose FPU has VFMA.F32 (Cortex-M4F / M7 / M55 hard-float
 * builds, Thumb-2): the tiles below then take their channels four at a time in inline assembly; elsewhere all in C. */
#ifndef TT_FMA_TILES
#if defined(__arm__) && defined(__thumb2__) && defined(__ARM_FP) && (__ARM_FP & 4) && defined(__ARM_FEATURE_FMA)
#define TT_FMA_TILES 1
#else
#define TT_FMA_TILES 0
#endif
#endif

/* tt_fma_tile<np>x<nr>_s8(x, ci, w0 .. w<nr-1>, g): nr weight rows' terms at np pixels whose sums are x[t * ci + c]
 * (t < np, c < ci): for each c, rows r = 0 .. nr-1 in that order,
 *     x[t * ci + c] = fma(g[np * r + t], (float)w_r[c], x[t * ci + c])
 * (docs/design.md §3b: each term one fused multiply-add, the integer converted exactly). A factor 0 adds an exact
 * zero.
 * With TT_FMA_TILES the channels go four at a time in assembly, the factors in s0.., each pixel's four sums in
 * s16 + 4t .. s19 + 4t, loaded and stored by one VLDM / VSTM, and each row's four weights in s12..s15, each converted
 * once for the np pixels: LDRSB (the row's pointer moving on by 4), half a VMOV of two registers, VCVT. Per four
 * channels 4 x 3: 87 instructions for 48 terms; 3 x 4: 95 for 48; 2 x 4: 77 for 32; 1 x 4: 59 for 16. The last
 * ci % 4 channels, and every channel elsewhere, take tt_fma_tile_c. */
static inline void tt_fma_tile_c(float *x, int ci, int c, int np, int nr, const int8_t *const *w, const float *g) {
    for (; c < ci; c++) {
        float v[4];  /* np <= 4 */
        for (int t = 0; t < np; t++) {
            v[t] = x[t * ci + c];
        }
        for (int r = 0; r < nr; r++) {
            const float d = (float)w[r][c];
            for (int t = 0; t < np; t++) {
                v[t] = tt_fmaf(g[np * r + t], d, v[t]);
            }
        }
        for (int t = 0; t < np; t++) {
            x[t * ci + c] = v[t];
        }
    }
}

#if TT_FMA_TILES
/* Row w's next four weights (w moves on by 4) as floats in s12..s15. */
#define TT_FMA_W4(w)                                                                                                \
    "ldrsb %[t0], [%[" w "]], #4\n\tldrsb %[t1], [%[" w "], #-3]\n\tvmov s12, s13, %[t0], %[t1]\n\t"              \
    "ldrsb %[t0], [%[" w "], #-2]\n\tldrsb %[t1], [%[" w "], #-1]\n\tvmov s14, s15, %[t0], %[t1]\n\t"             \
    "vcvt.f32.s32 s12, s12\n\tvcvt.f32.s32 s13, s13\n\tvcvt.f32.s32 s14, s14\n\tvcvt.f32.s32 s15, s15\n\t"
/* Their terms at pixel t (sums s<a>..s<a+3>) with factor s<g>. */
#define TT_FMA_PX(a0, a1, a2, a3, g)                                                                                \
    "vfma.f32 " a0 ", " g ", s12\n\tvfma.f32 " a1 ", " g ", s13\n\tvfma.f32 " a2 ", " g ", s14\n\t"                 \
    "vfma.f32 " a3 ", " g ", s15\n\t"
#define TT_FMA_P0(g) TT_FMA_PX("s16", "s17", "s18", "s19", g)
#define TT_FMA_P1(g) TT_FMA_PX("s20", "s21", "s22", "s23", g)
#define TT_FMA_P2(g) TT_FMA_PX("s24", "s25", "s26", "s27", g)
#define TT_FMA_P3(g) TT_FMA_PX("s28", "s29", "s30", "s31", g)
/* The channel loop, four channels a body, two bodies an iteration (one compare and branch per eight channels),
 * entered at the second when the count of fours is odd (ci & 4). */
#define TT_FMA_LOOP(body)                                                                                           \
    "tst %[ci], #4\n\tbne 2f\n1:\n\t" body "2:\n\t" body "cmp %[x0], %[end]\n\tbne 1b"
#define TT_FMA_CLOBBERS                                                                                             \
    "cc", "memory", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",     \
    "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30",   \
    "s31"
#endif

static inline void tt_fma_tile4x3_s8(float *x, int ci, const int8_t *w0, const int8_t *w1, const int8_t *w2,
                                     const float g[12]) {
    const int8_t *const w[3] = {w0, w1, w2};
    int c = 0;
#if TT_FMA_TILES
    if (ci >= 4) {
        float *x0 = x, *x1 = x + ci, *x2 = x + 2 * ci, *x3 = x + 3 * ci;
        const float *end = x + (ci & ~3);
        int32_t t0, t1;
        __asm__ volatile(
            "vldmia %[g], {s0-s11}\n\t"
            TT_FMA_LOOP(
                "vldmia %[x0], {s16-s19}\n\tvldmia %[x1], {s20-s23}\n\t"
                "vldmia %[x2], {s24-s27}\n\tvldmia %[x3], {s28-s31}\n\t"
                TT_FMA_W4("w0") TT_FMA_P0("s0") TT_FMA_P1("s1") TT_FMA_P2("s2") TT_FMA_P3("s3")
                TT_FMA_W4("w1") TT_FMA_P0("s4") TT_FMA_P1("s5") TT_FMA_P2("s6") TT_FMA_P3("s7")
                TT_FMA_W4("w2") TT_FMA_P0("s8") TT_FMA_P1("s9") TT_FMA_P2("s10") TT_FMA_P3("s11")
                "vstmia %[x0]!, {s16-s19}\n\tvstmia %[x1]!, {s20-s23}\n\t"
                "vstmia %[x2]!, {s24-s27}\n\tvstmia %[x3]!, {s28-s31}\n\t")
            : [x0] "+&r"(x0), [x1] "+&r"(x1), [x2] "+&r"(x2), [x3] "+&r"(x3), [w0] "+&r"(w0), [w1] "+&r"(w1),
              [w2] "+&r"(w2), [t0] "=&r"(t0), [t1] "=&r"(t1)
            : [end] "r"(end), [g] "r"(g), [ci] "r"(ci)
            : TT_FMA_CLOBBERS);
        c = ci & ~3;
    }
#endif
    tt_fma_tile_c(x, ci, c, 4, 3, w, g);
}

static inline void tt_fma_tile3x4_s8(float *x, int ci, const int8_t *w0, const int8_t *w1, const int8_t *w2,
                                     const int8_t *w3, const float g[12]) {
    const int8_t *const w[4] = {w0, w1, w2, w3};
    int c = 0;
#if TT_FMA_TILES
    if (ci >= 4) {
        float *x0 = x, *x1 = x + ci, *x2 = x + 2 * ci;
        const float *end = x + (ci & ~3);
        int32_t t0, t1;
        __asm__ volatile(
            "vldmia %[g], {s0-s11}\n\t"
            TT_FMA_LOOP(
                "vldmia %[x0], {s16-s19}\n\tvldmia %[x1], {s20-s23}\n\tvldmia %[x2], {s24-s27}\n\t"
                TT_FMA_W4("w0") TT_FMA_P0("s0") TT_FMA_P1("s1") TT_FMA_P2("s2")
                TT_FMA_W4("w1") TT_FMA_P0("s3") TT_FMA_P1("s4") TT_FMA_P2("s5")
                TT_FMA_W4("w2") TT_FMA_P0("s6") TT_FMA_P1("s7") TT_FMA_P2("s8")
                TT_FMA_W4("w3") TT_FMA_P0("s9") TT_FMA_P1("s10") TT_FMA_P2("s11")
                "vstmia %[x0]!, {s16-s19}\n\tvstmia %[x1]!, {s20-s23}\n\tvstmia %[x2]!, {s24-s27}\n\t")
            : [x0] "+&r"(x0), [x1] "+&r"(x1), [x2] "+&r"(x2), [w0] "+&r"(w0), [w1] "+&r"(w1), [w2] "+&r"(w2),
              [w3] "+&r"(w3), [t0] "=&r"(t0), [t1] "=&r"(t1)
            : [end] "r"(end), [g] "r"(g), [ci] "r"(ci)
            : TT_FMA_CLOBBERS);
        c = ci & ~3;
    }
#endif
    tt_fma_tile_c(x, ci, c, 3, 4, w, g);
}

static inline void tt_fma_tile2x4_s8(float *x, int ci, const int8_t *w0, const int8_t *w1, const int8_t *w2,
                                     const int8_t *w3, const float g[8]) {
    const int8_t *const w[4] = {w0, w1, w2, w3};
    int c = 0;
#if TT_FMA_TILES
    if (ci >= 4) {
        float *x0 = x, *x1 = x + ci;
        const float *end = x + (ci & ~3);
        int32_t t0, t1;
        __asm__ volatile(
            "vldmia %[g], {s0-s7}\n\t"
            TT_FMA_LOOP(
                "vldmia %[x0], {s16-s19}\n\tvldmia %[x1], {s20-s23}\n\t"
                TT_FMA_W4("w0") TT_FMA_P0("s0") TT_FMA_P1("s1")
                TT_FMA_W4("w1") TT_FMA_P0("s2") TT_FMA_P1("s3")
                TT_FMA_W4("w2") TT_FMA_P0("s4") TT_FMA_P1("s5")
                TT_FMA_W4("w3") TT_FMA_P0("s6") TT_FMA_P1("s7")
                "vstmia %[x0]!, {s16-s19}\n\tvstmia %[x1]!, {s20-s23}\n\t")
            : [x0] "+&r"(x0), [x1] "+&r"(x1), [w0] "+&r"(w0), [w1] "+&r"(w1), [w2] "+&r"(w2), [w3] "+&r"(w3),
              [t0] "=&r"(t0), [t1] "=&r"(t1)
            : [end] "r"(end), [g] "r"(g), [ci] "r"(ci)
            : TT_FMA_CLOBBERS);
        c = ci & ~3;
    }
#endif
    tt_fma_tile_c(x, ci, c, 2, 4, w, g);
}

static inline void tt_fma_tile1x4_s8(float *x, int ci, const int8_t *w0, const int8_t *w1, const int8_t *w2,
                                     const int8_t *w3, const float g[4]) {
    const int8_t *const w[4] = {w0, w1, w2, w3};
    int c = 0;
#if TT_FMA_TILES
    if (ci >= 4) {
        float *x0 = x;
        const float *end = x + (ci & ~3);
        int32_t t0, t1;
        __asm__ volatile(
            "vldmia %[g], {s0-s3}\n\t"
            TT_FMA_LOOP(
                "vldmia %[x0], {s16-s19}\n\t"
                TT_FMA_W4("w0") TT_FMA_P0("s0")
                TT_FMA_W4("w1") TT_FMA_P0("s1")
                TT_FMA_W4("w2") TT_FMA_P0("s2")
                TT_FMA_W4("w3") TT_FMA_P0("s3")
                "vstmia %[x0]!, {s16-s19}\n\t")
            : [x0] "+&r"(x0), [w0] "+&r"(w0), [w1] "+&r"(w1), [w2] "+&r"(w2), [w3] "+&r"(w3), [t0] "=&r"(t0),
              [t1] "=&r"(t1)
            : [end] "r"(end), [g] "r"(g), [ci] "r"(ci)
            : TT_FMA_CLOBBERS);
        c = ci & ~3;
    }
#endif
    tt_fma_tile_c(x, ci, c, 1, 4, w, g);
}

/* tt_fma_rows4_s8(x, ci, n, m, w, z, g): four pixels' sums over m weight rows, for a host build's pointwise input
 * gradient (kernels/conv2d_grad_input.c.j2, host): for t < n (n <= 4) and c < ci,
 *     x[t * ci + c] = the sum over i = 0 .. m-1, in that order, from +0, of fma(g[4 * i + t], (float)(w[i][c] - z[i]), .)
 * (z NULL: no zero point; docs/design.md §3b: each term one fused multiply-add, the integer converted exactly).
 * The four pixels' sums of sixteen channels stay in vector registers over all m rows (AVX2 + FMA: eight, a row's
 * sixteen weights widened and converted once for the four), then those of eight channels where ci % 16 >= 8 (four);
 * elsewhere blocks of eight in C loops the compiler vectorizes; the last ci % 8 channels one at a time. Pixels t >= n
 * take factors 0 and are not stored. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TT_ROWS4_V 1
#else
#define TT_ROWS4_V 0
#endif
static inline void tt_fma_rows4_s8(float *x, int ci, int n, int m, const int8_t *const *w, const int32_t *z,
                                   const float *g) {
    const int c0 = ci - ci % 8;  /* channels in blocks: c < c0 */
#if TT_ROWS4_V
    const int c16 = ci - ci % 16;  /* in sixteens: c < c16 */
    for (int c = 0; c < c16; c += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int i = 0; i < m; i++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(w[i] + c));
            const __m256i zi = _mm256_set1_epi32(z ? z[i] : 0);
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(q), zi));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)), zi));
            const float *gi = g + 4 * i;
            __m256 f = _mm256_broadcast_ss(gi);
            a0 = _mm256_fmadd_ps(f, lo, a0);
            b0 = _mm256_fmadd_ps(f, hi, b0);
            f = _mm256_broadcast_ss(gi + 1);
            a1 = _mm256_fmadd_ps(f, lo, a1);
            b1 = _mm256_fmadd_ps(f, hi, b1);
            f = _mm256_broadcast_ss(gi + 2);
            a2 = _mm256_fmadd_ps(f, lo, a2);
            b2 = _mm256_fmadd_ps(f, hi, b2);
            f = _mm256_broadcast_ss(gi + 3);
            a3 = _mm256_fmadd_ps(f, lo, a3);
            b3 = _mm256_fmadd_ps(f, hi, b3);
        }
        const __m256 lo_sums[4] = {a0, a1, a2, a3}, hi_sums[4] = {b0, b1, b2, b3};
        for (int t = 0; t < n; t++) {
            _mm256_storeu_ps(x + t * ci + c, lo_sums[t]);
            _mm256_storeu_ps(x + t * ci + c + 8, hi_sums[t]);
        }
    }
    if (c0 > c16) {  /* eight channels c16 .. c16+7 */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < m; i++) {
            const __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(w[i] + c16));
            const __m256 d = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(q),
                                                                 _mm256_set1_epi32(z ? z[i] : 0)));
            const float *gi = g + 4 * i;
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(gi), d, a0);
            a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(gi + 1), d, a1);
            a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(gi + 2), d, a2);
            a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(gi + 3), d, a3);
        }
        const __m256 sums[4] = {a0, a1, a2, a3};
        for (int t = 0; t < n; t++) {
            _mm256_storeu_ps(x + t * ci + c16, sums[t]);
        }
    }
#else
    for (int c = 0; c < c0; c += 8) {  /* in C, eight channels a block: 4 x 8 sums the compiler keeps in registers */
        float a[4][8] = {{0.0f}};
        for (int i = 0; i < m; i++) {
            float d[8];
            for (int e = 0; e < 8; e++) {
                d[e] = (float)((int32_t)w[i][c + e] - (z ? z[i] : 0));
            }
            for (int t = 0; t < 4; t++) {
                for (int e = 0; e < 8; e++) {
                    a[t][e] = tt_fmaf(g[4 * i + t], d[e], a[t][e]);
                }
            }
        }
        for (int t = 0; t < n; t++) {
            memcpy(x + t * ci + c, a[t], sizeof a[t]);
        }
    }
#endif
    for (int c = c0; c < ci; c++) {
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int i = 0; i < m; i++) {
            const float d = (float)((int32_t)w[i][c] - (z ? z[i] : 0));
            for (int t = 0; t < 4; t++) {
                v[t] = tt_fmaf(g[4 * i + t], d, v[t]);
            }
        }
        for (int t = 0; t < n; t++) {
            x[t * ci + c] = v[t];
        }
    }
}

/* tt_fma_taps_f32(y, g, t, n, ci): a host build's depthwise input gradient at one pixel (kernels/conv2d_grad_input.c.j2,
 * host): for c < ci, y[c] = the sum over k = 0 .. n-1, in that order, from +0, of fma(g[k][c], t[k][c], .) — g[k] the
 * (ci,) gz of the pixel's k-th tap, t[k] that tap's (ci,) dequantized weights (docs/design.md §3b: each term one
 * fused multiply-add; a zero gz adds an exact zero). Thirty-two channels at a time in four AVX2 registers (TT_ROWS4_V),
 * then eight, the last ci % 8 (every channel without AVX2 + FMA) in C. Channels c .. c+31 are stored after their own
 * terms are read only: y may start before g[k] in the same bytes as far as a C-order gather allows. */
static inline void tt_fma_taps_f32(float *y, const float *const *g, const float *const *t, int n, int ci) {
    int c = 0;
#if TT_ROWS4_V
    for (; c + 32 <= ci; c += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int k = 0; k < n; k++) {
            const float *gk = g[k] + c, *tk = t[k] + c;
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(gk), _mm256_loadu_ps(tk), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(gk + 8), _mm256_loadu_ps(tk + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(gk + 16), _mm256_loadu_ps(tk + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(gk + 24), _mm256_loadu_ps(tk + 24), a3);
        }
        _mm256_storeu_ps(y + c, a0);
        _mm256_storeu_ps(y + c + 8, a1);
        _mm256_storeu_ps(y + c + 16, a2);
        _mm256_storeu_ps(y + c + 24, a3);
    }
    for (; c + 8 <= ci; c += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int k = 0; k < n; k++) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(g[k] + c), _mm256_loadu_ps(t[k] + c), a);
        }
        _mm256_storeu_ps(y + c, a);
    }
#endif
    for (; c < ci; c++) {
        float a = 0.0f;
        for (int k = 0; k < n; k++) {
            a = tt_fmaf(g[k][c], t[k][c], a);
        }
        y[c] = a;
    }
}

#endif /* TT_FLOAT_GRAD_H */
