/* tt_fixedpoint.h — the fixed-point arithmetic of TFLite / CMSIS-NN / gemmlowp (docs/design.md §3).
 *
 * The math only; kernels (the generated tinytrain_model.c) call these. Each function is the C
 * counterpart of a function in tinytrain/quant.py or tinytrain/ops/softmax.py and must agree with
 * it bit for bit (the _s8 forms: their int8 outputs). Portable C99: signed right shifts are arithmetic
 * on every compiler we target; one GCC / Clang attribute keeps a rarely taken exact path out of line; on an Arm
 * core with an FPU one instruction of inline assembly (VCVTR, TT_FP32_FPU) rounds float32 to int.
 */
#ifndef TT_FIXEDPOINT_H
#define TT_FIXEDPOINT_H

#include <stdint.h>
#include <string.h>
#if defined(__ARM_FEATURE_SAT)
#include <arm_acle.h>
#endif

/* TT_WORD64: whether 64-bit integer shifts are single instructions (64-bit hosts) or not (Cortex-M); it only
 * chooses between two ways of computing the same integers in tt_requantize_fp32_s8. */
#ifndef TT_WORD64
#define TT_WORD64 (UINTPTR_MAX > 0xFFFFFFFFu)
#endif

/* TT_FP32_FPU: whether the compiler targets an Arm core with a single-precision FPU (Cortex-M4F / M7 / M55 hard-float
 * builds): tt_requantize_fp32_s8 then computes onnxruntime's float32 requantization on it (VLDR of the scale, VCVT,
 * VMUL, VCVTR), the very IEEE arithmetic the spec names, instead of emulating it in integers (docs/design.md §3a). */
#ifndef TT_FP32_FPU
#if defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4)
#define TT_FP32_FPU 1
#else
#define TT_FP32_FPU 0
#endif
#endif

