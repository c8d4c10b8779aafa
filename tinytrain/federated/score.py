"""Test accuracy of a fleet's global state: the layers no update changes run once per test image (chunked),
the rest per state, through the simulator (``simulator.split_frozen``: bit-identical to the whole forward pass).
The frozen layers run as host C (engine_c.predict) when they end in one tensor: the C forward pass equals the
simulator's bit for bit (docs/design.md §4), and is ~15x faster."""

from __future__ import annotations

import numpy as np

from tinytrain.data import model_inputs
from tinytrain.engines.host_c import predict
from tinytrain.ir import Graph
from tinytrain.ops import written_tensors
from tinytrain.simulator import TrainState
from tinytrain.simulator import forward, split_frozen, with_state


class Scorer:
    def __init__(self, graph: Graph, step_graph: Graph, x: np.ndarray, y: np.ndarray, chunk: int = 500) -> None:
        """``x``: the test images as loaded (uint8, any size: resized for the model chunk by chunk)."""

        prefix, self.suffix = split_frozen(graph, live=written_tensors(step_graph))
        parts = []
        for i in range(0, len(x), chunk):
            xi = model_inputs(graph, x[i : i + chunk])
            parts.append(_prefix(prefix, xi))
        self.features = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self.y = np.asarray(y)

    def predictions(self, state: TrainState) -> np.ndarray:
        g = with_state(self.suffix, state)
        out = forward(g, {k: self.features[k] for k in g.inputs})[g.outputs[0]]
        return out.reshape(len(self.y), -1).argmax(axis=1)

    def __call__(self, state: TrainState) -> float:
        return float((self.predictions(state) == self.y).mean())


def _prefix(prefix: Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """The frozen layers' outputs: the host C forward pass when they have one output, else the simulator."""
    if not prefix.nodes:
        return {prefix.inputs[0]: x}
    if len(prefix.outputs) == 1:
        return {prefix.outputs[0]: predict(prefix, x)}

    return forward(prefix, {prefix.inputs[0]: x})
