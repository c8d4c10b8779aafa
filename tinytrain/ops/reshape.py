"""Reshape (flatten, squeeze): same bytes, new shape. ``shape`` excludes the batch dimension.

Imports: TFLite RESHAPE; ONNX Flatten, Reshape, Squeeze, Unsqueeze where NCHW -> NHWC keeps the element order (a
1x1 spatial map); exported as Reshape, or Transpose -> Reshape -> Transpose where the orders differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import ModelError
from tinytrain.ops import OpDef, OpDoc, Resize, TfliteRead, integer_form, no_macs, same_bound


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...]


def infer_shapes(a: ReshapeAttrs, ins) -> list[tuple[int, ...]]:
    x = ins[0]
    if int(np.prod(a.shape)) != int(np.prod(x.shape[1:])):
        raise ValueError(f"reshape: cannot reshape {x.shape} to (N,){a.shape}")
    return [(x.shape[0],) + a.shape]


def reference(a: ReshapeAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [arrays[0].reshape((arrays[0].shape[0],) + a.shape)]



def backward(b, node, out_grads) -> list[str | None]:
    """The gradient reshaped back (a reshape of the fp32 gradient)."""
    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    return [b.emit("reshape", [out_grads[0]], ReshapeAttrs(b.tensor(x).shape[1:]), f"{node.name}.grad_input")[0]]


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def _onnx_target(cv, node, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The ONNX output shape of a Flatten / Reshape / Squeeze / Unsqueeze of an input of ONNX ``shape``."""
    a, op = cv.attrs(node), node.op_type
    if op == "Flatten":
        axis = a.get("axis", 1)
        axis = axis + len(shape) if axis < 0 else axis
        return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
    if op == "Reshape":
        return _reshape_target(cv, node, shape, a)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(x) for x in cv.const(node, 1, "axes")]
    if op == "Squeeze":
        if axes is None:
            axes = [k for k, d in enumerate(shape) if d == 1 and k > 0]
        axes = sorted(x + len(shape) if x < 0 else x for x in axes)
        if 0 in axes:
            raise cv.unsupported(f"{cv.label(node)} removes the batch dimension; keep the batch axis")
        return tuple(d for k, d in enumerate(shape) if k not in axes)
    rank = len(shape) + len(axes)
    axes = sorted(x + rank if x < 0 else x for x in axes)
    if 0 in axes:
        raise cv.unsupported(f"{cv.label(node)} inserts an axis before the batch dimension; keep the batch first")
    out, it = [], iter(shape)
    for k in range(rank):
        out.append(1 if k in axes else next(it))
    return tuple(out)


def _reshape_target(cv, node, shape: tuple[int, ...], a: dict) -> tuple[int, ...]:
    target = [int(d) for d in cv.const(node, 1, "shape")]
    out = [shape[k] if d == 0 and not a.get("allowzero", 0) else d for k, d in enumerate(target)]
    if out.count(-1) > 1:
        raise cv.malformed(f"{cv.label(node)}: shape {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = int(np.prod(shape, dtype=np.int64)) // max(known, 1)
    return tuple(out)


def onnx_reshape(cv, node) -> None:
    cv.reshape_input(node, lambda shape: _onnx_target(cv, node, shape))


def tflite_reshape(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    if x.size != out.size:
        raise ModelError(f"operator {op.index} (RESHAPE): {list(x.shape)} -> {list(out.shape)} changes the size")
    im.node(op, "reshape", [x.name], [out.name], ReshapeAttrs(out.shape[1:]))


def export(ex, n) -> None:
    """Reshape when ONNX's NCHW order and the IR's NHWC order agree (e.g. (N,1,1,C) -> (N,C)); otherwise the data
    transposed to NHWC, reshaped in the IR's order and transposed back to NCHW."""
    src, dst = ex.g.tensors[n.inputs[0]].shape, ex.g.tensors[n.outputs[0]].shape
    f = ex.dq(n.inputs[0], n.name)
    hint = f"{n.outputs[0]}_float"
    if ex.keeps_order(ex.onnx_shape(src), ex.onnx_shape(dst)):
        shape = ex.init(f"{n.outputs[0]}_shape", np.array((-1,) + ex.onnx_shape(dst)[1:], np.int64))
        f = ex.node("Reshape", [f, shape], hint, n.name)
    else:
        if len(src) == 4:
            f = ex.node("Transpose", [f], f"{n.outputs[0]}_nhwc", n.name, perm=[0, 2, 3, 1])
        shape = ex.init(f"{n.outputs[0]}_shape", np.array((-1,) + tuple(dst[1:]), np.int64))
        f = ex.node("Reshape", [f, shape], hint, n.name)
        if len(dst) == 4:
            f = ex.node("Transpose", [f], f"{n.outputs[0]}_nchw", n.name, perm=[0, 3, 1, 2])
    ex.q(f, n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    return xs[0].flatten(1)


ONNX = {"Flatten": onnx_reshape, "Reshape": onnx_reshape, "Squeeze": onnx_reshape, "Unsqueeze": onnx_reshape}
TFLITE = {"RESHAPE": TfliteRead(tflite_reshape, (17, ()), constants=(1,))}
DOC = OpDoc("RESHAPE", "Flatten, Reshape, Squeeze, Unsqueeze", "a view", "a view", "nothing")


OP = OpDef("reshape", ReshapeAttrs, infer_shapes, reference, no_macs, view=True, backward=backward,
           bound=same_bound, resize=Resize(features=True), export=export, twin=twin, doc=DOC,
           integer=integer_form("reshape"))
