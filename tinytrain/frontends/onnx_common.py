"""Shared machinery of the ONNX frontends (QDQ in onnx_qdq.py, QOperator in onnx_qop.py).

A model is converted by walking its nodes in topological order. Every ONNX value is mapped to one of

- :class:`Act`: an integer (int8/uint8) activation of the ONNX graph, backed by an IR int8 tensor
  (ONNX rank-4 tensors are NCHW, their IR tensors NHWC; other ranks keep their layout);
- :class:`FVal`: a float value between a DequantizeLinear and a QuantizeLinear. It is lazy: a
  float op on dequantized inputs (Conv, Gemm, Add, ReduceMean, ...) becomes a :class:`Pending`
  computation that is emitted as an integer IR node only when a QuantizeLinear gives it an output
  scale and zero point (``Relu``/``Clip`` on the way tighten its clamp range, a reshape is applied
  after it). This one mechanism covers QDQ patterns (DQ -> op -> Q) and the float islands that
  onnxruntime leaves in QOperator models (DQ -> ReduceMean -> Reshape -> Q).
- :class:`SoftmaxOut`: the result of a trailing Softmax, see below.

Arithmetic (design.md section 3): weights int8 per output channel, biases int32 with scale
s_x*s_w[c], requantization with the TFLite fixed-point multiplier of s_x*s_w[c]/s_y computed in
double. onnxruntime computes the real value in float32 and rounds it once, half to even; to be as
close to that as integer arithmetic allows, every ONNX import rounds once:

- conv2d / fully_connected / requantize / add / mean use single-rounding requantization
  (``Requant.single_rounding``: TFLITE_SINGLE_ROUNDING, = CMSIS-NN CMSIS_NN_USE_SINGLE_ROUNDING),
  not TFLite's default double rounding (SRDHM then a rounding shift), which was off by one LSB on
  up to 0.6 % of a convolution's values and, through deep networks, on up to 85 % of the outputs;
- mean (GlobalAveragePool, ReduceMean, a global AveragePool): the multiplier is that of
  s_in / (count * s_out) computed in double (``MeanAttrs.count_folded``), not tflite-micro's
  truncated integer division of the s_in / s_out multiplier by count;
- add: TFLite's three requantizations, each rounded once; the two input rescales keep 20 extra
  bits, so in effect the real sum is rounded once;
- AveragePool: with the same quantization in and out the centered average is rounded half to even
  (``round_half_even``); with another output quantization (QLinearAveragePool) one multiplier of
  s_in / (c * s_out) per valid-cell count c rounds the real average once (``AvgPool2dAttrs.output``);
- clamp bounds of a fused Relu / Clip are rounded half to even, as QuantizeLinear does.

What remains (measured in tests/test_onnx_frontend.py): a value whose real result lies within
onnxruntime's float32 error (about 1e-5 LSB) of a rounding boundary can round the other way (ours
is then the exact rounding), and so can an exact tie (ours rounds toward +infinity, onnxruntime to
even). Exact ties are common only in same-scale average pools, which round them to even, but there
onnxruntime's float32 sum of dequantized values breaks some ties the other way (3 % of the values of
the pools model in tests/onnx_models.py). The 31-bit multipliers and the add's 20 extra bits move a
real value by far less than onnxruntime's float error. Op by op that is a few
values per million; end to end a flip in an early layer of a deep network reaches the logits of some
images (onnxruntime's own fused-integer and float executions of one QDQ model disagree likewise).
The MatMul -> Add fold below is the one structural difference.

Conventions and documented deviations:

- uint8 tensors become int8 (q - 128, zero point - 128); a uint8 graph input sets
  ``Graph.uint8_io``. uint8 weights keep their (shifted) zero point: conv2d and fully_connected
  compute (w - zw).
- The IR input is the int8 tensor after the model's first QuantizeLinear (or the model's int8/uint8
  input itself); the IR output is the integer tensor before the final DequantizeLinear.
- A trailing Softmax / LogSoftmax (float, QDQ-quantized, or com.microsoft QLinearSoftmax) is
  dropped: the IR output is then the int8 logits feeding it. Training applies softmax
  cross-entropy to the dequantized logits itself (design.md section 3) and the arg-max is unchanged.
- A DQ bias whose scale differs from s_x*s_w[c] by more than float rounding (relative 1e-6) is
  re-rounded to s_x*s_w[c] (round half to even); a float bias is quantized the same way.
- Adding a constant to the output of a Conv/Gemm/MatMul (MatMul -> Add in QDQ, QLinearMatMul ->
  QLinearAdd in QOperator) is folded into that layer's int32 bias and the layer is re-emitted
  with the Add's output quantization: one rounding instead of onnxruntime's two (it rounds and
  saturates the MatMul output to its own quantization first), so the result may differ from
  onnxruntime's by one LSB on many values (about 30 % in tests/onnx_models.py's pools model), by up
  to two in principle; ours is the more exact. Reproducing it would need an int8 "add a constant"
  op, which the IR does not have.
- AveragePool is an IR avg_pool2d (with its own output quantization when it differs from the
  input's) unless the window covers the whole unpadded input, where it is an IR mean. A
  standalone Relu/Clip that the output quantization does not already imply is a requantize (if the
  quantization changes) and an IR avg_pool2d with a 1x1 window used as a clamp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tinytrain.errors import ModelError, TinyTrainError, UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor, verify
from tinytrain.ops import get_op
from tinytrain.ops.add import AddAttrs
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.conv2d import Conv2dAttrs, output_hw
from tinytrain.ops.fully_connected import FullyConnectedAttrs
from tinytrain.ops.mean import MeanAttrs
from tinytrain.ops.pad import PadAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.quant import Requant, activation_range

MIN_OPSET = 10
INT_ACT_TYPES = {TensorProto.INT8: "int8", TensorProto.UINT8: "uint8"}
BIAS_REL_TOL = 1e-6
_DUMMY_REQUANT = Requant((1 << 30,), (0,))


def elem_type_name(t: int) -> str:
    try:
        return TensorProto.DataType.Name(t).lower()
    except ValueError:
        return f"type {t}"


def one_line(msg: str) -> str:
    return " ".join(str(msg).split())


# --------------------------------------------------------------------------- values


@dataclass
class Act:
    """An integer activation of the ONNX graph and the IR int8 tensor holding it."""

    ir: str
    shape: tuple[int, ...]  # ONNX shape (batch 1), NCHW for rank 4
    dtype: str  # ONNX element type: "int8" or "uint8"
    quant: QuantParams | None = None  # IR (int8) quantization; None only for an int graph input not yet used


@dataclass
class QConst:
    """A quantized constant as stored in the file (weights, biases)."""

    name: str
    data: np.ndarray
    dtype: str  # "int8", "uint8", "int32"
    scale: np.ndarray  # float64 holding float32 values, one per channel along axis (or one)
    zero_point: np.ndarray  # int64
    axis: int | None  # None: per tensor


@dataclass
class Pending:
    """A float computation on dequantized inputs waiting for the QuantizeLinear that fixes its output."""

    op: str  # conv | fc | add | mean | avgpool | clamp | reshape
    shape: tuple[int, ...]  # ONNX shape of the float result
    args: dict[str, Any]
    source: str  # ONNX node (for messages)
    lo: float | None = None  # real clamp range (fused Relu / Clip)
    hi: float | None = None

    def clamped(self, lo: float | None, hi: float | None) -> Pending:
        new_lo = lo if self.lo is None else (self.lo if lo is None else max(lo, self.lo))
        new_hi = hi if self.hi is None else (self.hi if hi is None else min(hi, self.hi))
        if self.op == "reshape":
            return replace(self, args={**self.args, "inner": self.args["inner"].clamped(lo, hi)})
        return replace(self, lo=new_lo, hi=new_hi)


@dataclass
class FVal:
    """A float value of the ONNX graph."""

    kind: str  # input | dq | qconst | fconst | pending | softmax
    act: Act | None = None
    qconst: QConst | None = None
    array: np.ndarray | None = None
    pending: Pending | None = None
    source: str = ""


@dataclass
class SoftmaxOut:
    """The quantized output of a Softmax: only allowed to reach the graph output (then dropped)."""

    act: Act
    source: str


# --------------------------------------------------------------------------- layout helpers


def ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """ONNX shape -> IR shape (NCHW -> NHWC for rank 4)."""
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    return tuple(shape)


def onnx_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) == 4:
        n, h, w, c = shape
        return (n, c, h, w)
    return tuple(shape)


def _to_ir_layout(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def reshape_keeps_order(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether an ONNX reshape src -> dst is a plain byte-preserving reshape of the IR tensors."""
    n = int(np.prod(src))
    if len(src) != 4 and len(dst) != 4:
        return True
    idx = np.arange(n, dtype=np.int64).reshape(src)
    return np.array_equal(_to_ir_layout(idx).ravel(), _to_ir_layout(idx.reshape(dst)).ravel())


