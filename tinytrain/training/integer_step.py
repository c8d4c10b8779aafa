"""The integer-only training step (plan "backward": "int", docs/design.md §3c): a pass that rewrites the loss
gradient, the backward and the updates of a training graph into integer ops — no float operation from the loss to
the update.

    softmax_xent_grad            -> softmax_xent_grad_int   (int32 in [-2^14, 2^14], scale 2^-14; exp by a table)
    clamp_mask                   -> clamp_mask_int          (the same mask, the same scale)
    reshape                      -> reshape                 (a view: the int32 gradient under another shape)
    conv2d_grad_weight           -> conv2d_grad_weight_int  (sum over output pixels of g_z (x[tap] - zx); regular or
                                                             depthwise)
    conv2d_grad_input            -> conv2d_grad_input_int   (pointwise or depthwise: int32 sums of g_z (w - zw), the
                                                             per-channel weight scale folded in Q15, then shifted
                                                             into int16's range by a shift chosen at run time,
                                                             output with its exponent)
    fully_connected_grad_input   -> fully_connected_grad_input_int (the same arithmetic)
    avg_pool2d_grad, mean_grad   -> avg_pool2d_grad_int, mean_grad_int (a global pool: g broadcast, scale / (H W))
    fully_connected_grad_weight  -> fully_connected_grad_weight_int (int32 g_z (x - zx), scale s_g s_x)
    bias_grad                    -> bias_grad_int           (int32 sums, the input's scale)
    sgd_update                   -> sgd_update_int          (the float32 factor k times the gradient's scale, as a
                                                             fixed-point multiplier and shift per channel)

Each integer gradient carries its real scale s_g as a per-tensor quantization (zero point 0); the scales are powers
of two times the activations' scales, known at compile time, and folded into the update's multiplier. Behind an
input gradient, a gradient also has a run-time exponent e (a (1,) int32 tensor, real scale s_g 2^-e: NITI's
dynamic shift, ops/conv2d_int.py), which every op it flows through passes on and the update adds to its shift. The reported loss (``softmax_xent``) stays the float32 value nothing downstream reads.
Covered: a fully-connected or convolution classifier and, behind it, global pools (and means), pointwise and
depthwise (multiplier 1) convolutions: the last-k plans of MobileNetV1 models (last-k:2, last-k:3, ... until an
update's step factor passes 2^31); any other backward op raises PlanError naming it. Momentum has no integer
form (PlanError); an lr schedule scales each update's multiplier by its Q15 factor (ops/sgd_update_int.py).
Invariant: forward nodes, the loss and the update order are kept; the step's int8 forward is unchanged; the
integer gradients' overflow proof is training/finite.py's (bounds below 2^31).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops import get_op, written_tensors
from tinytrain.ops.avg_pool2d import is_global
from tinytrain.ops.conv2d_int import (FOLD_BITS, Conv2dGradInputIntAttrs, covered, fold, limit_for, offset, shifts,
                                     tap_sums)
from tinytrain.ops.fully_connected import FullyConnectedGradInputIntAttrs
from tinytrain.ops.softmax_xent import GRAD_FRAC_BITS, SoftmaxXentGradIntAttrs, exp_table
from tinytrain.ops.sgd_update import SCALE
from tinytrain.ops.sgd_update_int import EXP, fixed_point
from tinytrain.training.autodiff import is_forward
from tinytrain.training.finite import worst_case

INTEGER_FORMS = {"softmax_xent_grad": "softmax_xent_grad_int", "clamp_mask": "clamp_mask_int", "reshape": "reshape",
                 "fully_connected_grad_weight": "fully_connected_grad_weight_int",
                 "conv2d_grad_weight": "conv2d_grad_weight_int", "bias_grad": "bias_grad_int",
                 "sgd_update": "sgd_update_int", "conv2d_grad_input": "conv2d_grad_input_int",
                 "avg_pool2d_grad": "avg_pool2d_grad_int", "mean_grad": "mean_grad_int",
                 "fully_connected_grad_input": "fully_connected_grad_input_int"}
WEIGHT_GRADIENTS = ("fully_connected_grad_weight", "conv2d_grad_weight")  # their output's scale: s_g s_x
SHARES = ("avg_pool2d_grad", "mean_grad")  # their output's scale: s_g / (H W)
KEPT = ("softmax_xent",)  # the loss value: reported, read by nothing in the step
# ops whose output has its (first) input gradient's exponent: all but the input gradients and the updates
PASS_EXPONENT = ("clamp_mask", "reshape", "avg_pool2d_grad", "mean_grad", "bias_grad", *WEIGHT_GRADIENTS)


@dataclass
class _Rewrite:
    """The pass's state: the graph's tensors as rewritten, each integer gradient's real scale, its run-time
    exponent's tensor (behind an input gradient) and its bound (the overflow proof's, with trainable weights at their
    worst case: training/finite.py)."""

    tensors: dict[str, Tensor]
    written: set[str]
    scales: dict[str, float] = field(default_factory=dict)
    exps: dict[str, str] = field(default_factory=dict)
    bounds: dict[str, float] = field(default_factory=dict)

    def proven(self, name: str) -> Tensor:
        t = self.tensors[name]
        return worst_case(t) if name in self.written and t.role is Role.WEIGHT else t

    def bound(self, node: Node) -> None:
        op = get_op(node.op)
        if op.writes:
            return
        ins = [self.proven(i) if i else None for i in node.inputs]
        for name, b in zip(node.outputs, op.bound(node.attrs, ins, [self.bounds.get(i) for i in node.inputs])):
            self.bounds[name] = b


def integer_backward(graph: Graph) -> Graph:
    """The training graph with every backward and update node in its integer form (module docstring)."""
    state = _Rewrite(dict(graph.tensors), set(written_tensors(graph)))
    nodes = []
    for node in graph.nodes:
        if is_forward(graph, node) or node.op in KEPT:
            nodes.append(node)
            continue
        if node.op not in INTEGER_FORMS:
            raise PlanError(f'"backward": "int" covers classifiers, global pools, pointwise and depthwise '
                            f"convolutions (e.g. every last-k of MobileNetV1) and {node.name} is a {node.op} with no "
                            'integer form; use "backward": "fp32"')
        nodes.append(_rewrite(node, state))
        if nodes[-1].inputs and nodes[-1].inputs[0] in state.exps and node.op in PASS_EXPONENT:
            state.exps[nodes[-1].outputs[0]] = state.exps[nodes[-1].inputs[0]]
        state.bound(nodes[-1])
    tensors = state.tensors
    used = {i for n in nodes for i in n.inputs if i} | {o for n in nodes for o in n.outputs}
    used |= set(graph.inputs) | set(graph.outputs)
    return replace(graph, nodes=tuple(nodes), tensors={k: t for k, t in tensors.items() if k in used})


def _rewrite(node: Node, state: _Rewrite) -> Node:
    """``node``'s integer form; new constants and retyped outputs go into ``tensors``, output scales into ``scales``."""
    op, tensors, scales = INTEGER_FORMS[node.op], state.tensors, state.scales
    if node.op == "softmax_xent_grad":
        logits = tensors[node.inputs[0]]
        table = _constant(tensors, f"{node.name}.exp_table", exp_table(logits.quant.s))
        _int_output(tensors, scales, node.outputs[0], 2.0 ** -GRAD_FRAC_BITS)
        return replace(node, op=op, inputs=(*node.inputs, table), attrs=SoftmaxXentGradIntAttrs())
    if node.op == "sgd_update":
        return replace(node, op=op, inputs=_update_inputs(node, state))
    g = node.inputs[0]
    if g not in scales:
        raise PlanError(f"{node.name}: its gradient {g} has no integer form")
    if node.op in ("conv2d_grad_input", "fully_connected_grad_input"):
        return _input_gradient(node, state)
    if node.op in SHARES:
        if node.op == "avg_pool2d_grad" and not is_global(node.attrs):
            raise PlanError(f'"backward": "int": {node.name} is the gradient of an average pool that is not global; '
                            'use "backward": "fp32"')
        hw = node.attrs.input_hw
        _int_output(tensors, scales, node.outputs[0], scales[g] / (hw[0] * hw[1]))
        return replace(node, op=op)
    s = scales[g] * (float(np.float32(tensors[node.inputs[1]].quant.s)) if node.op in WEIGHT_GRADIENTS else 1.0)
    _int_output(tensors, scales, node.outputs[0], s)
    return replace(node, op=op)


