"""One interface for every engine: a training step built for it and bound to a run's samples (``build_trainer``).

    trainer = build_trainer("c", graph, spec, samples)             # sim | c | qemu; spec: training/spec.py
    losses, state = trainer.train(order, progress)                 # batch-1 SGD over samples[order]
    trainer.outputs(rows)                                          # int8 outputs of those samples, current state
    trainer.load_state(state); trainer.info                        # build seconds; qemu: board, instructions

The simulator (sim.py) runs the training graph on its frozen layers' outputs; the host C engine (host_c.py) the
emitted C, cut below the first layer the plan touches (cut.py); QEMU (qemu.py) that C as the device's firmware,
whole. Their losses and states are the same, bit for bit. ``progress(n)`` is called as steps finish (n of them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from tinytrain.engines import ENGINES, HOST_ENGINES, cut
from tinytrain.engines.host_c import CTrainer, predict
from tinytrain.engines.qemu import QemuTrainer
from tinytrain.engines.samples import Samples
from tinytrain.engines.sim import SimTrainer
from tinytrain.errors import UsageError, param
from tinytrain.ir import Graph
from tinytrain.simulator import TrainState, forward
from tinytrain.training.spec import StepSpec
from tinytrain.training.train_graph import build_training_graph

Progress = Callable[[int], None]
CHUNK = 256  # samples per call of an evaluation's forward pass


class Trainer(Protocol):
    engine: str
    info: dict  # what the engine reports: build_seconds; qemu: board, insns_per_step

    def train(self, order: np.ndarray, progress: Progress | None = None) -> tuple[np.ndarray, TrainState]:
        """(per-step float32 losses, the state after them) of batch-1 SGD over the samples ``order`` names; a NaN
        or Inf loss is a step the non-finite guard did not apply."""

    def outputs(self, rows: np.ndarray) -> np.ndarray:
        """The int8 outputs of the samples ``rows`` (the device's forward pass, with the current state)."""

    def state(self) -> TrainState: ...

    def load_state(self, state: TrainState) -> None: ...


class DeviceTrainer:
    """The Trainer of an emitted-C engine: a ``host_c.CTrainer`` or a ``qemu.QemuTrainer`` (``device``) bound to
    ``samples`` (the cut tensor's values for a cut host C step)."""

    def __init__(self, engine: str, device, samples: Samples, build_seconds: float) -> None:
        self.engine, self.device, self.samples = engine, device, samples
        self.info = {"build_seconds": round(build_seconds, 3)}

    def train(self, order: np.ndarray, progress: Progress | None = None) -> tuple[np.ndarray, TrainState]:
        s = self.samples
        losses = self.device.train(s.x, s.y, order, targets=s.targets, progress=progress)
        if self.engine == "qemu":
            self.info.update(board=self.device.board, insns_per_step=float(np.mean(self.device.step_insns)))
        return losses, self.device.state()

    def outputs(self, rows: np.ndarray) -> np.ndarray:
        return self.device.predict(self.samples.x[rows])

    def state(self) -> TrainState:
        return self.device.state()

    def load_state(self, state: TrainState) -> None:
        self.device.load_state(state)


def check_engine(engine: str, engines: tuple[str, ...] = ENGINES) -> str:
    if engine not in engines:
        raise UsageError(f"{param('engine', engine)}: choose one of {', '.join(engines)}")
    return engine


def build_trainer(engine: str, graph: Graph, spec: StepSpec, samples: Samples, *, board: str = "qemu-m7",
                  sram_bytes: int = 256 * 1024, save_every: int = 0, flash=None) -> Trainer:
    """The training step ``spec`` of ``graph`` on ``engine``, bound to ``samples``; ``board``,
    ``sram_bytes`` (the firmware's RAM region), ``save_every`` and ``flash`` (the board's flash file): qemu's."""
    check_engine(engine)
    plan, config, targets = spec.plan, spec.config, samples.targets is not None
    if engine == "sim":
        return SimTrainer(graph, build_training_graph(graph, plan, config, targets), samples)
    t0 = time.time()
    if engine == "c":
        tg, bound = cut.step(graph, plan, config, samples)
        return DeviceTrainer(engine, CTrainer(tg), bound, time.time() - t0)
    device = QemuTrainer(build_training_graph(graph, plan, config, targets), board=board, sram_budget=sram_bytes,
                         save_every=save_every, flash=flash)
    return DeviceTrainer(engine, device, samples, time.time() - t0)


def forward_outputs(graph: Graph, x: np.ndarray, engine: str, progress: Progress | None = None) -> np.ndarray:
    """The int8 output of ``graph`` for every sample of ``x``: the simulator's, or the emitted C forward pass's
    (bit-identical), ``CHUNK`` samples at a time (``progress`` after each chunk)."""
    if check_engine(engine, HOST_ENGINES) == "c":
        def run(xs):
            return predict(graph, xs)
    else:
        def run(xs):
            return forward(graph, {graph.inputs[0]: xs})[graph.outputs[0]]

    parts = []
    for i in range(0, len(x), CHUNK):
        parts.append(run(x[i : i + CHUNK]))
        if progress is not None:
            progress(len(parts[-1]))
    return np.concatenate(parts) if parts else run(x)
