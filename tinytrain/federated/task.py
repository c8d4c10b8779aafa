"""What every process of a fleet run rebuilds identically: the model, the training step, the devices' data.

A ``FleetTask`` is small and picklable (paths, a DATA spec, the plan as JSON): the server and every Flower client
(a Ray actor in simulation, a SuperNode in deployment) build the same training graph from it, so the state layout
and its fingerprint agree. ``local(task)`` caches the built parts per process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from tinytrain.api import load_data, load_model
from tinytrain.codegen.state import fingerprint, state_layout
from tinytrain.data import model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.engines.qemu import QemuTrainer
from tinytrain.federated.shards import make_shards
from tinytrain.ir import Graph
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan, parse_plan
from tinytrain.training.train_graph import build_training_graph


@dataclass(frozen=True)
class FleetTask:
    model: str
    data: str                   # DATA spec of the training pool the devices' shards come from
    plan_json: str              # the plan, as its JSON text
    devices: int
    per_device: int
    classes_per_device: int | None  # None: IID shards
    local_epochs: int = 1
    new_head: int | None = None
    seed: int = 0               # new-head init, stochastic rounding, shards, sample order
    input_size: str | None = None
    local_steps: int | None = None  # steps per round (None: local_epochs x per_device)
    server_lr: str = "1"        # the aggregation's server lr, a fraction "a/b" (aggregate.py)
    input_mapping: str | None = None  # --input-mapping (tinytrain/input_mapping.py; None: the model's own)

    @property
    def steps_per_round(self) -> int:
        return self.local_steps if self.local_steps is not None else self.local_epochs * self.per_device

    @property
    def rate(self) -> Fraction:
        return Fraction(self.server_lr)

    @property
    def plan(self) -> Plan:
        return parse_plan(json.loads(self.plan_json))

    def order_seed(self, round_: int) -> int:
        """The sample order of round ``round_`` (1-based): round 1 is ``tinytrain train --seed SEED``'s."""
        return self.seed + round_ - 1


class Built:
    """The parts of a task one process uses: graph, training step, its state layout, the raw data, the shards."""

    def __init__(self, task: FleetTask) -> None:
        self.task = task
        self.graph: Graph = load_model(task.model, new_head=task.new_head, seed=task.seed,
                                       input_size=task.input_size, input_mapping=task.input_mapping)
        self.step_graph = build_training_graph(self.graph, task.plan, UpdateConfig(seed=task.seed))
        self.layout = state_layout(self.step_graph)
        self.fingerprint = fingerprint(self.layout)
        self.dataset = load_data(task.data)
        self.shards = make_shards(self.dataset.y, task.devices, task.per_device, task.classes_per_device, task.seed)
        self._inputs: dict[int, np.ndarray] = {}
        self._boards: dict[str, object] = {}

    @cached_property
    def trainer(self):
        """The host C training step (engine_c.CTrainer), built once per process."""

        return CTrainer(self.step_graph)

    def board(self, name: str):
        """The training step as firmware on the QEMU board ``name`` (engine_qemu.QemuTrainer), built once."""

        if name not in self._boards:
            self._boards[name] = QemuTrainer(self.step_graph, board=name)
        return self._boards[name]

    def device_data(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """(int8 model inputs, labels) of a device's shard."""

        rows = self.shards[device]
        if device not in self._inputs:
            self._inputs[device] = model_inputs(self.graph, self.dataset.x[rows])
        return self._inputs[device], self.dataset.y[rows].astype(np.int64)


_BUILT: dict[FleetTask, Built] = {}


def local(task: FleetTask) -> Built:
    if task not in _BUILT:
        _BUILT[task] = Built(task)
    return _BUILT[task]
