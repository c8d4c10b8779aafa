"""The field runtime of an autoencoder (a model trained with ``--loss mse``): the anomaly score of every observed
sample, drift statistics on that score, and learning the reconstruction of samples flagged normal, with replay of
normal samples. The spec of codegen/templates/field_anomaly.c.j2 (``tt_field.c`` of an autoencoder).

    rt = AnomalyRuntime(program, SimStep(program.graph, program.tg))
    rt.observe(x)          # the anomaly score of the model's int8 input x; drift statistics updated
    rt.learn(x, NORMAL)    # LEARNED (one step on x, replay_k on buffer samples) or BAD_LABEL (nothing changes)

Samples enter as the model's input (the reconstruction's target lies below any cut): the buffer stores inputs and
the step is the whole model's (the frozen layers recomputed, as the device does).

The score, integer-exact: with the output o (scale s_o, zero point z_o) and the input x (s_x, z_x) of D values,
A = round(64 s_o / s), B = round(64 s_x / s), s = max(s_o, s_x) (compile-time constants), per value
d = A (o - z_o) - B (x - z_x) (|d| <= 32,640) and score = floor(sum d^2 / D): the mean squared reconstruction
error in units of (s / 64)^2 (the float MSE of ops/mse.py within the rounding of A and B).

Drift on the score (the score's EMA ``m`` following m <- m + asr(score - m, drift_shift), the first sample setting
m = score): after ``drift_warmup`` samples the reference r = m is taken; over the next ``drift_warmup`` samples the
rise D = m - r is calibrated (its largest value, ``dmax``) and the threshold is max(drift_factor x dmax, r / 16, 1)
(floored); from then on D above the threshold raises an alarm (the score rose: the input no longer looks like what
the model reconstructs) lasting ``drift_rebase`` samples, after which the reference is taken anew. One-sided: learning
lowers the score and raises no alarm.

``learn(x, label)``: ``label`` must be NORMAL (0); anything else is refused (BAD_LABEL, nothing changes). The sample
is observed, offered to the replay buffer (a plain reservoir over the normal samples: buffer.offer_guard's rule),
trained on once, then ``replay_k`` buffer slots drawn uniformly from the filled ones are trained on. The guard
settings of FieldConfig do not apply (no rollback: the score has no labelled reference to check against).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.codegen.state import state_layout, state_size
from tinytrain.errors import UsageError
from tinytrain.field_runtime.buffer import Slots, offer_guard, split_parts
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.rng import Rng
from tinytrain.field_runtime.status import STATUS
from tinytrain.ir import Graph
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan
from tinytrain.training.train_graph import build_training_graph

NORMAL = 0
LEARNED, BAD_LABEL = 0, -1
SCORE_UNIT = 64  # the larger of the two scales is SCORE_UNIT units of the score's grid
DRIFT = ("m", "r", "seen", "dmax", "threshold", "rise", "active", "since", "alarms", "score")


@dataclass(frozen=True)
class AnomalyProgram:
    """An autoencoder made ready for the field runtime: the model, its training graph, the score's constants."""

    graph: Graph
    tg: Graph
    cfg: FieldConfig

    @property
    def width(self) -> int:
        """Values of a sample (the model's input, the reconstruction's target)."""
        return int(np.prod(self.graph.tensors[self.graph.inputs[0]].shape[1:]))

    @property
    def state_size(self) -> int:
        return state_size(state_layout(self.tg))

    @property
    def score_constants(self) -> tuple[int, int, int, int]:
        """(A, z_o, B, z_x) of the score (the module's docstring)."""
        o, x = (self.graph.tensors[n].quant for n in (self.graph.outputs[0], self.graph.inputs[0]))
        s = max(float(o.s), float(x.s))
        return int(round(SCORE_UNIT * float(o.s) / s)), int(o.zp), int(round(SCORE_UNIT * float(x.s) / s)), int(x.zp)

    def latents(self, x: np.ndarray) -> np.ndarray:
        """(N, width) int8: the samples themselves (the runtime takes the model's input)."""
        return np.asarray(x, np.int8).reshape(len(x), -1)


def is_autoencoder(graph: Graph) -> bool:
    """Whether ``graph``'s output has its input's shape (a reconstruction)."""
    return tuple(graph.tensors[graph.outputs[0]].shape) == tuple(graph.tensors[graph.inputs[0]].shape)


def anomaly_program(graph: Graph, plan: Plan, cfg: FieldConfig, config: UpdateConfig) -> AnomalyProgram:
    """The anomaly-detection field runtime of the autoencoder ``graph`` trained by ``plan`` (loss mse)."""
    if not is_autoencoder(graph):
        raise UsageError("the anomaly field runtime needs an autoencoder: its output must have its input's shape")
    return AnomalyProgram(graph, build_training_graph(graph, plan, config), cfg.checked(1))


