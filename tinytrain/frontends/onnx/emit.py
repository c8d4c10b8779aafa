"""Emission of integer IR ops for the ONNX frontends, and the lazy float computations they come from.

``IRBuilder`` creates IR tensors and nodes (an op's handler names its op and attrs; the converter's own nodes are
requantize, reshape, pad and the clamp) with the rounding choices of requant.py, materializes a :class:`Pending`
float computation once a QuantizeLinear fixes its output quantization, and re-opens an emitted layer to fuse a
following clamp or constant bias add into it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from tinytrain.builder import GraphBuilder
from tinytrain.frontends.onnx.constants import ConstantReader, QConst
from tinytrain.frontends.onnx.requant import BIAS_REL_TOL, clamp_range, requantize_requant, round_half_even
from tinytrain.frontends.onnx.values import Act, Pending, ir_shape, onnx_shape, reshape_keeps_order, same_quant
from tinytrain.ir import DType, Node, QuantParams, Role
from tinytrain.ops import get_op
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.pad import PadAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.ops.reshape import ReshapeAttrs


class IRBuilder(ConstantReader, GraphBuilder):
    """The IR tensors and nodes built from an ONNX model (the constant reader supplies its name and errors). Tensor
    and node names share one namespace with the model's own value names (``fresh``), made unique by ``_k``."""

    def __init__(self, model: onnx.ModelProto, name: str):
        ConstantReader.__init__(self, model, name)
        GraphBuilder.__init__(self, name=name, separator="_")
        self._used_names: set[str] = set()
        self._made: dict[str, Pending] = {}  # IR output -> the pending that emitted it (a layer that reopens)

    # ----- names and IR construction
    def fresh(self, hint: str) -> str:
        name = self.unique(hint or "t", self._used_names)
        self._used_names.add(name)
        return name

    def add_tensor(self, hint: str, shape, dtype: DType, role: Role, quant: QuantParams | None = None,
                   data: np.ndarray | None = None) -> str:
        return super().add_tensor(self.fresh(hint), shape, dtype, role, quant, data)

    def add_node(self, op: str, hint: str, inputs: list[str], out_hint: str, out_quant: QuantParams, attrs: Any,
                 label: str) -> str:
        opdef = get_op(op)
        ins = [self.tensors[i] if i else None for i in inputs]
        try:
            (shape,) = opdef.infer_shapes(attrs, ins)
        except ValueError as e:
            raise self.unsupported(f"{label}: {e}") from None
        out = self.add_tensor(out_hint, shape, DType.INT8, Role.ACTIVATION, out_quant)
        self.nodes.append(Node(self.fresh("node:" + (hint or op)), op, tuple(inputs), (out,), attrs))
        return out

    # ----- emission of IR ops (shared by QDQ and QOperator)
    def weight_tensor(self, qc: QConst, data: np.ndarray, out_axis: int, label: str) -> str:
        """An IR int8 weight tensor (C_out first) from a QConst whose channel axis is ``out_axis``."""
        if qc.dtype not in ("int8", "uint8"):
            raise self.unsupported(f"{label}: weight '{qc.name}' is {qc.dtype}; tinytrain supports int8 (or uint8) weights "
                                   f"(quantize with weight_type=QuantType.QInt8)")
        if qc.axis is not None and qc.axis != out_axis:
            raise self.unsupported(f"{label}: weight '{qc.name}' is quantized along axis {qc.axis}, not its output-channel "
                                   f"axis {out_axis}; quantize weights per output channel (per_channel=True) or per tensor")
        n_out = data.shape[0]
        scale = qc.scale if qc.scale.size == n_out else np.full(n_out, qc.scale[0])
        zp = qc.zero_point if qc.zero_point.size == n_out else np.full(n_out, qc.zero_point[0])
        if qc.dtype == "uint8":
            data = (data.astype(np.int16) - 128).astype(np.int8)
            zp = zp - 128
        quant = QuantParams(tuple(float(s) for s in scale), tuple(int(z) for z in zp), 0)
        return self.add_tensor(qc.name, data.shape, DType.INT8, Role.WEIGHT, quant, np.ascontiguousarray(data.astype(np.int8)))

    def bias_int32(self, bias, s_x: float, s_w: np.ndarray, label: str) -> np.ndarray | None:
        """An int32 bias with scale s_x*s_w[c] from a QConst (DQ'd int32), a float array or None."""
        if bias is None:
            return None
        target = s_x * s_w
        if isinstance(bias, QConst):
            if bias.dtype != "int32":
                real = (bias.data.astype(np.float64).ravel() - bias.zero_point) * bias.scale
            else:
                data = bias.data.astype(np.int64).ravel()
                if data.size != target.size:
                    raise self.malformed(f"{label}: bias '{bias.name}' has {data.size} values for {target.size} channels")
                if (bias.zero_point == 0).all() and np.all(np.abs(bias.scale - target) <= BIAS_REL_TOL * target):
                    return data.astype(np.int32)
                real = (data - bias.zero_point) * bias.scale
        else:
            real = np.asarray(bias, np.float64).ravel()
        if real.size == 1 and target.size > 1:
            real = np.full(target.size, real[0])
        if real.size != target.size:
            raise self.malformed(f"{label}: bias has {real.size} values for {target.size} channels")
        q = round_half_even(real / target)
        return np.clip(q, -(1 << 31), (1 << 31) - 1).astype(np.int32)

    def bias_tensor(self, bias: np.ndarray | None, s_x: float, s_w: tuple[float, ...], hint: str) -> list[str]:
        if bias is None:
            return []
        quant = QuantParams(tuple(s_x * s for s in s_w), tuple(0 for _ in s_w), 0)
        return [self.add_tensor(hint, bias.shape, DType.INT32, Role.BIAS, quant, bias.astype(np.int32))]

    def emit_requantize(self, x_ir: str, yq: QuantParams, out_hint: str, label: str) -> str:
        xq = self.tensors[x_ir].quant
        return self.add_node("requantize", label, [x_ir], out_hint, yq, RequantizeAttrs(requantize_requant(xq.s, yq.s)),
                             label)

    def emit_reshape(self, x_ir: str, new_onnx_shape: tuple[int, ...], out_hint: str, label: str) -> str:
        src = onnx_shape(self.tensors[x_ir].shape)
        if not reshape_keeps_order(src, new_onnx_shape):
            raise self.unsupported(f"{label}: reshaping {src} to {new_onnx_shape} changes the element order between "
                                   f"ONNX's NCHW and tinytrain's NHWC layout (only reshapes of 1x1 spatial maps are "
                                   f"supported); pool to 1x1 before flattening")
        target = ir_shape(new_onnx_shape)
        if target == self.tensors[x_ir].shape:
            return x_ir
        return self.add_node("reshape", label, [x_ir], out_hint, self.tensors[x_ir].quant, ReshapeAttrs(tuple(target[1:])),
                             label)

    def emit_clamp(self, x_ir: str, yq: QuantParams, lo, hi, out_hint: str, label: str) -> str:
        """Requantize to yq and clamp to the real range [lo, hi] (standalone Relu / Clip).

        Fused into the producing conv / fully-connected / add / mean when there is one; otherwise a
        requantize (if the quantization changes) and a 1x1 avg_pool2d used as a clamp.
        """
        p = self.reopen(x_ir, label)
        if p is not None:
            return self.materialize(p.clamped(lo, hi), yq, out_hint)
        xq = self.tensors[x_ir].quant
        cur = x_ir
        if not same_quant(xq, yq):
            cur = self.emit_requantize(cur, yq, out_hint + ("_rq" if (lo, hi) != (None, None) else ""), label)
        amin, amax = clamp_range(yq, lo, hi)
        if (amin, amax) == (-128, 127):
            return cur
        shape = self.tensors[cur].shape
        if len(shape) != 4:
            flat = self.add_node("reshape", label, [cur], out_hint + "_4d", yq, ReshapeAttrs((1, 1, int(np.prod(shape[1:])))),
                                 label)
            clamped = self.add_node("avg_pool2d", label, [flat], out_hint + "_clamped", yq,
                                    AvgPool2dAttrs((1, 1), (1, 1), (0, 0, 0, 0), amin, amax), label)
            return self.add_node("reshape", label, [clamped], out_hint, yq, ReshapeAttrs(tuple(shape[1:])), label)
        return self.add_node("avg_pool2d", label, [cur], out_hint, yq,
                             AvgPool2dAttrs((1, 1), (1, 1), (0, 0, 0, 0), amin, amax), label)

    def emit_pad(self, x_ir: str, pads: tuple[tuple[int, int], ...], out_hint: str, label: str) -> str:
        return self.add_node("pad", label, [x_ir], out_hint, self.tensors[x_ir].quant, PadAttrs(pads), label)

    # ----- pending float computations
    def materialize(self, p: Pending, yq: QuantParams, out_hint: str) -> str:
        """Emit a pending float computation with the output quantization yq; returns its IR output."""
        if p.op == "clamp":
            return self.emit_clamp(p.args["x"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "reshape":
            inner = self.materialize(p.args["inner"], yq, out_hint + "_pre")
            return self.emit_reshape(inner, p.shape, out_hint, p.source)
        out = p.emit(self, p, yq, out_hint)
        if p.reopens:
            self._made[out] = p
        return out

    def reopen(self, x_ir: str, label: str) -> Pending | None:
        """The layer that produced ``x_ir`` (one whose pending ``reopens``), as a Pending to re-emit, its clamp
        range the one its output's quantization and fused clamp give.

        Used to fuse a following clamp (standalone Relu/Clip) or constant bias add into the layer; the
        original node is dropped at the end if nothing else reads its output.
        """
        p = self._made.get(x_ir)
        if p is None:
            return None
        q = self.tensors[x_ir].quant
        a = next(n for n in reversed(self.nodes) if x_ir in n.outputs).attrs
        lo = None if a.act_min <= -128 else (a.act_min - q.zp) * q.s
        hi = None if a.act_max >= 127 else (a.act_max - q.zp) * q.s
        return replace(p, source=label, lo=lo, hi=hi)

    def pending_from_producer(self, act: Act, label: str) -> Pending | None:
        """Re-open the layer with a bias and without clamp that produced ``act`` (to fold a bias add)."""
        p = self.reopen(act.ir, label)
        if p is None or not p.has_bias or (p.lo, p.hi) != (None, None):
            return None
        return p

    def fold_bias(self, p: Pending, real: np.ndarray, label: str) -> Pending:
        """Add a constant (real values, broadcast over the layer's output) into a pending layer's bias."""
        n_out = p.shape[1]
        arr = np.asarray(real, np.float64)
        if arr.size == 1:
            vec = np.full(n_out, float(arr.ravel()[0]))
        else:
            squeezed = arr.reshape([d for d in arr.shape if d != 1] or [1])
            ok = squeezed.ndim == 1 and squeezed.size == n_out
            if ok and len(p.shape) == 4:
                # must broadcast along channels of NCHW: trailing dims (C,1,1) or (1,C,1,1)
                ok = arr.ndim >= 3 and arr.shape[-3] == n_out and arr.shape[-2:] == (1, 1)
            elif ok:
                ok = arr.shape[-1] == n_out
            if not ok:
                raise self.unsupported(f"{label}: adds a constant of shape {arr.shape} to an output of shape {p.shape}; "
                                       f"only per-channel bias constants can be added")
            vec = squeezed
        s_x = self.tensors[p.args["x"]].quant.s
        s_w = np.asarray(self.tensors[p.args["w"]].quant.scale)
        extra = round_half_even(vec / (s_x * s_w)).astype(np.int64)
        old = p.args["bias"]
        new = extra if old is None else old.astype(np.int64) + extra
        new = np.clip(new, -(1 << 31), (1 << 31) - 1).astype(np.int32)
        return replace(p, args={**p.args, "bias": new}, source=label)