def _input_gradient(node: Node, state: _Rewrite) -> Node:
    """conv2d_grad_input / fully_connected_grad_input -> their integer forms: the weight's per-channel scale folded
    (Q15), the pre-shift the smallest the proof allows, the limit the weight gradient behind allows, the exponent's
    offset (ops/conv2d_int.py); the output's static scale s_g max(s_w) 2^(r-15+T) and its exponent tensor."""
    (g, w), wt = node.inputs, state.tensors[node.inputs[1]]
    conv = node.op == "conv2d_grad_input"
    if conv and not covered(node.attrs, wt.shape):
        raise PlanError(f'"backward": "int": {node.name} is the input gradient of a convolution neither pointwise nor '
                        'depthwise (multiplier 1); use "backward": "fp32"')
    proven = state.proven(w).data
    proven = proven if conv else proven.reshape(proven.shape[0], 1, 1, -1)
    m = fold(wt.quant.scale, wt.shape[0])
    gx = state.tensors[node.outputs[0]]
    limit = limit_for(gx.shape[1] * gx.shape[2] if conv else gx.shape[0])
    r = shifts(int(state.bounds[g]), int(m.max()),
               int(tap_sums(proven, wt.quant.zero_point, node.attrs.groups if conv else 1).max()), limit)[0]
    s_w = float(np.max(np.asarray(wt.quant.scale, np.float32)))
    t = offset(r, s_w)
    a = node.attrs
    attrs = (Conv2dGradInputIntAttrs(a.stride, a.padding, a.input_hw, a.dilation, a.groups, r, t, limit) if conv
             else FullyConnectedGradInputIntAttrs(r, t, limit))
    fold_name = _constant(state.tensors, f"{node.name}.fold", m)
    _int_output(state.tensors, state.scales, gx.name, state.scales[g] * s_w * 2.0 ** (r - FOLD_BITS + t))
    exp = f"{gx.name}.exp"
    state.tensors[exp] = Tensor(exp, (1,), DType.INT32, gx.role)
    state.exps[gx.name] = exp
    return replace(node, op=INTEGER_FORMS[node.op], inputs=(g, w, fold_name, state.exps.get(g, "")),
                   outputs=(gx.name, exp), attrs=attrs)


