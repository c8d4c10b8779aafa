/* tt_simd.h — the int8 inner loops of the forward kernels: sum_c (x[c] - in_zp) * w[c] in int32 over contiguous
 * channels (pointwise / regular convolution rows, fully connected: tt_dot_s8, tt_dot2_s8, tt_dot4w_s8 against an
 * input widened once per output pixel, tt_widen_s8, tt_dot4wp_s8 with the rows packed as halfwords, and
 * tt_dot2x2w_s8, two rows at two pixels, against two pixels' inputs widened once, tt_widen2_s8; tt_dot2x2p_s8 with
 * the rows packed as halfwords, and tt_pw2x2p_fp32_sat_s8, a pointwise kernel's whole loop over its channel pairs
 * with their float32 requantization and stores), one window tap of four
 * neighbouring depthwise channels (tt_mac4_s8; tt_mac4p_s8 with the weights packed as halfwords), one channel's
 * depthwise rows (tt_gather16_s8 gathers them as int16, tt_dwrow2_s1 / tt_dwrow2_s2 multiply them), and the clamped
 * store of four or two int8 outputs (tt_store4_s8, tt_store2_s8; tt_store4_sat_s8, tt_store2_sat_s8 for the full
 * int8 range, saturation alone).
 *
 * Two implementations of the same integers, chosen ONCE per project by TT_ARM_DSP, which the generated
 * tinytrain_model.c defines from the compile's --target (codegen/emit.py: arm_dsp) before including this file:
 *   TT_ARM_DSP 0: portable C99, the reference. Plain loops over contiguous channels with 16-bit operands and
 *                 int32 accumulators, which gcc -O3 vectorizes on the host (pmaddwd) and compiles to tight
 *                 loops on any core; a "widened input" is a view of the int8 input.
 *   TT_ARM_DSP 1: the Arm DSP extension (Cortex-M4/M7/M55), as CMSIS-NN: 4 int8 per 32-bit load, SXTB16 /
 *                 SXTAB16 widen them to two pairs of int16 (SXTAB16 subtracts the input zero point on the way),
 *                 SMLAD does two multiply-accumulates, SMLABB / SMLATB one from a chosen halfword; an output
 *                 pixel's input can be widened once into a buffer for all its output channels; four outputs
 *                 are saturated (SSAT), packed (BFI) and clamped (SSUB8 + SEL) as one word. Compiled for a core
 *                 without the extension (a host), the same algorithm runs on C models of those instructions, so
 *                 the DSP path is also testable there.
 * The parts, by kernel family: tt_simd_ops.h (the DSP instructions, tt_simd_asm.h: the inline-asm loops), tt_simd_dot.h
 * (inner products), tt_simd_depthwise.h (depthwise taps), tt_simd_store.h (int8 stores), tt_simd_loops.h (whole
 * loops and window helpers).
 * Both give the same integers for every input: the products (x - in_zp) * w fit 17 bits and the sums are the
 * same integers, only added in another order (int32 addition is associative; accumulators never approach
 * 2^31 for the layer sizes int8 models have), and clamping to an int8 range after saturating to int8 is the
 * same clamp. Kernels call the tt_widen / tt_dot / tt_mac4 / tt_store4 functions and never test TT_ARM_DSP.
 */
#ifndef TT_SIMD_H
#define TT_SIMD_H

#include <stdint.h>
#include <string.h>

#include "tt_fixedpoint.h"  /* tt_sat_s8: SSAT to int8 */

#ifndef TT_ARM_DSP
#define TT_ARM_DSP 0
#endif

#include "tt_simd_ops.h"
#include "tt_simd_dot.h"
#include "tt_simd_depthwise.h"
#include "tt_simd_store.h"
#include "tt_simd_loops.h"

#endif /* TT_SIMD_H */
