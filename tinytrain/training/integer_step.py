"""The integer-only training step (plan "backward": "int", docs/design.md §3c): a pass that rewrites the loss
gradient, the backward and the updates of a training graph into integer ops — no float operation from the loss to
the update.

    softmax_xent_grad            -> softmax_xent_grad_int   (int32 in [-2^14, 2^14], scale 2^-14; exp by a table)
    clamp_mask                   -> clamp_mask_int          (the same mask, the same scale)
    reshape                      -> reshape                 (a view: the int32 gradient under another shape)
    conv2d_grad_weight           -> conv2d_grad_weight_int  (a pointwise convolution's: sum over pixels of g_z (x - zx))
    fully_connected_grad_weight  -> fully_connected_grad_weight_int (int32 g_z (x - zx), scale s_g s_x)
    bias_grad                    -> bias_grad_int           (int32 sums, the input's scale)
    sgd_update                   -> sgd_update_int          (the float32 factor k times the gradient's scale, as a
                                                             fixed-point multiplier and shift per channel)

Each integer gradient carries its real scale s_g as a per-tensor quantization (zero point 0); the scales are powers
of two times the activations' scales, known at compile time, so they need no run-time work: they are folded into
the update's multiplier. The reported loss (``softmax_xent``) stays the float32 value nothing downstream reads.
Covered: what a plan updating the last layer needs when it is a fully-connected or pointwise-convolution classifier
(its weights and bias: a classifier-only or bias-only:1 plan of the zoo models and of MobileNetV1 TFLite models,
whose head is a 1x1 convolution); any other backward op raises PlanError naming it. Momentum has no integer
form (PlanError); an lr schedule scales each update's multiplier by its Q15 factor (ops/sgd_update_int.py).
Invariant: forward nodes, the loss and the update order are kept; the step's int8 forward is unchanged; the
integer gradients' overflow proof is training/finite.py's (bounds below 2^31).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops.conv2d import pointwise
from tinytrain.ops.softmax_xent import GRAD_FRAC_BITS, SoftmaxXentGradIntAttrs, exp_table
from tinytrain.ops.sgd_update import SCALE
from tinytrain.ops.sgd_update_int import fixed_point
from tinytrain.training.autodiff import is_forward

INTEGER_FORMS = {"softmax_xent_grad": "softmax_xent_grad_int", "clamp_mask": "clamp_mask_int", "reshape": "reshape",
                 "fully_connected_grad_weight": "fully_connected_grad_weight_int",
                 "conv2d_grad_weight": "conv2d_grad_weight_int", "bias_grad": "bias_grad_int",
                 "sgd_update": "sgd_update_int"}
WEIGHT_GRADIENTS = ("fully_connected_grad_weight", "conv2d_grad_weight")  # their output's scale: s_g s_x
KEPT = ("softmax_xent",)  # the loss value: reported, read by nothing in the step


def integer_backward(graph: Graph) -> Graph:
    """The training graph with every backward and update node in its integer form (module docstring)."""
    tensors = dict(graph.tensors)
    scales: dict[str, float] = {}  # integer gradient -> its real scale
    nodes = []
    for node in graph.nodes:
        if is_forward(graph, node) or node.op in KEPT:
            nodes.append(node)
            continue
        if node.op not in INTEGER_FORMS:
            raise PlanError(f'"backward": "int" covers the classifier layer (classifier-only, bias-only:1) '
                            f"and {node.name} is a {node.op} with no integer form; use \"backward\": \"fp32\"")
        nodes.append(_rewrite(node, tensors, scales))
    used = {i for n in nodes for i in n.inputs if i} | {o for n in nodes for o in n.outputs}
    used |= set(graph.inputs) | set(graph.outputs)
    return replace(graph, nodes=tuple(nodes), tensors={k: t for k, t in tensors.items() if k in used})


def _rewrite(node: Node, tensors: dict[str, Tensor], scales: dict[str, float]) -> Node:
    """``node``'s integer form; new constants and retyped outputs go into ``tensors``, output scales into ``scales``."""
    op = INTEGER_FORMS[node.op]
    if node.op == "softmax_xent_grad":
        logits = tensors[node.inputs[0]]
        table = _constant(tensors, f"{node.name}.exp_table", exp_table(logits.quant.s))
        _int_output(tensors, scales, node.outputs[0], 2.0 ** -GRAD_FRAC_BITS)
        return replace(node, op=op, inputs=(*node.inputs, table), attrs=SoftmaxXentGradIntAttrs())
    if node.op == "sgd_update":
        return replace(node, op=op, inputs=_update_inputs(node, tensors, scales))
    g = node.inputs[0]
    if g not in scales:
        raise PlanError(f"{node.name}: its gradient {g} has no integer form")
    if node.op == "conv2d_grad_weight" and not pointwise(node.attrs):
        raise PlanError(f'"backward": "int": {node.name} is the weight gradient of a convolution that is not pointwise; '
                        'use "backward": "fp32"')
    s = scales[g] * (float(np.float32(tensors[node.inputs[1]].quant.s)) if node.op in WEIGHT_GRADIENTS else 1.0)
    _int_output(tensors, scales, node.outputs[0], s)
    return replace(node, op=op)


def _update_inputs(node: Node, tensors: dict[str, Tensor], scales: dict[str, float]) -> tuple[str, ...]:
    """The update's inputs with its float32 step factor k[c] replaced by (M, n) per channel: k[c] s_g = M 2^-n."""
    a = node.attrs
    if a.momentum:
        raise PlanError('"backward": "int" keeps no momentum; drop it or use "fp32"')
    g, k = node.inputs[1], tensors[node.inputs[SCALE]]
    if g not in scales:
        raise PlanError(f"{node.name}: its gradient {g} has no integer form")
    fixed = np.array([fixed_point(float(v) * scales[g], node.inputs[0]) for v in k.data], np.int32).reshape(-1, 2)
    name = _constant(tensors, f"{node.inputs[0]}.step_fixed", fixed)
    return tuple(name if j == SCALE else i for j, i in enumerate(node.inputs))


def _constant(tensors: dict[str, Tensor], name: str, data: np.ndarray) -> str:
    if name in tensors:
        raise ValueError(f"tensor {name} already exists")
    tensors[name] = Tensor(name, data.shape, DType(data.dtype.name), Role.CONSTANT, data=np.ascontiguousarray(data))
    return name


def _int_output(tensors: dict[str, Tensor], scales: dict[str, float], name: str, scale: float) -> None:
    tensors[name] = replace(tensors[name], dtype=DType.INT32, quant=QuantParams((scale,), (0,)))
    scales[name] = scale