def _update_inputs(node: Node, state: _Rewrite) -> tuple[str, ...]:
    """The update's inputs with its float32 step factor k[c] replaced by (M, n) per channel: k[c] s_g = M 2^-n, and
    its gradient's exponent (if it has one) appended."""
    a, tensors, scales = node.attrs, state.tensors, state.scales
    if a.momentum:
        raise PlanError('"backward": "int" keeps no momentum; drop it or use "fp32"')
    g, k = node.inputs[1], tensors[node.inputs[SCALE]]
    if g not in scales:
        raise PlanError(f"{node.name}: its gradient {g} has no integer form")
    free = g in state.exps  # its exponent moves the shift at run time: any static shift (ops/sgd_update_int.py)
    fixed = np.array([fixed_point(float(v) * scales[g], node.inputs[0], free) for v in k.data],
                     np.int32).reshape(-1, 2)
    name = _constant(tensors, f"{node.inputs[0]}.step_fixed", fixed)
    inputs = tuple(name if j == SCALE else i for j, i in enumerate(node.inputs))
    return inputs + ("",) * (EXP - len(inputs)) + (state.exps[g],) if free else inputs


def _constant(tensors: dict[str, Tensor], name: str, data: np.ndarray) -> str:
    if name in tensors:
        raise ValueError(f"tensor {name} already exists")
    tensors[name] = Tensor(name, data.shape, DType(data.dtype.name), Role.CONSTANT, data=np.ascontiguousarray(data))
    return name


def _int_output(tensors: dict[str, Tensor], scales: dict[str, float], name: str, scale: float) -> None:
    tensors[name] = replace(tensors[name], dtype=DType.INT32, quant=QuantParams((scale,), (0,)))
    scales[name] = scale
