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

static inline uint32_t tt_pack16(int32_t lo, int32_t hi) {  /* two int16 in one word, lo in bits 0..15 */
    return ((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16);
}

#if TT_ARM_DSP && defined(__ARM_FEATURE_DSP)
/* The instructions: ACLE intrinsics; the rotated forms, BFI and the GE-flag pair SSUB8 + SEL as inline asm. */
#include <arm_acle.h>
static inline uint32_t tt_sxtb16(uint32_t x) { return (uint32_t)__sxtb16((int32_t)x); }
static inline uint32_t tt_sxtab16(uint32_t a, uint32_t x) { return (uint32_t)__sxtab16((int32_t)a, (int32_t)x); }
static inline int32_t tt_smlad(uint32_t a, uint32_t b, int32_t acc) { return __smlad((int32_t)a, (int32_t)b, acc); }
static inline int32_t tt_smlabb(uint32_t a, int32_t b, int32_t acc) { return __smlabb((int32_t)a, b, acc); }
static inline int32_t tt_smlatb(uint32_t a, int32_t b, int32_t acc) { return __smlatb((int32_t)a, b, acc); }
static inline int32_t tt_smlatt(uint32_t a, uint32_t b, int32_t acc) { return __smlatt((int32_t)a, (int32_t)b, acc); }
static inline int32_t tt_smlabt(uint32_t a, uint32_t b, int32_t acc) { return __smlabt((int32_t)a, (int32_t)b, acc); }
static inline uint32_t tt_sxtb16_ror8(uint32_t x) {
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}
static inline uint32_t tt_sxtab16_ror8(uint32_t a, uint32_t x) {
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
    return r;
}
/* tt_pack16 as one instruction (PKHBT; gcc makes UXTH + ORR of the C): for values not known at compile time. */
static inline uint32_t tt_pkhbt(int32_t lo, int32_t hi) {
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
}
/* The low bytes of b0..b3 as bytes 0..3 of one word. */
static inline uint32_t tt_pack4(int32_t b0, int32_t b1, int32_t b2, int32_t b3) {
    uint32_t r = (uint32_t)b0;
    __asm__("bfi %0, %1, #8, #8\n\tbfi %0, %2, #16, #8\n\tbfi %0, %3, #24, #8" : "+r"(r) : "r"(b1), "r"(b2), "r"(b3));
    return r;
}
/* Bytewise signed max / min of two words. */
static inline uint32_t tt_max_s8x4(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("ssub8 %0, %1, %2\n\tsel %0, %1, %2" : "=&r"(r) : "r"(a), "r"(b) : "cc");
    return r;
}
static inline uint32_t tt_min_s8x4(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("ssub8 %0, %1, %2\n\tsel %0, %2, %1" : "=&r"(r) : "r"(a), "r"(b) : "cc");
    return r;
}
/* Bit j (j < 4) set when byte j of x, less byte j of low4 (mod 256), is below byte j of width4 (unsigned): USUB8
 * twice, SEL of 0 / 1 per byte, and a multiply gathering the four bytes' low bits. */
static inline uint32_t tt_inside4(uint32_t x, uint32_t low4, uint32_t width4) {
    uint32_t r;
    __asm__("usub8 %0, %1, %2\n\tusub8 %0, %0, %3\n\tsel %0, %4, %5"
            : "=&r"(r) : "r"(x), "r"(low4), "r"(width4), "r"(0u), "r"(0x01010101u) : "cc");
    return (r * 0x01020408u) >> 24;
}
#define TT_INSIDE4_DSP 1
/* tt_widen2_s8 (below) for a constant channel count 4 * GROUPS, as one asm block: per group both pixels' words
 * loaded (LDR, at constant offsets: x may be unaligned), widened (SXTAB16, subtracting the zero point pair OFF) and
 * stored as pairs (STRD). gcc's own loop kept it rolled, rematerialized OFF and stored word by word: about 13
 * instructions per group where this takes 8. */
#define TT_WIDEN2_ASM(XW, X0, X1, OFF, GROUPS)                                                                       \
    do {                                                                                                             \
        uint32_t t0_, t1_, u0_, u1_;                                                                                 \
        __asm__ volatile(".set .Ltt_g, 0\n\t"                                                                        \
                         ".rept %c[g]\n\t"                                                                           \
                         "ldr %[t0], [%[x0], #.Ltt_g * 4]\n\t"                                                       \
                         "ldr %[t1], [%[x1], #.Ltt_g * 4]\n\t"                                                       \
                         "sxtab16 %[u0], %[off], %[t0]\n\t"                                                          \
                         "sxtab16 %[t0], %[off], %[t0], ror #8\n\t"                                                  \
                         "sxtab16 %[u1], %[off], %[t1]\n\t"                                                          \
                         "sxtab16 %[t1], %[off], %[t1], ror #8\n\t"                                                  \
                         "strd %[u0], %[t0], [%[xw], #.Ltt_g * 16]\n\t"                                              \
                         "strd %[u1], %[t1], [%[xw], #.Ltt_g * 16 + 8]\n\t"                                          \
                         ".set .Ltt_g, .Ltt_g + 1\n\t"                                                               \
                         ".endr"                                                                                     \
                         : [t0] "=&r"(t0_), [t1] "=&r"(t1_), [u0] "=&r"(u0_), [u1] "=&r"(u1_)                        \
                         : [xw] "r"(XW), [x0] "r"(X0), [x1] "r"(X1), [off] "r"(OFF), [g] "n"(GROUPS)                 \
                         : "memory");                                                                                \
    } while (0)
/* tt_gather16_s8 (below) for a constant stride C, four words (eight inputs) per block: LDRSB at constant offsets,
 * PKHBT, STRD; gcc's own code of the C loop computed an address per input. The memory operands tell gcc what the
 * block reads (7C + 1 bytes from S) and writes (4 words at D); volatile: its register outputs are scratch. */
#define TT_GATHER16_ASM(D, S, C)                                                                                     \
    do {                                                                                                             \
        int32_t a_, b_, c_, d_;                                                                                      \
        __asm__ volatile(".set .Ltt_k, 0\n\t"                                                                        \
                ".rept 2\n\t"                                                                                        \
                "ldrsb %[a], [%[s], #.Ltt_k * 4 * %c[c]]\n\t"                                                        \
                "ldrsb %[b], [%[s], #(.Ltt_k * 4 + 1) * %c[c]]\n\t"                                                  \
                "ldrsb %[x], [%[s], #(.Ltt_k * 4 + 2) * %c[c]]\n\t"                                                  \
                "ldrsb %[y], [%[s], #(.Ltt_k * 4 + 3) * %c[c]]\n\t"                                                  \
                "pkhbt %[a], %[a], %[b], lsl #16\n\t"                                                                \
                "pkhbt %[x], %[x], %[y], lsl #16\n\t"                                                                \
                "strd %[a], %[x], [%[d], #.Ltt_k * 8]\n\t"                                                           \
                ".set .Ltt_k, .Ltt_k + 1\n\t"                                                                        \
                ".endr"                                                                                              \
                : [a] "=&r"(a_), [b] "=&r"(b_), [x] "=&r"(c_), [y] "=&r"(d_), "=m"(*(uint32_t(*)[4])(D))             \
                : [s] "r"(S), [d] "r"(D), [c] "n"(C), "m"(*(const int8_t(*)[7 * (C) + 1])(S)));                      \
    } while (0)
/* Two rows at two pixels over a constant channel count 4 * GROUPS, as one asm block (tt_dot2x2p_s8, tt_dot2x2w_s8
 * below): per group of four channels ROWS puts both rows' widened pairs in p0, p1 and q0, q1 (at constant offsets
 * from W0 and from W1 + OFF1 bytes), both pixels' widened words (XW) are loaded as pairs (LDRD), 8 SMLAD into
 * A0..A3, 6 temporaries. gcc, given the same as C with every word used twice, ran out of registers and spilled and
 * reloaded them at every 2 x 2 tile. "memory": the block reads the buffer and rows through its pointer operands. */
#define TT_DOT2X2_TILE_ASM(ROWS, XW, W0, W1, OFF1, GROUPS, A0, A1, A2, A3)                                           \
    do {                                                                                                             \
        uint32_t x0_, x1_, p0_, p1_, q0_, q1_;                                                                       \
        __asm__(".set .Ltt_g, 0\n\t"                                                                                 \
                ".rept %c[g]\n\t" ROWS                                                                               \
                "ldrd %[x0], %[x1], [%[xw], #.Ltt_g * 16]\n\t" /* pixel 0 */                                         \
                "smlad %[a0], %[x0], %[p0], %[a0]\n\t"                                                               \
                "smlad %[a0], %[x1], %[p1], %[a0]\n\t"                                                               \
                "smlad %[a1], %[x0], %[q0], %[a1]\n\t"                                                               \
                "smlad %[a1], %[x1], %[q1], %[a1]\n\t"                                                               \
                "ldrd %[x0], %[x1], [%[xw], #.Ltt_g * 16 + 8]\n\t" /* pixel 1 */                                     \
                "smlad %[a2], %[x0], %[p0], %[a2]\n\t"                                                               \
                "smlad %[a2], %[x1], %[p1], %[a2]\n\t"                                                               \
                "smlad %[a3], %[x0], %[q0], %[a3]\n\t"                                                               \
                "smlad %[a3], %[x1], %[q1], %[a3]\n\t"                                                               \
                ".set .Ltt_g, .Ltt_g + 1\n\t"                                                                        \
                ".endr"                                                                                              \
                : [a0] "+r"(A0), [a1] "+r"(A1), [a2] "+r"(A2), [a3] "+r"(A3), [x0] "=&r"(x0_), [x1] "=&r"(x1_),      \
                  [p0] "=&r"(p0_), [p1] "=&r"(p1_), [q0] "=&r"(q0_), [q1] "=&r"(q1_)                                 \
                : [xw] "r"(XW), [w0] "r"(W0), [w1] "r"(W1), [d1] "n"(OFF1), [g] "n"(GROUPS)                          \
                : "memory");                                                                                         \
    } while (0)
/* tt_dot2x2p_s8's rows packed as halfwords: each row's pair of words one LDRD (no SXTB16). */
#define TT_DOT2X2P_ASM(XW, W0, W1, OFF1, GROUPS, A0, A1, A2, A3)                                                     \
    TT_DOT2X2_TILE_ASM("ldrd %[p0], %[p1], [%[w0], #.Ltt_g * 8]\n\t"                                                 \
                       "ldrd %[q0], %[q1], [%[w1], #.Ltt_g * 8 + %c[d1]]\n\t",                                       \
                       XW, W0, W1, OFF1, GROUPS, A0, A1, A2, A3)
/* tt_dot4wp_s8 (below) as one asm loop: per group of four channels the widened pair (LDRD, post-indexed) and the
 * four rows' 8 packed words as two LDM of 4 registers, 8 SMLAD into A0..A3, two groups a pass; W walks to END (> W). gcc loaded the
 * 8 words one LDR each. LDM needs its registers in ascending order: they are named (r8-r11). */
#define TT_DOT4WP_ASM(XW, W, END, A0, A1, A2, A3)                                                                    \
    do {                                                                                                             \
        register uint32_t p0_ __asm__("r8"), p1_ __asm__("r9"), p2_ __asm__("r10"), p3_ __asm__("r11");                \
        uint32_t x0_, x1_;                                                                                           \
        __asm__("1:\n\t"                                                                                              \
                ".rept 2\n\t" /* two groups per pass: END - W a multiple of 16 words */                               \
                "ldrd %[x0], %[x1], [%[xw]], #8\n\t"                                                                   \
                "ldm %[w]!, {%[p0], %[p1], %[p2], %[p3]}\n\t" /* rows 0 and 1 */                                      \
                "smlad %[a0], %[x0], %[p0], %[a0]\n\t"                                                                 \
                "smlad %[a0], %[x1], %[p1], %[a0]\n\t"                                                                 \
                "smlad %[a1], %[x0], %[p2], %[a1]\n\t"                                                                 \
                "smlad %[a1], %[x1], %[p3], %[a1]\n\t"                                                                 \
                "ldm %[w]!, {%[p0], %[p1], %[p2], %[p3]}\n\t" /* rows 2 and 3 */                                      \
                "smlad %[a2], %[x0], %[p0], %[a2]\n\t"                                                                 \
                "smlad %[a2], %[x1], %[p1], %[a2]\n\t"                                                                 \
                "smlad %[a3], %[x0], %[p2], %[a3]\n\t"                                                                 \
                "smlad %[a3], %[x1], %[p3], %[a3]\n\t"                                                                 \
                ".endr\n\t"                                                                                            \
                "cmp %[w], %[end]\n\t"                                                                                 \
                "bne 1b"                                                                                             \
                : [a0] "+r"(A0), [a1] "+r"(A1), [a2] "+r"(A2), [a3] "+r"(A3), [xw] "+&r"(XW), [w] "+&r"(W),           \
                  [x0] "=&r"(x0_), [x1] "=&r"(x1_), [p0] "=&r"(p0_), [p1] "=&r"(p1_), [p2] "=&r"(p2_), [p3] "=&r"(p3_) \
                : [end] "r"(END)                                                                                     \
                : "cc", "memory");                                                                                   \
    } while (0)
/* One group of four channels of two pixels' inner products with two rows (TT_DOT2X2_ASM, TT_DOT2X2Z_ASM): the
 * pixels' words at X and X + N, the rows' at W and W + N (immediate offsets, group .Ltt_g), the pixels' widened by
 * WIDEN (TT_RAW16: SXTB16; TT_LESS_ZP16: SXTAB16 of the zero point pair OFF), the rows' by SXTB16, 8 SMLAD into
 * A0..A3, in 6 temporaries. */
#define TT_RAW16(D, S) "sxtb16 " D ", " S "\n\t"
#define TT_LESS_ZP16(D, S) "sxtab16 " D ", %[off], " S "\n\t"
#define TT_DOT2X2_GROUP(WIDEN)                                                                                       \
    "ldr %[v0], [%[x], #.Ltt_g * 4]\n\t"          /* pixel 0 */                                                      \
    "ldr %[v1], [%[x], #.Ltt_g * 4 + %c[n]]\n\t"  /* pixel 1 */                                                      \
    "ldr %[u], [%[w], #.Ltt_g * 4]\n\t"           /* row 0 */                                                        \
    WIDEN("%[p]", "%[v0]") WIDEN("%[v0]", "%[v0], ror #8") WIDEN("%[q]", "%[v1]") WIDEN("%[v1]", "%[v1], ror #8")    \
    "sxtb16 %[t], %[u]\n\t"                                                                                          \
    "sxtb16 %[u], %[u], ror #8\n\t"                                                                                  \
    "smlad %[a0], %[p], %[t], %[a0]\n\t"                                                                             \
    "smlad %[a0], %[v0], %[u], %[a0]\n\t"                                                                            \
    "smlad %[a2], %[q], %[t], %[a2]\n\t"                                                                             \
    "smlad %[a2], %[v1], %[u], %[a2]\n\t"                                                                            \
    "ldr %[u], [%[w], #.Ltt_g * 4 + %c[n]]\n\t"   /* row 1 */                                                        \
    "sxtb16 %[t], %[u]\n\t"                                                                                          \
    "sxtb16 %[u], %[u], ror #8\n\t"                                                                                  \
    "smlad %[a1], %[p], %[t], %[a1]\n\t"                                                                             \
    "smlad %[a1], %[v0], %[u], %[a1]\n\t"                                                                            \
    "smlad %[a3], %[q], %[t], %[a3]\n\t"                                                                             \
    "smlad %[a3], %[v1], %[u], %[a3]\n\t"                                                                            \
    ".set .Ltt_g, .Ltt_g + 1\n\t"
/* tt_dot2x2_s8 (below) for raw inputs (in_zp 0) and a constant channel count N, a multiple of 16, the second pixel
 * and the second row N bytes after the first: an asm loop of four groups (TT_DOT2X2_GROUP, raw), per group 4 LDR,
 * 8 SXTB16 and 8 SMLAD, 13 registers. As C, gcc kept four pointers, the end and the zero point's pair beside the
 * 4 sums and 6 temporaries, and spilled a pointer at every group. */
#define TT_DOT2X2_ASM(X0, W0, N, A0, A1, A2, A3)                                                                     \
    do {                                                                                                             \
        const int8_t *x_ = (X0), *w_ = (W0), *const end_ = (X0) + (N);                                               \
        uint32_t v0_, v1_, u_, t_, p_, q_;                                                                           \
        __asm__("1:\n\t"                                                                                             \
                ".set .Ltt_g, 0\n\t"                                                                                 \
                ".rept 4\n\t" TT_DOT2X2_GROUP(TT_RAW16) ".endr\n\t"                                                  \
                "add %[x], %[x], #16\n\t"                                                                            \
                "add %[w], %[w], #16\n\t"                                                                            \
                "cmp %[x], %[end]\n\t"                                                                               \
                "bne 1b"                                                                                             \
                : [a0] "+r"(A0), [a1] "+r"(A1), [a2] "+r"(A2), [a3] "+r"(A3), [x] "+&r"(x_), [w] "+&r"(w_),          \
                  [v0] "=&r"(v0_), [v1] "=&r"(v1_), [u] "=&r"(u_), [t] "=&r"(t_), [p] "=&r"(p_), [q] "=&r"(q_)       \
                : [end] "r"(end_), [n] "n"(N)                                                                        \
                : "cc", "memory");                                                                                   \
    } while (0)
/* TT_DOT2X2_ASM's loop for inputs less a zero point (TT_DOT2X2_GROUP with OFF, its pair) in the same 13 registers,
 * 12, 8 or 4 groups a pass (K, whichever divides N / 4): the loop's end waits in memory, loaded into a free
 * temporary once a pass (a split weight's rows, whose sums change as the step updates them: conv2d.c.j2 "x2" with
 * Cs even). Not unrolled whole: gcc does not see the length of a .rept and placed a literal pool out of its loads'
 * reach. */
#define TT_DOT2X2Z_ASM(X0, W0, N, OFF, A0, A1, A2, A3)                                                               \
    do {                                                                                                             \
        const int8_t *x_ = (X0), *w_ = (W0), *end_ = (X0) + (N);                                                     \
        uint32_t v0_, v1_, u_, t_, p_, q_;                                                                           \
        __asm__("1:\n\t"                                                                                             \
                ".set .Ltt_g, 0\n\t"                                                                                 \
                ".rept %c[k]\n\t" TT_DOT2X2_GROUP(TT_LESS_ZP16) ".endr\n\t"                                          \
                "add %[x], %[x], #%c[k] * 4\n\t"                                                                     \
                "add %[w], %[w], #%c[k] * 4\n\t"                                                                     \
                "ldr %[t], %[end]\n\t"                                                                               \
                "cmp %[x], %[t]\n\t"                                                                                 \
                "bne 1b"                                                                                             \
                : [a0] "+r"(A0), [a1] "+r"(A1), [a2] "+r"(A2), [a3] "+r"(A3), [x] "+&r"(x_), [w] "+&r"(w_),          \
                  [v0] "=&r"(v0_), [v1] "=&r"(v1_), [u] "=&r"(u_), [t] "=&r"(t_), [p] "=&r"(p_), [q] "=&r"(q_)       \
                : [end] "m"(end_), [off] "r"(OFF), [n] "n"(N),                                                       \
                  [k] "n"((N) / 4 % 12 ? ((N) / 4 % 8 ? 4 : 8) : 12)                                                 \
                : "cc", "memory");                                                                                   \
    } while (0)
/* tt_dot4w_s8 (below) as one asm loop over groups of four channels (END: W0's end, at least one group): the
 * input's two widened words loaded as a pair (LDRD), each row's word (rows 0, 1 walking by post-increment, rows 2, 3
 * D bytes after them) widened (SXTB16), 8 SMLAD: 23 instructions per group where gcc's loop took 26. */
#define TT_DOT4W_ASM(XW, W0, W1, D, END, A0, A1, A2, A3)                                                             \
    do {                                                                                                             \
        uint32_t xa_, xb_, v_, t_;                                                                                   \
        __asm__("1:\n\t"                                                                                             \
                "ldrd %[xa], %[xb], [%[xw]], #8\n\t" /* the input's four channels */                                 \
                "ldr %[v], [%[w0], %[d]]\n\t" /* row 2's four weights */                                             \
                "sxtb16 %[t], %[v]\n\t"                                                                              \
                "sxtb16 %[v], %[v], ror #8\n\t"                                                                      \
                "smlad %[a2], %[xa], %[t], %[a2]\n\t"                                                                \
                "smlad %[a2], %[xb], %[v], %[a2]\n\t"                                                                \
                "ldr %[v], [%[w1], %[d]]\n\t" /* row 3's */                                                          \
                "sxtb16 %[t], %[v]\n\t"                                                                              \
                "sxtb16 %[v], %[v], ror #8\n\t"                                                                      \
                "smlad %[a3], %[xa], %[t], %[a3]\n\t"                                                                \
                "smlad %[a3], %[xb], %[v], %[a3]\n\t"                                                                \
                "ldr %[v], [%[w0]], #4\n\t" /* row 0's */                                                            \
                "sxtb16 %[t], %[v]\n\t"                                                                              \
                "sxtb16 %[v], %[v], ror #8\n\t"                                                                      \
                "smlad %[a0], %[xa], %[t], %[a0]\n\t"                                                                \
                "smlad %[a0], %[xb], %[v], %[a0]\n\t"                                                                \
                "ldr %[v], [%[w1]], #4\n\t" /* row 1's */                                                            \
                "sxtb16 %[t], %[v]\n\t"                                                                              \
                "sxtb16 %[v], %[v], ror #8\n\t"                                                                      \
                "smlad %[a1], %[xa], %[t], %[a1]\n\t"                                                                \
                "smlad %[a1], %[xb], %[v], %[a1]\n\t"                                                                \
                "cmp %[w0], %[end]\n\t"                                                                              \
                "bne 1b"                                                                                             \
                : [a0] "+r"(A0), [a1] "+r"(A1), [a2] "+r"(A2), [a3] "+r"(A3), [xw] "+&r"(XW), [w0] "+&r"(W0),        \
                  [w1] "+&r"(W1), [xa] "=&r"(xa_), [xb] "=&r"(xb_), [v] "=&r"(v_), [t] "=&r"(t_)                     \
                : [d] "r"(D), [end] "r"(END)                                                                         \
                : "cc", "memory");                                                                                   \
    } while (0)
/* tt_dot2x2w_s8's int8 rows: each row's word loaded (LDR at constant offsets: the rows may be unaligned) and widened
 * (SXTB16), 16 instructions per group where gcc's unrolled C took some 23. */
#define TT_DOT2X2W_ASM(XW, W0, W1, OFF1, GROUPS, A0, A1, A2, A3)                                                     \
    TT_DOT2X2_TILE_ASM("ldr %[p1], [%[w0], #.Ltt_g * 4]\n\t"                                                         \
                       "ldr %[q1], [%[w1], #.Ltt_g * 4 + %c[d1]]\n\t"                                                \
                       "sxtb16 %[p0], %[p1]\n\t"                                                                     \
                       "sxtb16 %[p1], %[p1], ror #8\n\t"                                                             \
                       "sxtb16 %[q0], %[q1]\n\t"                                                                     \
                       "sxtb16 %[q1], %[q1], ror #8\n\t",                                                            \
                       XW, W0, W1, OFF1, GROUPS, A0, A1, A2, A3)
#if TT_FP32_FPU
/* tt_pw2x2p_fp32_sat_s8 (below) for a constant channel count 4 * GROUPS, as one asm block: the whole loop over the
 * output channel pairs, every pointer walking by post-increment (gcc, given the loop as C around TT_DOT2X2P_ASM, ran
 * out of registers and spilled and reloaded its pointers at every 2 x 2 tile). 14 core registers: the buffer, rows
 * and both output pointers, 4 accumulators, 6 temporaries; the bias and table pointers wait in s16, s17 (one VMOV
 * each way, in temporaries while used: a free register pair saves a load per group of four channels).
 * TT_PW2X2P_MAC: per group both pixels' widened words and both rows' packed words loaded as pairs (LDRD), 8 SMLAD,
 * pixel 1 first: its first SMLAD starts at the bias pair, pixel 0's accumulators, before their own. The first row
 * read moves W past both rows; the others are read at offsets back. TT_PW2X2P_REQ: tt_requantize_fp32_s8x2's
 * instructions (VCVT, VMUL, VCVTR on s8..s11) with the scales SC0, SC1 (loaded with the multipliers by VLDM). The
 * output stage OUT (TT_PW2X2P_USAT or TT_PW2X2P_SSAT) then stores both pixels' two bytes as one halfword each (y may
 * be unaligned). With PAIRS (up to 48 input channels: measured, 2.5 of a tile's 55 to 180 instructions saved for
 * 1-2 KB of flash each), two tiles per iteration up to YEND4 (Co less Co % 4) share one VMOV of the pointers each
 * way, one VLDM of both bias pairs (s12..s15) and one of both tables (s0..s7), and one test; then (else from the
 * start) one tile per iteration up to YEND. B, Q, YEND4, YEND and ZP are memory operands. */
#define TT_PW2X2P_MAC                                                                                                \
    ".set .Ltt_g, 0\n\t"                                                                                             \
    ".rept %c[g]\n\t"                                                                                                \
    "ldrd %[x0], %[x1], [%[xw], #.Ltt_g * 16 + 8]\n\t" /* pixel 1 */                                                 \
    ".if .Ltt_g\n\t"                                                                                                 \
    "ldrd %[p0], %[p1], [%[w], #.Ltt_g * 8 - %c[r2]]\n\t" /* row o */                                                \
    "smlad %[a2], %[x0], %[p0], %[a2]\n\t"                                                                           \
    "smlad %[a2], %[x1], %[p1], %[a2]\n\t"                                                                           \
    "ldrd %[q0], %[q1], [%[w], #.Ltt_g * 8 - %c[r1]]\n\t" /* row o + 1 */                                            \
    "smlad %[a3], %[x0], %[q0], %[a3]\n\t"                                                                           \
    ".else\n\t"                                                                                                      \
    "ldrd %[p0], %[p1], [%[w]], #%c[r2]\n\t"                                                                         \
    "smlad %[a2], %[x0], %[p0], %[a0]\n\t"                                                                           \
    "smlad %[a2], %[x1], %[p1], %[a2]\n\t"                                                                           \
    "ldrd %[q0], %[q1], [%[w], #-%c[r1]]\n\t"                                                                        \
    "smlad %[a3], %[x0], %[q0], %[a1]\n\t"                                                                           \
    ".endif\n\t"                                                                                                     \
    "smlad %[a3], %[x1], %[q1], %[a3]\n\t"                                                                           \
    "ldrd %[x0], %[x1], [%[xw], #.Ltt_g * 16]\n\t" /* pixel 0 */                                                     \
    "smlad %[a0], %[x0], %[p0], %[a0]\n\t"                                                                           \
    "smlad %[a0], %[x1], %[p1], %[a0]\n\t"                                                                           \
    "smlad %[a1], %[x0], %[q0], %[a1]\n\t"                                                                           \
    "smlad %[a1], %[x1], %[q1], %[a1]\n\t"                                                                           \
    ".set .Ltt_g, .Ltt_g + 1\n\t"                                                                                    \
    ".endr\n\t"
#define TT_PW2X2P_REQ(SC0, SC1)                                                                                      \
    "vmov s8, s9, %[a0], %[a2]\n\t"                                                                                  \
    "vmov s10, s11, %[a1], %[a3]\n\t"                                                                                \
    "vcvt.f32.s32 s8, s8\n\t"                                                                                        \
    "vcvt.f32.s32 s9, s9\n\t"                                                                                        \
    "vcvt.f32.s32 s10, s10\n\t"                                                                                      \
    "vcvt.f32.s32 s11, s11\n\t"                                                                                      \
    "vmul.f32 s8, s8, " SC0 "\n\t"                                                                                   \
    "vmul.f32 s9, s9, " SC0 "\n\t"                                                                                   \
    "vmul.f32 s10, s10, " SC1 "\n\t"                                                                                 \
    "vmul.f32 s11, s11, " SC1 "\n\t"                                                                                 \
    "vcvtr.s32.f32 s8, s8\n\t"                                                                                       \
    "vcvtr.s32.f32 s9, s9\n\t"                                                                                       \
    "vcvtr.s32.f32 s10, s10\n\t"                                                                                     \
    "vcvtr.s32.f32 s11, s11\n\t"                                                                                     \
    "vmov %[a0], %[a2], s8, s9\n\t"                                                                                  \
    "vmov %[a1], %[a3], s10, s11\n\t"
#define TT_PW2X2P_TILE(SC0, SC1, OUT)                                                                                \
    TT_PW2X2P_MAC TT_PW2X2P_REQ(SC0, SC1) OUT                                                                        \
    "strh %[a0], [%[y]], #2\n\t"                                                                                     \
    "strh %[a2], [%[y1]], #2\n\t"
#define TT_PW2X2P_ASM(XW, W, B, Q, Y, Y1, YEND4, YEND, ZP, GROUPS, PAIRS, OUT)                                       \
    do {                                                                                                             \
        uint32_t a0_, a1_, a2_, a3_, x0_, x1_, p0_, p1_, q0_, q1_;                                                   \
        __asm__ volatile("ldr %[p0], %[b]\n\t"                                                                       \
                         "ldr %[p1], %[q]\n\t"                                                                       \
                         "vmov s16, s17, %[p0], %[p1]\n\t"                                                           \
                         ".if %c[pairs]\n\t"                                                                         \
                         "b 2f\n\t"                                                                                  \
                         "1:\n\t"                                                                                    \
                         "vmov %[p0], %[p1], s16, s17\n\t"                                                           \
                         "vldmia %[p0]!, {s12-s15}\n\t" /* both tiles' bias pairs */                                 \
                         "vldmia %[p1]!, {s0-s7}\n\t" /* their multipliers and scales */                             \
                         "vmov s16, s17, %[p0], %[p1]\n\t"                                                           \
                         "vmov %[a0], %[a1], s12, s13\n\t"                                                           \
                         TT_PW2X2P_TILE("s1", "s3", OUT)                                                             \
                         "vmov %[a0], %[a1], s14, s15\n\t"                                                           \
                         TT_PW2X2P_TILE("s5", "s7", OUT)                                                             \
                         "2:\n\t"                                                                                    \
                         "ldr %[x0], %[yend4]\n\t"                                                                   \
                         "cmp %[y], %[x0]\n\t"                                                                       \
                         "bne 1b\n\t"                                                                                \
                         ".endif\n\t"                                                                                \
                         "b 4f\n\t"                                                                                  \
                         "3:\n\t"                                                                                    \
                         "vmov %[p0], %[p1], s16, s17\n\t"                                                           \
                         "ldrd %[a0], %[a1], [%[p0]], #8\n\t" /* the bias pair */                                    \
                         "vldmia %[p1]!, {s0-s3}\n\t" /* multiplier, scale of channel o, then o + 1 */               \
                         "vmov s16, s17, %[p0], %[p1]\n\t"                                                           \
                         TT_PW2X2P_TILE("s1", "s3", OUT)                                                             \
                         "4:\n\t"                                                                                    \
                         "ldr %[x0], %[yend]\n\t"                                                                    \
                         "cmp %[y], %[x0]\n\t"                                                                       \
                         "bne 3b"                                                                                    \
                         : [w] "+&r"(W), [y] "+&r"(Y), [y1] "+&r"(Y1), [a0] "=&r"(a0_), [a1] "=&r"(a1_),             \
                           [a2] "=&r"(a2_), [a3] "=&r"(a3_), [x0] "=&r"(x0_), [x1] "=&r"(x1_), [p0] "=&r"(p0_),      \
                           [p1] "=&r"(p1_), [q0] "=&r"(q0_), [q1] "=&r"(q1_)                                         \
                         : [xw] "r"(XW), [b] "m"(B), [q] "m"(Q), [yend4] "m"(YEND4), [yend] "m"(YEND), [zp] "m"(ZP), \
                           [g] "n"(GROUPS), [pairs] "n"(PAIRS), [r1] "n"(2 * 4 * (GROUPS)), [r2] "n"(4 * 4 * (GROUPS))\
                         : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12",          \
                           "s13", "s14", "s15", "s16", "s17", "cc", "memory");                                       \
    } while (0)
/* out_zp = -128: clamp(r - 128, -128, 127) is USAT(r, 8) - 128, as a byte USAT(r, 8) ^ 0x80; the two channels'
 * bytes of a pixel packed (ORR), flipped at once (EOR). */
#define TT_PW2X2P_USAT                                                                                               \
    "usat %[a0], #8, %[a0]\n\t"                                                                                      \
    "usat %[a1], #8, %[a1]\n\t"                                                                                      \
    "usat %[a2], #8, %[a2]\n\t"                                                                                      \
    "usat %[a3], #8, %[a3]\n\t"                                                                                      \
    "orr %[a0], %[a0], %[a1], lsl #8\n\t"                                                                            \
    "orr %[a2], %[a2], %[a3], lsl #8\n\t"                                                                            \
    "eor %[a0], %[a0], #0x80808080\n\t"                                                                              \
    "eor %[a2], %[a2], #0x80808080\n\t"
/* Any other out_zp (read from memory into a free temporary): r + out_zp saturated (SSAT), packed (BFI). */
#define TT_PW2X2P_SSAT                                                                                               \
    "ldr %[x0], %[zp]\n\t"                                                                                           \
    "add %[a0], %[a0], %[x0]\n\t"                                                                                    \
    "add %[a1], %[a1], %[x0]\n\t"                                                                                    \
    "add %[a2], %[a2], %[x0]\n\t"                                                                                    \
    "add %[a3], %[a3], %[x0]\n\t"                                                                                    \
    "ssat %[a0], #8, %[a0]\n\t"                                                                                      \
    "ssat %[a1], #8, %[a1]\n\t"                                                                                      \
    "ssat %[a2], #8, %[a2]\n\t"                                                                                      \
    "ssat %[a3], #8, %[a3]\n\t"                                                                                      \
    "bfi %[a0], %[a1], #8, #8\n\t"                                                                                   \
    "bfi %[a2], %[a3], #8, #8\n\t"
#endif
#elif TT_ARM_DSP
/* C models of SXTAB16 (halfword sums wrap mod 2^16), SXTB16, SMLAD, SMLABB, SMLATB, SMLATT and SMLABT (sums wrap
 * mod 2^32), PKHBT, BFI of bytes and SSUB8 + SEL (SSAT to 8 bits: tt_fixedpoint.h tt_sat_s8). */
static inline uint32_t tt_sxtab16(uint32_t a, uint32_t x) {
    return tt_pack16((int32_t)(a & 0xFFFFu) + (int8_t)(x & 0xFFu), (int32_t)(a >> 16) + (int8_t)((x >> 16) & 0xFFu));
}
static inline uint32_t tt_sxtb16(uint32_t x) { return tt_sxtab16(0, x); }
static inline uint32_t tt_sxtb16_ror8(uint32_t x) { return tt_sxtab16(0, (x >> 8) | (x << 24)); }
static inline uint32_t tt_sxtab16_ror8(uint32_t a, uint32_t x) { return tt_sxtab16(a, (x >> 8) | (x << 24)); }
static inline int32_t tt_smlad(uint32_t a, uint32_t b, int32_t acc) {
    const int32_t lo = (int32_t)(int16_t)(a & 0xFFFFu) * (int16_t)(b & 0xFFFFu);
    const int32_t hi = (int32_t)(int16_t)(a >> 16) * (int16_t)(b >> 16);
    return (int32_t)((uint32_t)acc + (uint32_t)lo + (uint32_t)hi);
}
static inline int32_t tt_smlabb(uint32_t a, int32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)(a & 0xFFFFu) * (int16_t)((uint32_t)b & 0xFFFFu)));
}
static inline int32_t tt_smlatb(uint32_t a, int32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)(a >> 16) * (int16_t)((uint32_t)b & 0xFFFFu)));
}
static inline int32_t tt_smlatt(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)(a >> 16) * (int16_t)(b >> 16)));
}
static inline int32_t tt_smlabt(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)(a & 0xFFFFu) * (int16_t)(b >> 16)));
}
static inline uint32_t tt_pkhbt(int32_t lo, int32_t hi) { return tt_pack16(lo, hi); }
static inline uint32_t tt_pack4(int32_t b0, int32_t b1, int32_t b2, int32_t b3) {
    return ((uint32_t)b0 & 0xFFu) | (((uint32_t)b1 & 0xFFu) << 8) | (((uint32_t)b2 & 0xFFu) << 16) |
           ((uint32_t)b3 << 24);
}
static inline uint32_t tt_max_s8x4(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i += 8) {
        const int8_t x = (int8_t)(a >> i), y = (int8_t)(b >> i);
        r |= (uint32_t)(uint8_t)(x >= y ? x : y) << i;
    }
    return r;
}
static inline uint32_t tt_min_s8x4(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i += 8) {
        const int8_t x = (int8_t)(a >> i), y = (int8_t)(b >> i);
        r |= (uint32_t)(uint8_t)(x >= y ? y : x) << i;
    }
    return r;
}
#endif

