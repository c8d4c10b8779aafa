"""A stream through the field runtime (``tinytrain field``, ``tinytrain.field``): learn from each labelled sample,
observe the others, score a test set at checkpoints, record drift alarms, rollbacks and the buffer.

The runtime runs on the simulator (``sim``, the spec) or the emitted C built for the host (``c``): the same
decisions, states and buffer, bit for bit. Samples enter as latents, the frozen prefix's output computed once per
sample by the C forward (``engines.cut.cut_features``, bit-identical to the simulator's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field as dc_field

import numpy as np

from tinytrain.field_runtime.emit import field_memory
from tinytrain.engines import default_engine
from tinytrain.engines.trainer import check_engine
from tinytrain.errors import UsageError
from tinytrain.field_runtime.board import BoardField
from tinytrain.field_runtime.host import HostField
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.runtime import FieldRuntime, split_state
from tinytrain.field_runtime.step import SimStep

FIELD_ENGINES = ("sim", "c", "qemu")


@dataclass
class FieldResult:
    """What a stream did: accuracy on the test set at each checkpoint (overall and per class, over the classes seen
    by then), drift alarms (the sample each was raised at), rollbacks, the buffer's slots per class at the end."""

    engine: str
    samples: int
    labelled: int
    checkpoints: list[dict] = dc_field(default_factory=list)
    alarms: list[int] = dc_field(default_factory=list)
    status: dict = dc_field(default_factory=dict)
    buffer: dict[int, int] = dc_field(default_factory=dict)
    guard: dict[int, int] = dc_field(default_factory=dict)
    classes_seen: list[int] = dc_field(default_factory=list)
    memory: dict = dc_field(default_factory=dict)
    seconds: float = 0.0
    state: bytes = dc_field(default=b"", repr=False)  # the runtime at the end (tt_field_save)

    @property
    def accuracy(self) -> float | None:
        return self.checkpoints[-1]["accuracy"] if self.checkpoints else None

    def to_json(self) -> dict:
        return {"engine": self.engine, "samples": self.samples, "labelled": self.labelled,
                "accuracy": self.accuracy, "checkpoints": self.checkpoints, "drift_alarms": self.alarms,
                "rollbacks": self.status.get("rollbacks", 0), "status": self.status,
                "buffer": {str(k): v for k, v in self.buffer.items()},
                "guard": {str(k): v for k, v in self.guard.items()}, "classes_seen": self.classes_seen,
                "memory": self.memory, "seconds": round(self.seconds, 3)}

    def text(self) -> str:
        lines = []
        for c in self.checkpoints:
            acc = "" if c["accuracy"] is None else f", test accuracy {c['accuracy']:.4f}"
            per = " ".join(f"{k}:{v:.2f}" for k, v in c["per_class"].items())
            lines.append(f"sample {c['sample']}: {c['labelled']} labelled, {len(c['seen'])} classes{acc}"
                         + (f" (per class {per})" if per else ""))
        alarms = ", ".join(map(str, self.alarms)) or "none"
        s = self.status
        lines.append(f"drift alarms at samples: {alarms}; rollbacks {s['rollbacks']} of {s['checks']} guard checks; "
                     f"{s['steps']} training steps ({s['learned']} samples learned, "
                     f"{s['labelled'] - s['learned']} held for the guard)")
        buf = " ".join(f"{k}:{v}" for k, v in self.buffer.items()) or "empty"
        m = self.memory
        lines.append(f"buffer slots per class: {buf}; the runtime adds {m['sram']} B SRAM "
                     f"(buffer {m['buffer']}, guard {m['guard']}, states {m['states']})")
        return "\n".join(lines)


def runtime(program: FieldProgram, engine: str, stream=None, test=None, every: int = 0, board: str = "qemu-m4"):
    """The field runtime of ``program`` on ``engine`` (sim: the spec; c: the emitted C, host build; qemu: that C on
    ``board``, which runs the ``stream`` (latents, labels) with ``test``'s latents scored every ``every`` samples
    first)."""
    engine = check_engine(engine, FIELD_ENGINES)
    if engine == "sim":
        return FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    if engine == "c":
        return HostField(program)
    return BoardField(program, *stream, test, every, board)


def per_class(pred: np.ndarray, y: np.ndarray, seen: list[int]) -> tuple[float | None, dict[int, float]]:
    """(accuracy on the test samples of the seen classes, accuracy per seen class)."""
    mask = np.isin(y, seen)
    if not mask.any():
        return None, {}
    return float(np.mean(pred[mask] == y[mask])), {c: float(np.mean(pred[y == c] == c)) for c in seen
                                                   if (y == c).any()}


def run_stream(program: FieldProgram, latents: np.ndarray, labels: np.ndarray, test: tuple[np.ndarray, np.ndarray],
               *, engine: str | None = None, every: int = 0, start: bytes | None = None,
               on_sample: Callable | None = None, board: str = "qemu-m4", rt=None) -> FieldResult:
    """The stream of ``latents`` / ``labels`` (-1: none) through the runtime; ``test`` (latents, labels) scored
    every ``every`` samples (0: ten checkpoints) and at the end; ``start``: the model state to start from (not on
    qemu); ``on_sample(i, rt)`` after each sample; ``rt``: a runtime of the ``FieldRuntime`` calls to run it on
    (a board's over its serial port: board.SerialField; ``engine`` then only names it)."""
    engine = engine or default_engine()
    every = every or max(1, len(labels) // 10)
    if start is not None and engine == "qemu":
        raise UsageError("the qemu engine starts from the model (tt_field_init): give no start state")
    t0 = time.time()
    rt = rt or runtime(program, engine, (latents, labels), test[0], every, board)
    if start is not None:
        rt.start(start)
    result = FieldResult(engine, len(labels), int((labels >= 0).sum()), memory=field_memory(program).as_dict())
    alarms = 0
    for i, (x, y) in enumerate(zip(latents, labels)):
        rt.learn(x, int(y)) if y >= 0 else rt.observe(x)
        st = rt.status()
        if st["alarms"] > alarms:
            alarms = st["alarms"]
            result.alarms.append(st["since"] - 1)
        if (i + 1) % every == 0 or i + 1 == len(labels):
            result.checkpoints.append(checkpoint(program, rt, i + 1, test))
        if on_sample is not None:
            on_sample(i, rt)
    finish(program, rt, result)
    result.seconds = time.time() - t0
    return result


def seen_classes(program: FieldProgram, rt) -> list[int]:
    return [int(c) for c in np.flatnonzero(split_state(program, rt.state_bytes())["seen"])]


def checkpoint(program: FieldProgram, rt, sample: int, test: tuple[np.ndarray, np.ndarray]) -> dict:
    seen = seen_classes(program, rt)
    st = rt.status()
    acc, per = per_class(rt.predict(test[0]), test[1], seen) if len(test[1]) else (None, {})
    return {"sample": sample, "labelled": st["labelled"], "seen": seen, "accuracy": acc,
            "per_class": {str(k): v for k, v in per.items()}, "rollbacks": st["rollbacks"], "alarms": st["alarms"]}


def finish(program: FieldProgram, rt, result: FieldResult) -> None:
    result.state = rt.state_bytes()
    parts = split_state(program, result.state)
    result.status = rt.status()
    for name, into in (("buffer", result.buffer), ("guard", result.guard)):
        y = parts[f"{name}_y"][: int(parts[f"{name}_filled"][0])]
        into.update({int(c): int((y == c).sum()) for c in np.unique(y)})
    result.classes_seen = [int(c) for c in np.flatnonzero(parts["seen"])]
