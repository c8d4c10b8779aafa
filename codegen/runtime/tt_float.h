/* tt_float.h — the fp32 helpers of the training step (docs/design.md §3-4): exp / log for the loss, the
 * integer rounding of an SGD step, the stochastic-rounding hash of tinytrain/ops/sgd_update.py and the lr
 * schedule's factor of tinytrain/training/schedule.py.
 *
 * Everything here uses only IEEE-754 float32 + - * / and fused multiply-add, and integer arithmetic, never libm,
 * so the host build and the Cortex-M build give the same bits (glibc's and newlib's expf / logf differ in
 * the last bit; floorf / rintf are exact but may need -lm). Build with -ffp-contract=off, no fast-math.
 * The rounding helpers, the hash and the lr factor must agree bit for bit with the simulator; tt_expf / tt_logf are
 * within 2 ulp of the exact values (the simulator uses numpy's float32 exp / log: see the tolerances in
 * tests/test_codegen_train.py).
 */
#ifndef TT_FLOAT_H
#define TT_FLOAT_H

#include <stdint.h>
#include <string.h>

/* a * b + c rounded once to float32 (IEEE 754 fusedMultiplyAdd): the fp32 backward's sums take each term this way
 * (docs/design.md §3b). Where the compiler has a fused multiply-add instruction (__FP_FAST_FMAF: VFMA.F32 on every
 * Cortex-M core tinytrain targets, M4F / M7 / M55; VFMADD on an x86 host built with -march=native) it is that one
 * instruction. Elsewhere it is computed in double and rounded to odd (Boldo & Melquiond, "Emulation of FMA and
 * correctly rounded sums", 2008): a * b is exact in double, p + c is exact as the pair (s, e) (TwoSum), and s with
 * its last bit forced to 1 when e is not 0 rounds to the correctly rounded float32 — the same bits as the instruction,
 * without libm (newlib's fmaf rounds twice). An explicit fused multiply-add, not a contraction: -ffp-contract=off
 * still holds for every other product and sum. */
#if defined(__FP_FAST_FMAF)
#define tt_fmaf(a, b, c) __builtin_fmaf((a), (b), (c))
#else
static inline float tt_fmaf(float a, float b, float c) {
    const double p = (double)a * (double)b, s = p + (double)c;
    const double bp = s - (double)c, e = (p - bp) + ((double)c - (s - bp));  /* s + e == p + c exactly */
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    if (e != 0.0 && (bits & 1u) == 0 && (bits >> 52 & 0x7FFu) != 0x7FFu) {  /* inexact, even, finite: to odd */
        bits += ((e > 0.0) == (s > 0.0)) ? 1 : (uint64_t)-1;  /* one ulp away from or towards 0, towards p + c */
        double t;
        memcpy(&t, &bits, sizeof t);
        return (float)t;
    }
    return (float)s;
}
#endif

/* 2^n as a float for -126 <= n <= 127 (built from its bits; memcpy is the portable bit cast). */
static inline float tt_pow2f(int n) {
    const uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* exp(x), float32 (Cephes expf: Cody-Waite reduction by ln 2, degree-7 polynomial); 0 below -87. */
static inline float tt_expf(float x) {
    if (x < -87.0f) {
        return 0.0f;
    }
    if (x > 88.0f) {
        x = 88.0f;
    }
    const float t = 1.44269504088896341f * x + 0.5f;   /* n = floor(x / ln 2 + 1/2) */
    int n = (int)t;
    if ((float)n > t) {
        n -= 1;
    }
    const float r = (x - (float)n * 0.693359375f) - (float)n * -2.12194440e-4f;  /* ln 2 = hi + lo */
    const float z = r * r;
    const float p = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                       + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) * z + r + 1.0f;
    return p * tt_pow2f(n);
}

/* log(x) for a normal x > 0, float32 (Cephes logf: x = m 2^e, m in [sqrt(1/2), sqrt(2)), degree-9 polynomial). */
static inline float tt_logf(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 23) & 0xFFu) - 126;
    bits = (bits & 0x807FFFFFu) | 0x3F000000u;          /* m in [0.5, 1) */
    float m;
    memcpy(&m, &bits, sizeof m);
    if (m < 0.707106781186547524f) {
        e -= 1;
        m = m + m - 1.0f;
    } else {
        m = m - 1.0f;
    }
    const float z = m * m;
    float y = ((((((((7.0376836292e-2f * m - 1.1514610310e-1f) * m + 1.1676998740e-1f) * m - 1.2420140846e-1f) * m
                   + 1.4249322787e-1f) * m - 1.6668057665e-1f) * m + 2.0000714765e-1f) * m - 2.4999993993e-1f) * m
              + 3.3333331174e-1f) * m * z;
    y = y + -2.12194440e-4f * (float)e;
    y = y + -0.5f * z;
    return (m + y) + 0.693359375f * (float)e;
}