#ifndef TT_INSIDE4_DSP
/* Bit j (j < 4) set when byte j of x, less byte j of low4 (mod 256), is below byte j of width4 (unsigned): the
 * portable form, and the C model of the DSP one. */
static inline uint32_t tt_inside4(uint32_t x, uint32_t low4, uint32_t width4) {
    uint32_t r = 0;
    for (int j = 0; j < 4; j++) {
        const uint32_t d = ((x >> (8 * j)) - (low4 >> (8 * j))) & 0xFFu;
        r |= (uint32_t)(d < ((width4 >> (8 * j)) & 0xFFu)) << j;
    }
    return r;
}
#endif

#if TT_ARM_DSP

/* A widened input vector (tt_widen_s8): int16 pairs, TT_XW_LEN(n) of them for n channels. */
typedef uint32_t tt_xw_t;
#define TT_XW_LEN(n) (((n) + 1) / 2)

static inline uint32_t tt_read_u32(const int8_t *p) {  /* may be unaligned: one LDR on ARMv7E-M */
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* sum_c (x[c] - in_zp) * w[c], c < n: 4 channels per step (bytes 0,2 then 1,3 of each word), then the rest. */
static inline int32_t tt_dot_s8(const int8_t *x, const int8_t *w, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t acc = 0;
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        const uint32_t xv = tt_read_u32(x + c), wv = tt_read_u32(w + c);
        acc = tt_smlad(tt_sxtab16(off, xv), tt_sxtb16(wv), acc);
        acc = tt_smlad(tt_sxtab16_ror8(off, xv), tt_sxtb16_ror8(wv), acc);
    }
    for (; c < n; c++) {
        acc += ((int32_t)x[c] - in_zp) * (int32_t)w[c];
    }
    return acc;
}

