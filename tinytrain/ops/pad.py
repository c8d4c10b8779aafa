"""Zero-point padding of an int8 NHWC tensor (the quantized value of real 0).

Imports: TFLite PAD; ONNX Pad (mode constant, the value of real zero), of the spatial axes of an NCHW tensor or the
non-batch axes of another; exported as Pad.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, TfliteRead, no_macs, same_bound


@dataclass(frozen=True)
class PadAttrs:
    pads: tuple[tuple[int, int], ...]  # (before, after) for each non-batch dimension


def infer_shapes(a: PadAttrs, ins) -> list[tuple[int, ...]]:
    x = ins[0]
    if len(a.pads) != len(x.shape) - 1 or any(p < 0 for pair in a.pads for p in pair):
        raise ValueError(f"pad: paddings {a.pads} do not fit input {x.shape}")
    return [(x.shape[0],) + tuple(d + b + e for d, (b, e) in zip(x.shape[1:], a.pads))]


def reference(a: PadAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [np.pad(arrays[0], ((0, 0),) + a.pads, constant_values=outs[0].quant.zp)]



# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def _onnx_pads(cv, node, rank: int) -> list[int]:
    if cv.opset is not None and cv.opset < 11:
        pads = list(cv.attrs(node).get("pads", []))
    else:
        pads = [int(p) for p in cv.const(node, 1, "pads")]
    if len(node.input) > 3 and node.input[3]:
        axes = [int(x) + (rank if int(x) < 0 else 0) for x in cv.const(node, 3, "axes")]
        full = [0] * (2 * rank)
        for k, ax in enumerate(axes):
            full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise cv.malformed(f"{cv.label(node)}: {len(pads)} pads for a rank-{rank} tensor")
    if any(p < 0 for p in pads):
        raise cv.unsupported(f"{cv.label(node)}: negative pads {pads} (cropping) are not supported")
    return pads


def _check_real_zero(cv, node, act, is_float: bool) -> None:
    """The Pad must fill with the value of real zero (a float zero, or the integer input's zero point)."""
    cval = None
    if cv.opset is not None and cv.opset < 11:
        cval = cv.attrs(node).get("value", 0.0)
    elif len(node.input) > 2 and node.input[2]:
        cval = cv.const(node, 2, "constant_value").ravel()[0]
    if is_float:
        ok = cval is None or float(cval) == 0.0
    else:
        zp = act.quant.zp + (128 if act.dtype == "uint8" else 0) if act.quant is not None else 0
        ok = (cval is None and zp == 0) or (cval is not None and int(cval) == zp)
    if not ok:
        raise cv.unsupported(f"{cv.label(node)}: pads with {cval}, not with the value of real zero; only zero padding "
                             f"is supported")


def onnx_pad(cv, node) -> None:
    label = cv.label(node)
    a = cv.attrs(node)
    if a.get("mode", "constant") != "constant":
        raise cv.unsupported(f"{label}: mode {a['mode']!r} is not supported; only constant (zero) padding")
    act, is_float = cv.layout_act(node)
    rank = len(act.shape)
    pads = _onnx_pads(cv, node, rank)
    _check_real_zero(cv, node, act, is_float)
    if act.quant is None:
        raise cv.unsupported(f"{label}: the quantization of '{node.input[0]}' is unknown at this point")
    if rank == 4:
        if pads[0] or pads[1] or pads[4] or pads[5]:
            raise cv.unsupported(f"{label}: pads the batch or channel axis ({pads}); only spatial padding is supported")
        ir_pads = ((pads[2], pads[6]), (pads[3], pads[7]), (0, 0))
    else:
        if pads[0] or pads[rank]:
            raise cv.unsupported(f"{label}: pads the batch axis; only padding of the other axes is supported")
        ir_pads = tuple((pads[k], pads[k + rank]) for k in range(1, rank))
    cv.relayout(node, cv.emit_pad(act.ir, ir_pads, node.output[0], label), act, is_float)


def tflite_pad(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    pads = im.const_data(op.inputs[1], "PAD paddings", ("INT32", "INT64")).astype(np.int64)
    if pads.shape != (len(x.shape), 2) or (pads < 0).any():
        raise ModelError(f"operator {op.index} (PAD): paddings {pads.tolist()} do not fit input {list(x.shape)}")
    if pads[0].any():
        raise UnsupportedModelError(f"operator {op.index} (PAD) pads the batch dimension")
    if x.quant != out.quant:
        raise ModelError(f"operator {op.index} (PAD): input and output quantization differ")
    im.node(op, "pad", [x.name], [out.name], PadAttrs(tuple((int(a), int(b)) for a, b in pads[1:])))


def export(ex, n) -> None:
    pads = list(n.attrs.pads)
    if len(pads) == 3:  # IR (H, W, C) -> ONNX (C, H, W)
        pads = [pads[2], pads[0], pads[1]]
    begin, end = [0] + [p[0] for p in pads], [0] + [p[1] for p in pads]
    p = ex.init(f"{n.outputs[0]}_pads", np.array(begin + end, np.int64))
    ex.q(ex.node("Pad", [ex.dq(n.inputs[0], n.name), p], f"{n.outputs[0]}_float", n.name, mode="constant"),
         n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    pads = node.attrs.pads
    if len(pads) != 3:
        raise NotImplementedError("torch twin: pad of a tensor that is not NHWC")
    (top, bottom), (left, right), channels = pads
    if channels != (0, 0):
        raise NotImplementedError("torch twin: pad of the channel axis")
    return t.F.pad(xs[0], (left, right, top, bottom))


ONNX = {"Pad": onnx_pad}
TFLITE = {"PAD": TfliteRead(tflite_pad, required=2, constants=(1,))}
DOC = OpDoc("PAD", "Pad", "zero point fill", "crop", "nothing")


@dataclass(frozen=True)
class PadGradAttrs:
    """g_x = g_y with the padding cut away (``pads`` as in the forward pad)."""

    pads: tuple[tuple[int, int], ...]


def grad_shapes(a: PadGradAttrs, ins) -> list[tuple[int, ...]]:
    g = ins[0]
    shape = (g.shape[0],) + tuple(d - lo - hi for d, (lo, hi) in zip(g.shape[1:], a.pads, strict=True))
    if min(shape) <= 0:
        raise ValueError(f"pad_grad: cannot remove {a.pads} from {g.shape}")
    return [shape]


def grad_reference(a: PadGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0]
    index = (slice(None),) + tuple(slice(lo, d - hi) for d, (lo, hi) in zip(g.shape[1:], a.pads))
    return [np.ascontiguousarray(g[index], np.float32)]


def backward(b, node, out_grads) -> list[str | None]:
    if not b.needs_grad(node.inputs[0]):
        return [None]
    return [b.emit("pad_grad", [out_grads[0]], PadGradAttrs(node.attrs.pads), f"{node.name}.grad_input")[0]]


OP = OpDef("pad", PadAttrs, infer_shapes, reference, no_macs, backward=backward, export=export, twin=twin, doc=DOC)
GRAD = OpDef("pad_grad", PadGradAttrs, grad_shapes, grad_reference, no_macs, bound=same_bound)
OPS = (OP, GRAD)
