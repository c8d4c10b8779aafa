/* tt_simd_asm.h — the inline-asm inner loops of the DSP cores (widening, gathers, the 2 x 2 and 4 x 1 inner products, the
 * pointwise pair loop with its float32 requantization); included by tt_simd_ops.h under TT_ARM_DSP with the DSP
 * extension only.
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_ASM_H
#define TT_SIMD_ASM_H

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

#endif /* TT_SIMD_ASM_H */
