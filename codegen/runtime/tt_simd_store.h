/* tt_simd_store.h — the clamped (tt_store4_s8, tt_store2_s8) and saturated (tt_store4_sat_s8, tt_store2_sat_s8) int8 stores.
 * A part of tt_simd.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_SIMD_STORE_H
#define TT_SIMD_STORE_H

#if TT_ARM_DSP

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

#endif /* TT_SIMD_STORE_H */
