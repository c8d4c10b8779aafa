/* tt_float.h — the fp32 helpers of the training step (docs/design.md §3-4): exp / log for the loss, the
 * integer rounding of an SGD step, the stochastic-rounding hash of tinytrain/ops/sgd_update.py and the lr
 * schedule's factor of tinytrain/lr_schedule.py.
 *
 * Everything here uses only IEEE-754 float32 + - * / and fused multiply-add, and integer arithmetic, never libm,
 * so the host build and the Cortex-M build give the same bits (glibc's and newlib's expf / logf differ in
 * the last bit; floorf / rintf are exact but may need -lm). Build with -ffp-contract=off, no fast-math.
 * Everything here must agree bit for bit with the simulator: tt_expf / tt_logf (within 2 ulp of the exact values)
 * and tt_fmaf are computed by tinytrain/f32.py the same way (tests/ops/test_f32.py).
 *
 * The parts, by family: tt_float_round.h (fma, exp / log, rounding), tt_float_draws.h (stochastic rounding, lr
 * factor), tt_float_grad.h (input-gradient tiles), tt_float_masks.h (a host build's clamp masks).
 */
#ifndef TT_FLOAT_H
#define TT_FLOAT_H

#include <stdint.h>
#include <string.h>

#include "tt_float_round.h"
#include "tt_float_draws.h"
#include "tt_float_grad.h"
#include "tt_float_masks.h"

#endif /* TT_FLOAT_H */