def anomaly_score(program: AnomalyProgram, x: np.ndarray, out: np.ndarray) -> int:
    """The integer anomaly score of one sample's int8 input ``x`` and its int8 reconstruction ``out``."""
    a, zo, b, zx = program.score_constants
    d = a * (out.reshape(-1).astype(np.int64) - zo) - b * (x.reshape(-1).astype(np.int64) - zx)
    return int((d * d).sum()) // d.size


@dataclass
class ScoreDrift:
    m: int = 0
    r: int = 0
    seen: int = 0
    dmax: int = 0
    threshold: int = 0
    rise: int = 0
    active: int = 0
    since: int = -1
    alarms: int = 0
    score: int = 0  # the last observed sample's

    def observe(self, cfg: FieldConfig, score: int) -> None:
        self.score = score
        self.m = score if self.seen == 0 else self.m + ((score - self.m) >> cfg.drift_shift)
        self.seen += 1
        w = cfg.drift_warmup
        if self.seen == w:
            self.r = self.m
        if self.seen <= w:
            return
        self.rise = self.m - self.r
        if self.seen <= 2 * w:
            self.dmax = max(self.dmax, self.rise)
            if self.seen == 2 * w:
                self.threshold = max(cfg.drift_factor * self.dmax, self.r // 16, 1)
            return
        if self.active and self.seen - self.since >= cfg.drift_rebase:
            self.active, self.r = 0, self.m
        elif not self.active and self.rise > self.threshold:
            self.active, self.since, self.alarms = 1, self.seen, self.alarms + 1


class AnomalyRuntime:
    def __init__(self, program: AnomalyProgram, step) -> None:
        self.program, self.step, self.cfg = program, step, program.cfg
        self.rng = Rng(self.cfg.seed)
        self.buffer = Slots.empty(self.cfg.replay, program.width, 1)
        self.drift = ScoreDrift()
        self.n = [0, 0, 0]  # labelled, learned, steps

    def start(self, state: bytes) -> None:
        self.step.load(state)

    def scores(self, xs: np.ndarray) -> np.ndarray:
        """The anomaly score of each sample, the statistics untouched."""
        out = self.step.predict(xs)
        return np.array([anomaly_score(self.program, x, o) for x, o in zip(xs, out)], np.int64)

    def observe(self, x: np.ndarray) -> int:
        score = int(self.scores(x[None])[0])
        self.drift.observe(self.cfg, score)
        return score

    def learn(self, x: np.ndarray, label: int) -> int:
        if label != NORMAL:
            return BAD_LABEL
        self.observe(x)
        self.n[0] += 1
        if self.cfg.replay:
            offer_guard(self.buffer, self.rng, x, NORMAL)
        self._train(x)
        for _ in range(self.cfg.replay_k if self.buffer.filled else 0):
            self._train(self.buffer.x[self.rng.below(self.buffer.filled)])
        self.n[1] += 1
        return LEARNED

    def _train(self, x: np.ndarray) -> None:
        self.step.train(x, 0)
        self.n[2] += 1

    def status(self) -> dict:
        d = self.drift
        return dict(zip(STATUS, (*self.n, 0, 0, d.alarms, d.active, d.since)))

    def state_bytes(self) -> bytes:
        """Everything the runtime holds, in the byte layout of the C's ``tt_field_save`` (``anomaly_parts``)."""
        d, b = self.drift, self.buffer
        values = dict(rng=self.rng.x, state=np.frombuffer(self.step.save(), np.uint8), buffer_filled=b.filled,
                      buffer_x=b.x, buffer_offered=b.offered, drift=[getattr(d, f) for f in DRIFT], counters=self.n)
        return b"".join(np.asarray(values[name]).astype(dt).reshape(-1).tobytes()
                        for name, dt, _ in anomaly_parts(self.program))


def anomaly_parts(program: AnomalyProgram) -> list[tuple[str, str, int]]:
    """(name, little-endian dtype, count) of each part of the saved runtime, in order (the C's ``tt_field_save``)."""
    return [("rng", "<u4", 1), ("state", "u1", program.state_size), ("buffer_filled", "<u4", 1),
            ("buffer_x", "i1", program.cfg.replay * program.width), ("buffer_offered", "<u4", 1),
            ("drift", "<i8", len(DRIFT)), ("counters", "<u4", 3)]


def anomaly_save_bytes(program: AnomalyProgram) -> int:
    return sum(np.dtype(dt).itemsize * n for _, dt, n in anomaly_parts(program))


def split_anomaly(program: AnomalyProgram, data: bytes) -> dict[str, np.ndarray]:
    """The parts of a saved anomaly runtime (``state_bytes`` / ``tt_field_save``) by name."""
    return split_parts(anomaly_parts(program), data)
