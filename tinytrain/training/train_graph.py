"""The training step of a model under a sparse-update plan, as one IR graph.

    differentiate (loss + full backward)  ->  apply_plan (which gradients, which channels)
      ->  add_updates (QAS-scaled SGD, in place)  ->  prune (drop what no update needs)
      [->  integer_backward (plan "backward": "int": the backward and updates in integers, training/integer_step.py)]

(docs/design.md §2 lists QAS before the plan; here the plan is applied first so that QAS scales only the
gradients that are kept — the composition is the same.) The result runs in the simulator
(``simulator.train_step``) and is what the scheduler, memory planner and code generator consume: inputs
(image, label[, step]), output ``loss``, and one ``sgd_update`` node per updated parameter
(``training.device_step`` makes the device's step of it: clamp masks in bits, each weight's update fused with the
node computing its gradient, reordered).
"""

from __future__ import annotations

from tinytrain.errors import PlanError
from tinytrain.ir import Graph
from tinytrain.training.autodiff import differentiate
from tinytrain.training.integer_step import integer_backward
from tinytrain.training.prune import prune
from tinytrain.training.qas import UpdateConfig, add_updates
from tinytrain.training.sparse import Plan, apply_plan, updated_params


def build_training_graph(graph: Graph, plan: Plan, config: UpdateConfig = UpdateConfig(), targets: bool = False) -> Graph:
    """``targets``: an mse plan's loss reads the float32 input ``target`` (names.TARGET) instead of the model's input."""
    if not updated_params(plan, graph):
        raise PlanError("the plan updates nothing: give bias_last_k > 0 or some weights")
    g = differentiate(graph, loss=plan.loss, targets=targets)
    g = apply_plan(g, plan)
    g = add_updates(g, plan, config)
    if plan.backward == "int":
        g = integer_backward(prune(g))
    return prune(g)
