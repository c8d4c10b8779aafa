"""The learning-rate schedule of a plan (docs/design.md §5b, §3): linear warm-up, then cosine decay to a floor.

The device computes the factor from its own step counter (the number of steps applied so far, kept in the
trained state), so a schedule is part of the compiled training step and resumes exactly after a reboot. Every
update multiplies its float32 step by the factor (ops/sgd_update.py). The factor uses float32 additions,
multiplications and one division only — no libm — so numpy here and the C runtime (``tt_lr_factor`` in
runtime/tt_schedule.h) give the same bits (C built with -ffp-contract=off):

    step < warmup:            f = (float)(step + 1) / (float)warmup
    step >= steps:            f = floor
    otherwise:                t = (float)(step - warmup) / (float)(steps - warmup)        in [0, 1)
                              u = (t + t) - 1                                             in [-1, 1)
                              s = u * P(u*u)        P: the odd Taylor polynomial of sin(pi/2 u) to degree 9
                              c = 0.5 - 0.5 * s     = (1 + cos(pi t)) / 2 within 4e-6
                              f = floor + (1 - floor) * c

Counts stay below 2^24, so every int -> float conversion is exact.

The integer-only step (plan "backward": "int", ops/sgd_update_int.py) takes the same schedule as a Q15 factor
computed in integers only (``factor_q15``; ``tt_lr_factor_q15`` in runtime/tt_float_draws.h, bit for bit), within
2^-14 of ``factor``:

    step < warmup:            f = ((step + 1) 2^15) / warmup                              (integer division)
    step >= steps:            f = round(floor 2^15)
    otherwise:                t = ((step - warmup) 2^30) / (steps - warmup)               Q30 in [0, 2^30)
                              u = 2 t - 2^30;  u2 = (u u) >> 30                           Q30
                              p = POLY_Q30[4]; p = ((p u2) >> 30) + POLY_Q30[k], k = 3 .. 0
                              c = (2^30 - ((u p) >> 30)) >> 1, clamped to [0, 2^30];  c15 = c >> 15
                              f = floor15 + (((2^15 - floor15) c15) >> 15)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import PlanError, UsageError

MAX_STEPS = 1 << 24  # int -> float32 conversions of counts below it are exact
# sin(pi/2 u) ~ u * (C1 + u2 * (C3 + u2 * (C5 + u2 * (C7 + u2 * C9)))), Taylor coefficients as float32
_HALF_PI = math.pi / 2
POLY = tuple(np.float32((-1) ** k * _HALF_PI ** (2 * k + 1) / math.factorial(2 * k + 1)) for k in range(5))
POLY_Q30 = tuple(round((-1) ** k * _HALF_PI ** (2 * k + 1) / math.factorial(2 * k + 1) * (1 << 30)) for k in range(5))
Q15 = 1 << 15
# The fraction of the lrs a schedule written by `plan`, `compile` or `train` keeps after its last step, unless asked
# otherwise: a device keeps learning (a file without "floor" keeps its 0, as before)
DEFAULT_FLOOR = 0.1


@dataclass(frozen=True)
class Schedule:
    """``warmup`` steps of linear warm-up, cosine decay until step ``steps``, then ``floor`` (a fraction of the
    plan's lrs). ``Schedule.over(n, w)`` spans a run of n steps with a warm-up fraction w."""

    warmup: int
    steps: int
    floor: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.warmup < self.steps < MAX_STEPS:
            raise PlanError(f"lr schedule: need 0 <= warmup ({self.warmup}) < steps ({self.steps}) < {MAX_STEPS}")
        if not 0.0 <= self.floor <= 1.0:
            raise PlanError(f"lr schedule: floor {self.floor} is not a fraction between 0 and 1")

    @staticmethod
    def over(steps: int, warmup_fraction: float = 0.0, floor: float = 0.0) -> Schedule:
        if not 0.0 <= warmup_fraction < 1.0:
            raise PlanError(f"lr schedule: warm-up fraction {warmup_fraction} is not in [0, 1)")
        return Schedule(int(warmup_fraction * steps), steps, floor)

    def factor(self, step: int) -> np.float32:
        """The factor of the step applied when ``step`` steps were applied before it (float32, as the C)."""
        f32 = np.float32
        if step < self.warmup:
            return f32(step + 1) / f32(self.warmup)
        if step >= self.steps:
            return f32(self.floor)
        t = f32(step - self.warmup) / f32(self.steps - self.warmup)
        u = (t + t) - f32(1.0)
        u2 = u * u
        p = POLY[4]
        for c in POLY[3::-1]:
            p = p * u2 + c
        c = f32(0.5) - f32(0.5) * (u * p)
        return f32(self.floor) + (f32(1.0) - f32(self.floor)) * c

    @property
    def floor_q15(self) -> int:
        return round(self.floor * Q15)

    def factor_q15(self, step: int) -> int:
        """``factor`` in Q15 (0 .. 2^15) computed in integers only: the integer step's (module docstring)."""
        if step < self.warmup:
            return ((step + 1) << 15) // self.warmup
        if step >= self.steps:
            return self.floor_q15
        t = ((step - self.warmup) << 30) // (self.steps - self.warmup)
        u = 2 * t - (1 << 30)
        u2 = (u * u) >> 30
        p = POLY_Q30[4]
        for c in POLY_Q30[3::-1]:
            p = ((p * u2) >> 30) + c
        c15 = min(max(((1 << 30) - ((u * p) >> 30)) >> 1, 0), 1 << 30) >> 15
        return self.floor_q15 + (((Q15 - self.floor_q15) * c15) >> 15)

    def describe(self) -> str:
        """One line: the warm-up, the decay and what follows its last step."""
        after = "then 0 (the device stops learning)" if not self.floor else f"then {self.floor:g} x the lrs for good"
        warm = f"warm-up {self.warmup} steps, " if self.warmup else ""
        return f"cosine ({warm}decay over {self.steps} steps, {after})"

    def to_json(self) -> dict:
        d = {"kind": "cosine", "warmup": self.warmup, "steps": self.steps}
        if self.floor:
            d["floor"] = self.floor
        return d


def parse_schedule(obj, source: str) -> Schedule:
    """A plan's "lr_schedule" field: {"kind": "cosine", "warmup": W, "steps": T[, "floor": f]}."""
    fields = {"kind", "warmup", "steps", "floor"}
    if not isinstance(obj, dict) or obj.get("kind") != "cosine" or not {"kind", "warmup", "steps"} <= set(obj) \
            or set(obj) - fields:
        raise PlanError(f'{source}: "lr_schedule" must be {{"kind": "cosine", "warmup": W, "steps": T[, "floor": f]}}'
                        f", got {obj!r}")
    w, t, f = obj["warmup"], obj["steps"], obj.get("floor", 0.0)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (w, t)) or isinstance(f, bool) \
            or not isinstance(f, (int, float)):
        raise PlanError(f'{source}: "lr_schedule" warmup and steps are integers, floor a number; got {obj!r}')
    try:
        return Schedule(w, t, float(f))
    except PlanError as e:
        raise PlanError(f"{source}: {e}") from None


def check_schedule(lr_schedule: str | None, warmup: float) -> None:
    if lr_schedule not in (None, "constant", "cosine"):
        raise UsageError(f"lr schedule {lr_schedule!r}: choose constant or cosine")
    if warmup and lr_schedule != "cosine":
        raise UsageError("--warmup applies to --lr-schedule cosine; add it or drop --warmup")
    if not 0 <= warmup < 1:
        raise UsageError(f"--warmup {warmup}: give the fraction of the steps that warms up, in [0, 1)")
