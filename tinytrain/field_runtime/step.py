"""The training step the simulator's field runtime drives: the cut model's training graph run by the simulator.

``SimStep`` is the spec of what the C runtime calls (``tt_train_step``, ``tt_predict``, ``tt_state_save`` /
``tt_state_load`` of the cut model's emitted step): state bytes in the layout of ``codegen.state``.
"""

from __future__ import annotations

import numpy as np

from dataclasses import replace

from tinytrain.codegen.state import pack, unpack
from tinytrain.ir import Graph
from tinytrain.ops import loss_ops
from tinytrain.simulator import forward, init_state, train_step, with_state


def logits_graph(cut_graph: Graph, tg: Graph) -> Graph:
    """The cut model up to the loss's input (the logits ``tt_predict`` writes: a final softmax is not applied)."""
    logits = next(n.inputs[0] for n in tg.nodes if n.op in loss_ops())
    last = next(k for k, n in enumerate(cut_graph.nodes) if logits in n.outputs)
    return replace(cut_graph, nodes=cut_graph.nodes[: last + 1], outputs=(logits,))


class SimStep:
    def __init__(self, cut_graph: Graph, tg: Graph) -> None:
        self.cut_graph, self.tg = logits_graph(cut_graph, tg), tg
        self.state = init_state(tg)
        self._scorer: Graph | None = None
        self.shape = (1, *cut_graph.tensors[cut_graph.inputs[0]].shape[1:])

    def train(self, latent: np.ndarray, label: int) -> None:
        train_step(self.tg, self.state, latent.reshape(self.shape), label)
        self._scorer = None

    def predict(self, latents: np.ndarray) -> np.ndarray:
        """(N, classes) int8 logits of (N, width) latents with the current state."""
        if self._scorer is None:
            self._scorer = with_state(self.cut_graph, self.state)
        g = self._scorer
        x = latents.reshape((len(latents), *self.shape[1:]))
        return forward(g, {g.inputs[0]: x})[g.outputs[0]].reshape(len(latents), -1)

    def save(self) -> bytes:
        return pack(self.tg, self.state)

    def load(self, data: bytes) -> None:
        self.state = unpack(self.tg, data)
        self._scorer = None
