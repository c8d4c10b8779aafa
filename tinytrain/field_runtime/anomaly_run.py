"""A stream through the anomaly field runtime of an autoencoder (``tinytrain field`` on a ``--loss mse`` model):
learn the samples labelled normal (y 0), score the others (y -1), the test set's ROC AUC (its ``anomaly`` 0/1
labels) and mean score at checkpoints, drift alarms on the score. Engines: sim (anomaly.py, the spec), c (the
emitted C on the host, anomaly_host.py) and qemu (that C on a semihosting QEMU board, the stream baked in:
board.BoardField): the same scores, decisions and saved bytes."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tinytrain.data import model_inputs
from tinytrain.engines.samples import load_data
from tinytrain.errors import UsageError, param
from tinytrain.field_runtime.anomaly import NORMAL, AnomalyProgram, AnomalyRuntime, split_anomaly
from tinytrain.field_runtime.anomaly_host import AnomalyHost, anomaly_memory
from tinytrain.field_runtime.board import BoardField
from tinytrain.field_runtime.run import FieldResult
from tinytrain.field_runtime.step import SimStep
from tinytrain.field_runtime.stream import load_stream
from tinytrain.metrics import roc_auc

ANOMALY_ENGINES = ("sim", "c", "qemu")


@dataclass
class AnomalyResult(FieldResult):
    """A FieldResult whose checkpoints hold the test set's ROC AUC (``auc``) and mean score instead of accuracy."""

    def text(self) -> str:
        lines = []
        for c in self.checkpoints:
            auc = "" if c["auc"] is None else f", test ROC AUC {c['auc']:.4f}"
            lines.append(f"sample {c['sample']}: {c['labelled']} learned as normal, mean test score "
                         f"{c['mean_score']:.1f}{auc}")
        s, m = self.status, self.memory
        lines.append(f"drift alarms (on the score) at samples: {', '.join(map(str, self.alarms)) or 'none'}; "
                     f"{s['steps']} training steps ({s['learned']} normal samples learned)")
        lines.append(f"buffer: {self.buffer.get(0, 0)} normal samples; the runtime adds {m['sram']} B SRAM "
                     f"(buffer {m['buffer']}, statistics {m['statistics']})")
        return "\n".join(lines)


def check_labels(y: np.ndarray, source: str) -> None:
    """An autoencoder's stream labels: 0 (normal: learn it) or -1 (score only); one line otherwise."""
    bad = np.flatnonzero((y != NORMAL) & (y != -1))
    if len(bad):
        raise UsageError(f"{source}: label {int(y[bad[0]])} at sample {int(bad[0])}: the model is an autoencoder, "
                         "its stream's labels are 0 (a normal sample: learn it) or -1 (score only)")


def anomaly_runtime(program: AnomalyProgram, engine: str, stream=None, test=None, every: int = 0,
                    board: str = "qemu-m4"):
    """The anomaly runtime on ``engine`` (sim, c, or qemu on ``board``, which runs the ``stream`` (inputs, labels)
    first, ``test``'s inputs scored every ``every`` samples: board.BoardField)."""
    if engine not in ANOMALY_ENGINES:
        raise UsageError(f"{param('engine', engine)}: an autoencoder's field runtime runs on "
                         f"{', '.join(ANOMALY_ENGINES)}")
    if engine == "sim":
        return AnomalyRuntime(program, SimStep(program.graph, program.tg))
    if engine == "qemu":
        return BoardField(program, *stream, test, every, board)
    return AnomalyHost(program)


def checkpoint(rt, sample: int, test: tuple[np.ndarray, np.ndarray]) -> dict:
    scores = rt.scores(test[0]) if len(test[0]) else np.zeros(0, np.int64)
    auc = roc_auc(scores, test[1]) if len(set(test[1].tolist())) == 2 else None
    return {"sample": sample, "labelled": rt.status()["labelled"], "auc": auc, "accuracy": None, "per_class": {},
            "mean_score": float(scores.mean()) if len(scores) else 0.0, "alarms": rt.status()["alarms"]}


def run_anomaly_stream(program: AnomalyProgram, xs: np.ndarray, ys: np.ndarray, test: tuple[np.ndarray, np.ndarray],
                       *, engine: str = "c", every: int = 0, start: bytes | None = None, rt=None) -> AnomalyResult:
    """The stream ``xs`` (the model's int8 inputs) / ``ys`` (0: learn as normal, -1: score only) through the
    anomaly runtime; ``test`` (inputs, 0/1 anomaly labels) scored every ``every`` samples (0: ten) and at the end."""
    check_labels(ys, "the stream")
    every = every or max(1, len(ys) // 10)
    t0 = time.time()
    rt = rt or anomaly_runtime(program, engine)
    if start is not None:
        rt.start(start)
    result = AnomalyResult(engine, len(ys), int((ys >= 0).sum()), memory=anomaly_memory(program).as_dict())
    alarms = 0
    for i, (x, y) in enumerate(zip(xs, ys)):
        rt.learn(x, NORMAL) if y == NORMAL else rt.observe(x)
        st = rt.status()
        if st["alarms"] > alarms:
            alarms = st["alarms"]
            result.alarms.append(st["since"] - 1)
        if (i + 1) % every == 0 or i + 1 == len(ys):
            result.checkpoints.append(checkpoint(rt, i + 1, test))
    result.state, result.status = rt.state_bytes(), rt.status()
    filled = int(split_anomaly(program, result.state)["buffer_filled"][0])
    result.buffer = {NORMAL: filled} if filled else {}
    result.seconds = time.time() - t0
    return result


def test_set(program: AnomalyProgram, test) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, 0/1 anomaly labels) of the DATA spec ``test`` (an .npz with ``x`` and ``anomaly``), or empty."""
    if test is None:
        return np.zeros((0, program.width), np.int8), np.zeros(0, np.int64)
    ds = load_data(test)
    if ds.anomaly is None:
        raise UsageError(f"{ds.source}: an autoencoder's test set needs 'anomaly' (0 normal, 1 anomalous per "
                         "sample) for its ROC AUC")
    return program.latents(model_inputs(program.graph, ds.x)), np.asarray(ds.anomaly, np.int64)


def field_anomaly(program: AnomalyProgram, stream, test, engine: str, checkpoints: int,
                  board: str = "qemu-m4") -> AnomalyResult:
    """``tinytrain.field`` of an autoencoder: STREAM.npz's x (the model's inputs) and y (0 normal, -1 none)."""
    s = load_stream(stream, program.graph, 1, check_labels)
    every = max(1, len(s.y) // max(1, checkpoints))
    xs, t = program.latents(s.x), test_set(program, test)
    rt = anomaly_runtime(program, engine, (xs, s.y), t[0], every, board)
    return run_anomaly_stream(program, xs, s.y, t, every=every, rt=rt)
