"""Quantization-aware scaling (QAS) and the SGD update nodes (docs/design.md §3).

An int8 weight W̄ with per-channel scale s_W stands for W = s_W W̄, so its gradient is G_W̄ = s_W G_W
(G_W: the gradient of the real weight, what autodiff computes). QAS updates with G_W̄ s_W⁻² = G_W / s_W,
which makes the int8 step equal to the fp32 SGD step expressed in LSBs: W̄ ← W̄ − lr G_W / s_W. The same
holds for the int32 bias with scale s_b = s_x s_W. The pass folds lr and the scale into one float32
factor per output channel, k[c] = float32(lr / s[c]) (computed in double on the host; without QAS,
plain int8 SGD on G_W̄: k[c] = float32(lr · s[c])), and stores it as a constant, so C reads the same
bits. The update arithmetic and its rounding are specified in tinytrain/ops/sgd_update.py.

Rounding decision: stochastic rounding with the deterministic hash PRNG of ops/sgd_update.py, everywhere.
Measured (benchmarks/finetune.py rounding --epochs 3 --lrs 0.01,0.03 --seeds 1 -> benchmarks/results/rounding.json):
ImageNet MobileNetV1-0.25 (uint8 TF1 model) with a new 2-class head, fine-tuned on 600 VWW images with
plan last-k:4, batch-1 SGD + QAS. 99.96 % of the fp32 weight steps |lr G / s_w| are below half an LSB,
so round-to-nearest changes only 0.04 % of the updated weights per step (the new head's, mostly), while
stochastic rounding changes 0.39 % (and is unbiased: E[step] = the fp32 step). At lr 0.01, held-out
accuracy after 3 epochs: nearest 72.5 %, stochastic 81.0 % (last-epoch loss 0.649 vs 0.602). At lr 0.03
both diverge (50-52 %), so the lr matters more than the rounding there. Nearest stays available
(``Rounding.NEAREST``) for experiments only.

Momentum (optional) keeps an fp32 buffer per updated element: 4 bytes per int8 weight updated, i.e.
4x the SRAM of the updated weights themselves; its tensors have role OPTIMIZER_STATE so the memory
planner counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.builder import GraphBuilder
from tinytrain.errors import PlanError
from tinytrain.ir import DType, Graph, Role
from tinytrain.names import LOSS, STEP_INPUT
from tinytrain.ops.sgd_update import Rounding, SgdUpdateAttrs, remainder_shape
from tinytrain.training.autodiff import param_gradients
from tinytrain.training.sparse import Plan, updated_params


@dataclass(frozen=True)
class UpdateConfig:
    momentum: float = 0.0
    rounding: Rounding = Rounding.STOCHASTIC
    qas: bool = True
    seed: int = 0


def param_scales(graph: Graph, param: str) -> np.ndarray:
    """Per-output-channel real scale of a parameter: s_W for a weight, s_x s_W for a bias (float64)."""
    t = graph.tensors[param]
    if t.quant is not None and t.role is Role.WEIGHT:
        return np.broadcast_to(np.asarray(t.quant.scale, np.float64), (t.shape[0],))
    for node in graph.nodes:
        if len(node.inputs) > 2 and node.inputs[2] == param:
            x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
            s_w = np.broadcast_to(np.asarray(w.quant.scale, np.float64), (t.shape[0],))
            return np.float64(np.float32(x.quant.s)) * s_w
    raise ValueError(f"no scale known for {param}")


def step_scale(graph: Graph, param: str, lr: float, channels, qas: bool) -> np.ndarray:
    """k[c] = float32(lr / s[c]) with QAS, float32(lr * s[c]) without, for the selected channels."""
    s = param_scales(graph, param)
    if channels is not None:
        s = s[np.asarray(channels)]
    with np.errstate(over="ignore"):
        k = (lr / s if qas else lr * s).astype(np.float32)
    return _finite_scale(k, param, lr)


def _finite_scale(k: np.ndarray, param: str, lr: float) -> np.ndarray:
    if not np.all(np.isfinite(k)):  # every step would be NaN or Inf (non-finite guard, docs/guide/field.md)

        raise PlanError(f"lr {lr:g} makes the float32 step factor of {param} infinite; use a smaller lr")
    return k


def add_updates(graph: Graph, plan: Plan, config: UpdateConfig = UpdateConfig()) -> Graph:
    """Append one ``sgd_update`` node per parameter gradient among the outputs (after ``sparse.apply_plan``).

    Invariant: every parameter gradient output is consumed by exactly one update node that writes the
    parameter in place, after every other node (so every reader sees the pre-update value); the outputs
    shrink to (loss,); each update gets its float32 step-scale constant, its momentum buffer (role
    OPTIMIZER_STATE, zeros) when momentum is on, its remainder (role OPTIMIZER_STATE, int8 zeros, 2^F folded into
    the step scale: ops/sgd_update.py) when the plan keeps ``remainder_bits`` F > 0 for its layer (the entry's own,
    or the plan's) and the parameter is an int8 weight, and reads the graph input ``step`` when rounding is
    stochastic or the plan has an lr schedule. Update nodes are numbered (``stream``) in output order.
    """
    grads = param_gradients(graph)
    updates = {u.param: u for u in updated_params(plan, graph)}
    b = GraphBuilder(graph)
    step = ""
    if config.rounding is Rounding.STOCHASTIC or plan.lr_schedule is not None:
        step = b.add_tensor(STEP_INPUT, (1,), DType.INT32, Role.INPUT)
        b.inputs.append(step)
    for stream, (param, g) in enumerate(grads.items()):
        u = updates[param]
        gt = graph.tensors[g]
        bits = u.remainder_bits if graph.tensors[param].dtype is DType.INT8 else 0
        k = step_scale(graph, param, u.lr, u.channels, config.qas) * np.float32(1 << bits)
        k = b.constant(f"{param}.step_scale", _finite_scale(k, param, u.lr))
        m = rem = ""
        if config.momentum:
            m = b.constant(f"{param}.momentum", np.zeros(gt.shape, np.float32), Role.OPTIMIZER_STATE)
        if bits:
            rem = b.constant(f"{param}.remainder", np.zeros(remainder_shape(gt.shape, bits), np.int8),
                             Role.OPTIMIZER_STATE)
        attrs = SgdUpdateAttrs(u.channels, config.rounding, float(config.momentum), stream, config.seed,
                               plan.lr_schedule, bits)
        inputs = [param, g, k, m, step, rem]
        while inputs and not inputs[-1]:
            inputs.pop()
        b.emit("sgd_update", inputs, attrs, f"{param}.update")
    b.outputs = [LOSS]
    return b.build()


def optimizer_state_bytes(graph: Graph) -> int:
    """SRAM of the optimizer state (momentum buffers, weight remainders) of a training graph."""
    return sum(t.nbytes for t in graph.tensors.values() if t.role is Role.OPTIMIZER_STATE)
