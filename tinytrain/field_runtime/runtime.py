"""The field runtime, the spec of the emitted C's (codegen/templates/field.c.j2): learn, observe, drift, the guard.

    rt = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    rt.learn(latent, label)   # LEARNED, HELD (kept for the guard) or an error code (BAD_LABEL: nothing changes)
    rt.observe(latent)        # the predicted class (over the classes seen), drift statistics updated
    rt.drift                  # Drift: active, since, alarms, score, threshold

``learn``: a label outside 0 .. classes-1 is refused (BAD_LABEL, state unchanged). Otherwise the sample is observed;
every ``guard_every``-th labelled sample of a class with at least ``imprint`` examples is held back into the guard
set (not trained on); any other is offered to the replay buffer; a class's first ``imprint`` examples (re)imprint
its head row (head.py) — a new class closes a guard period first (``check``) and the state after imprinting is
the new last good one; then one training step on the sample and ``replay_k`` steps on buffer slots drawn uniformly
from the filled ones. Every ``guard_period`` learned samples the guard ``check``s: the state's score (guard samples
predicted right) against the last good state's on the same guard set; more than ``guard_drop`` below it rolls the
state back to the last good one (``rollbacks`` counts); at least as high, the state becomes the last good one; in
between, learning goes on from the state and the last good one stays (so small losses cannot add up). While the guard
set is less than half full the state becomes the last good one unchecked; a drift alarm empties the guard set (its
samples are of the distribution the input drifted from) and, while it lasts, nothing is held back (every labelled
sample is learned from); then the set refills from post-drift samples, and its first check at half full compares the
state with the last good one on them (re-baselines). The guard set's reservoir draws from its own xorshift32 stream
(``rng.guard_seed``), so a guard does not change the replay draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.field_runtime.buffer import Slots, offer_guard, offer_replay, split_parts
from tinytrain.field_runtime.drift import Drift, observe_drift
from tinytrain.field_runtime.head import imprint
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.rng import Rng, guard_seed
from tinytrain.field_runtime.status import STATUS

LEARNED, HELD, BAD_LABEL = 0, 1, -1


@dataclass
class Counters:
    labelled: int = 0
    learned: int = 0
    steps: int = 0
    rollbacks: int = 0
    checks: int = 0


def predicted(out: np.ndarray, seen: np.ndarray) -> tuple[int, int]:
    """(class, margin) of one output row over the seen classes: the first largest, top-1 minus top-2 (0: one)."""
    v = np.where(seen, out.astype(np.int32), -1000)
    c = int(np.argmax(v))
    if seen.sum() < 2:
        return c, 0
    return c, int(v[c] - np.max(np.delete(v, c)))


class FieldRuntime:
    def __init__(self, program: FieldProgram, step) -> None:
        cfg = self.cfg = program.cfg
        self.program, self.step = program, step
        k, c = program.width, program.classes
        self.rng = Rng(cfg.seed)
        self.guard_rng = Rng(guard_seed(cfg.seed))  # the guard set's own stream (rng.py)
        self.buffer = Slots.empty(cfg.replay, k, c)
        self.guard = Slots.empty(cfg.guard, k, 1)
        self.drift = Drift.empty(k)
        self.seen = np.arange(c) < cfg.known
        self.count = np.zeros(c, np.int64)  # labelled examples per class
        self.n = Counters()
        self.good = step.save()

    def start(self, state: bytes) -> None:
        """Start from the model state ``state`` (state bytes of the cut model's step): it is the last good one."""
        self.step.load(state)
        self.good = self.step.save()

    def observe(self, latent: np.ndarray) -> int:
        cls, margin = predicted(self.step.predict(latent[None])[0], self.seen)
        alarms = self.drift.alarms
        observe_drift(self.drift, self.cfg, latent, margin)
        if self.drift.alarms > alarms:  # the guard's samples are of the old distribution: it starts again
            self.guard.filled, self.guard.offered[0] = 0, 0
        return cls

    def learn(self, latent: np.ndarray, label: int) -> int:
        cfg = self.cfg
        if not 0 <= label < self.program.classes:
            return BAD_LABEL
        self.observe(latent)
        self.n.labelled += 1
        self.count[label] += 1
        if (cfg.guard and not self.drift.active and self.count[label] > cfg.imprint
                and self.count[label] % cfg.guard_every == 0):
            offer_guard(self.guard, self.guard_rng, latent, label)
            return HELD
        offer_replay(self.buffer, self.rng, latent, label)
        if self.count[label] <= cfg.imprint and self.program.head is not None and label >= cfg.known:
            self._imprint(label)
        self._train(latent, label)
        for _ in range(cfg.replay_k if self.buffer.filled else 0):
            r = self.rng.below(self.buffer.filled)
            self._train(self.buffer.x[r], int(self.buffer.y[r]))
        self.n.learned += 1
        if cfg.guard and self.n.learned % cfg.guard_period == 0:
            self.check()
        return LEARNED

    def _train(self, latent: np.ndarray, label: int) -> None:
        self.step.train(latent, label)
        self.n.steps += 1

    def _imprint(self, label: int) -> None:
        if self.cfg.guard and not self.seen[label]:
            self.check()
        self.seen[label] = True
        self.step.load(imprint(self.step.save(), self.program.head, self.buffer, label, self.seen))
        self.good = self.step.save()

    def score(self) -> int:
        g = self.guard
        if not g.filled:
            return 0
        out = self.step.predict(g.x[: g.filled])
        return sum(predicted(o, self.seen)[0] == y for o, y in zip(out, g.y[: g.filled]))

    def check(self) -> None:
        """The guard's check: roll back to the last good state, make the state the last good one, or neither
        (without comparing while the guard set is less than half full: it becomes the last good one)."""
        now = self.step.save()
        if 2 * self.guard.filled < self.cfg.guard:
            self.good = now
            return
        self.n.checks += 1
        mine = self.score()
        self.step.load(self.good)
        good = self.score()
        if mine + self.cfg.guard_drop < good:
            self.n.rollbacks += 1
            return
        self.step.load(now)
        if mine >= good:
            self.good = now

    def status(self) -> dict:
        d, n = self.drift, self.n
        return dict(zip(STATUS, (n.labelled, n.learned, n.steps, n.rollbacks, n.checks, d.alarms, d.active,
                                 d.since)))

    def predict(self, latents: np.ndarray) -> np.ndarray:
        """The predicted class (over the seen ones) of each latent, the statistics untouched."""
        return np.array([predicted(o, self.seen)[0] for o in self.step.predict(latents)], np.int64)

    def state_bytes(self) -> bytes:
        """Everything the runtime holds, in the byte layout of the C's ``tt_field_save`` (``state_parts``)."""
        d, n = self.drift, self.n
        s = self.step.save()
        values = dict(rng=self.rng.x, guard_rng=self.guard_rng.x, state=np.frombuffer(s, np.uint8), good=np.frombuffer(self.good, np.uint8),
                      seen=self.seen, count=self.count, m=d.m, r=d.r, s=d.s,
                      drift=[d.conf, d.conf_ref, d.seen, d.dmax, d.threshold, d.score, d.active, d.since, d.alarms, d.t],
                      counters=[n.labelled, n.learned, n.steps, n.rollbacks, n.checks])
        for prefix, slots in (("buffer", self.buffer), ("guard", self.guard)):
            values.update({f"{prefix}_filled": slots.filled, f"{prefix}_x": slots.x, f"{prefix}_y": slots.y,
                           f"{prefix}_offered": slots.offered})
        return b"".join(np.asarray(values[name]).astype(dt).reshape(-1).tobytes()
                        for name, dt, _ in state_parts(self.program))


def state_parts(program: FieldProgram) -> list[tuple[str, str, int]]:
    """(name, little-endian dtype, count) of each part of the saved runtime, in order (the C's ``tt_field_save``)."""
    cfg, k, c, size = program.cfg, program.width, program.classes, program.state_size
    return [("rng", "<u4", 1), ("guard_rng", "<u4", 1), ("state", "u1", size), ("good", "u1", size),
            ("buffer_filled", "<u4", 1), ("buffer_x", "i1", cfg.replay * k), ("buffer_y", "<i2", cfg.replay),
            ("buffer_offered", "<u4", c), ("guard_filled", "<u4", 1), ("guard_x", "i1", cfg.guard * k),
            ("guard_y", "<i2", cfg.guard), ("guard_offered", "<u4", 1), ("seen", "u1", c), ("count", "<u4", c),
            ("m", "<i4", k), ("r", "<i4", k), ("s", "<i4", k), ("drift", "<i4", 10), ("counters", "<u4", 5)]


def split_state(program: FieldProgram, data: bytes) -> dict[str, np.ndarray]:
    """The parts of a saved runtime (``state_bytes`` / ``tt_field_save``) by name."""
    return split_parts(state_parts(program), data)
