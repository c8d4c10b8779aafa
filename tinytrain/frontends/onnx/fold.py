"""Per-channel affine maps folded into the layer before them: ``BatchNormalization`` left after a quantized
convolution (NNCF's torch backend, onnxruntime on a model whose BatchNorm was not folded before quantization),
and ``Mul`` / ``Div`` / ``Add`` / ``Sub`` with a constant operand (ops/mul.py, ops/add.py call ``fold_affine``;
the BatchNormalization handler is batchnorm.py).

A layer with a bias and no clamp (Conv, Gemm, MatMul) computes y[c] = s_x * s_w[c] * (acc[c] + b[c]); then
g[c] * y[c] + h[c] is the same layer with

- the int8 weights kept, the weight scale s_w[c] * |g[c]| (rounded to float32, as every scale is) and the int32
  bias kept, both negated for a negative g[c] (refused where a weight is -128, whose negation is not int8, and for
  g[c] = 0, which has no scale);
- h[c] added to the bias as ``fold_bias`` does: rounded half to even to the new bias scale s_x * s_w[c] * |g[c]|,
  an error of at most half of it, far below one output LSB.

So the layer is requantized once, from its accumulator, where onnxruntime computes the float chain and quantizes it
(the Q after the BatchNormalization); the two agree but for values within float32 error of a rounding tie.
Anything else (a map after a clamp, on a value no foldable layer computed, not per channel) is refused, in one
line naming the node and what to do.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx

from tinytrain.frontends.onnx.layout import Permuted, nchw_constant
from tinytrain.frontends.onnx.parse import node_label
from tinytrain.frontends.onnx.values import FVal, Pending
from tinytrain.ir import DType, QuantParams, Role


class AffineFolds:
    """The folds, as methods of the ONNX reader (reader.py ``Reader``): ``cv.fold_affine(node, v, scale, shift)``."""

    def foldable(self, node: onnx.NodeProto, v, what: str) -> Pending:
        """The pending layer computing ``v`` (a float value) that a per-channel map can fold into, else refused."""
        label = node_label(node)
        if isinstance(v, FVal) and v.kind == "pending":
            p = v.pending
            if p.has_bias and (p.lo, p.hi) == (None, None):
                return p
            reason = "a clamp (Relu / Clip)" if p.has_bias else f"{p.source}, not a Conv / Gemm / MatMul"
            raise self.unsupported(f"{label} {what} the output of {reason}; tinytrain folds it only into the Conv / Gemm "
                                 f"right before it: move it before the activation, or fold it into the layer before "
                                 f"quantizing")
        if isinstance(v, FVal) and v.kind == "dq":
            p = self.pending_from_producer(v.act, label)
            if p is not None:
                return p
        raise self.unsupported(f"{label} {what} '{node.input[0]}', which no Conv / Gemm / MatMul right before it computes; "
                             f"fold it into the layer before quantizing (onnxruntime quant_pre_process does, or "
                             f"tinytrain quantize on the float model)")


    def channel_vector(self, p: Pending, arr: np.ndarray, label: str) -> np.ndarray:
        """A constant broadcast over the layer's output as one value per output channel, else refused."""
        n_out = p.shape[1]
        arr = np.asarray(arr, np.float64)
        if arr.size == 1:
            return np.full(n_out, float(arr.ravel()[0]))
        squeezed = arr.reshape([d for d in arr.shape if d != 1] or [1])
        ok = squeezed.ndim == 1 and squeezed.size == n_out
        if ok and len(p.shape) == 4:  # along the channels of NCHW: trailing dims (C, 1, 1)
            ok = arr.ndim >= 3 and arr.shape[-3] == n_out and arr.shape[-2:] == (1, 1)
        elif ok:
            ok = arr.shape[-1] == n_out
        if not ok:
            raise self.unsupported(f"{label}: a constant of shape {arr.shape} on an output of shape {p.shape}; only "
                                 f"per-channel (or scalar) constants fold into the layer")
        return squeezed


    def fold_scale(self, p: Pending, g: np.ndarray, label: str) -> Pending:
        """The pending layer times g[c] per output channel (module docstring)."""
        w = self.tensors[p.args["w"]]
        if np.any(g == 0) or not np.all(np.isfinite(g)):
            raise self.unsupported(f"{label} multiplies output channel {int(np.flatnonzero(~(np.isfinite(g) & (g != 0)))[0])} "
                                 f"by {g[~(np.isfinite(g) & (g != 0))][0]:g}; a zero or non-finite factor has no int8 "
                                 f"scale: remove the channel or fold the map before quantizing")
        neg = g < 0
        data = w.data.astype(np.int16)
        flip = neg.reshape((-1,) + (1,) * (data.ndim - 1))
        if np.any((data == -128) & flip):
            raise self.unsupported(f"{label} negates output channel {int(np.flatnonzero(neg)[0])} of {p.source}, whose int8 "
                                 f"weights hold -128 (not negatable in int8); quantize weights to [-127, 127] "
                                 f"(symmetric, narrow range) or fold the map before quantizing")
        scale = np.asarray(w.quant.scale, np.float64)
        new_scale = np.abs(g) * scale
        new_scale = np.asarray(new_scale, np.float32).astype(np.float64)
        zp = np.asarray(w.quant.zero_point, np.int64)
        zp = np.where(neg, -zp, zp) if zp.size == neg.size else zp
        quant = QuantParams(tuple(float(s) for s in new_scale), tuple(int(z) for z in np.resize(zp, neg.size)), 0)
        w_ir = self.add_tensor(w.name, w.shape, DType.INT8, Role.WEIGHT, quant,
                             np.where(flip, -data, data).astype(np.int8))
        bias = p.args["bias"]
        if bias is not None:
            bias = np.where(neg, -bias.astype(np.int64), bias).astype(np.int32)
        return replace(p, args={**p.args, "w": w_ir, "bias": bias}, source=label)


    def fold_affine(self, node: onnx.NodeProto, v, scale=None, shift=None, what: str = "maps",
                    per_channel: bool = False) -> None:
        """Record output 0 as ``scale * v + shift`` (constants broadcast as ONNX does, or with ``per_channel`` one
        value per channel, BatchNormalization's; None: 1 / 0), folded."""
        label = node_label(node)
        if isinstance(v, Permuted):  # an NHWC view (layout.py): fold into the NCHW value, keep the view
            self.fold_affine(node, v.inner, None if scale is None else nchw_constant(scale),
                             None if shift is None else nchw_constant(shift), what, per_channel)
            self.values[node.output[0]] = Permuted(self.values[node.output[0]], v.source)
            return
        p = self.foldable(node, v, what)

        def vector(c):
            c = np.asarray(c, np.float64)
            return c.reshape((-1,) + (1,) * (len(p.shape) - 2)) if per_channel else c

        if scale is not None:
            p = self.fold_scale(p, self.channel_vector(p, vector(scale), label), label)
        if shift is not None:
            vec = self.channel_vector(p, vector(shift), label)
            p = self.fold_bias(p, vec.reshape((-1,) + (1,) * (len(p.shape) - 2)), label)
        self.values[node.output[0]] = self.pending_value(replace(p, source=label))

    def constant_operand(self, node: onnx.NodeProto) -> tuple[int, np.ndarray] | None:
        """(index, real values) of a binary op's one constant operand (a float constant or a dequantized one),
        None when neither is constant."""
        for k in (0, 1):
            v = self.value(node, k)
            if isinstance(v, FVal) and v.kind in ("qconst", "fconst") and not self._is_constant(node, 1 - k):
                return k, self.real(v.qconst) if v.kind == "qconst" else v.array
        return None

    def _is_constant(self, node: onnx.NodeProto, k: int) -> bool:
        v = self.value(node, k)
        return isinstance(v, FVal) and v.kind in ("qconst", "fconst")