/* Two rows at once, sharing the widened input: acc[0] += x . w0, acc[1] += x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t acc[2]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t a0 = acc[0], a1 = acc[1];
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        const uint32_t xv = tt_read_u32(x + c);
        const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
        const uint32_t v0 = tt_read_u32(w0 + c), v1 = tt_read_u32(w1 + c);
        a0 = tt_smlad(xa, tt_sxtb16(v0), a0);
        a0 = tt_smlad(xb, tt_sxtb16_ror8(v0), a0);
        a1 = tt_smlad(xa, tt_sxtb16(v1), a1);
        a1 = tt_smlad(xb, tt_sxtb16_ror8(v1), a1);
    }
    for (; c < n; c++) {
        const int32_t xc = (int32_t)x[c] - in_zp;
        a0 += xc * (int32_t)w0[c];
        a1 += xc * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* The input vector of one output pixel widened once for all its output channels: xw holds x[c] - in_zp, c < n, as
 * int16 pairs, four channels a group in the order SXTB16 splits a weight word (x0, x2 | x1, x3), the last n % 4 in
 * order. */
static inline void tt_widen_s8(tt_xw_t *xw, const int8_t *x, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const int rest = n % 4;
    const int8_t *end4 = x + (n - rest);
    for (; x != end4; x += 4, xw += 2) {
        const uint32_t xv = tt_read_u32(x);
        xw[0] = tt_sxtab16(off, xv);
        xw[1] = tt_sxtab16_ror8(off, xv);
    }
    for (int c = 0; c < rest; c += 2) {
        xw[c / 2] = tt_pack16((int32_t)x[c] - in_zp, c + 1 < rest ? (int32_t)x[c + 1] - in_zp : 0);
    }
}

