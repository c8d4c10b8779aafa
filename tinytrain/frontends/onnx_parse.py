"""Reading an ONNX model's protobuf: attributes, model-level checks, and its constants.

``ConstantReader`` loads the initializers and Constant nodes of a model and reads the quantization
parameters and quantized constants (weights, biases) a node refers to, checking types, scales and
axes. The model-level checks (``topo_sort``, ``static_input_shape``) run before any conversion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ir import QuantParams

MIN_OPSET = 10
INT_ACT_TYPES = {TensorProto.INT8: "int8", TensorProto.UINT8: "uint8"}


def elem_type_name(t: int) -> str:
    try:
        return TensorProto.DataType.Name(t).lower()
    except ValueError:
        return f"type {t}"


def one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def attrs_of(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def node_label(node: onnx.NodeProto) -> str:
    if node.name or not node.output:
        return f"{node.op_type} '{node.name}'"
    return f"{node.op_type} (output '{node.output[0]}')"


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


# --------------------------------------------------------------------------- constants


@dataclass
class QConst:
    """A quantized constant as stored in the file (weights, biases)."""

    name: str
    data: np.ndarray
    dtype: str  # "int8", "uint8", "int32"
    scale: np.ndarray  # float64 holding float32 values, one per channel along axis (or one)
    zero_point: np.ndarray  # int64
    axis: int | None  # None: per tensor


class ConstantReader:
    """The constants of an ONNX model (initializers, Constant nodes) and the quantization parameters read from them."""

    def __init__(self, model: onnx.ModelProto, name: str):
        self.model = model
        self.graph_proto = model.graph
        self.name = name
        self.opset = default_opset(model)
        self.inits: dict[str, np.ndarray | None] = {}
        self.init_types: dict[str, int] = {}

    # ----- errors
    def unsupported(self, msg: str) -> UnsupportedModelError:
        return UnsupportedModelError(one_line(f"{self.name}: {msg}"))

    def malformed(self, msg: str) -> ModelError:
        return ModelError(one_line(f"{self.name}: {msg}"))

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
            try:
                self.inits[name] = numpy_helper.to_array(tp)
            except ValueError as e:  # dims that do not match the stored data
                raise self.malformed(f"initializer '{name}' does not hold its dims {list(tp.dims)} ({e})") from None
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