/* SaturatingRoundingDoublingHighMul: (a * b * 2) >> 32, rounded, saturated on INT32_MIN * INT32_MIN. */
static inline int32_t tt_srdhm(int32_t a, int32_t b) {
    if (a == INT32_MIN && b == INT32_MIN) {
        return INT32_MAX;
    }
    const int64_t ab = (int64_t)a * (int64_t)b;
    const int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

/* RoundingDivideByPOT: x / 2^exponent, to nearest, ties away from zero; 0 <= exponent <= 31. */
static inline int32_t tt_rounding_divide_by_pot(int32_t x, int exponent) {
    const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* RoundingDivideByPOT for any exponent 0..62, in 64 bits (the softmax's final division can exceed 31). */
static inline int32_t tt_rounding_divide_by_pot_wide(int32_t x, int exponent) {
    const int64_t mask = ((int64_t)1 << exponent) - 1;
    const int64_t remainder = (int64_t)x & mask;
    const int64_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (int32_t)(((int64_t)x >> exponent) + (remainder > threshold ? 1 : 0));
}

/* The requantization helpers; a kernel calls the one its node's Requant selects (``single_rounding``,
 * a template parameter of the kernel, never an #ifdef).
 *
 * tt_requantize: TFLite MultiplyByQuantizedMultiplier, default double rounding (tflite-micro).
 * shift > 0 is a left shift, shift < 0 a rounding right shift. */
static inline int32_t tt_requantize(int32_t acc, int32_t multiplier, int32_t shift) {
    const int left = shift > 0 ? (int)shift : 0;
    const int right = shift > 0 ? 0 : (int)-shift;
    return tt_rounding_divide_by_pot(tt_srdhm(acc * ((int32_t)1 << left), multiplier), right);
}

/* tt_requantize_single: MultiplyByQuantizedMultiplier with TFLITE_SINGLE_ROUNDING (= CMSIS-NN
 * arm_nn_requantize with CMSIS_NN_USE_SINGLE_ROUNDING): acc * multiplier * 2^(shift - 31) rounded once,
 * ties toward +infinity, in 64 bits; -31 <= shift <= 30 (QuantizeMultiplier clamps it). */
static inline int32_t tt_requantize_single(int32_t acc, int32_t multiplier, int32_t shift) {
    const int total_shift = 31 - (int)shift;
    const int64_t round = (int64_t)1 << (total_shift - 1);
    return (int32_t)(((int64_t)acc * (int64_t)multiplier + round) >> total_shift);
}

/* Number of significant bits of x (0 for 0). */
static inline int tt_bit_length64(uint64_t x) {
    int n = 0;
    if (x >> 32) { x >>= 32; n += 32; }
    if (x >> 16) { x >>= 16; n += 16; }
    if (x >> 8) { x >>= 8; n += 8; }
    if (x >> 4) { x >>= 4; n += 4; }
    if (x >> 2) { x >>= 2; n += 2; }
    if (x >> 1) { x >>= 1; n += 1; }
    return n + (int)x;
}

/* x / 2^k rounded to nearest, ties to even; 1 <= k <= 62 (floor shift plus non-negative remainder). */
static inline int64_t tt_shift_round_half_even(int64_t x, int k) {
    const int64_t q = x >> k;
    const int64_t r = (int64_t)((uint64_t)x & (((uint64_t)1 << k) - 1));
    const int64_t half = (int64_t)1 << (k - 1);
    return q + ((r > half || (r == half && (q & 1))) ? 1 : 0);
}

/* The integer value of (float)x: x (|x| < 2^62) rounded to 24 significant bits, ties to even. */
static inline int64_t tt_round_to_float32(int64_t x) {
    const uint64_t ax = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    const int k = tt_bit_length64(ax) - 24;
    return k > 0 ? tt_shift_round_half_even(x, k) * ((int64_t)1 << k) : x;
}

/* tt_requantize_fp32: onnxruntime's requantization nearbyint((float)acc * scale) in float32, ties to even
 * (MLAS MlasRequantizeOutput: QLinearConv, QGemm, QLinearGlobalAveragePool), in integer arithmetic
 * (quant.py multiply_by_float32_scale). scale = multiplier * 2^(shift - 31) is a float32 value, its
 * significand m = multiplier >> 7 (24 bits; the multiplier's low 7 bits are zero), shift <= 23. Saturates at
 * +-2^30. (float)acc and p = (float)acc * m are rounded to 24 significant bits, then p / 2^k (k = 24 - shift)
 * is rounded half to even. Out of line (unused in projects without float32 rounding): the kernels call
 * tt_requantize_fp32_s8, which needs it for about 1 output in 4000, or tt_requantize_fp32_wide_s8. */
static __attribute__((noinline, unused)) int32_t tt_requantize_fp32(int32_t acc, int32_t multiplier, int32_t shift) {
    const int64_t m = (int64_t)(multiplier >> 7);
    const int k = 24 - (int)shift;
    const int64_t limit = (int64_t)1 << 30;
    if (m == 0) {
        return 0;
    }
    const int64_t y = tt_shift_round_half_even(tt_round_to_float32(tt_round_to_float32(acc) * m), k > 62 ? 62 : k);
    return (int32_t)(y > limit ? limit : (y < -limit ? -limit : y));
}

/* gemmlowp SaturatingRoundingMultiplyByPOT for a positive exponent (1..30). */
static inline int32_t tt_saturating_left_shift(int32_t x, int exponent) {
    const int32_t threshold = (int32_t)(((int64_t)1 << (31 - exponent)) - 1);
    if (x > threshold) {
        return INT32_MAX;
    }
    if (x < -threshold) {
        return INT32_MIN;
    }
    return x * ((int32_t)1 << exponent);
}

/* acc / count rounded half away from zero (count > 0), as TFLite's average pool and mean. */
static inline int32_t tt_divide_round_away(int32_t acc, int32_t count) {
    return acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
}

/* floor((acc + count / 2) / count) (count > 0): half up, for models imported from uint8. */
static inline int32_t tt_divide_round_half_up(int32_t acc, int32_t count) {
    const int32_t n = acc + count / 2;
    const int32_t q = n / count;
    return (n % count < 0) ? q - 1 : q;
}

/* acc / count rounded half to even (count > 0), as onnxruntime's float average and QuantizeLinear. */
static inline int32_t tt_divide_round_half_even(int32_t acc, int32_t count) {
    int32_t q = acc / count;
    int32_t r = acc % count;
    if (r < 0) {  /* floor division */
        q -= 1;
        r += count;
    }
    if (2 * r > count || (2 * r == count && q % 2 != 0)) {
        q += 1;
    }
    return q;
}

static inline int32_t tt_clamp(int32_t x, int32_t lo, int32_t hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

/* tt_clamp to the full int8 range: one SSAT on a core with the saturating instructions (ACLE __ssat). */
static inline int32_t tt_sat_s8(int32_t x) {
#if defined(__ARM_FEATURE_SAT)
    return __ssat(x, 8);
#else
    return tt_clamp(x, -128, 127);
#endif
}

/* ---- int8 outputs ----
 * A requantizing kernel stores clamp(requantize(acc, multiplier, shift) + out_zp, act_min, act_max) for an int8
 * zero point (-128 <= out_zp <= 127) and an int8 range (-128 <= act_min <= act_max <= 127). The _s8 helper of each
 * rounding returns a v for which clamp(v + out_zp, act_min, act_max) is that int8 for every such zero point and
 * range (v is the exact result wherever that matters); the kernels call these. */

/* tt_requantize without its left shift (shift <= 0, every int8 layer's) and for a multiplier >= 0: the doubling high
 * product is then floor((acc * multiplier + 2^30) / 2^31) (TFLite's nudge and truncating division give that for
 * every product but INT32_MIN * INT32_MIN), then the rounding right shift. Other shifts take tt_requantize. */
static inline int32_t tt_requantize_s8(int32_t acc, int32_t multiplier, int32_t shift) {
    if (shift > 0 || multiplier < 0) {
        return tt_requantize(acc, multiplier, shift);
    }
    const int right = -(int)shift;
    const int32_t x = (int32_t)(((int64_t)acc * multiplier + (1 << 30)) >> 31);
    const int32_t mask = (int32_t)(((uint32_t)1 << right) - 1u);
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> right) + ((x & mask) > threshold ? 1 : 0);
}

/* tt_requantize_single for shift <= -2 (a total shift 32 + t, t >= 1: every int8 layer's): the product's high word
 * (SMMUL) rounded and shifted by t in 32 bits, where a 64-bit shift by a variable takes a branchy sequence on a
 * 32-bit core. The same integer: the rounding term 2^(31 + t) is a multiple of 2^32, so floor((p + 2^(31 + t)) /
 * 2^(32 + t)) = floor((floor(p / 2^32) + 2^(t - 1)) / 2^t). Other shifts take tt_requantize_single. */
static inline int32_t tt_requantize_single_s8(int32_t acc, int32_t multiplier, int32_t shift) {
    if (shift > -2) {
        return tt_requantize_single(acc, multiplier, shift);
    }
    const int t = -1 - (int)shift;
    const int32_t high = (int32_t)(((int64_t)acc * multiplier) >> 32);
    return (high + ((int32_t)1 << (t - 1))) >> t;
}

/* tt_requantize_fp32's int8-output form, for -32 <= shift <= -2 (26 <= k <= 56: the scales of int8 layers;
 * bindings/common.py picks tt_requantize_fp32_wide for a node with any other shift), given the multiplier and, for
 * the shift, the float32 bits of the scale (bindings/common.py rq_operand): scale_bits = ((shift + 126) << 23) +
 * (multiplier >> 7) - 2^23, the multiplier in [2^30, 2^31) (no channel with a zero scale takes this helper: its
 * shift 0 is outside -32..-2), so shift = (scale_bits >> 23) - 126. A fast path in 32-bit words:
 * q = floor(p * 2^(32 - k)) = floor(acc * multiplier / 2^e), e = -1 - shift in 1..31, is the 64-bit product
 * shifted right by e (p = acc * m exact); its high word is floor(p / 2^k), its low word f the remainder of p
 * modulo 2^k in units of 2^(k - 32), floored. The fast result is high word + (f >= 2^31), p / 2^k rounded half
 * up; where f is not within 2^19 of the tie 2^31 it stands for the exact one:
 *   |p| < 2^(k + 9): the float32 roundings of acc and of p move p by at most |p| * 2^-23 (1 + 2^-24), under
 *     2^18 + 1 units of f; farther from the tie than that the exact p' rounds as p does: the same result.
 *   |p| >= 2^(k + 9): both results have magnitude >= 511 and the same sign: both clamp to act_min or act_max.
 * About 1 output in 4000 lies within 2^19 of the tie and takes tt_requantize_fp32.
 * With TT_FP32_FPU the FPU computes the spec itself, every bit equal for every acc (docs/design.md §3a): the scale
 * as loaded, (float)acc and the product rounded to nearest even (the FPSCR's reset mode), and VCVTR rounds the
 * product, |product| < 2^29, to the nearest integer, ties to even. */
static inline int32_t tt_requantize_fp32_s8(int32_t acc, int32_t multiplier, int32_t scale_bits) {
#if TT_FP32_FPU
    float scale, y;
    int32_t r;
    (void)multiplier;
    memcpy(&scale, &scale_bits, sizeof scale);
    const float p = (float)acc * scale;
    __asm__("vcvtr.s32.f32 %0, %1" : "=t"(y) : "t"(p));
    memcpy(&r, &y, sizeof r);
    return r;
#else
    const int32_t shift = (int32_t)((uint32_t)scale_bits >> 23) - 126;
    const int e = -1 - (int)shift;
#if TT_WORD64  /* one 64-bit shift */
    const int64_t q = ((int64_t)acc * multiplier) >> e;
    const uint32_t f = (uint32_t)q;
    const int32_t high = (int32_t)(q >> 32);
#else  /* the two words shifted (gcc makes a 64-bit shift by a variable a branchy sequence on 32-bit cores) */
    const int64_t prod = (int64_t)acc * multiplier;
    const uint32_t lo = (uint32_t)prod, hi = (uint32_t)((uint64_t)prod >> 32);
    const uint32_t f = (lo >> e) | (hi << (32 - e));
    const int32_t high = (int32_t)hi >> e;
#endif
    if ((f ^ 0x80000000u) + 0x80000u < 0x100000u) {  /* f in [2^31 - 2^19, 2^31 + 2^19) */
        return tt_requantize_fp32(acc, multiplier, shift);
    }
    return high + (int32_t)(f >> 31);
#endif
}

/* tt_requantize_fp32_s8 of two accumulators, each with its channel's multiplier and scale: r[q] for acc_q. With
 * TT_FP32_FPU one VMOV moves both accumulators into a pair of consecutive S registers (s14, s15: a register pair
 * cannot be asked of gcc, so they are named and clobbered) and one moves both results back, two instructions fewer
 * than two calls; the arithmetic between is tt_requantize_fp32_s8's, instruction for instruction. */
static inline void tt_requantize_fp32_s8x2(int32_t acc0, int32_t multiplier0, int32_t scale_bits0, int32_t acc1,
                                           int32_t multiplier1, int32_t scale_bits1, int32_t r[2]) {
#if TT_FP32_FPU
    float scale0, scale1;
    int32_t r0, r1;
    (void)multiplier0;
    (void)multiplier1;
    memcpy(&scale0, &scale_bits0, sizeof scale0);
    memcpy(&scale1, &scale_bits1, sizeof scale1);
    __asm__("vmov s14, s15, %2, %3\n\t"
            "vcvt.f32.s32 s14, s14\n\t"
            "vcvt.f32.s32 s15, s15\n\t"
            "vmul.f32 s14, s14, %4\n\t"
            "vmul.f32 s15, s15, %5\n\t"
            "vcvtr.s32.f32 s14, s14\n\t"
            "vcvtr.s32.f32 s15, s15\n\t"
            "vmov %0, %1, s14, s15"
            : "=r"(r0), "=r"(r1) : "r"(acc0), "r"(acc1), "t"(scale0), "t"(scale1) : "s14", "s15");
    r[0] = r0;
    r[1] = r1;
#else
    r[0] = tt_requantize_fp32_s8(acc0, multiplier0, scale_bits0);
    r[1] = tt_requantize_fp32_s8(acc1, multiplier1, scale_bits1);
#endif
}

/* tt_requantize_fp32 under the name bindings/common.py gives nodes with a shift outside -32..-2, and its int8-output
 * form: the exact arithmetic. */
static inline int32_t tt_requantize_fp32_wide(int32_t acc, int32_t multiplier, int32_t shift) {
    return tt_requantize_fp32(acc, multiplier, shift);
}

static inline int32_t tt_requantize_fp32_wide_s8(int32_t acc, int32_t multiplier, int32_t shift) {
    return tt_requantize_fp32(acc, multiplier, shift);
}

/* ---- gemmlowp fixed point for the int8 softmax (tinytrain/ops/softmax.py) ---- */

/* exp(x) for x in [-1/4, 0), Q0.31 in and out. */
static inline int32_t tt_exp_on_interval_between_negative_one_quarter_and_0_excl(int32_t a) {
    const int32_t constant_term = 1895147668;
    const int32_t constant_1_over_3 = 715827883;
    const int32_t x = a + (1 << 28);
    const int32_t x2 = tt_srdhm(x, x);
    const int32_t x3 = tt_srdhm(x2, x);
    const int32_t x4 = tt_srdhm(x2, x2);
    const int32_t x4_over_4 = tt_rounding_divide_by_pot(x4, 2);
    const int32_t poly = tt_rounding_divide_by_pot(tt_srdhm(x4_over_4 + x3, constant_1_over_3) + x2, 1);
    return constant_term + tt_srdhm(constant_term, x + poly);
}

/* exp(a) for a <= 0 in Q5.26 (5 integer bits), result in Q0.31. */
static inline int32_t tt_exp_on_negative_values_q5(int32_t a) {
    enum { integer_bits = 5, fractional_bits = 31 - 5 };
    static const int32_t barrel[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
    const int32_t one_quarter = (int32_t)1 << (fractional_bits - 2);
    const int32_t mask = one_quarter - 1;
    const int32_t a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter;
    int32_t result = tt_exp_on_interval_between_negative_one_quarter_and_0_excl(
        tt_saturating_left_shift(a_mod_quarter_minus_one_quarter, integer_bits));
    const int32_t remainder = a_mod_quarter_minus_one_quarter - a;
    for (int e = -2; e < integer_bits; e++) {  /* exponents -2..4 */
        if (remainder & ((int32_t)1 << (fractional_bits + e))) {
            result = tt_srdhm(result, barrel[e + 2]);
        }
    }
    return a == 0 ? INT32_MAX : result;
}

/* 1 / (1 + a) for a in [0, 1), Q0.31 in and out (Newton-Raphson). */
static inline int32_t tt_one_over_one_plus_x_for_x_in_0_1(int32_t a) {
    const int64_t sum = (int64_t)a + INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
    int32_t x = 1515870810 + tt_srdhm(half_denominator, -1010580540);
    const int32_t one_q2 = (int32_t)1 << 29;
    for (int i = 0; i < 3; i++) {
        const int32_t half_denominator_times_x = tt_srdhm(half_denominator, x);
        const int32_t one_minus = one_q2 - half_denominator_times_x;
        x = x + tt_saturating_left_shift(tt_srdhm(x, one_minus), 2);
    }
    return tt_saturating_left_shift(x, 1);
}

/* Number of leading zero bits of a 32-bit value (32 for 0). */
static inline int tt_count_leading_zeros(uint32_t x) {
    int n = 0;
    for (uint32_t bit = (uint32_t)1 << 31; bit != 0 && !(x & bit); bit >>= 1) {
        n++;
    }
    return n;
}

#endif /* TT_FIXEDPOINT_H */