/* Four consecutive rows against a widened input (tt_widen_s8): acc[q] += xw . w[q * stride ..], q < 4, over n
 * channels. Rows 2 and 3 are read at an offset from rows 0 and 1: one pointer register fewer. */
static inline void tt_dot4w_s8(const tt_xw_t *xw, const int8_t *w, int stride, int n, int32_t acc[4]) {
    const int8_t *w0 = w, *w1 = w + stride, *end4 = w0 + (n - n % 4), *end = w0 + n;
    const int d = 2 * stride;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT4W_ASM
    if (w0 != end4) {
        TT_DOT4W_ASM(xw, w0, w1, d, end4, a0, a1, a2, a3);
    }
#endif
    for (; w0 != end4; w0 += 4, w1 += 4, xw += 2) {
        const uint32_t xa = xw[0], xb = xw[1];
        uint32_t v = tt_read_u32(w0);
        a0 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a0));
        v = tt_read_u32(w1);
        a1 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a1));
        v = tt_read_u32(w0 + d);
        a2 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a2));
        v = tt_read_u32(w1 + d);
        a3 = tt_smlad(xb, tt_sxtb16_ror8(v), tt_smlad(xa, tt_sxtb16(v), a3));
    }
    for (int c = 0; w0 != end; w0++, w1++, c++) {
        const int32_t xc = (int16_t)(xw[c / 2] >> (16 * (c % 2)));
        a0 += xc * (int32_t)w0[0];
        a1 += xc * (int32_t)w1[0];
        a2 += xc * (int32_t)w0[d];
        a3 += xc * (int32_t)w1[d];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot4w_s8 with four rows packed as int16 halfwords and interleaved (bindings/conv2d.py packed_quads: per group of
 * four channels c..c+3 and row q < 4, the words (w_q[c], w_q[c+2]) and (w_q[c+1], w_q[c+3]), the pairs tt_widen_s8
 * makes of the input), n % 4 == 0: per 4 channels 2 widened words and 8 weight words at constant offsets from one
 * pointer (LDRD pairs), 8 SMLAD, no SXTB16 (tt_dot4w_s8: 4 weight words from two pointers, 8 SXTB16). */
static inline void tt_dot4wp_s8(const tt_xw_t *xw, const uint32_t *w, int n, int32_t acc[4]) {
    const uint32_t *end = w + 2 * n;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT4WP_ASM
    if ((n / 4) & 1) {  /* an odd group count: the first group here, then the asm loop's pairs of groups */
        a0 = tt_smlad(xw[1], w[1], tt_smlad(xw[0], w[0], a0));
        a1 = tt_smlad(xw[1], w[3], tt_smlad(xw[0], w[2], a1));
        a2 = tt_smlad(xw[1], w[5], tt_smlad(xw[0], w[4], a2));
        a3 = tt_smlad(xw[1], w[7], tt_smlad(xw[0], w[6], a3));
        xw += 2;
        w += 8;
    }
    if (w != end) {
        TT_DOT4WP_ASM(xw, w, end, a0, a1, a2, a3);
    }
#else
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 2  /* the loop's pointer updates and branch once per 8 channels */
#endif
    for (; w != end; w += 8, xw += 2) {
        const uint32_t xa = xw[0], xb = xw[1];
        a0 = tt_smlad(xb, w[1], tt_smlad(xa, w[0], a0));
        a1 = tt_smlad(xb, w[3], tt_smlad(xa, w[2], a1));
        a2 = tt_smlad(xb, w[5], tt_smlad(xa, w[4], a2));
        a3 = tt_smlad(xb, w[7], tt_smlad(xa, w[6], a3));
    }
#endif
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* Two output pixels' input vectors widened once for all their output channels (tt_dot2x2w_s8): per group of four
 * channels tt_widen_s8's two words of pixel 0, then of pixel 1; the last n % 4 channels one more such group, padded
 * with zeros. TT_XW2_LEN(n) words. */
typedef uint32_t tt_xw2_t;
#define TT_XW2_LEN(n) (4 * (((n) + 3) / 4))

static inline void tt_widen2_s8(tt_xw2_t *xw, const int8_t *x0, const int8_t *x1, int n, int32_t in_zp) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
#ifdef TT_WIDEN2_ASM
    if (__builtin_constant_p(n) && n % 4 == 0 && n <= 252) {  /* conv2d.c.j2 "ci"; STRD offsets within 1020 bytes */
        TT_WIDEN2_ASM(xw, x0, x1, off, n / 4);
        return;
    }
#endif
    const int rest = n % 4, n4 = n - rest;
    for (int c = 0; c < n4; c += 4, xw += 4) {
        const uint32_t v0 = tt_read_u32(x0 + c), v1 = tt_read_u32(x1 + c);
        xw[0] = tt_sxtab16(off, v0);
        xw[1] = tt_sxtab16_ror8(off, v0);
        xw[2] = tt_sxtab16(off, v1);
        xw[3] = tt_sxtab16_ror8(off, v1);
    }
    if (rest) {
        int32_t a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
        for (int c = 0; c < rest; c++) {
            a[c] = (int32_t)x0[n4 + c] - in_zp;
            b[c] = (int32_t)x1[n4 + c] - in_zp;
        }
        xw[0] = tt_pack16(a[0], a[2]);
        xw[1] = tt_pack16(a[1], a[3]);
        xw[2] = tt_pack16(b[0], b[2]);
        xw[3] = tt_pack16(b[1], b[3]);
    }
}

/* Two rows w0, w1 at two pixels against a tt_widen2_s8 buffer: acc[0] += x0 . w0, acc[1] += x0 . w1, acc[2] += x1 . w0,
 * acc[3] += x1 . w1 over n channels. Each weight word is widened once for both pixels, each widened input word read
 * once for both rows: per 4 channels 2 weight loads, 4 SXTB16, 4 widened words, 8 SMLAD. */
/* always_inline: with the asm blocks gcc made it an outlined function of its own (a call per 2 x 2 tile, the
 * accumulators through memory). */
static inline __attribute__((always_inline)) void tt_dot2x2w_s8(const tt_xw2_t *xw, const int8_t *w0, const int8_t *w1,
                                                                 int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT2X2W_ASM
    /* A constant n, a multiple of 4 (conv2d.c.j2 "ci"): the asm block, its LDRD offsets within 1020 bytes. Row w1 at
     * a constant distance from w0 (pair_outputs' rows o, o + 1 of one weight) is read at offsets from w0's
     * register: one fewer. */
    if (__builtin_constant_p(n) && n % 4 == 0 && n <= 252) {
        if (__builtin_constant_p(w1 - w0) && w1 - w0 >= 0 && w1 - w0 + n <= 4095) {
            TT_DOT2X2W_ASM(xw, w0, w0, w1 - w0, n / 4, a0, a1, a2, a3);
        } else {
            TT_DOT2X2W_ASM(xw, w0, w1, 0, n / 4, a0, a1, a2, a3);
        }
        n = 0;
    }
#endif
    const int8_t *end4 = w0 + (n - n % 4);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 16  /* whole, when n is a constant (conv2d.c.j2 "ci"); else in groups of 16 */
#endif
    for (; w0 != end4; w0 += 4, w1 += 4, xw += 4) {
        uint32_t v = tt_read_u32(w0);
        uint32_t wa = tt_sxtb16(v), wb = tt_sxtb16_ror8(v);
        a0 = tt_smlad(xw[1], wb, tt_smlad(xw[0], wa, a0));
        a2 = tt_smlad(xw[3], wb, tt_smlad(xw[2], wa, a2));
        v = tt_read_u32(w1);
        wa = tt_sxtb16(v);
        wb = tt_sxtb16_ror8(v);
        a1 = tt_smlad(xw[1], wb, tt_smlad(xw[0], wa, a1));
        a3 = tt_smlad(xw[3], wb, tt_smlad(xw[2], wa, a3));
    }
    for (int c = 0; c < n % 4; c++) {  /* the rest group: channel c in word c % 2, halfword c / 2 */
        const int32_t x0c = (int16_t)(xw[c % 2] >> (16 * (c / 2))), x1c = (int16_t)(xw[2 + c % 2] >> (16 * (c / 2)));
        a0 += x0c * (int32_t)w0[c];
        a1 += x0c * (int32_t)w1[c];
        a2 += x1c * (int32_t)w0[c];
        a3 += x1c * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with the rows packed as int16 halfwords, per group of four channels (w[c], w[c+2]) and
 * (w[c+1], w[c+3]) (bindings/conv2d.py packed_rows: the words SXTB16 would make of a weight word), n % 4 == 0: per
 * 4 channels 4 weight words (pairs: LDRD), no SXTB16, 4 widened words, 8 SMLAD. */
static inline void tt_dot2x2p_s8(const tt_xw2_t *xw, const uint32_t *w0, const uint32_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#ifdef TT_DOT2X2P_ASM
    /* A constant n (conv2d.c.j2 "ci", "kpad"): the asm block, its LDRD offsets within 1020 bytes. Row w1 at a
     * constant distance from w0 (pair_outputs' rows o, o + 1) is read at offsets from w0's register: one fewer. */
    if (__builtin_constant_p(n) && n <= 252) {
        if (__builtin_constant_p(w1 - w0) && w1 - w0 >= 0 && 4 * (w1 - w0) + 2 * n - 8 <= 1020) {
            TT_DOT2X2P_ASM(xw, w0, w0, 4 * (w1 - w0), n / 4, a0, a1, a2, a3);
        } else {
            TT_DOT2X2P_ASM(xw, w0, w1, 0, n / 4, a0, a1, a2, a3);
        }
        n = 0;
    }
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 16  /* whole, when n is a constant (conv2d.c.j2 "ci"); else in groups of 16 */
#endif
    for (int c = 0; c < n; c += 4, w0 += 2, w1 += 2, xw += 4) {
        a0 = tt_smlad(xw[1], w0[1], tt_smlad(xw[0], w0[0], a0));
        a2 = tt_smlad(xw[3], w0[1], tt_smlad(xw[2], w0[0], a2));
        a1 = tt_smlad(xw[1], w1[1], tt_smlad(xw[0], w1[0], a1));
        a3 = tt_smlad(xw[3], w1[1], tt_smlad(xw[2], w1[0], a3));
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with both pixels' inputs widened on the way, x0 and x1 their int8 inputs (too long for a stack
 * buffer, or beside rows of a split weight): acc[0] += (x0 - in_zp) . w0, acc[1] += (x0 - in_zp) . w1, acc[2] +=
 * (x1 - in_zp) . w0, acc[3] += (x1 - in_zp) . w1 over n channels. Per 4 channels 2 input loads and 4 SXTAB16,
 * 2 weight loads and 4 SXTB16, 8 SMLAD: each widened word feeds two SMLAD, where one pixel's two rows
 * (tt_dot2_s8) widen each input word for 2 and each weight word for 2. */
static inline void tt_dot2x2_s8(const int8_t *x0, const int8_t *x1, const int8_t *w0, const int8_t *w1, int n,
                                int32_t in_zp, int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int c = 0;
#ifdef TT_DOT2X2_ASM
    if (__builtin_constant_p(in_zp) && in_zp == 0 && __builtin_constant_p(n) && n > 0 && n % 16 == 0 && n <= 4080 &&
        __builtin_constant_p(w1 - w0) && w1 - w0 == n && x1 == x0 + n) {  /* conv2d.c.j2 "zb", two pixels */
        TT_DOT2X2_ASM(x0, w0, n, a0, a1, a2, a3);
        c = n;
    } else if (__builtin_constant_p(n) && n > 0 && n % 16 == 0 && n <= 4080 && __builtin_constant_p(w1 - w0) &&
               w1 - w0 == n && x1 == x0 + n) {  /* a split weight's pair of rows, two pixels */
        TT_DOT2X2Z_ASM(x0, w0, n, off, a0, a1, a2, a3);
        c = n;
    }
#endif
    for (; c + 4 <= n; c += 4) {
        uint32_t v = tt_read_u32(x0 + c);
        const uint32_t p0 = tt_sxtab16(off, v), p1 = tt_sxtab16_ror8(off, v);
        v = tt_read_u32(x1 + c);
        const uint32_t q0 = tt_sxtab16(off, v), q1 = tt_sxtab16_ror8(off, v);
        v = tt_read_u32(w0 + c);
        uint32_t wa = tt_sxtb16(v), wb = tt_sxtb16_ror8(v);
        a0 = tt_smlad(p1, wb, tt_smlad(p0, wa, a0));
        a2 = tt_smlad(q1, wb, tt_smlad(q0, wa, a2));
        v = tt_read_u32(w1 + c);
        wa = tt_sxtb16(v);
        wb = tt_sxtb16_ror8(v);
        a1 = tt_smlad(p1, wb, tt_smlad(p0, wa, a1));
        a3 = tt_smlad(q1, wb, tt_smlad(q0, wa, a3));
    }
    for (; c < n; c++) {
        const int32_t xc = (int32_t)x0[c] - in_zp, yc = (int32_t)x1[c] - in_zp;
        a0 += xc * (int32_t)w0[c];
        a1 += xc * (int32_t)w1[c];
        a2 += yc * (int32_t)w0[c];
        a3 += yc * (int32_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* One depthwise tap of four neighbouring channels: acc[q] += (x[q] - in_zp) * w_q, q < 4, |w_q| < 2^15. One load
 * feeds the four channels: SXTAB16 gives x0, x2 and (rotated) x1, x3 as halfwords, SMLABB / SMLATB multiply one. */
static inline void tt_mac4_s8(const int8_t *x, int32_t in_zp, int32_t w0, int32_t w1, int32_t w2, int32_t w3,
                              int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const uint32_t xv = tt_read_u32(x);
    const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
    acc[0] = tt_smlabb(xa, w0, acc[0]);
    acc[1] = tt_smlabb(xb, w1, acc[1]);
    acc[2] = tt_smlatb(xa, w2, acc[2]);
    acc[3] = tt_smlatb(xb, w3, acc[3]);
}

/* tt_mac4_s8 with the four weights packed as two words of int16 halfwords, w02 = (w_0, w_2) and w13 = (w_1, w_3)
 * (bindings/conv2d.py packed_taps): two weight loads instead of four, SMLABB / SMLATT pick the halves. */
static inline void tt_mac4p_s8(const int8_t *x, int32_t in_zp, uint32_t w02, uint32_t w13, int32_t acc[4]) {
    const uint32_t off = tt_pack16(-in_zp, -in_zp);
    const uint32_t xv = tt_read_u32(x);
    const uint32_t xa = tt_sxtab16(off, xv), xb = tt_sxtab16_ror8(off, xv);
    acc[0] = tt_smlabb(xa, (int32_t)w02, acc[0]);
    acc[1] = tt_smlabb(xb, (int32_t)w13, acc[1]);
    acc[2] = tt_smlatt(xa, w02, acc[2]);
    acc[3] = tt_smlatt(xb, w13, acc[3]);
}

/* One channel of a depthwise convolution (kernels/depthwise_planar.c.j2): the products of one window row of
 * kw = 2m + 1 taps with two neighbouring outputs, from a row r of int16 inputs as words P_k = (r[2k], r[2k + 1])
 * whose halfword 0 is the first output's first tap. w: the row's taps as halfword pairs (tt_pack16), m words
 * E_k = (w_2k, w_2k+1) then m words O_k = (w_2k-1, w_2k), k = 1 .. m.
 * Stride 1, outputs at r[0] and r[1]: acc0 += sum_j w_j r[j] = sum_k<m P_k . E_k + r[2m] w_2m, acc1 += sum_j w_j
 * r[j + 1] = r[1] w_0 + sum_k>=1 P_k . O_k: m + 1 words, 2m + 2 multiply-accumulates (SMLAD, and SMLABT / SMLATB
 * for the halves). */
static inline void tt_dwrow2_s1(const uint32_t *r, const uint32_t *w, int m, int32_t *acc0, int32_t *acc1) {
    int32_t a0 = *acc0, a1 = tt_smlatb(r[0], (int32_t)w[0], *acc1);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8  /* whole: m is a constant */
#endif
    for (int k = 0; k < m; k++) {
        a0 = tt_smlad(r[k], w[k], a0);
        a1 = tt_smlad(r[k + 1], w[m + k], a1);
    }
    *acc0 = tt_smlabt(r[m], w[2 * m - 1], a0);
    *acc1 = a1;
}

/* tt_dwrow2_s1 at stride 2, outputs at r[0] and r[2]: acc0 += sum_k<m P_k . E_k + r[2m] w_2m, acc1 the same from
 * P_k+1: m + 2 words, 2m + 2 multiply-accumulates (E_k and the top of O_m only). */
static inline void tt_dwrow2_s2(const uint32_t *r, const uint32_t *w, int m, int32_t *acc0, int32_t *acc1) {
    int32_t a0 = *acc0, a1 = *acc1;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8  /* whole: m is a constant */
#endif
    for (int k = 0; k < m; k++) {
        a0 = tt_smlad(r[k], w[k], a0);
        a1 = tt_smlad(r[k + 1], w[k], a1);
    }
    *acc0 = tt_smlabt(r[m], w[2 * m - 1], a0);
    *acc1 = tt_smlabt(r[m + 1], w[2 * m - 1], a1);
}

/* d[k] = (s[2k c], s[(2k + 1) c]) as int16 halfwords, low first, k < n: 2n inputs c bytes apart gathered into
 * the ring of the planar depthwise kernel (kernels/depthwise_planar.c.j2), d word-aligned; four words at a time as
 * asm blocks (TT_GATHER16_ASM), c a constant of at most 585 (the blocks' offsets, up to 7c, are LDRSB immediates:
 * bindings/conv2d.py PLANAR_C_MAX). */
static inline void tt_gather16_s8(uint32_t *d, const int8_t *s, int c, int n) {
    int k = 0;
#ifdef TT_GATHER16_ASM
    for (; k + 4 <= n; k += 4) {
        TT_GATHER16_ASM(d + k, s + 2 * k * c, c);
    }
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#endif
    for (; k < n; k++) {
        d[k] = tt_pkhbt(s[2 * k * c], s[(2 * k + 1) * c]);
    }
}

/* y[q] = clamp(v_q, lo, hi), q < 4, for -128 <= lo <= hi <= 127: saturated to int8, packed, clamped bytewise, one
 * store (y may be unaligned). */
static inline void tt_store4_s8(int8_t *y, int32_t v0, int32_t v1, int32_t v2, int32_t v3, int32_t lo, int32_t hi) {
    const uint32_t lo4 = (uint32_t)(uint8_t)lo * 0x01010101u, hi4 = (uint32_t)(uint8_t)hi * 0x01010101u;
    const uint32_t r = tt_min_s8x4(tt_max_s8x4(tt_pack4(tt_sat_s8(v0), tt_sat_s8(v1), tt_sat_s8(v2), tt_sat_s8(v3)), lo4),
                                   hi4);
    memcpy(y, &r, sizeof r);
}

/* y[q] = clamp(v_q, lo, hi), q < 2, for -128 <= lo <= hi <= 127: saturated to int8, packed, clamped bytewise, one
 * halfword store (y may be unaligned). */
static inline void tt_store2_s8(int8_t *y, int32_t v0, int32_t v1, int32_t lo, int32_t hi) {
    const uint32_t lo4 = (uint32_t)(uint8_t)lo * 0x01010101u, hi4 = (uint32_t)(uint8_t)hi * 0x01010101u;
    const uint32_t packed = ((uint32_t)tt_sat_s8(v0) & 0xFFu) | ((uint32_t)tt_sat_s8(v1) << 8);  /* bytes 2, 3 unused */
    const uint16_t h = (uint16_t)tt_min_s8x4(tt_max_s8x4(packed, lo4), hi4);
    memcpy(y, &h, sizeof h);
}

/* tt_store4_s8 and tt_store2_s8 for the full int8 range (lo = -128, hi = 127): SSAT is the clamp, no SSUB8 + SEL.
 * Two outputs as two byte stores: packing them for one halfword store takes more instructions. */
static inline void tt_store4_sat_s8(int8_t *y, int32_t v0, int32_t v1, int32_t v2, int32_t v3) {
    const uint32_t r = tt_pack4(tt_sat_s8(v0), tt_sat_s8(v1), tt_sat_s8(v2), tt_sat_s8(v3));
    memcpy(y, &r, sizeof r);
}

static inline void tt_store2_sat_s8(int8_t *y, int32_t v0, int32_t v1) {
    y[0] = (int8_t)tt_sat_s8(v0);
    y[1] = (int8_t)tt_sat_s8(v1);
}

#else /* portable C: the reference */

/* sum_c (x[c] - in_zp) * w[c], c < n. 16-bit operands (x - in_zp fits int16) so vectorizers use 16x16->32
 * multiply-adds. */
static inline int32_t tt_dot_s8(const int8_t *x, const int8_t *w, int n, int32_t in_zp) {
    const int16_t zp = (int16_t)in_zp;
    int32_t acc = 0;
    for (int c = 0; c < n; c++) {
        acc += (int16_t)(x[c] - zp) * (int16_t)w[c];
    }
    return acc;
}

/* Two rows at once, sharing the input: acc[0] += x . w0, acc[1] += x . w1 (with x - in_zp). */
static inline void tt_dot2_s8(const int8_t *x, const int8_t *w0, const int8_t *w1, int n, int32_t in_zp,
                              int32_t acc[2]) {
    const int16_t zp = (int16_t)in_zp;
    int32_t a0 = acc[0], a1 = acc[1];
    for (int c = 0; c < n; c++) {
        const int16_t xc = (int16_t)(x[c] - zp);
        a0 += xc * (int16_t)w0[c];
        a1 += xc * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* The portable "widened input" is a view of the int8 input and its zero point (tt_widen_s8 copies nothing; the
 * inner products widen on the way, as tt_dot2_s8, in loops gcc vectorizes). */
typedef struct {
    const int8_t *x;
    int32_t in_zp;
} tt_xw_t;
#define TT_XW_LEN(n) 1

static inline void tt_widen_s8(tt_xw_t *xw, const int8_t *x, int n, int32_t in_zp) {
    (void)n;
    xw->x = x;
    xw->in_zp = in_zp;
}

/* Four consecutive rows against a widened input (tt_widen_s8): acc[q] += (x - in_zp) . w[q * stride ..], q < 4,
 * over n channels. */
static inline void tt_dot4w_s8(const tt_xw_t *xw, const int8_t *w, int stride, int n, int32_t acc[4]) {
    tt_dot2_s8(xw->x, w, w + stride, n, xw->in_zp, acc);
    tt_dot2_s8(xw->x, w + 2 * stride, w + 3 * stride, n, xw->in_zp, acc + 2);
}

/* tt_dot4w_s8 with four rows packed as int16 halfwords and interleaved (the DSP form's order), n % 4 == 0. */
static inline void tt_dot4wp_s8(const tt_xw_t *xw, const uint32_t *w, int n, int32_t acc[4]) {
    for (int c = 0; c < n; c++) {
        const int32_t xc = (int16_t)(xw->x[c] - xw->in_zp);
        const int word = c / 4 * 8 + c % 2, shift = 16 * (c % 4 / 2);  /* channel c's halfword of row 0 */
        for (int q = 0; q < 4; q++) {
            acc[q] += xc * (int32_t)(int16_t)(w[word + 2 * q] >> shift);
        }
    }
}

/* Two output pixels' input vectors, x - in_zp as int16: pixel 0's n channels, then pixel 1's (a copy, so that the
 * pixels' outputs may be stored over their inputs once this is made). */
typedef int16_t tt_xw2_t;
#define TT_XW2_LEN(n) (2 * (n))

static inline void tt_widen2_s8(tt_xw2_t *xw, const int8_t *x0, const int8_t *x1, int n, int32_t in_zp) {
    const int16_t zp = (int16_t)in_zp;
    for (int c = 0; c < n; c++) {
        xw[c] = (int16_t)(x0[c] - zp);
        xw[n + c] = (int16_t)(x1[c] - zp);
    }
}

/* Two rows w0, w1 at two pixels against a tt_widen2_s8 buffer: acc[0] += x0 . w0, acc[1] += x0 . w1, acc[2] += x1 . w0,
 * acc[3] += x1 . w1 over n channels. */
static inline void tt_dot2x2w_s8(const tt_xw2_t *xw, const int8_t *w0, const int8_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        a0 += xw[c] * (int16_t)w0[c];
        a1 += xw[c] * (int16_t)w1[c];
        a2 += xw[n + c] * (int16_t)w0[c];
        a3 += xw[n + c] * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with the rows packed as int16 halfwords (the DSP form's order), n % 4 == 0. */
static inline void tt_dot2x2p_s8(const tt_xw2_t *xw, const uint32_t *w0, const uint32_t *w1, int n, int32_t acc[4]) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        const int word = c / 4 * 2 + c % 2, shift = 16 * (c % 4 / 2);  /* channel c's halfword */
        const int32_t w0c = (int16_t)(w0[word] >> shift), w1c = (int16_t)(w1[word] >> shift);
        a0 += xw[c] * w0c;
        a1 += xw[c] * w1c;
        a2 += xw[n + c] * w0c;
        a3 += xw[n + c] * w1c;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* tt_dot2x2w_s8 with both pixels' inputs widened on the way. */
static inline void tt_dot2x2_s8(const int8_t *x0, const int8_t *x1, const int8_t *w0, const int8_t *w1, int n,
                                int32_t in_zp, int32_t acc[4]) {
    const int16_t zp = (int16_t)in_zp;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int c = 0; c < n; c++) {
        const int16_t xc = (int16_t)(x0[c] - zp), yc = (int16_t)(x1[c] - zp);
        a0 += xc * (int16_t)w0[c];
        a1 += xc * (int16_t)w1[c];
        a2 += yc * (int16_t)w0[c];
        a3 += yc * (int16_t)w1[c];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* One depthwise tap of four neighbouring channels: acc[q] += (x[q] - in_zp) * w_q, q < 4. */
static inline void tt_mac4_s8(const int8_t *x, int32_t in_zp, int32_t w0, int32_t w1, int32_t w2, int32_t w3,
                              int32_t acc[4]) {
    acc[0] += ((int32_t)x[0] - in_zp) * w0;
    acc[1] += ((int32_t)x[1] - in_zp) * w1;
    acc[2] += ((int32_t)x[2] - in_zp) * w2;
    acc[3] += ((int32_t)x[3] - in_zp) * w3;
}

/* tt_mac4_s8 with the weights packed as int16 halfwords: w02 = (w_0, w_2), w13 = (w_1, w_3). */
static inline void tt_mac4p_s8(const int8_t *x, int32_t in_zp, uint32_t w02, uint32_t w13, int32_t acc[4]) {
    tt_mac4_s8(x, in_zp, (int16_t)(w02 & 0xFFFFu), (int16_t)(w13 & 0xFFFFu), (int16_t)(w02 >> 16), (int16_t)(w13 >> 16),
               acc);
}

/* y[q] = clamp(v_q, lo, hi), q < 4. */
static inline void tt_store4_s8(int8_t *y, int32_t v0, int32_t v1, int32_t v2, int32_t v3, int32_t lo, int32_t hi) {
    y[0] = (int8_t)(v0 < lo ? lo : (v0 > hi ? hi : v0));
    y[1] = (int8_t)(v1 < lo ? lo : (v1 > hi ? hi : v1));
    y[2] = (int8_t)(v2 < lo ? lo : (v2 > hi ? hi : v2));
    y[3] = (int8_t)(v3 < lo ? lo : (v3 > hi ? hi : v3));
}

/* y[q] = clamp(v_q, lo, hi), q < 2. */
static inline void tt_store2_s8(int8_t *y, int32_t v0, int32_t v1, int32_t lo, int32_t hi) {
    y[0] = (int8_t)(v0 < lo ? lo : (v0 > hi ? hi : v0));
    y[1] = (int8_t)(v1 < lo ? lo : (v1 > hi ? hi : v1));
}

/* tt_store4_s8 and tt_store2_s8 for the full int8 range. */
static inline void tt_store4_sat_s8(int8_t *y, int32_t v0, int32_t v1, int32_t v2, int32_t v3) {
    tt_store4_s8(y, v0, v1, v2, v3, -128, 127);
}

static inline void tt_store2_sat_s8(int8_t *y, int32_t v0, int32_t v1) {
    tt_store2_s8(y, v0, v1, -128, 127);
}

#endif /* TT_ARM_DSP */

/* Every output channel pair of two pixels (a pointwise kernel's, conv2d.c.j2 "ci" with "packed", float32
 * requantization, the full int8 range): channels o, o + 1 at both pixels (tt_dot2x2p_s8 from the bias pair against
 * rows o, o + 1 of wpk, n / 2 words each), requantized (tt_requantize_fp32_s8x2), out_zp added, saturated to int8
 * and stored at y[o], y[o + 1] and y1[o], y1[o + 1]; Co even, n a constant multiple of 4. */
static inline void tt_pw2x2p_fp32_sat_s8(const tt_xw2_t *xw, const uint32_t *wpk, const int32_t *bias,
                                         const int32_t *rq, int n, int Co, int32_t out_zp, int8_t *y, int8_t *y1) {
#ifdef TT_PW2X2P_ASM
    if (__builtin_constant_p(n) && n <= 252) {  /* LDRD offsets within 1020 bytes */
        const int8_t *const yend4 = y + (Co & ~3), *const yend = y + Co;
        if (out_zp == -128) {
            TT_PW2X2P_ASM(xw, wpk, bias, rq, y, y1, yend4, yend, out_zp, n / 4, n <= 48, TT_PW2X2P_USAT);
        } else {
            TT_PW2X2P_ASM(xw, wpk, bias, rq, y, y1, yend4, yend, out_zp, n / 4, n <= 48, TT_PW2X2P_SSAT);
        }
        return;
    }
#endif
    for (int o = 0; o < Co; o += 2, wpk += n, bias += 2, rq += 4, y += 2, y1 += 2) {
        int32_t a[4] = {bias[0], bias[1], bias[0], bias[1]}, r[4];  /* channel o at both pixels, then o + 1 */
        tt_dot2x2p_s8(xw, wpk, wpk + n / 2, n, a);
        tt_requantize_fp32_s8x2(a[0], rq[0], rq[1], a[2], rq[0], rq[1], r);
        tt_requantize_fp32_s8x2(a[1], rq[2], rq[3], a[3], rq[2], rq[3], r + 2);
        tt_store2_sat_s8(y, r[0] + out_zp, r[2] + out_zp);
        tt_store2_sat_s8(y1, r[1] + out_zp, r[3] + out_zp);
    }
}

/* sum_c (x[c] - in_zp), c < n: the weight zero point's term, (x - in_zp) . (w - w_zp) = x . w - w_zp * this. */
static inline int32_t tt_sum_s8(const int8_t *x, int n, int32_t in_zp) {
    int32_t acc = 0;
    for (int c = 0; c < n; c++) {
        acc += (int32_t)x[c] - in_zp;
    }
    return acc;
}

/* The taps t in [begin, end) of one window dimension whose input index o0 + t * d lies in [0, n), o0 being the
 * first tap's (negative in the padding): one clipped range per output pixel instead of a check per tap. */
static inline int tt_tap_begin(int o0, int d) {
    return o0 < 0 ? (-o0 + d - 1) / d : 0;
}

static inline int tt_tap_end(int o0, int n, int taps, int d) {
    const int room = n - o0;
    const int t = room <= 0 ? 0 : (room + d - 1) / d;
    return t < taps ? t : taps;
}

#endif /* TT_SIMD_H */
