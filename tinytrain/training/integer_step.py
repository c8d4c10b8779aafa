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
dynamic shift, ops/conv2d/integer.py), which every op it flows through passes on and the update adds to its shift. The reported loss (``softmax_xent``) stays the float32 value nothing downstream reads.
Covered: a fully-connected or convolution classifier and, behind it, global pools (and means), pointwise and
depthwise (multiplier 1) convolutions: the last-k plans of MobileNetV1 models (last-k:2, last-k:3, ... until an
update's step factor passes 2^31); any other backward op raises PlanError naming it. Momentum has no integer
form (PlanError); an lr schedule scales each update's multiplier by its Q15 factor (ops/sgd_update_int.py).
Each op's rewrite is its own (``OpDef.integer``, in the op's module beside the integer op it makes: the table this
pass reads, as the backward reads the gradient rules); ``IntegerRewrite`` is what a rule reads and writes.
Invariant: forward nodes, the loss and the update order are kept; the step's int8 forward is unchanged; the
integer gradients' overflow proof is training/finite.py's (bounds below 2^31).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops import get_op, written_tensors
from tinytrain.training.autodiff import is_forward
from tinytrain.training.finite import worst_case


@dataclass
class IntegerRewrite:
    """The pass's state, what an op's rule (``OpDef.integer``) reads and writes: the graph's tensors as rewritten,
    each integer gradient's real scale, its run-time exponent's tensor (behind an input gradient) and its bound (the
    overflow proof's, with trainable weights at their worst case: training/finite.py)."""

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

    def scale(self, gradient: str, node: Node) -> float:
        """The real scale of the integer gradient ``node`` reads; refused when that gradient has no integer form."""
        if gradient not in self.scales:
            raise PlanError(f"{node.name}: its gradient {gradient} has no integer form")
        return self.scales[gradient]

    def int_output(self, name: str, scale: float) -> None:
        """Output ``name`` becomes an int32 gradient of real scale ``scale``."""
        self.tensors[name] = replace(self.tensors[name], dtype=DType.INT32, quant=QuantParams((scale,), (0,)))
        self.scales[name] = scale

    def constant(self, name: str, data: np.ndarray) -> str:
        """A new constant tensor of the step (a table, a fold, a fixed-point factor)."""
        if name in self.tensors:
            raise ValueError(f"tensor {name} already exists")
        self.tensors[name] = Tensor(name, data.shape, DType(data.dtype.name), Role.CONSTANT,
                                    data=np.ascontiguousarray(data))
        return name

    def exponent_tensor(self, name: str, role: Role) -> str:
        """The run-time exponent (a (1,) int32 tensor) of gradient ``name``."""
        exp = f"{name}.exp"
        self.tensors[exp] = Tensor(exp, (1,), DType.INT32, role)
        self.exps[name] = exp
        return exp

    def pass_exponent(self, node: Node) -> None:
        """``node``'s output has its (first) input gradient's run-time exponent, if that has one."""
        if node.inputs and node.inputs[0] in self.exps:
            self.exps[node.outputs[0]] = self.exps[node.inputs[0]]


def integer_backward(graph: Graph) -> Graph:
    """The training graph with every backward and update node in its integer form (module docstring)."""
    state = IntegerRewrite(dict(graph.tensors), set(written_tensors(graph)))
    nodes = []
    for node in graph.nodes:
        if is_forward(graph, node):
            nodes.append(node)
            continue
        rule = get_op(node.op).integer
        if rule is None:
            raise PlanError(f'"backward": "int" covers classifiers, global pools, pointwise and depthwise '
                            f"convolutions (e.g. every last-k of MobileNetV1) and {node.name} is a {node.op} with no "
                            'integer form; use "backward": "fp32"')
        nodes.append(rule(node, state))
        if nodes[-1] is not node:  # a rule that returns the node itself keeps it (the loss value nothing reads)
            state.bound(nodes[-1])
    tensors = state.tensors
    used = {i for n in nodes for i in n.inputs if i} | {o for n in nodes for o in n.outputs}
    used |= set(graph.inputs) | set(graph.outputs)
    return replace(graph, nodes=tuple(nodes), tensors={k: t for k, t in tensors.items() if k in used})