#define TT_STEP_LIMIT 1073741824.0f  /* 2^30: an SGD step is clamped to +-2^30 LSB before it lands */

/* TT_FPV5: the generated training C defines it 1 for a core whose FPU has VMAXNM / VMINNM / VCVTM (Cortex-M7, M55:
 * codegen/context.py FPV5_TARGETS); built with that FPU, tt_floor_clamped is those three instructions. */
#ifndef TT_FPV5
#define TT_FPV5 0
#endif

/* floor(x) clamped to [-2^30, 2^30] (NaN gives -2^30), as an integer. */
#if TT_FPV5 && defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4)
/* The same integer: VMAXNM returns -2^30 for a (quiet: x is a sum, never signalling) NaN and below, VMINNM 2^30 above,
 * VCVTM rounds toward minus infinity, exact at |x| <= 2^30 (gcc: fmaxf, fminf, lfloorf inline on this FPU). */
static inline int32_t tt_floor_clamped(float x) {
    return (int32_t)__builtin_lfloorf(__builtin_fminf(__builtin_fmaxf(x, -TT_STEP_LIMIT), TT_STEP_LIMIT));
}
#else
static inline int32_t tt_floor_clamped(float x) {
    if (!(x >= -TT_STEP_LIMIT)) {
        x = -TT_STEP_LIMIT;
    }
    if (x > TT_STEP_LIMIT) {
        x = TT_STEP_LIMIT;
    }
    int32_t r = (int32_t)x;  /* toward zero; exact for |x| >= 2^23, where x is an integer */
    if ((float)r > x) {
        r -= 1;
    }
    return r;
}
#endif

/* tt_floor_clamped in two halves, each of which gcc vectorizes in a loop (the whole it does not: "control flow in
 * loop", gcc 12; a host build's update, kernels/sgd_update.c.j2): tt_floor_of_clamped(tt_step_clamp(x)) ==
 * tt_floor_clamped(x) for every float x. The clamp to +-2^30 (NaN to -2^30) is tt_floor_clamped's; then, |y| <= 2^30,
 * the conversion truncates toward zero and one is taken off below a negative non-integer, as tt_floor_clamped does. */
static inline float tt_step_clamp(float x) {
    x = x > TT_STEP_LIMIT ? TT_STEP_LIMIT : x;
    return x >= -TT_STEP_LIMIT ? x : -TT_STEP_LIMIT;
}

static inline int32_t tt_floor_of_clamped(float y) {
    const int32_t r = (int32_t)y;
    return (float)r > y ? r - 1 : r;
}

/* x rounded to nearest, ties to even (rintf in the default rounding mode), clamped to [-2^30, 2^30]. */
static inline int32_t tt_rint_clamped(float x) {
    const int32_t r = tt_floor_clamped(x);
    if (!(x > -TT_STEP_LIMIT) || x >= TT_STEP_LIMIT) {
        return r;
    }
    const float frac = x - (float)r;  /* exact, in [0, 1) */
    return (frac > 0.5f || (frac == 0.5f && (r & 1))) ? r + 1 : r;
}

/* ---- the stochastic-rounding draws of ops/sgd_update.py (stateless hash, all uint32, wrapping) ---- */

#define TT_GOLDEN 0x9E3779B9u

/* lowbias32. */
static inline uint32_t tt_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

/* The key of one update node (stream) at one step. */
static inline uint32_t tt_sr_key(uint32_t seed, uint32_t step, uint32_t stream) {
    return tt_mix32(tt_mix32(tt_mix32(seed ^ TT_GOLDEN) ^ step) ^ stream);
}

/* u_i in [0, 1): the top 24 bits of the hash of element i, times 2^-24 (exact in float32). */
static inline float tt_sr_uniform(uint32_t key, uint32_t i) {
    return (float)(tt_mix32(key + i * TT_GOLDEN) >> 8) * (1.0f / 16777216.0f);
}

/* The lr schedule's factor at a step (training/schedule.py, the spec): linear warm-up over `warmup` steps,
 * cosine decay until `steps`, then `lr_floor`. sin(pi/2 u) by its degree-9 odd Taylor polynomial (float32
 * coefficients), so no libm; counts below 2^24 convert to float exactly. */
static inline float tt_lr_factor(uint32_t step, uint32_t warmup, uint32_t steps, float lr_floor) {
    if (step < warmup) {
        return (float)(step + 1u) / (float)warmup;
    }
    if (step >= steps) {
        return lr_floor;
    }
    const float t = (float)(step - warmup) / (float)(steps - warmup);
    const float u = (t + t) - 1.0f;
    const float u2 = u * u;
    float p = 0.000160441181f;
    p = p * u2 + -0.00468175393f;
    p = p * u2 + 0.0796926245f;
    p = p * u2 + -0.645964086f;
    p = p * u2 + 1.57079637f;
    const float c = 0.5f - 0.5f * (u * p);
    return lr_floor + (1.0f - lr_floor) * c;
}

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

#endif /* TT_FLOAT_H */
