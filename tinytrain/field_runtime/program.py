"""A model and plan made ready for the field runtime: the cut model, its training graph, the head's layout.

The runtime stores and trains latents: the frozen prefix's output (``engines.cut.suffix_model``, the input of
the first layer the plan touches). ``latents`` computes them for raw samples with the C forward of the frozen
layers (``engines.cut.cut_features``, bit-identical to the simulator's). The runtime needs a cut (a plan that
trains layer 0 has no frozen prefix) and a classifier (softmax cross-entropy loss); an autoencoder's (mse loss)
is anomaly.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.codegen.state import state_layout, state_size
from tinytrain.engines import cut
from tinytrain.errors import PlanError
from tinytrain.field_runtime.anomaly import AnomalyProgram, anomaly_program
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.head import HeadLayout, check_sums, head_layout
from tinytrain.ir import Graph
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan
from tinytrain.training.train_graph import build_training_graph


@dataclass(frozen=True)
class FieldProgram:
    graph: Graph  # the whole model
    cut_graph: Graph  # the model from the cut on (its input: the latent)
    tg: Graph  # the cut model's training graph
    cut: str
    cfg: FieldConfig
    head: HeadLayout | None

    @property
    def width(self) -> int:
        return int(np.prod(self.cut_graph.tensors[self.cut].shape[1:]))

    @property
    def input_bytes(self) -> int:
        """Bytes of the model's int8 input (a raw sample, the frozen prefix's input)."""
        return int(np.prod(self.graph.tensors[self.graph.inputs[0]].shape[1:]))

    @property
    def state_size(self) -> int:
        """Bytes of the cut model's saved state (tt_state_save)."""
        return state_size(state_layout(self.tg))

    @property
    def classes(self) -> int:
        return int(np.prod(self.cut_graph.tensors[self.cut_graph.outputs[0]].shape[1:]))

    def latents(self, x: np.ndarray) -> np.ndarray:
        """(N, width) int8 latents of the model's internal int8 inputs ``x``."""
        f = cut.cut_features(self.graph, self.cut_graph, self.cut, x)
        return f.reshape(len(x), -1)


def field_program(graph: Graph, plan: Plan, cfg: FieldConfig, config: UpdateConfig = UpdateConfig()
                  ) -> FieldProgram | AnomalyProgram:
    """The field runtime of ``graph`` trained by ``plan`` (an autoencoder's, ``plan.loss`` mse: anomaly.py's);
    UsageError when it cannot have one."""
    if plan.loss == "mse":
        return anomaly_program(graph, plan, cfg, config)
    g, p, name = cut.suffix_model(graph, plan)
    if name is None:
        raise PlanError("the field runtime stores the frozen prefix's output: the plan must leave layer 0 frozen "
                        "(e.g. --update last-k:1) and no residual may cross the cut")
    tg = build_training_graph(g, p, config)
    classes = int(np.prod(g.tensors[g.outputs[0]].shape[1:]))
    cfg = cfg.checked(classes)
    head = head_layout(g, tg)
    if cfg.known < classes and head is None:
        raise PlanError(f"--known-classes {cfg.known} < {classes}: adding classes imprints the head's rows, so the "
                        "plan must train the head only, weights and bias (--update last-k:1)")
    if head is not None:
        check_sums(head, cfg.replay)
    return FieldProgram(graph, g, tg, name, cfg, head)
