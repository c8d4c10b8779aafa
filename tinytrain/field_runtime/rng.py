"""The field runtime's random numbers: xorshift32 (Marsaglia 2003), the same 32-bit integers in the C."""

from __future__ import annotations

MASK = 0xFFFFFFFF
GUARD_SALT = 0x9E3779B9  # the guard set's own stream starts from seed ^ GUARD_SALT (GUARD_SALT when that is 0)


def next_u32(x: int) -> int:
    """The generator's next state (also its output): x ^= x << 13; x ^= x >> 17; x ^= x << 5, modulo 2^32."""
    x ^= (x << 13) & MASK
    x ^= x >> 17
    x ^= (x << 5) & MASK
    return x


def guard_seed(seed: int) -> int:
    """The seed of the guard set's stream: its own, so that a guard does not change the replay draws."""
    return ((seed ^ GUARD_SALT) & MASK) or GUARD_SALT


class Rng:
    """A xorshift32 stream; ``below(n)`` is its next output modulo n (the small bias of a modulo is accepted)."""

    def __init__(self, seed: int) -> None:
        self.x = seed & MASK

    def below(self, n: int) -> int:
        self.x = next_u32(self.x)
        return self.x % n
