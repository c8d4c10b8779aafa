/* tt_float_round.h — fused multiply-add, exp / log, and the integer rounding of an SGD step.
 * A part of tt_float.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_FLOAT_ROUND_H
#define TT_FLOAT_ROUND_H

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

#endif /* TT_FLOAT_ROUND_H */
