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

#endif /* TT_ROWS_H */
