"""The constants of an ONNX model: ``ConstantReader`` loads the initializers and Constant nodes and reads the
quantization parameters and quantized constants (weights, biases) a node refers to, checking types, scales and
axes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.frontends.onnx.parse import attrs_of, default_opset, elem_type_name, node_label, one_line
from tinytrain.ir import QuantParams

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
            elif node.op_type == "Identity" and node.input[0] in self.inits:  # Identity(initializer): a constant
                self.inits[node.output[0]] = self.inits[node.input[0]]
                self.init_types[node.output[0]] = self.init_types[node.input[0]]

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
            s, zp = self._per_tensor(node, s, zp, what)
        z = int(zp[0]) - (128 if dtype == "uint8" else 0)
        return QuantParams.per_tensor(float(s[0]), z), dtype

    def _per_tensor(self, node: onnx.NodeProto, s: np.ndarray, zp: np.ndarray, what: str):
        """A per-channel activation quantization as the per-tensor one it is when every channel has the same
        scale and zero point (NNCF exports them so); otherwise refused: requantizing to one scale would round."""
        s32 = np.asarray(s, np.float32).ravel()
        zps = np.asarray(zp).ravel()
        if np.all(s32 == s32[0]) and np.all(zps == zps[0]):
            return s32[:1].astype(np.float64), zps[:1]
        c = int(np.flatnonzero((s32 != s32[0]) | (np.resize(zps, s32.size) != zps[0]))[0])
        raise self.unsupported(f"{node_label(node)}: {what} is quantized per channel ({s32.size} scales; channel 0 "
                               f"s={s32[0]:.6g}, channel {c} s={s32[c]:.6g}) and tinytrain's activations have one "
                               f"scale; quantize activations per tensor (NNCF: advanced_parameters="
                               f"AdvancedQuantizationParameters(activations_quantization_params="
                               f"QuantizationParameters(per_channel=False)); onnxruntime's per_channel is for "
                               f"weights only)")

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
