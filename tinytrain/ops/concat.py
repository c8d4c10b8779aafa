"""Concatenation of int8 activations along one axis (channels in NHWC CNNs: Inception / DenseNet-style blocks).

Each input is copied into its slice of the output, through a 256-entry table when its quantization differs from the
output's (``tables[k]``, else None: a copy). TFLite Micro's int8 kernel requires equal quantization (a copy);
onnxruntime's QLinearConcat and QDQ Concat requantize each input in float32 (tinytrain/tables.py float32_table).

Backward: the real output is the inputs side by side, so input k's gradient is its slice of the output gradient
(``concat_grad``); a requantization that saturates is straight-through.

Imports: TFLite CONCATENATION (inputs quantized like the output); ONNX Concat of dequantized activations (QDQ) and
com.microsoft QLinearConcat, each input requantized to the output (and clamped by a Relu / Clip after it) in float32
through a table, or copied when it has the output's quantization and nothing clamps; exported as Concat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain import tables
from tinytrain.errors import UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, RowWindow, TfliteRead, no_macs, same_bound


@dataclass(frozen=True)
class ConcatAttrs:
    axis: int  # IR axis (NHWC for rank 4), >= 1
    tables: tuple[tuple[int, ...] | None, ...]  # per input: 256 int8 outputs by input + 128, or None (a copy)


def infer_shapes(a: ConcatAttrs, ins) -> list[tuple[int, ...]]:
    shapes = [t.shape for t in ins]
    rank = len(shapes[0])
    if len(a.tables) != len(shapes) or not 1 <= a.axis < rank:
        raise ValueError(f"concat: axis {a.axis} of rank {rank}, {len(a.tables)} tables for {len(shapes)} inputs")
    for s in shapes:
        if len(s) != rank or any(s[d] != shapes[0][d] for d in range(rank) if d != a.axis):
            raise ValueError(f"concat: shapes {shapes} differ outside axis {a.axis}")
    out = list(shapes[0])
    out[a.axis] = sum(s[a.axis] for s in shapes)
    return [tuple(out)]


def reference(a: ConcatAttrs, arrays, ins, outs) -> list[np.ndarray]:
    parts = [x if t is None else np.asarray(t, np.int8)[x.astype(np.int64) + 128] for x, t in zip(arrays, a.tables)]
    return [np.concatenate(parts, axis=a.axis).astype(np.int8)]


def rows(a: ConcatAttrs, ins, outs, k: int) -> RowWindow | None:
    """Along channels (or width) of an NHWC tensor, output row r is input row r of each input."""
    return RowWindow(1, 0, 1) if len(outs[0].shape) == 4 and a.axis >= 2 else None


def backward(b, node, out_grads) -> list[str | None]:
    a: ConcatAttrs = node.attrs
    grads, begin = [], 0
    for x in node.inputs:
        size = b.tensor(x).shape[a.axis]
        grads.append(b.emit("concat_grad", [out_grads[0]], ConcatGradAttrs(a.axis, begin, size),
                            f"{node.name}.grad_{len(grads)}")[0] if b.needs_grad(x) else None)
        begin += size
    return grads


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------

_NCHW_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    xs = [cv.tensors[x] for x in p.args["xs"]]
    copy = (p.lo, p.hi) == (None, None)
    same = [np.float32(x.quant.s) == np.float32(yq.s) and x.quant.zp == yq.zp for x in xs]
    parts = tuple(None if copy and s else tables.float32_table(lambda v: v, x.quant, yq, p.lo, p.hi)
                  for x, s in zip(xs, same))
    return cv.add_node("concat", p.source, [x.name for x in xs], out_hint, yq, ConcatAttrs(p.args["axis"], parts),
                       p.source)


def _axis(cv, node, rank: int) -> int:
    axis = int(cv.attrs(node).get("axis", 1)) % rank
    axis = _NCHW_TO_NHWC[axis] if rank == 4 else axis
    if axis == 0:
        raise cv.unsupported(f"{cv.label(node)} concatenates along the batch axis")
    return axis


def onnx_concat(cv, node) -> None:
    """Concat of DequantizeLinear outputs (QDQ), deferred to its QuantizeLinear."""
    xs = [cv.dq_input(node, i) for i in range(len(node.input))]
    axis = _axis(cv, node, len(xs[0].shape))
    onnx_axis = int(cv.attrs(node).get("axis", 1)) % len(xs[0].shape)
    shape = list(xs[0].shape)
    shape[onnx_axis] = sum(x.shape[onnx_axis] for x in xs)
    cv.defer(node, "concat", tuple(shape), onnx_emit, xs=[x.ir for x in xs], axis=axis)


def onnx_qlinear_concat(cv, node) -> None:
    """com.microsoft QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per input)."""
    yq, dtype = cv.qlinear_output(node, 0, 1)
    xs = [cv.qlinear_input(node, idx, idx + 1, idx + 2) for idx in range(2, len(node.input), 3)]
    p = cv.defer(node, "concat", (), onnx_emit, xs=[x.ir for x in xs], axis=_axis(cv, node, len(xs[0].shape)))
    cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)


def tflite_concatenation(im, op) -> None:
    """TFLite Micro's int8 kernel copies: every input must have the output's quantization."""
    xs, out = [im.act(i) for i in op.inputs], im.out(op)
    axis = op.options["axis"] % len(out.shape)
    if op.options["activation"] != 0:
        raise UnsupportedModelError(f"operator {op.index} (CONCATENATION) has a fused activation")
    for x in xs:
        if x.quant != out.quant:
            raise UnsupportedModelError(f"operator {op.index} (CONCATENATION): input {x.name!r} is quantized "
                                        "unlike the output (TFLite Micro's int8 kernel does not rescale)")
    if axis == 0:
        raise UnsupportedModelError(f"operator {op.index} (CONCATENATION) joins along the batch axis")
    im.node(op, "concat", [x.name for x in xs], [out.name], ConcatAttrs(axis, (None,) * len(xs)))


def export(ex, n) -> None:
    rank = len(ex.g.tensors[n.outputs[0]].shape)
    axis = {1: 2, 2: 3, 3: 1}[n.attrs.axis] if rank == 4 else n.attrs.axis
    f = ex.node("Concat", [ex.dq(i, n.name) for i in n.inputs], f"{n.outputs[0]}_float", n.name, axis=axis)
    ex.q(f, n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    rank = len(xs[0].shape)
    return t.torch.cat(list(xs), dim={1: 2, 2: 3, 3: 1}[node.attrs.axis] if rank == 4 else node.attrs.axis)


ONNX = {"Concat": onnx_concat}
ONNX_QOPERATOR = {"com.microsoft.QLinearConcat": onnx_qlinear_concat}
TFLITE = {"CONCATENATION": TfliteRead(tflite_concatenation, (10, (("axis", 0, "<i", 0), ("activation", 1, "<b", 0))))}
DOC = OpDoc("CONCATENATION (equal quantization)", "Concat / QLinearConcat",
            "copies, or per-input requantization tables", "slices of g", "nothing", streamed="yes (channel / width axis)")
OP = OpDef("concat", ConcatAttrs, infer_shapes, reference, no_macs, backward=backward, rows=rows, export=export,
           twin=twin, doc=DOC)


@dataclass(frozen=True)
class ConcatGradAttrs:
    """One input's gradient: elements [begin, begin + size) of the gradient along ``axis``."""

    axis: int
    begin: int
    size: int


def grad_shapes(a: ConcatGradAttrs, ins) -> list[tuple[int, ...]]:
    shape = list(ins[0].shape)
    if not (0 <= a.begin and a.begin + a.size <= shape[a.axis] and a.size > 0):
        raise ValueError(f"concat_grad: [{a.begin}, {a.begin + a.size}) outside {shape[a.axis]}")
    shape[a.axis] = a.size
    return [tuple(shape)]


def grad_reference(a: ConcatGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    index = [slice(None)] * arrays[0].ndim
    index[a.axis] = slice(a.begin, a.begin + a.size)
    return [np.ascontiguousarray(arrays[0][tuple(index)], np.float32)]


GRAD = OpDef("concat_grad", ConcatGradAttrs, grad_shapes, grad_reference, no_macs, bound=same_bound)
OPS = (OP, GRAD)
