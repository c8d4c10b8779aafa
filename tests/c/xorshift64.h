/* The test programs' random numbers: xorshift64 from a fixed seed (the same values on the host and the boards). */
static uint64_t state = 0x9E3779B97F4A7C15u;
static uint64_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}
