"""Why checking the loss is enough: a compile-time proof that no gradient of a step with a finite loss overflows.

The non-finite guard (docs/design.md §10) checks one number at run time, the loss, right after computing it and
before any update. A step is not applied when its loss *or any gradient* is NaN or Inf; the updates are fused into
the backward and applied layer by layer, so a gradient found non-finite later could not take back the updates
already applied. Instead this pass proves, for the training graph, that whenever the loss is finite every fp32
gradient is finite: the loss gradient p - onehot is then in [-1, 1], and each backward op's ``OpDef.bound`` turns
upper bounds of its inputs' |elements| into one of its outputs' (exact arithmetic: sums of |weight| x bound, with
the weights as stored — trainable int8 weights at their worst case, any int8 value — and every int8 activation
value possible). A momentum buffer M = mu M + g stays within bound(g) / (1 - mu) over any number of steps. The
operands the backward dequantizes (s_w (w - zw), s_x (x - zx): a depthwise input gradient's kernel computes its real
taps before multiplying, docs/design.md §3b) are bounded too, so no intermediate value overflows where the bound of
a product would not show it.

The bounds must stay below float32's largest value by ``MARGIN`` (2^10), which covers float32 rounding: a float32
sum of n terms exceeds the exact sum of their magnitudes by at most a factor 1 + n 2^-23, and the product of these
factors over a backward chain (n up to ~10^5 per sum, a few dozen ops) stays far below 2^10. When a bound does not
fit, the step is refused with one line naming the gradient wherever a step is made runnable: the simulator's
``init_state``, the C's ``render_training_project`` (host C, QEMU, compile). The shipped plans and the zoo and
VWW models' presets that fit 256 KB are proven; near-full updates of the deepest models (megabytes of SRAM) are
not. The step factor lr / s (training/qas.py) is not a gradient: a finite gradient times it is finite or ±Inf,
never NaN, and the rounding clamps it to ±2^30 (ops/sgd_update.py), identically in every engine.

The integer step (plan "backward": "int", training/integer_step.py) makes the same walk an overflow proof: its int32
gradients' bound rules give exact integer bounds (the loss gradient's 2^14, times max |x - zx| and the positions
summed; an input gradient's int32 intermediates and its int16-range result, ops/conv2d/integer.py), each of which must
be at most INT32_MAX; the update's product g M then stays below 2^62 and its rounding
below 2^63 (ops/sgd_update_int.py), so no integer operation of the step wraps. Integer bounds hold whatever the
loss is: the run-time check has nothing to guard there (the C still skips a step whose float loss is not finite).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ir import DType, Graph, Role, Tensor
from tinytrain.names import LOSS, grad_name
from tinytrain.ops import get_op
from tinytrain.ops import written_tensors
from tinytrain.ops.conv2d import input_magnitude, weight_magnitude

FLOAT32_MAX = float(np.finfo(np.float32).max)
MARGIN = 2.0 ** 10
LIMIT = FLOAT32_MAX / MARGIN
INT32_LIMIT = float(2 ** 31 - 1)  # an integer gradient's bound (the integer step): at most INT32_MAX


@dataclass(frozen=True)
class GradientProof:
    """The bound of every fp32 tensor the backward computes or keeps (momentum), and the largest one."""

    bounds: dict[str, float]
    largest: str
    limit: float = LIMIT

    @property
    def largest_bound(self) -> float:
        return self.bounds[self.largest]

    def to_json(self) -> dict:
        if self.limit == INT32_LIMIT:
            return {"runtime_check": "loss", "proof": "no int32 gradient overflows (training/finite.py)",
                    "largest_gradient_bound": self.largest_bound, "largest_gradient": self.largest, "limit": self.limit}
        return {"runtime_check": "loss", "proof": "every gradient finite when the loss is (training/finite.py)",
                "largest_gradient_bound": self.largest_bound, "largest_gradient": self.largest, "limit": self.limit}


def _proven(t: Tensor) -> bool:
    """A tensor the proof bounds: an fp32 one, or an integer gradient (the integer step)."""
    return t.dtype is DType.FLOAT32 or (t.dtype is DType.INT32 and t.role is Role.GRADIENT)


def worst_case(t: Tensor) -> Tensor:
    """A trainable int8 weight as the proof sees it: every element as far from its zero point as int8 allows (-128
    before the first update, [-127, 127] after)."""
    zp = np.asarray(t.quant.zero_point).reshape((-1,) + (1,) * (len(t.shape) - 1))
    return replace(t, data=np.broadcast_to(np.where(zp >= 0, -128, 127), t.shape).astype(np.int8))


def gradient_bounds(graph: Graph) -> GradientProof:
    """Bounds of |element| of every fp32 tensor a training graph computes — of the gradient and momentum of each
    update (``PARAM.grad``, the momentum buffer's name), fused or not, and of each int8 operand the backward
    dequantizes (``real NAME``) — given a finite loss. Any training graph: as ``build_training_graph`` makes it or
    as the device runs it (``device_schedule``: masks, fused updates). Raises PlanError when a bound is not below
    ``LIMIT``."""

    written = set(written_tensors(graph))
    tensors = {k: worst_case(t) if k in written and t.role is Role.WEIGHT else t for k, t in graph.tensors.items()}
    at_run_time = {i for n in graph.nodes if LOSS in n.outputs for i in n.inputs}  # finite when the loss is
    bounds: dict[str, float] = {}
    for node in graph.nodes:
        op = get_op(node.op)
        computes = [o for o in node.outputs if _proven(graph.tensors[o]) and o != LOSS]
        if not computes and not op.writes:
            continue  # the int8 forward, the loss (checked at run time)
        if op.bound is None:
            raise PlanError(f"cannot prove the gradients of {node.name} finite: {node.op} has no bound rule")
        ins = [tensors[i] if i else None for i in node.inputs]
        for t in ins:
            if t is not None and t.dtype is DType.INT8 and t.quant is not None and t.name not in at_run_time:
                bounds[f"real {t.name}"] = float(weight_magnitude(t).max()) if t.has_data else input_magnitude(t)
        result = op.bound(node.attrs, ins, [bounds.get(i) for i in node.inputs])
        if op.writes:
            grad, momentum = result
            bounds[grad_name(node.inputs[op.writes[0]])] = grad
            if momentum:
                bounds[node.inputs[op.writes[1]]] = momentum
            continue
        for name, b in zip(node.outputs, result, strict=True):
            if name in computes:
                bounds[name] = float(b)
    if not bounds:
        raise PlanError("the training graph computes no gradient")
    largest = max(bounds, key=bounds.__getitem__)
    if any(_proven(t) and t.dtype is DType.INT32 for t in graph.tensors.values()):
        if not bounds[largest] <= INT32_LIMIT:
            raise PlanError(f"the integer backward's {largest} may reach {bounds[largest]:.3g}, beyond int32: "
                            'update fewer layers or use "backward": "fp32"')
        return GradientProof(bounds, largest, INT32_LIMIT)
    if not bounds[largest] < LIMIT:
        raise PlanError(f"the backward's {largest} may reach {bounds[largest]:.3g} with a finite loss (float32 "
                        f"overflows at {FLOAT32_MAX:.3g}): the model's scales let it overflow; update fewer layers")
    return GradientProof(bounds, largest)
