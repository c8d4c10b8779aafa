"""The simulator engine: the training graph run by the numpy simulator (the spec), on the outputs of its frozen
layers computed once per image (frozen.py)."""

from __future__ import annotations

import numpy as np

from tinytrain.engines.frozen import frozen_features, suffix_outputs
from tinytrain.engines.samples import Samples
from tinytrain.ir import Graph
from tinytrain.simulator import TrainState, init_state, train

CHUNK = 64  # steps between progress reports


class SimTrainer:
    """The Trainer (trainer.py) of the simulator: the training graph ``tg`` of the forward graph ``graph``, bound to
    ``samples``; its state starts at the model's weights (``simulator.init_state``)."""

    engine = "sim"

    def __init__(self, graph: Graph, tg: Graph, samples: Samples) -> None:
        self.tg, self.samples = tg, samples
        self.features, self.suffix = frozen_features(graph, tg, samples.x)
        self._state = init_state(tg)
        self.info: dict = {}

    def train(self, order: np.ndarray, progress=None) -> tuple[np.ndarray, TrainState]:
        order = np.asarray(order)
        losses = np.empty(len(order), np.float32)
        s = self.samples
        for i in range(0, len(order), CHUNK):  # the state carries the step count: chunks are one run
            part = order[i : i + CHUNK]
            losses[i : i + len(part)] = train(self.tg, self._state, s.x, s.y, part, features=self.features,
                                              targets=s.targets)
            if progress is not None:
                progress(len(part))
        return losses, self._state

    def outputs(self, rows: np.ndarray) -> np.ndarray:
        return suffix_outputs(self.suffix, self.features, rows, self._state)

    def state(self) -> TrainState:
        return self._state

    def load_state(self, state: TrainState) -> None:
        self._state = state.copy()
