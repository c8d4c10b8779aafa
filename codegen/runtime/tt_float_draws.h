/* tt_float_draws.h — the stochastic-rounding draws and the lr schedule's factor.
 * A part of tt_float.h (its umbrella header, which kernels include); not included alone. */
#ifndef TT_FLOAT_DRAWS_H
#define TT_FLOAT_DRAWS_H

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

/* The lr schedule's factor at a step (lr_schedule.py, the spec): linear warm-up over `warmup` steps,
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

/* The same factor in Q15 (0 .. 32768), integers only, for the integer step (lr_schedule.py factor_q15, the
 * spec): sin(pi/2 u) by the same polynomial with Q30 coefficients; counts below 2^24, so every product fits int64.
 * Right shifts of negative int64 are arithmetic (floor), as GCC does. */
static inline int32_t tt_lr_factor_q15(uint32_t step, uint32_t warmup, uint32_t steps, int32_t floor_q15) {
    if (step < warmup) {
        return (int32_t)(((uint64_t)(step + 1u) << 15) / warmup);
    }
    if (step >= steps) {
        return floor_q15;
    }
    const int64_t t = (int64_t)(((uint64_t)(step - warmup) << 30) / (steps - warmup));
    const int64_t u = 2 * t - ((int64_t)1 << 30);
    const int64_t u2 = (u * u) >> 30;
    int64_t p = 172272;
    p = ((p * u2) >> 30) + -5026995;
    p = ((p * u2) >> 30) + 85569306;
    p = ((p * u2) >> 30) + -693598668;
    p = ((p * u2) >> 30) + 1686629713;
    int64_t c = (((int64_t)1 << 30) - ((u * p) >> 30)) >> 1;
    c = c < 0 ? 0 : (c > ((int64_t)1 << 30) ? ((int64_t)1 << 30) : c);
    return floor_q15 + (int32_t)(((int64_t)(32768 - floor_q15) * (c >> 15)) >> 15);
}

#endif /* TT_FLOAT_DRAWS_H */
