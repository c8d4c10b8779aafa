/* tt_simd_ops.h — the DSP instructions the inner loops use (SXTB16 / SXTAB16, SMLAD / SMLABB.., PKHBT, SSUB8 + SEL bytewise max /
 * min), as ACLE intrinsics on a core with the DSP extension and as C models of them elsewhere; the inline-asm loops
 * of tt_simd_asm.h on the DSP cores.
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_OPS_H
#define TT_SIMD_OPS_H

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
#include "tt_simd_asm.h"  /* the inline-asm inner loops (gcc, DSP cores) */
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

#endif /* TT_SIMD_OPS_H */
