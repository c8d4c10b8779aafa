"""The field runtime's compile-time settings (``compile --replay N --replay-k K --max-classes C ...``), checked."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.errors import UsageError, param


@dataclass(frozen=True)
class FieldConfig:
    """Sizes and thresholds of the field runtime; every one is a compile-time constant of the emitted C.

    replay        slots of the replay buffer (labelled latents, class-balanced reservoir; 0: no replay)
    replay_k      replayed samples per ``learn`` (each one training step after the new sample's)
    known         classes the model knows at compile time (0 .. known-1); the others are added by their labels
    imprint       a new class's row is re-imprinted from the buffer at each of its first ``imprint`` examples
    guard         slots of the held-back guard set (0: no guard)
    guard_every   every ``guard_every``-th labelled sample of an established class is held back for the guard
    guard_period  learning steps between guard checks
    guard_drop    a check rolls back when the state scores more than this many guard samples below the last good
    drift_shift   the feature-mean EMA's weight is 2^-drift_shift
    drift_warmup  samples before the reference is taken; the threshold is calibrated over the next as many
    drift_factor  the threshold is drift_factor x the largest score seen while calibrating (at least drift_min)
    drift_min     the smallest threshold (the mean squared standardized shift, 1/4096 of a spread squared; drift.py)
    drift_rebase  samples after an alarm when the detector restarts (the drift is then the new normal)
    seed          the xorshift32 generator's seed (nonzero)
    """

    replay: int = 256
    replay_k: int = 2
    known: int = -1  # -1: every class of the head
    imprint: int = 10
    guard: int = 32
    guard_every: int = 10
    guard_period: int = 32
    guard_drop: int = 2
    drift_shift: int = 6
    drift_warmup: int = 256
    drift_factor: int = 3
    drift_min: int = 64
    drift_rebase: int = 512
    seed: int = 0x2545F491

    def checked(self, classes: int) -> FieldConfig:
        """This config for a head of ``classes`` rows (``known`` -1 resolved); UsageError on a bad value."""
        ranges = {"replay": (0, 1 << 16), "replay_k": (0, 64), "imprint": (1, 1 << 16), "guard": (0, 1 << 12),
                  "guard_every": (2, 1 << 16), "guard_period": (1, 1 << 16), "guard_drop": (0, 1 << 12),
                  "drift_shift": (0, 12), "drift_warmup": (1, 1 << 20), "drift_factor": (1, 64),
                  "drift_min": (0, 1 << 20), "drift_rebase": (1, 1 << 24), "seed": (1, (1 << 32) - 1)}
        for name, (lo, hi) in ranges.items():
            v = getattr(self, name)
            if not isinstance(v, int) or not lo <= v <= hi:
                raise UsageError(f"{param(name, v)}: expected an integer from {lo} to {hi}")
        known = classes if self.known == -1 else self.known
        if not 0 <= known <= classes:
            raise UsageError(f"{param('known_classes', self.known)}: the head has {classes} classes ({param('max_classes')})")
        if self.replay_k and not self.replay:
            raise UsageError(f"{param('replay_k', self.replay_k)}: replay needs a buffer ({param('replay')} above 0)")
        return FieldConfig(**{**self.__dict__, "known": known})