def attrs_of(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def node_label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} (output '{node.output[0]}')"


def same_quant(a: QuantParams, b: QuantParams) -> bool:
    return np.float32(a.s) == np.float32(b.s) and a.zp == b.zp


@dataclass(frozen=True)
class ConvGeom:
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int


def resolve_padding(attrs: dict, in_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                    dilation: tuple[int, int], label: str) -> tuple[int, int, int, int]:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise UnsupportedModelError(f"{label}: pads {pads} are not 2-D; only 2-D (NCHW) windows are supported")
        if any(p < 0 for p in pads):
            raise UnsupportedModelError(f"{label}: negative pads {pads} are not supported; re-export without cropping")
        return (pads[0], pads[1], pads[2], pads[3])
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(2):
            o = -(-in_hw[i] // stride[i])
            total = max((o - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in_hw[i], 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return (out[0][0], out[1][0], out[0][1], out[1][1])
    raise UnsupportedModelError(f"{label}: auto_pad={auto_pad!r} is not supported (use NOTSET, VALID, SAME_UPPER or SAME_LOWER)")


def round_half_even(x: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(x, np.float64))


# --------------------------------------------------------------------------- the converter

Handler = Callable[["Converter", onnx.NodeProto], None]


class Converter:
    """Builds the IR graph from an ONNX model; the format modules supply the op handlers."""

    def __init__(self, model: onnx.ModelProto, name: str, sha256: str, handlers: dict[str, Handler], fmt: str):
        self.model = model
        self.graph_proto = model.graph
        self.name = name
        self.sha256 = sha256
        self.handlers = handlers
        self.fmt = fmt
        self.opset = default_opset(model)
        self.inits: dict[str, np.ndarray | None] = {}
        self.init_types: dict[str, int] = {}
        self.values: dict[str, Act | FVal | SoftmaxOut] = {}
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self._used_names: set[str] = set()
        self.input_act: Act | None = None
        self.ir_names: dict[str, str] = {}  # after run(): ONNX integer tensor -> IR tensor holding it
        self.input_name = ""

    # ----- errors
    def unsupported(self, msg: str) -> UnsupportedModelError:
        return UnsupportedModelError(one_line(f"{self.name}: {msg}"))

    def malformed(self, msg: str) -> ModelError:
        return ModelError(one_line(f"{self.name}: {msg}"))

    # ----- names and IR construction
    def fresh(self, hint: str) -> str:
        base = hint or "t"
        name, k = base, 1
        while name in self._used_names:
            name, k = f"{base}_{k}", k + 1
        self._used_names.add(name)
        return name

    def add_tensor(self, hint: str, shape, dtype: DType, role: Role, quant: QuantParams | None,
                   data: np.ndarray | None = None) -> str:
        name = self.fresh(hint)
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype, role, quant, data)
        return name

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

    # ----- loading
    def load_constants(self) -> None:
        for init in self.graph_proto.initializer:
            self._store_const(init.name, init)
        for init in self.graph_proto.sparse_initializer:
            raise self.unsupported(f"sparse initializer '{init.values.name}' is not supported; densify the model")
        for node in self.graph_proto.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                a = attrs_of(node)
                if "value" in a:
                    self._store_const(node.output[0], a["value"])
                elif "value_float" in a:
                    self.inits[node.output[0]] = np.array(a["value_float"], np.float32)
                    self.init_types[node.output[0]] = TensorProto.FLOAT
                elif "value_floats" in a:
                    self.inits[node.output[0]] = np.array(a["value_floats"], np.float32)
                    self.init_types[node.output[0]] = TensorProto.FLOAT
                elif "value_int" in a:
                    self.inits[node.output[0]] = np.array(a["value_int"], np.int64)
                    self.init_types[node.output[0]] = TensorProto.INT64
                elif "value_ints" in a:
                    self.inits[node.output[0]] = np.array(a["value_ints"], np.int64)
                    self.init_types[node.output[0]] = TensorProto.INT64
                else:
                    raise self.unsupported(f"{node_label(node)} has no tensor value; only tensor constants are supported")

    def _store_const(self, name: str, tp: TensorProto) -> None:
        self.init_types[name] = tp.data_type
        if tp.data_location == TensorProto.EXTERNAL:
            raise self.unsupported(f"initializer '{name}' uses external data; save the model with its weights inside")
        if tp.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32,
                            TensorProto.INT64, TensorProto.INT16, TensorProto.UINT16, TensorProto.FLOAT16, TensorProto.BOOL):
            self.inits[name] = numpy_helper.to_array(tp)
        else:
            self.inits[name] = None  # a type we never compute with (float8, int4, ...): reported where it is used

    def const(self, node: onnx.NodeProto, idx: int, what: str, optional: bool = False) -> np.ndarray | None:
        """The constant at node input idx (an initializer or a Constant node's value)."""
        if idx >= len(node.input) or not node.input[idx]:
            if optional:
                return None
            raise self.malformed(f"{node_label(node)} has no {what} input")
        name = node.input[idx]
        if name not in self.inits:
            raise self.malformed(f"{node_label(node)}: {what} '{name}' is not an initializer (constant); "
                                 f"tinytrain needs quantization parameters and weights stored in the model")
        arr = self.inits[name]
        if arr is None:
            raise self.unsupported(f"{node_label(node)}: {what} '{name}' has element type "
                                   f"{elem_type_name(self.init_types[name])}, which tinytrain does not support")
        return arr

    def is_const(self, name: str) -> bool:
        return name in self.inits

    def value(self, node: onnx.NodeProto, idx: int):
        name = node.input[idx]
        if name in self.values:
            return self.values[name]
        if name in self.inits:
            arr = self.inits[name]
            if arr is None:
                raise self.unsupported(f"{node_label(node)}: constant '{name}' has element type "
                                       f"{elem_type_name(self.init_types[name])}, which tinytrain does not support")
            if arr.dtype.kind == "f":
                return FVal("fconst", array=arr.astype(np.float64), source=name)
            return arr
        raise self.malformed(f"{node_label(node)} reads '{name}', which nothing produces")

    # ----- quantization parameters
    def scale_of(self, node: onnx.NodeProto, idx: int, what: str) -> np.ndarray:
        s = self.const(node, idx, what)
        if s.dtype.kind != "f":
            raise self.malformed(f"{node_label(node)}: {what} '{node.input[idx]}' is {s.dtype}, not a float")
        if s.dtype == np.float16:
            raise self.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is float16; "
                                   f"tinytrain supports float32 scales (re-quantize with float32 scales)")
        s = np.asarray(s, np.float32).astype(np.float64)
        bad = ~(np.isfinite(s) & (s > 0))
        if bad.any():
            raise self.malformed(f"{node_label(node)}: {what} '{node.input[idx]}' contains {float(s[bad][0]):g}; "
                                 f"quantization scales must be positive and finite (re-quantize the model)")
        return s.ravel()

    def zero_point_of(self, node: onnx.NodeProto, idx: int, what: str, default_type: str) -> tuple[np.ndarray, str]:
        if idx < len(node.input) and node.input[idx]:
            name = node.input[idx]
            t = self.init_types.get(name)
            if name in self.inits and t not in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32):
                raise self.unsupported(f"{node_label(node)}: {what} '{name}' is {elem_type_name(t)}; tinytrain supports "
                                       f"int8 and uint8 tensors (quantize with QuantType.QInt8 or QUInt8)")
            zp = self.const(node, idx, what)
            return np.asarray(zp).astype(np.int64).ravel(), str(np.asarray(zp).dtype)
        return np.zeros(1, np.int64), default_type

    def act_quant(self, node: onnx.NodeProto, s_idx: int, zp_idx: int, what: str,
                  default_type: str = "uint8") -> tuple[QuantParams, str]:
        """Per-tensor activation quantization -> (IR int8 QuantParams, ONNX dtype)."""
        s = self.scale_of(node, s_idx, f"{what} scale")
        zp, dtype = self.zero_point_of(node, zp_idx, f"{what} zero point", default_type)
        if dtype not in ("int8", "uint8"):
            raise self.unsupported(f"{node_label(node)}: {what} is {dtype}; tinytrain supports int8 and uint8 activations "
                                   f"(quantize with activation_type=QuantType.QInt8 or QUInt8)")
        if s.size != 1 or zp.size != 1:
            raise self.unsupported(f"{node_label(node)}: {what} is quantized per channel ({s.size} scales); "
                                   f"activations must be quantized per tensor")
        z = int(zp[0]) - (128 if dtype == "uint8" else 0)
        return QuantParams.per_tensor(float(s[0]), z), dtype

    def qconst(self, node: onnx.NodeProto, data_idx: int, s_idx: int, zp_idx: int, axis: int | None,
               what: str) -> QConst:
        data = self.const(node, data_idx, what)
        name = node.input[data_idx]
        dt = self.init_types[name]
        if dt not in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32):
            raise self.unsupported(f"{node_label(node)}: {what} '{name}' is {elem_type_name(dt)}; tinytrain supports "
                                   f"int8 (or uint8) weights and int32 biases (quantize with weight_type=QuantType.QInt8)")
        scale = self.scale_of(node, s_idx, f"{what} scale")
        zp, _ = self.zero_point_of(node, zp_idx, f"{what} zero point", str(data.dtype))
        if zp.size not in (1, scale.size):
            raise self.malformed(f"{node_label(node)}: {what} has {scale.size} scales but {zp.size} zero points")
        if scale.size == 1:
            ax = None
        else:
            ax = 1 if axis is None else axis
            if ax < 0:
                ax += data.ndim
            if not 0 <= ax < data.ndim or data.shape[ax] != scale.size:
                dim = data.shape[ax] if 0 <= ax < data.ndim else "out of range"
                raise self.malformed(f"{node_label(node)}: per-axis {what} scale has {scale.size} values but axis {ax} of "
                                     f"'{name}' {tuple(data.shape)} has {dim}; the scale must have one value per channel")
        if zp.size != scale.size:
            zp = np.full(scale.size, zp[0], np.int64)
        return QConst(name, data, str(data.dtype), scale, zp, ax)

    def qconst_raw_int32(self, node: onnx.NodeProto, idx: int, what: str) -> np.ndarray:
        """An int32 bias whose scale is implied (QLinearConv / QGemm: x_scale * w_scale[c], zero point 0)."""
        data = self.const(node, idx, what)
        if self.init_types[node.input[idx]] != TensorProto.INT32:
            raise self.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is "
                                   f"{elem_type_name(self.init_types[node.input[idx]])}; tinytrain supports int32 biases")
        return np.asarray(data, np.int32).ravel()

    # ----- activations
    def act_in(self, node: onnx.NodeProto, idx: int, quant: QuantParams | None = None, dtype: str | None = None) -> Act:
        """The integer activation at input idx; ``quant`` (from the consuming op) must match it."""
        v = self.value(node, idx)
        if isinstance(v, SoftmaxOut):
            raise self.unsupported(f"{node_label(node)} consumes the output of Softmax {v.source}; "
                                   f"Softmax is only supported as the model's last op")
        if not isinstance(v, Act):
            raise self.unsupported(f"{node_label(node)}: input '{node.input[idx]}' is not an int8/uint8 activation "
                                   f"(a constant or a float value); this pattern is not supported")
        if quant is not None:
            self.bind_quant(v, quant, dtype, node)
        return v

    def bind_quant(self, act: Act, quant: QuantParams, dtype: str | None, node: onnx.NodeProto) -> None:
        if dtype is not None and dtype != act.dtype:
            raise self.malformed(f"{node_label(node)} reads '{act.ir}' as {dtype} but it is {act.dtype}")
        if act.quant is None:
            act.quant = quant
            self.tensors[act.ir] = Tensor(act.ir, ir_shape(act.shape), DType.INT8, Role.INPUT, quant)
        elif not same_quant(act.quant, quant):
            raise self.unsupported(f"{node_label(node)} reads '{act.ir}' with scale {quant.s:.8g}, zero point {quant.zp} "
                                   f"but it was produced with scale {act.quant.s:.8g}, zero point {act.quant.zp}; "
                                   f"insert an explicit requantization (QuantizeLinear) between them")

    def new_act(self, ir: str, ir_shape_: tuple[int, ...], dtype: str) -> Act:
        return Act(ir, onnx_shape(ir_shape_), dtype, self.tensors[ir].quant)

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

    def _bias_tensor(self, bias: np.ndarray | None, s_x: float, s_w: tuple[float, ...], hint: str) -> list[str]:
        if bias is None:
            return []
        quant = QuantParams(tuple(s_x * s for s in s_w), tuple(0 for _ in s_w), 0)
        return [self.add_tensor(hint, bias.shape, DType.INT32, Role.BIAS, quant, bias.astype(np.int32))]

    def emit_conv(self, x_ir: str, w_ir: str, bias: np.ndarray | None, geom: ConvGeom, yq: QuantParams,
                  lo: float | None, hi: float | None, out_hint: str, label: str) -> str:
        s_x = self.tensors[x_ir].quant.s
        s_w = self.tensors[w_ir].quant.scale
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
        attrs = Conv2dAttrs(geom.stride, geom.padding, Requant.from_scales([s_x * s / yq.s for s in s_w], True),
                            geom.dilation, geom.groups, amin, amax)
        ins = [x_ir, w_ir] + self._bias_tensor(bias, s_x, s_w, w_ir.removesuffix("_quantized") + "_bias")
        return self.add_node("conv2d", label, ins, out_hint, yq, attrs, label)

    def emit_fc(self, x_ir: str, w_ir: str, bias: np.ndarray | None, yq: QuantParams, lo, hi, out_hint: str,
                label: str) -> str:
        s_x = self.tensors[x_ir].quant.s
        s_w = self.tensors[w_ir].quant.scale
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
        attrs = FullyConnectedAttrs(Requant.from_scales([s_x * s / yq.s for s in s_w], True), amin, amax)
        ins = [x_ir, w_ir] + self._bias_tensor(bias, s_x, s_w, w_ir.removesuffix("_quantized") + "_bias")
        return self.add_node("fully_connected", label, ins, out_hint, yq, attrs, label)

    def emit_add(self, a_ir: str, b_ir: str, yq: QuantParams, lo, hi, out_hint: str, label: str) -> str:
        ta, tb = self.tensors[a_ir], self.tensors[b_ir]
        if ta.shape != tb.shape:
            raise self.unsupported(f"{label}: adds shapes {onnx_shape(ta.shape)} and {onnx_shape(tb.shape)}; "
                                   f"broadcasting Add is not supported (only residual adds of equal shapes)")
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
        attrs = AddAttrs.from_scales(ta.quant.s, tb.quant.s, yq.s, amin, amax, single_rounding=True)
        return self.add_node("add", label, [a_ir, b_ir], out_hint, yq, attrs, label)

    def emit_mean(self, x_ir: str, keepdims: bool, yq: QuantParams, lo, hi, out_hint: str, label: str) -> str:
        xt = self.tensors[x_ir]
        count = xt.shape[1] * xt.shape[2]
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
        attrs = MeanAttrs(Requant.from_scales([xt.quant.s / (count * yq.s)], True), keepdims, amin, amax,
                          count_folded=True)
        return self.add_node("mean", label, [x_ir], out_hint, yq, attrs, label)

    def emit_requantize(self, x_ir: str, yq: QuantParams, out_hint: str, label: str) -> str:
        xq = self.tensors[x_ir].quant
        return self.add_node("requantize", label, [x_ir], out_hint, yq, RequantizeAttrs(Requant.from_scales([xq.s / yq.s], True)),
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

    def emit_avgpool(self, x_ir: str, kernel, stride, padding, yq: QuantParams, lo, hi, out_hint: str,
                     label: str) -> str:
        xt = self.tensors[x_ir]
        _, h, w, _ = xt.shape
        if tuple(kernel) == (h, w) and tuple(padding) == (0, 0, 0, 0):
            return self.emit_mean(x_ir, True, yq, lo, hi, out_hint, label)
        xq = xt.quant
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
        if same_quant(xq, yq):
            attrs = AvgPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding), amin, amax, round_half_even=True)
            return self.add_node("avg_pool2d", label, [x_ir], out_hint, xq, attrs, label)
        # another output quantization (QLinearAveragePool): one rounding of s_in * sum(x - zx) / (count * s_out)
        cells = int(kernel[0]) * int(kernel[1])
        output = Requant.from_scales([xq.s / (c * yq.s) for c in range(1, cells + 1)], True)
        attrs = AvgPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding), amin, amax, output=output)
        return self.add_node("avg_pool2d", label, [x_ir], out_hint, yq, attrs, label)

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
        amin, amax = activation_range(yq.zp, yq.s, lo, hi, half_even=True)
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
        a = p.args
        if p.op == "conv":
            return self.emit_conv(a["x"], a["w"], a["bias"], a["geom"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "fc":
            return self.emit_fc(a["x"], a["w"], a["bias"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "add":
            return self.emit_add(a["a"], a["b"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "mean":
            return self.emit_mean(a["x"], a["keepdims"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "avgpool":
            return self.emit_avgpool(a["x"], a["kernel"], a["stride"], a["padding"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "clamp":
            return self.emit_clamp(a["x"], yq, p.lo, p.hi, out_hint, p.source)
        if p.op == "reshape":
            inner = self.materialize(a["inner"], yq, out_hint + "_pre")
            return self.emit_reshape(inner, p.shape, out_hint, p.source)
        raise AssertionError(p.op)

    def reopen(self, x_ir: str, label: str) -> Pending | None:
        """The conv2d / fully_connected / add / mean that produced ``x_ir``, as a Pending to re-emit.

        Used to fuse a following clamp (standalone Relu/Clip) or constant bias add into the layer; the
        original node is dropped at the end if nothing else reads its output.
        """
        for node in reversed(self.nodes):
            if x_ir in node.outputs:
                break
        else:
            return None
        if node.op not in ("conv2d", "fully_connected", "add", "mean"):
            return None
        t = self.tensors[x_ir]
        q = t.quant
        a = node.attrs
        lo = None if a.act_min <= -128 else (a.act_min - q.zp) * q.s
        hi = None if a.act_max >= 127 else (a.act_max - q.zp) * q.s
        shape = onnx_shape(t.shape)
        if node.op in ("conv2d", "fully_connected"):
            bias = self.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
            args = {"x": node.inputs[0], "w": node.inputs[1], "bias": bias}
            if node.op == "conv2d":
                args["geom"] = ConvGeom(a.stride, a.padding, a.dilation, a.groups)
            return Pending("conv" if node.op == "conv2d" else "fc", shape, args, label, lo, hi)
        if node.op == "add":
            return Pending("add", shape, {"a": node.inputs[0], "b": node.inputs[1]}, label, lo, hi)
        return Pending("mean", shape, {"x": node.inputs[0], "keepdims": a.keepdims}, label, lo, hi)

    def pending_from_producer(self, act: Act, label: str) -> Pending | None:
        """Re-open the conv2d / fully_connected without clamp that produced ``act`` (to fold a bias add)."""
        p = self.reopen(act.ir, label)
        if p is None or p.op not in ("conv", "fc") or (p.lo, p.hi) != (None, None):
            return None
        return p

    def fold_bias(self, p: Pending, real: np.ndarray, label: str) -> Pending:
        """Add a constant (real values, broadcast over the layer's output) into a pending conv/fc bias."""
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

    # ----- driving
    def run(self) -> Graph:
        self.load_constants()
        self._bind_input()
        for node in self.graph_proto.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                continue
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            handler = self.handlers.get(key)
            if handler is None:
                supported = ", ".join(sorted(k for k in self.handlers))
                raise self.unsupported(f"unsupported ONNX op {key} (node '{node.name or node.output[0]}'); "
                                       f"the {self.fmt} frontend supports: {supported}")
            try:
                handler(self, node)
            except TinyTrainError:
                raise
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise self.malformed(f"cannot convert {node_label(node)} ({type(e).__name__}: {e}); "
                                     f"the model may be malformed") from None
        return self._finish()

    def _bind_input(self) -> None:
        inputs = graph_inputs(self.graph_proto)
        vi = inputs[0]
        self.input_name = vi.name
        shape = static_input_shape(vi, self.name)
        et = vi.type.tensor_type.elem_type
        if et == TensorProto.FLOAT:
            self.values[vi.name] = FVal("input", source=vi.name)
            self._input_shape = shape
        elif et in INT_ACT_TYPES:
            self._used_names.add(vi.name)
            act = Act(vi.name, shape, INT_ACT_TYPES[et], None)
            self.values[vi.name] = act
            self.input_act = act
        else:
            raise self.unsupported(f"input '{vi.name}' is {elem_type_name(et)}; tinytrain takes a float32 input "
                                   f"(quantized by the model's first QuantizeLinear) or an int8/uint8 input")

    def quantize_input(self, node: onnx.NodeProto, yq: QuantParams, dtype: str) -> Act:
        """QuantizeLinear of the float graph input: its output becomes the IR graph input."""
        if self.input_act is not None:
            if not same_quant(self.input_act.quant, yq) or self.input_act.dtype != dtype:
                raise self.unsupported(f"the input '{self.input_name}' is quantized twice with different parameters "
                                       f"({node_label(node)}); quantize it once")
            return self.input_act
        name = self.fresh(self.input_name)
        self.tensors[name] = Tensor(name, ir_shape(self._input_shape), DType.INT8, Role.INPUT, yq)
        self.input_act = Act(name, self._input_shape, dtype, yq)
        return self.input_act

    def _finish(self) -> Graph:
        if self.input_act is None or self.input_act.quant is None:
            raise self.unsupported(f"the input '{self.input_name}' is never quantized (no QuantizeLinear or quantized op "
                                   f"reads it); quantize the model with onnxruntime quantize_static")
        outputs: list[str] = []
        out_names: list[str] = []
        for vi in self.graph_proto.output:
            v = self.values.get(vi.name)
            act = self._output_act(vi.name, v)
            if act.dtype != self.input_act.dtype:
                raise self.unsupported(f"the input is {self.input_act.dtype} but output '{vi.name}' is {act.dtype}; "
                                       f"tinytrain needs one integer type at both ends")
            outputs.append(act.ir)
            out_names.append(vi.name)
        self._eliminate_dead(outputs)
        renames = {}
        for ir_name, onnx_name in zip(outputs, out_names):
            t = self.tensors[ir_name]
            if t.role == Role.ACTIVATION and onnx_name not in self.tensors and ir_name not in renames:
                renames[ir_name] = onnx_name
        tensors, nodes = self._renamed(renames)
        self.ir_names = {k: renames.get(v.ir, v.ir) for k, v in self.values.items()
                         if isinstance(v, Act) and renames.get(v.ir, v.ir) in tensors}
        outputs = [renames.get(o, o) for o in outputs]
        tensors = {k: (replace(t, role=Role.OUTPUT) if k in outputs and t.role == Role.ACTIVATION else t)
                   for k, t in tensors.items()}
        graph = Graph(self.name, tensors, tuple(nodes), (self.input_act.ir,), tuple(outputs), self.sha256,
                      uint8_io=self.input_act.dtype == "uint8")
        try:
            verify(graph)
        except ValueError as e:
            raise self.malformed(f"the converted graph is inconsistent: {e}") from None
        return graph

    def _output_act(self, name: str, v) -> Act:
        if isinstance(v, Act):
            return v
        if isinstance(v, SoftmaxOut):
            return v.act
        if isinstance(v, FVal):
            if v.kind == "dq":
                return v.act
            if v.kind == "softmax":
                return v.act
            if v.kind == "pending":
                raise self.unsupported(f"graph output '{name}' is the float result of {v.pending.source} with no "
                                       f"QuantizeLinear after it; quantize the model's outputs too (quantize_static does)")
            if v.kind == "input":
                raise self.unsupported(f"graph output '{name}' is the float input itself")
        raise self.unsupported(f"graph output '{name}' is not computed from a quantized tensor")

    def _eliminate_dead(self, outputs: list[str]) -> None:
        live = set(outputs)
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(o in live for o in node.outputs):
                kept.append(node)
                live.update(i for i in node.inputs if i)
        self.nodes = kept[::-1]
        live.add(self.input_act.ir)
        self.tensors = {k: t for k, t in self.tensors.items() if k in live}

    def _renamed(self, renames: dict[str, str]) -> tuple[dict[str, Tensor], list[Node]]:
        if not renames:
            return self.tensors, self.nodes
        tensors = {renames.get(k, k): replace(t, name=renames.get(k, k)) for k, t in self.tensors.items()}
        nodes = [replace(n, inputs=tuple(renames.get(i, i) for i in n.inputs),
                         outputs=tuple(renames.get(o, o) for o in n.outputs)) for n in self.nodes]
        return tensors, nodes


# --------------------------------------------------------------------------- model-level checks


def default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return None


def graph_inputs(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in g.initializer}
    return [vi for vi in g.input if vi.name not in inits]


def static_input_shape(vi: onnx.ValueInfoProto, model_name: str) -> tuple[int, ...]:
    """The input shape with the batch dimension set to 1; symbolic dims elsewhere are an error."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has no fixed shape; fix the input shape "
                                    f"(e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed) and retry")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
            continue
        if k == 0:
            dims.append(1)
            continue
        what = f"'{d.dim_param}'" if d.dim_param else "an unknown size"
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has a symbolic dimension {what} at axis {k}; "
                                    f"fix the input shape (e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed "
                                    f"--dim_param {d.dim_param or 'NAME'} --dim_value N) or re-export with a static shape")
    if not dims:
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' is a scalar; tinytrain needs a batch of tensors")
    if dims[0] != 1:
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has a fixed batch size of {dims[0]}; export the "
                                    f"model with batch size 1 (the simulator still runs any batch)")
    return tuple(dims)


def topo_sort(model: onnx.ModelProto, model_name: str) -> None:
    """Check every node input is defined and there is no cycle; sort the nodes topologically in place."""
    g = model.graph
    available = {vi.name for vi in g.input} | {i.name for i in g.initializer} | {""}
    available |= {i.values.name for i in g.sparse_initializer}
    producer: dict[str, int] = {}
    for k, n in enumerate(g.node):
        for o in n.output:
            if o:
                if o in producer or o in available - {""}:
                    raise ModelError(f"{model_name}: tensor '{o}' is produced more than once; the model is malformed")
                producer[o] = k
    for n in g.node:
        for i in n.input:
            if i not in available and i not in producer:
                raise ModelError(f"{model_name}: {node_label(n)} reads '{i}', which is not a graph input, an initializer "
                                 f"or a node output (missing initializer?); the model is incomplete, re-export it")
    deps = [{producer[i] for i in n.input if i in producer} for n in g.node]
    order: list[int] = []
    state = [0] * len(g.node)  # 0 new, 1 on stack, 2 done
    for root in range(len(g.node)):
        if state[root]:
            continue
        stack = [(root, iter(sorted(deps[root])))]
        state[root] = 1
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[k] = 2
                order.append(k)
                stack.pop()
            elif state[nxt] == 1:
                cycle = [g.node[j].name or g.node[j].output[0] for j, _ in stack]
                cycle = cycle[cycle.index(g.node[nxt].name or g.node[nxt].output[0]):]
                raise ModelError(f"{model_name}: the graph has a cycle through nodes {', '.join(cycle)}; "
                                 f"ONNX graphs must be acyclic, re-export the model")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
    if order != list(range(len(g.node))):
        nodes = [g.node[k] for k in order]
        copied = [onnx.NodeProto() for _ in nodes]
        for dst, src in zip(copied, nodes):
            dst.CopyFrom(src)
        del g.node[:]
        g.node.extend(copied)


# --------------------------------------------------------------------------- helpers for the op handlers


def qconst_real(qc: QConst) -> np.ndarray:
    """The real values of a quantized constant."""
    shape = [1] * qc.data.ndim
    if qc.axis is not None:
        shape[qc.axis] = qc.scale.size
    return (qc.data.astype(np.float64) - qc.zero_point.reshape(shape)) * qc.scale.reshape(shape)


def conv_setup(cv: Converter, node: onnx.NodeProto, x: Act, w: QConst) -> tuple[str, ConvGeom, tuple[int, ...]]:
    """IR weight tensor, geometry and ONNX output shape of a Conv / QLinearConv on x (NCHW) with weight w (OIHW)."""
    label = node_label(node)
    a = attrs_of(node)
    if len(x.shape) != 4 or w.data.ndim != 4:
        raise cv.unsupported(f"{label}: only 2-D convolutions on NCHW tensors are supported (input {x.shape}, "
                             f"weight {tuple(w.data.shape)})")
    _, cin, h, wd = x.shape
    cout, cg, kh, kw = w.data.shape
    if "kernel_shape" in a and tuple(a["kernel_shape"]) != (kh, kw):
        raise cv.malformed(f"{label}: kernel_shape {a['kernel_shape']} does not match weight {tuple(w.data.shape)}")
    groups = int(a.get("group", 1))
    if cg * groups != cin or cout % groups:
        raise cv.malformed(f"{label}: weight {tuple(w.data.shape)} does not fit input {x.shape} with group={groups}")
    if groups not in (1, cin):
        raise cv.unsupported(f"{label}: grouped convolution with group={groups} (neither 1 nor the {cin} input channels) "
                             f"is not supported; only regular and depthwise convolutions")
    stride = tuple(int(s) for s in a.get("strides", (1, 1)))
    dilation = tuple(int(d) for d in a.get("dilations", (1, 1)))
    if len(stride) != 2 or len(dilation) != 2:
        raise cv.unsupported(f"{label}: only 2-D convolutions are supported")
    padding = resolve_padding(a, (h, wd), (kh, kw), stride, dilation, label)
    geom = ConvGeom(stride, padding, dilation, groups)
    dummy = Conv2dAttrs(stride, padding, _DUMMY_REQUANT, dilation, groups)
    ho, wo = output_hw(h, wd, kh, kw, dummy)
    if ho <= 0 or wo <= 0:
        raise cv.malformed(f"{label}: the kernel does not fit the input {x.shape}")
    w_ir = cv.weight_tensor(w, w.data.transpose(0, 2, 3, 1), 0, label)
    return w_ir, geom, (1, cout, ho, wo)


def weight_qconst(cv: Converter, node: onnx.NodeProto, idx: int, what: str = "weight") -> QConst:
    """A float op's weight input: must be the DequantizeLinear of an int8 constant."""
    v = cv.value(node, idx)
    if isinstance(v, FVal) and v.kind == "qconst":
        return v.qconst
    if isinstance(v, FVal) and v.kind == "fconst":
        raise cv.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is float; quantize the model to int8 "
                             f"with onnxruntime quantize_static first")
    raise cv.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is not a constant; tinytrain needs constant "
                         f"weights (DequantizeLinear of an int8 initializer)")


def bias_value(cv: Converter, node: onnx.NodeProto, idx: int):
    """A float op's bias input: None, a QConst (DequantizeLinear of a constant) or a float array."""
    if idx >= len(node.input) or not node.input[idx]:
        return None
    v = cv.value(node, idx)
    if isinstance(v, FVal) and v.kind == "qconst":
        return v.qconst
    if isinstance(v, FVal) and v.kind == "fconst":
        return v.array
    raise cv.unsupported(f"{node_label(node)}: bias '{node.input[idx]}' is not a constant")


# --------------------------------------------------------------------------- handlers shared by both formats


def _spatial_act_or_fval(cv: Converter, node: onnx.NodeProto):
    v = resolve_clamp(cv, node, 0) if node.op_type == "Pad" else cv.value(node, 0)
    if isinstance(v, SoftmaxOut) or (isinstance(v, FVal) and v.kind == "softmax"):
        raise cv.unsupported(f"{node_label(node)} consumes a Softmax output; Softmax is only supported as the last op")
    return v


def h_quantize_linear(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    out_dtype = "uint8"
    if "output_dtype" in a and a["output_dtype"]:
        out_dtype = elem_type_name(a["output_dtype"])
    if a.get("block_size"):
        raise cv.unsupported(f"{node_label(node)} uses blocked quantization, which tinytrain does not support")
    v = cv.value(node, 0)
    if isinstance(v, FVal) and v.kind == "fconst":
        # a float constant quantized in the graph (float weights -> Q -> DQ, as QAT exports write them):
        # quantize it here, as QuantizeLinear does (round half to even, saturate)
        s = cv.scale_of(node, 1, "scale")
        zp, dtype = cv.zero_point_of(node, 2, "zero point", out_dtype)
        if dtype not in ("int8", "uint8"):
            raise cv.unsupported(f"{node_label(node)} quantizes a constant to {dtype}; tinytrain supports int8 weights")
        arr = v.array
        shape = [1] * arr.ndim
        if s.size > 1:
            axis = a.get("axis", 1)
            shape[axis + arr.ndim if axis < 0 else axis] = s.size
        zps = zp.reshape(shape) if zp.size > 1 else zp[0]
        lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
        q = np.clip(round_half_even(arr / s.reshape(shape)) + zps, lo, hi)
        cv.inits[node.output[0]] = q.astype(dtype)
        cv.init_types[node.output[0]] = TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8
        return
    yq, dtype = cv.act_quant(node, 1, 2, "output", out_dtype)
    hint = node.output[0]
    if isinstance(v, FVal):
        if v.kind == "input":
            cv.values[node.output[0]] = cv.quantize_input(node, yq, dtype)
            return
        if v.kind == "dq":
            if same_quant(v.act.quant, yq) and v.act.dtype == dtype:
                cv.values[node.output[0]] = v.act
            else:
                ir = cv.emit_requantize(v.act.ir, yq, hint, node_label(node))
                cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)
            return
        if v.kind == "pending":
            ir = cv.materialize(v.pending, yq, hint)
            cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)
            return
        if v.kind == "softmax":
            cv.values[node.output[0]] = SoftmaxOut(v.act, v.source)
            return
    raise cv.unsupported(f"{node_label(node)} quantizes '{node.input[0]}', which is not a supported float value")


def h_dequantize_linear(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    if a.get("block_size"):
        raise cv.unsupported(f"{node_label(node)} uses blocked quantization, which tinytrain does not support")
    name = node.input[0]
    if cv.is_const(name):
        qc = cv.qconst(node, 0, 1, 2, a.get("axis", 1), "constant")
        cv.values[node.output[0]] = FVal("qconst", qconst=qc, source=name)
        return
    v = cv.value(node, 0)
    if isinstance(v, SoftmaxOut):
        cv.values[node.output[0]] = FVal("softmax", act=v.act, source=v.source)
        return
    if not isinstance(v, Act):
        raise cv.unsupported(f"{node_label(node)} dequantizes '{name}', which is not an int8/uint8 activation")
    q, dtype = cv.act_quant(node, 1, 2, "input", v.dtype)
    cv.bind_quant(v, q, dtype, node)
    cv.values[node.output[0]] = FVal("dq", act=v, source=name)


def h_identity(cv: Converter, node: onnx.NodeProto) -> None:
    cv.values[node.output[0]] = cv.value(node, 0)


def _reshape_target(cv: Converter, node: onnx.NodeProto, shape: tuple[int, ...]) -> tuple[int, ...]:
    a = attrs_of(node)
    op = node.op_type
    if op == "Flatten":
        axis = a.get("axis", 1)
        axis = axis + len(shape) if axis < 0 else axis
        return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
    if op == "Reshape":
        target = [int(d) for d in cv.const(node, 1, "shape")]
        out = []
        for k, d in enumerate(target):
            out.append(shape[k] if d == 0 and not a.get("allowzero", 0) else d)
        if out.count(-1) > 1:
            raise cv.malformed(f"{node_label(node)}: shape {target} has more than one -1")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            out[out.index(-1)] = int(np.prod(shape, dtype=np.int64)) // max(known, 1)
        return tuple(out)
    if op in ("Squeeze", "Unsqueeze"):
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(x) for x in cv.const(node, 1, "axes")]
        if op == "Squeeze":
            if axes is None:
                axes = [k for k, d in enumerate(shape) if d == 1 and k > 0]
            axes = sorted(x + len(shape) if x < 0 else x for x in axes)
            if 0 in axes:
                raise cv.unsupported(f"{node_label(node)} removes the batch dimension; keep the batch axis")
            return tuple(d for k, d in enumerate(shape) if k not in axes)
        rank = len(shape) + len(axes)
        axes = sorted(x + rank if x < 0 else x for x in axes)
        if 0 in axes:
            raise cv.unsupported(f"{node_label(node)} inserts an axis before the batch dimension; keep the batch first")
        out, it = [], iter(shape)
        for k in range(rank):
            out.append(1 if k in axes else next(it))
        return tuple(out)
    raise AssertionError(op)


def h_reshape(cv: Converter, node: onnx.NodeProto) -> None:
    v = _spatial_act_or_fval(cv, node)
    label = node_label(node)
    if isinstance(v, Act):
        src = v.shape
    elif isinstance(v, FVal) and v.kind == "dq":
        src = v.act.shape
    elif isinstance(v, FVal) and v.kind == "pending":
        src = v.pending.shape
    else:
        raise cv.unsupported(f"{label} reshapes '{node.input[0]}', which is not a quantized activation")
    dst = _reshape_target(cv, node, src)
    if int(np.prod(dst, dtype=np.int64)) != int(np.prod(src, dtype=np.int64)):
        raise cv.malformed(f"{label}: cannot reshape {src} to {dst}")
    if not dst or dst[0] != src[0]:
        raise cv.unsupported(f"{label}: reshaping {src} to {dst} changes the batch dimension; keep the batch axis first")
    if not reshape_keeps_order(src, dst):
        raise cv.unsupported(f"{label}: reshaping {src} to {dst} changes the element order between ONNX's NCHW and "
                             f"tinytrain's NHWC layout (only reshapes of 1x1 spatial maps are supported); "
                             f"pool to 1x1 before flattening")
    if isinstance(v, Act):
        ir = cv.emit_reshape(v.ir, dst, node.output[0], label)
        cv.values[node.output[0]] = Act(ir, dst, v.dtype, cv.tensors[ir].quant)
    elif v.kind == "dq":
        ir = cv.emit_reshape(v.act.ir, dst, node.output[0], label)
        cv.values[node.output[0]] = FVal("dq", act=Act(ir, dst, v.act.dtype, cv.tensors[ir].quant), source=v.source)
    else:
        cv.values[node.output[0]] = FVal("pending", pending=Pending("reshape", dst, {"inner": v.pending}, label))


def _pads_from(cv: Converter, node: onnx.NodeProto, rank: int) -> list[int]:
    a = attrs_of(node)
    if cv.opset is not None and cv.opset < 11:
        pads = list(a.get("pads", []))
    else:
        pads = [int(p) for p in cv.const(node, 1, "pads")]
    axes = None
    if len(node.input) > 3 and node.input[3]:
        axes = [int(x) + (rank if int(x) < 0 else 0) for x in cv.const(node, 3, "axes")]
    if axes is not None:
        full = [0] * (2 * rank)
        for k, ax in enumerate(axes):
            full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise cv.malformed(f"{node_label(node)}: {len(pads)} pads for a rank-{rank} tensor")
    return pads


def h_pad(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    label = node_label(node)
    if a.get("mode", "constant") != "constant":
        raise cv.unsupported(f"{label}: mode {a['mode']!r} is not supported; only constant (zero) padding")
    v = _spatial_act_or_fval(cv, node)
    if isinstance(v, FVal) and v.kind == "dq":
        act, is_float = v.act, True
    elif isinstance(v, Act):
        act, is_float = v, False
    else:
        raise cv.unsupported(f"{label} pads '{node.input[0]}', which is not a quantized activation")
    rank = len(act.shape)
    pads = _pads_from(cv, node, rank)
    if any(p < 0 for p in pads):
        raise cv.unsupported(f"{label}: negative pads {pads} (cropping) are not supported")
    cval = None
    if cv.opset is not None and cv.opset < 11:
        cval = a.get("value", 0.0)
    elif len(node.input) > 2 and node.input[2]:
        cval = cv.const(node, 2, "constant_value").ravel()[0]
    if is_float:
        ok = cval is None or float(cval) == 0.0
    else:
        zp = act.quant.zp + (128 if act.dtype == "uint8" else 0) if act.quant is not None else 0
        ok = (cval is None and zp == 0) or (cval is not None and int(cval) == zp)
    if not ok:
        raise cv.unsupported(f"{label}: pads with {cval}, not with the value of real zero; only zero padding is supported")
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
    ir = cv.emit_pad(act.ir, ir_pads, node.output[0], label)
    new = Act(ir, onnx_shape(cv.tensors[ir].shape), act.dtype, act.quant)
    cv.values[node.output[0]] = FVal("dq", act=new, source=v.source) if is_float else new


def clip_bounds(cv: Converter, node: onnx.NodeProto) -> tuple[float | None, float | None]:
    if node.op_type == "Relu":
        return 0.0, None
    a = attrs_of(node)
    if cv.opset is not None and cv.opset < 11:
        lo, hi = a.get("min"), a.get("max")
    else:
        lo = cv.const(node, 1, "min", optional=True)
        hi = cv.const(node, 2, "max", optional=True)
        lo = None if lo is None else float(np.asarray(lo).ravel()[0])
        hi = None if hi is None else float(np.asarray(hi).ravel()[0])
    lo = None if lo is not None and math.isinf(lo) and lo < 0 else lo
    hi = None if hi is not None and math.isinf(hi) and hi > 0 else hi
    return lo, hi


def h_relu_clip(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    v = _spatial_act_or_fval(cv, node)
    lo, hi = clip_bounds(cv, node)
    if isinstance(v, FVal) and v.kind == "pending":
        cv.values[node.output[0]] = FVal("pending", pending=v.pending.clamped(lo, hi), source=label)
    elif isinstance(v, FVal) and v.kind == "dq":
        p = Pending("clamp", v.act.shape, {"x": v.act.ir, "dtype": v.act.dtype}, label, lo, hi)
        cv.values[node.output[0]] = FVal("pending", pending=p, source=label)
    else:
        raise cv.unsupported(f"{label} is applied to '{node.input[0]}', which is not a dequantized activation; "
                             f"quantize the model with onnxruntime quantize_static (QDQ or QOperator)")


def resolve_clamp(cv: Converter, node: onnx.NodeProto, idx: int):
    """The value at input idx; a pending standalone Relu/Clip becomes a dequantized activation.

    Used where the clamp feeds a float op other than QuantizeLinear (QOperator float islands such as
    DQ -> Relu -> GlobalAveragePool): it is applied in the source's own quantization, which is exact
    (Q(min(x, c)) == min(Q(x), Q(c)) for a monotone Q).
    """
    v = cv.value(node, idx)
    if isinstance(v, FVal) and v.kind == "pending" and v.pending.op == "clamp":
        src = cv.tensors[v.pending.args["x"]]
        ir = cv.materialize(v.pending, src.quant, node.input[idx] + "_clamped")
        v = FVal("dq", act=cv.new_act(ir, cv.tensors[ir].shape, v.pending.args["dtype"]), source=v.source)
        cv.values[node.input[idx]] = v
    return v


def dq_act(cv: Converter, node: onnx.NodeProto, idx: int, what: str = "input") -> Act:
    """A float input that must be a dequantized activation."""
    v = resolve_clamp(cv, node, idx)
    if isinstance(v, FVal) and v.kind == "dq":
        return v.act
    if isinstance(v, FVal) and v.kind in ("softmax",) or isinstance(v, SoftmaxOut):
        raise cv.unsupported(f"{node_label(node)} consumes a Softmax output; Softmax is only supported as the last op")
    if isinstance(v, FVal) and v.kind == "pending":
        raise cv.unsupported(f"{node_label(node)}: its {what} is the float output of {v.pending.source} with no "
                             f"QuantizeLinear in between; quantize the whole model (quantize_static)")
    if isinstance(v, FVal) and v.kind == "input":
        raise cv.unsupported(f"{node_label(node)} reads the float input directly; quantize the model with "
                             f"onnxruntime quantize_static first")
    raise cv.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is not a dequantized int8 activation")


def _pool_geom(cv: Converter, node: onnx.NodeProto, hw: tuple[int, int]):
    a = attrs_of(node)
    label = node_label(node)
    kernel = tuple(a.get("kernel_shape", ()))
    if len(kernel) != 2:
        raise cv.unsupported(f"{label}: kernel_shape {kernel} is not 2-D")
    stride = tuple(a.get("strides", (1, 1)))
    if tuple(a.get("dilations", (1, 1))) != (1, 1):
        raise cv.unsupported(f"{label}: dilated pooling is not supported")
    padding = resolve_padding(a, hw, kernel, stride, (1, 1), label)
    if a.get("ceil_mode", 0):
        for i in range(2):
            span = hw[i] + padding[i] + padding[i + 2] - kernel[i]
            if span % stride[i]:
                raise cv.unsupported(f"{label}: ceil_mode=1 adds a partial window; use ceil_mode=0 or adjust the padding")
    return kernel, stride, padding, bool(a.get("count_include_pad", 0))


def avgpool_pending(cv: Converter, node: onnx.NodeProto, act: Act) -> Pending:
    label = node_label(node)
    if len(act.shape) != 4:
        raise cv.unsupported(f"{label}: only 2-D (NCHW) pooling is supported")
    n, c, h, w = act.shape
    kernel, stride, padding, include_pad = _pool_geom(cv, node, (h, w))
    x_ir = act.ir
    if include_pad and any(padding):
        x_ir = cv.emit_pad(x_ir, ((padding[0], padding[2]), (padding[1], padding[3]), (0, 0)), act.ir + "_padded", label)
        padding = (0, 0, 0, 0)
        h, w = cv.tensors[x_ir].shape[1:3]
    ho = (h + padding[0] + padding[2] - kernel[0]) // stride[0] + 1
    wo = (w + padding[1] + padding[3] - kernel[1]) // stride[1] + 1
    return Pending("avgpool", (n, c, ho, wo), {"x": x_ir, "kernel": kernel, "stride": stride, "padding": padding}, label)


def mean_pending(cv: Converter, node: onnx.NodeProto, act: Act) -> Pending:
    label = node_label(node)
    if len(act.shape) != 4:
        raise cv.unsupported(f"{label}: only spatial means of NCHW tensors are supported")
    n, c, _, _ = act.shape
    if node.op_type in ("GlobalAveragePool", "QLinearGlobalAveragePool"):
        keep = True
    else:
        a = attrs_of(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(x) for x in cv.const(node, 1, "axes")]
        if not axes:
            raise cv.unsupported(f"{label} averages over all axes; only the mean over H and W (axes 2, 3) is supported")
        axes = sorted({x + 4 if x < 0 else x for x in axes})
        if axes != [2, 3]:
            raise cv.unsupported(f"{label} averages over axes {axes}; only the mean over H and W (axes 2, 3) is supported")
        keep = bool(a.get("keepdims", 1))
    shape = (n, c, 1, 1) if keep else (n, c)
    return Pending("mean", shape, {"x": act.ir, "keepdims": keep}, label)


def h_float_mean(cv: Converter, node: onnx.NodeProto) -> None:
    act = dq_act(cv, node, 0)
    cv.values[node.output[0]] = FVal("pending", pending=mean_pending(cv, node, act), source=node_label(node))


def h_float_avgpool(cv: Converter, node: onnx.NodeProto) -> None:
    act = dq_act(cv, node, 0)
    cv.values[node.output[0]] = FVal("pending", pending=avgpool_pending(cv, node, act), source=node_label(node))


def h_softmax(cv: Converter, node: onnx.NodeProto) -> None:
    act = dq_act(cv, node, 0)
    cv.values[node.output[0]] = FVal("softmax", act=act, source=node_label(node))


COMMON_HANDLERS: dict[str, Handler] = {
    "QuantizeLinear": h_quantize_linear,
    "DequantizeLinear": h_dequantize_linear,
    "Identity": h_identity,
    "Flatten": h_reshape,
    "Reshape": h_reshape,
    "Squeeze": h_reshape,
    "Unsqueeze": h_reshape,
    "Pad": h_pad,
    "Relu": h_relu_clip,
    "Clip": h_relu_clip,
    "GlobalAveragePool": h_float_mean,
    "ReduceMean": h_float_mean,
    "AveragePool": h_float_avgpool,
    "Softmax": h_softmax,
    "LogSoftmax": h_softmax,
}
