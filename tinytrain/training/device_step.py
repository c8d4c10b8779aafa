"""The training step a device runs: one function builds it for compile, the engines and the plan search.

    build_training_graph (loss, backward, plan, QAS-scaled SGD, prune)
      ->  save_masks (1-bit clamp masks where the backward reads no activation values)
      ->  fuse_mean_masks (the mean's broadcast gradient written masked, never stored whole)
      ->  fuse_updates (weight gradient + SGD update a block of rows at a time)
      ->  reorder (updates as early as possible, buffers freed early)

``device_schedule`` applies the passes after ``build_training_graph`` to a training graph (the engines receive
one); ``device_step`` builds it from a model and a plan. Each pass keeps the training step's results exactly,
so the simulator may run the training graph before or after them.
"""

from __future__ import annotations

from tinytrain.ir import Graph
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.fuse_masks import fuse_mean_masks
from tinytrain.training.masks import save_masks
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.reorder import reorder
from tinytrain.training.sparse import Plan
from tinytrain.training.train_graph import build_training_graph


def device_schedule(training_graph: Graph) -> Graph:
    """The device's schedule of a training graph (``build_training_graph``'s result, fused or not)."""
    return reorder(fuse_updates(fuse_mean_masks(save_masks(training_graph))))


def device_step(graph: Graph, plan: Plan, config: UpdateConfig = UpdateConfig()) -> Graph:
    """The scheduled training step of model ``graph`` under ``plan``: what compile plans and emits."""

    return device_schedule(build_training_graph(graph, plan, config))
