"""TFLite frontend: an int8 (or TF1-style uint8) .tflite model -> IR Graph, bit-exact with TFLite's kernels.

Supported builtin ops: ADD, AVERAGE_POOL_2D, CONV_2D, DEPTHWISE_CONV_2D, DEQUANTIZE (at a graph output),
FULLY_CONNECTED, MEAN (over H and W), PAD, QUANTIZE, RESHAPE, SOFTMAX, and those of tflite_ops.py; fused NONE / RELU / RELU6 /
RELU_N1_TO_1 activations become the output clamp range.

Choices (each matches what the device runs):
- Float boundary. A float32 graph input that feeds a single QUANTIZE, and a float32 graph output
  produced by a DEQUANTIZE, are dropped: the graph exchanges the int8 tensors on the other side of
  them, as the device does (users quantize with the input tensor's scale / zero point). A QUANTIZE
  between two quantized tensors becomes a ``requantize`` node.
- Requantization multipliers are computed exactly as the runtime that runs the model does:
  int8 CONV_2D / DEPTHWISE_CONV_2D (tflite-micro, per channel, also for a single scale) and every
  FULLY_CONNECTED: double(s_in) * double(s_w) / double(s_out); uint8 (TF1-style) CONV_2D /
  DEPTHWISE_CONV_2D (reference kernels, GetQuantizedConvolutionMultipler): double(float32(s_in * s_w)) /
  double(s_out). MEAN and int8->int8 QUANTIZE: s_in / s_out in double. Each rule is pinned by a test on
  scales where the two products give different outputs; for FULLY_CONNECTED the runtimes measurably use
  the double product although kernel_util.cc's GetQuantizedConvolutionMultipler reads as a float product.
- uint8 models are converted on import: activations and weights are shifted by -128 (zero points
  alike; weights keep their zero point), AVERAGE_POOL_2D rounds half up as the uint8 kernel does, and
  ``Graph.uint8_io`` is set.
- Weight quantization is stored per output channel (axis 0) even when the file has one scale;
  depthwise weights (1, KH, KW, C*m) become (C*m, KH, KW, 1). Bias quantization is taken per output
  channel whatever ``quantized_dimension`` says (person_detect.tflite stores 3 for its 1-D biases,
  which tflite-micro ignores too).
- Graphs are built for batch 1 (a -1 batch in shape_signature is fine); the simulator runs batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import ModelError, TinyTrainError, UnsupportedModelError
from tinytrain.frontends.tflite_metadata import input_normalization
from tinytrain.frontends.tflite_ops import MORE_OPS, MoreOps
from tinytrain.frontends.tflite_reader import (TflModel, TflOperator, TflQuant, TflTensor,
                                               builtin_name, read_model)
from tinytrain.input_mapping import with_mapping
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops.add import AddAttrs
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.conv2d import Conv2dAttrs
from tinytrain.ops.fully_connected import FullyConnectedAttrs
from tinytrain.ops.mean import MeanAttrs
from tinytrain.ops.pad import PadAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.ops.softmax import SoftmaxAttrs
from tinytrain.quant import Requant, activation_range
from tinytrain.verify import verify

SUPPORTED_OPS = tuple(sorted(("ADD", "AVERAGE_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "FULLY_CONNECTED",
                              "MEAN", "PAD", "QUANTIZE", "RESHAPE", "SOFTMAX") + MORE_OPS))
_QUANTIZED = ("INT8", "UINT8")
# Fused activation -> real clamp range (lo, hi); TANH (4) and SIGN_BIT (5) are not supported.
_ACTIVATIONS = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
_ACTIVATION_NAMES = {4: "TANH", 5: "SIGN_BIT"}
_REQUIRED_INPUTS = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "ADD": 2, "MEAN": 2, "PAD": 2, "MUL": 2}
# Input positions that must be constants (read from buffers by the op's handler).
_CONSTANT_INPUTS = {"CONV_2D": (1, 2), "DEPTHWISE_CONV_2D": (1, 2), "FULLY_CONNECTED": (1, 2), "MEAN": (1,),
                    "PAD": (1,), "RESHAPE": (1,)}


def graph_from_tflite(data: bytes, name: str, sha256: str) -> Graph:
    """Import a .tflite model (with its input normalization metadata, if any, as its input mapping). Raises
    ModelError (malformed) or UnsupportedModelError, one line each."""
    try:
        return with_mapping(_Importer(read_model(data), name, sha256).run(), input_normalization(data))
    except TinyTrainError as e:
        raise type(e)(f"{name}: {e}") from None
    except (ValueError, OverflowError) as e:  # e.g. a scale so extreme that no fixed-point multiplier exists
        raise ModelError(f"{name}: inconsistent quantization or shapes ({e})") from None


def padding_values(padding: int, in_size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int, int]:
    """(out_size, pad_before, pad_after) exactly as TFLite's ComputePaddingHeightWidth / ComputeOutSize.

    ``padding`` is the schema's Padding enum (0 = SAME, 1 = VALID). TFLite kernels use only the
    leading padding and skip out-of-range taps; the trailing padding here makes that explicit.
    """
    effective = (kernel - 1) * dilation + 1
    if padding == 0:
        out = (in_size + stride - 1) // stride
    elif padding == 1:
        out = (in_size + stride - effective) // stride
    else:
        raise ModelError(f"unknown padding type {padding}")
    total = max((out - 1) * stride + effective - in_size, 0)
    return out, total // 2, total - total // 2


@dataclass
class _Importer(MoreOps):
    model: TflModel
    name: str
    sha256: str

    def __post_init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.names: dict[int, str] = {}
        self.produced: set[int] = set()
        self.skip: set[int] = set()  # operators dropped at the float boundary

    # ---- driver ---------------------------------------------------------------------------------
    def run(self) -> Graph:
        m = self.model
        if m.subgraph_count != 1:
            raise UnsupportedModelError(f"the model has {m.subgraph_count} subgraphs; only single-subgraph models "
                                        "(no control flow) are supported")
        if not any(t.type in _QUANTIZED for t in m.tensors):
            raise UnsupportedModelError("this is a float model; quantize it to int8 first (full-integer "
                                        "post-training quantization, e.g. TFLiteConverter with "
                                        "optimizations=[DEFAULT] and a representative dataset)")
        for op in m.operators:
            if builtin_name(op.opcode) not in SUPPORTED_OPS:
                raise UnsupportedModelError(f"operator {op.index} is {op.name}, which is not supported; "
                                            f"supported ops: {', '.join(SUPPORTED_OPS)}")
        inputs = [self._graph_input(i) for i in m.inputs]
        outputs = [self._graph_output(o) for o in m.outputs]
        self.graph_inputs, self.graph_outputs = set(inputs), set(outputs)
        for i in inputs:
            self._act(i)
        self.produced.update(inputs)
        for op in m.operators:
            if op.index not in self.skip:
                self._operator(op)
        for o in outputs:
            if o not in self.produced:
                raise ModelError(f"graph output {self._t(o).name!r} is never written by an operator")
        uint8 = {self._t(i).type == "UINT8" for i in inputs + outputs}
        if len(uint8) > 1:
            raise UnsupportedModelError("the model mixes uint8 and int8 graph inputs/outputs")
        graph = Graph(self.name, self.tensors, tuple(self.nodes), tuple(self.names[i] for i in inputs),
                      tuple(self.names[o] for o in outputs), self.sha256, uint8_io=uint8 == {True})
        try:
            verify(graph)
        except ValueError as e:
            raise ModelError(f"imported graph is inconsistent: {e}") from None
        return graph

    def _consumers(self, index: int) -> list[TflOperator]:
        return [op for op in self.model.operators if index in op.inputs]

    def _graph_input(self, index: int) -> int:
        t = self._t(index)
        if t.type != "FLOAT32":
            return index
        users = self._consumers(index)
        if len(users) != 1 or builtin_name(users[0].opcode) != "QUANTIZE":
            raise UnsupportedModelError(f"float input {t.name!r} must feed exactly one QUANTIZE (float ops are "
                                        "not supported; quantize the model to int8)")
        self.skip.add(users[0].index)
        return users[0].outputs[0]

    def _graph_output(self, index: int) -> int:
        t = self._t(index)
        if t.type != "FLOAT32":
            return index
        for op in self.model.operators:
            if index in op.outputs:
                if builtin_name(op.opcode) != "DEQUANTIZE":
                    break
                self.skip.add(op.index)
                return op.inputs[0]
        raise UnsupportedModelError(f"float output {t.name!r} must come from a DEQUANTIZE (float ops are not "
                                    "supported; quantize the model to int8)")

    def _operator(self, op: TflOperator) -> None:
        kind = builtin_name(op.opcode)
        required = _REQUIRED_INPUTS.get(kind, 1)
        if not op.outputs or len(op.inputs) < required or any(i < 0 for i in op.inputs[:required]):
            raise ModelError(f"operator {op.index} ({kind}) lacks a required input or has no output")
        for pos, i in enumerate(op.inputs):
            if pos in _CONSTANT_INPUTS.get(kind, ()):
                continue  # weights, biases, shapes: checked to hold data by the op's handler
            if i >= 0 and i not in self.produced and self.model.buffers[self._t(i).buffer] == b"":
                raise ModelError(f"operator {op.index} ({kind}) reads tensor {self._t(i).name!r} before any "
                                 "operator writes it (operators out of order or a cycle)")
        for o in op.outputs:
            if o in self.produced or self.model.buffers[self._t(o).buffer] != b"":
                raise ModelError(f"operator {op.index} ({kind}) writes tensor {self._t(o).name!r}, which is "
                                 "already written or constant")
        getattr(self, "_op_" + kind.lower())(op)
        self.produced.update(op.outputs)

    # ---- tensors --------------------------------------------------------------------------------
    def _t(self, index: int) -> TflTensor:
        return self.model.tensors[index]

    def _unique(self, name: str) -> str:
        if name not in self.tensors:
            return name
        k = 1
        while f"{name}#{k}" in self.tensors:
            k += 1
        return f"{name}#{k}"

    def _add(self, index: int | None, tensor: Tensor) -> str:
        self.tensors[tensor.name] = tensor
        if index is not None:
            self.names[index] = tensor.name
        return tensor.name

    def _check_quant(self, t: TflTensor, q: TflQuant | None) -> TflQuant:
        if q is None:
            raise ModelError(f"tensor {t.name!r} ({t.type}) has no quantization parameters")
        for s in q.scale:
            if not (math.isfinite(s) and s > 0):
                raise ModelError(f"tensor {t.name!r} has quantization scale {s:.7g}; scales must be positive and "
                                 "finite")
        return q

    def _shift(self, t: TflTensor) -> int:
        """Offset that brings a tensor's values and zero points to int8 (uint8 models: -128)."""
        if t.type == "UINT8":
            return -128
        if t.type == "INT8":
            return 0
        if t.type == "FLOAT32":
            raise UnsupportedModelError(f"tensor {t.name!r} is float32: the model is not fully quantized; quantize "
                                        "it to int8 first (full-integer post-training quantization)")
        raise UnsupportedModelError(f"tensor {t.name!r} has type {t.type}; only int8 and uint8 tensors are supported")

    def _act(self, index: int) -> Tensor:
        """The IR tensor of an activation (created on first use)."""
        if index in self.names:
            return self.tensors[self.names[index]]
        t = self._t(index)
        if self.model.buffers[t.buffer] != b"":
            raise UnsupportedModelError(f"tensor {t.name!r} is a constant where an activation is expected")
        shift = self._shift(t)
        q = self._check_quant(t, t.quant)
        if len(q.scale) != 1:
            raise UnsupportedModelError(f"activation {t.name!r} is quantized per axis; only per-tensor "
                                        "activations are supported")
        if t.shape_signature is not None and any(d < 0 for d in t.shape_signature[1:]):
            raise UnsupportedModelError(f"tensor {t.name!r} has a dynamic shape {list(t.shape_signature)}; only the "
                                        "batch dimension may be dynamic (export with a fixed input size)")
        if not t.shape or any(d <= 0 for d in t.shape):
            raise UnsupportedModelError(f"tensor {t.name!r} has shape {list(t.shape)}; static shapes of rank >= 1 "
                                        "are needed")
        if t.shape[0] != 1:
            raise UnsupportedModelError(f"tensor {t.name!r} has batch {t.shape[0]}; export the model with batch 1 "
                                        "(the simulator still runs batches)")
        zp = q.zero_point[0] + shift
        if not -128 <= zp <= 127:
            raise ModelError(f"tensor {t.name!r} has zero point {q.zero_point[0]} outside the {t.type} range")
        role = Role.INPUT if index in self.graph_inputs else Role.OUTPUT if index in self.graph_outputs \
            else Role.ACTIVATION
        tensor = Tensor(self._unique(t.name), t.shape, DType.INT8, role, QuantParams.per_tensor(q.scale[0], zp))
        self._add(index, tensor)
        return tensor

    def _const_data(self, index: int, what: str, types=None) -> np.ndarray:
        t = self._t(index)
        if types is not None and t.type not in types:
            raise ModelError(f"{what} {t.name!r} has type {t.type}, expected {' or '.join(types)}")
        data = self.model.data(t)
        if data is None:
            raise ModelError(f"{what} {t.name!r} has no data (its buffer {t.buffer} is empty)")
        return data

    def _weight(self, index: int, rank: int, channel_dim: int) -> tuple[np.ndarray, TflTensor, TflQuant, int]:
        """Weight data shifted to int8, its TFLite tensor, quantization and the int8 shift."""
        t = self._t(index)
        if len(t.shape) != rank:
            raise ModelError(f"weight {t.name!r} has shape {list(t.shape)}, expected rank {rank}")
        shift = self._shift(t)
        q = self._check_quant(t, t.quant)
        data = self._const_data(index, "weight")
        channels = t.shape[channel_dim]
        if any(not -128 <= z + shift <= 127 for z in q.zero_point):
            raise ModelError(f"weight {t.name!r} has a zero point outside the {t.type} range")
        if len(q.scale) > 1:
            if not 0 <= q.quantized_dimension < len(t.shape) or len(q.scale) != t.shape[q.quantized_dimension]:
                raise ModelError(f"weight {t.name!r} has {len(q.scale)} scales along dimension "
                                 f"{q.quantized_dimension} of shape {list(t.shape)}")
            if q.quantized_dimension != channel_dim:
                raise UnsupportedModelError(f"weight {t.name!r} is quantized along dimension {q.quantized_dimension}; "
                                            f"only per-output-channel (dimension {channel_dim}) is supported")
        if t.type == "INT8" and any(z != 0 for z in q.zero_point):
            raise UnsupportedModelError(f"int8 weight {t.name!r} has a non-zero zero point; int8 weights must be "
                                        "symmetric")
        scale = q.scale if len(q.scale) == channels else q.scale * channels
        zero = q.zero_point if len(q.zero_point) == channels else q.zero_point * channels
        data = (data.astype(np.int16) + shift).astype(np.int8)
        return data, t, TflQuant(tuple(scale), tuple(z + shift for z in zero), channel_dim), shift

    def _add_weight(self, index: int, data: np.ndarray, q: TflQuant) -> str:
        quant = QuantParams(q.scale, q.zero_point, 0)
        return self._add(index, Tensor(self._unique(self._t(index).name), data.shape, DType.INT8, Role.WEIGHT,
                                       quant, data))

    def _add_bias(self, op: TflOperator, x: Tensor, w_scales: tuple[float, ...]) -> str | None:
        if len(op.inputs) < 3 or op.inputs[2] < 0:
            return None
        index = op.inputs[2]
        t = self._t(index)
        cout = len(w_scales)
        if t.type != "INT32":
            raise UnsupportedModelError(f"bias {t.name!r} has type {t.type}; int32 biases are supported")
        data = self._const_data(index, "bias")
        if data.shape != (cout,):
            raise ModelError(f"bias {t.name!r} has shape {list(data.shape)}, expected [{cout}]")
        if t.quant is not None:
            q = self._check_quant(t, t.quant)
            if len(q.scale) not in (1, cout):
                raise ModelError(f"bias {t.name!r} has {len(q.scale)} scales for {cout} channels")
            scale = q.scale if len(q.scale) == cout else q.scale * cout
        else:
            scale = tuple(float(np.float32(x.quant.s) * np.float32(s)) for s in w_scales)
        quant = QuantParams(tuple(scale), (0,) * cout, 0)
        return self._add(index, Tensor(self._unique(t.name), (cout,), DType.INT32, Role.BIAS, quant, data))

    def _out(self, op: TflOperator) -> Tensor:
        if len(op.outputs) != 1:
            raise ModelError(f"operator {op.index} ({op.name}) has {len(op.outputs)} outputs, expected 1")
        return self._act(op.outputs[0])

    def _activation(self, op: TflOperator, out: Tensor) -> tuple[int, int]:
        code = op.options.get("activation", 0)
        if code not in _ACTIVATIONS:
            name = _ACTIVATION_NAMES.get(code, f"activation {code}")
            raise UnsupportedModelError(f"operator {op.index} ({op.name}) has fused {name}; only NONE, RELU, RELU6 "
                                        "and RELU_N1_TO_1 are supported")
        lo, hi = _ACTIVATIONS[code]
        try:
            with np.errstate(over="ignore"):
                return activation_range(out.quant.zp, out.quant.s, lo, hi)
        except OverflowError:  # TFLite's Prepare fails the same way
            raise ModelError(f"operator {op.index} ({op.name}): output scale {out.quant.s:.7g} is too small for "
                             "its fused activation") from None

    def _node(self, op: TflOperator, kind: str, inputs, outputs, attrs, suffix: str = "") -> None:
        self.nodes.append(Node(f"{op.name.lower()}_{op.index}{suffix}", kind, tuple(inputs), tuple(outputs), attrs))

    def _stride(self, op: TflOperator) -> tuple[int, int]:
        s = (op.options["stride_h"], op.options["stride_w"])
        if min(s) <= 0:
            raise ModelError(f"operator {op.index} ({op.name}) has stride {list(s)}")
        return s

    def _padding(self, op: TflOperator, x: Tensor, out: Tensor, kernel, stride, dilation) -> tuple[int, int, int, int]:
        ho, pt, pb = padding_values(op.options["padding"], x.shape[1], kernel[0], stride[0], dilation[0])
        wo, pl, pr = padding_values(op.options["padding"], x.shape[2], kernel[1], stride[1], dilation[1])
        if len(out.shape) != 4 or out.shape[1:3] != (ho, wo):
            raise ModelError(f"operator {op.index} ({op.name}) output {out.name!r} has shape {list(out.shape)}, "
                             f"but its padding gives {ho}x{wo}")
        return pt, pl, pb, pr

    @staticmethod
    def _multipliers(s_in: float, w_scales, s_out: float, float_product: bool) -> Requant:
        """Per-channel requantization, as the runtime's Prepare computes it (see the module docstring)."""
        if float_product:
            reals = [float(np.float32(s_in) * np.float32(s)) / s_out for s in w_scales]
        else:
            reals = [s_in * s / s_out for s in w_scales]
        return Requant.from_scales(reals)

    def _rank4(self, op: TflOperator, x: Tensor) -> None:
        if len(x.shape) != 4:
            raise UnsupportedModelError(f"operator {op.index} ({op.name}) needs a 4-D NHWC input, got {list(x.shape)}")

    # ---- ops ------------------------------------------------------------------------------------
    def _op_conv_2d(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        self._rank4(op, x)
        data, wt, wq, shift = self._weight(op.inputs[1], 4, 0)
        if data.shape[3] != x.shape[3]:
            raise UnsupportedModelError(f"operator {op.index} (CONV_2D): filter depth {data.shape[3]} != input "
                                        f"channels {x.shape[3]} (grouped convolution is not supported)")
        self._conv(op, x, out, data, wq, shift, groups=1)

    def _op_depthwise_conv_2d(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        self._rank4(op, x)
        data, wt, wq, shift = self._weight(op.inputs[1], 4, 3)
        if data.shape[0] != 1:
            raise ModelError(f"depthwise weight {wt.name!r} has shape {list(data.shape)}, expected [1,KH,KW,C*m]")
        cin, cout = x.shape[3], data.shape[3]
        multiplier = op.options["depth_multiplier"]
        if cout % cin or (multiplier > 0 and cout != cin * multiplier):
            raise ModelError(f"operator {op.index} (DEPTHWISE_CONV_2D): {cout} output channels for {cin} input "
                             f"channels and depth multiplier {multiplier}")
        self._conv(op, x, out, np.ascontiguousarray(data.transpose(3, 1, 2, 0)), wq, shift, groups=cin)

    def _conv(self, op, x: Tensor, out: Tensor, data: np.ndarray, wq: TflQuant, shift: int, groups: int) -> None:
        stride = self._stride(op)
        dilation = (op.options["dilation_h"], op.options["dilation_w"])
        if min(dilation) <= 0:
            raise ModelError(f"operator {op.index} ({op.name}) has dilation {list(dilation)}")
        padding = self._padding(op, x, out, data.shape[1:3], stride, dilation)
        if out.shape[3] != data.shape[0]:
            raise ModelError(f"operator {op.index} ({op.name}): output has {out.shape[3]} channels, filter "
                             f"{data.shape[0]}")
        # tflite-micro int8: per-channel double; uint8 (reference kernels): GetQuantizedConvolutionMultipler.
        requant = self._multipliers(x.quant.s, wq.scale, out.quant.s, float_product=shift != 0)
        act_min, act_max = self._activation(op, out)
        w = self._add_weight(op.inputs[1], data, wq)
        b = self._add_bias(op, x, wq.scale)
        attrs = Conv2dAttrs(stride, padding, requant, dilation, groups, act_min, act_max)
        self._node(op, "conv2d", [x.name, w] + ([b] if b else []), [out.name], attrs)

    def _op_fully_connected(self, op: TflOperator) -> None:
        x, y = self._act(op.inputs[0]), self._act(op.outputs[0])
        if len(op.outputs) != 1:
            raise ModelError(f"operator {op.index} (FULLY_CONNECTED) has {len(op.outputs)} outputs")
        if op.options["weights_format"] != 0:
            raise UnsupportedModelError(f"operator {op.index} (FULLY_CONNECTED) uses shuffled weights")
        data, wt, wq, _ = self._weight(op.inputs[1], 2, 0)
        cout, k = data.shape
        if x.size != k:
            raise UnsupportedModelError(f"operator {op.index} (FULLY_CONNECTED): input {list(x.shape)} is not one "
                                        f"row of {k} (batched rows inside the model are not supported)")
        if y.size != cout:
            raise ModelError(f"operator {op.index} (FULLY_CONNECTED): output {list(y.shape)} for {cout} units")
        src = x.name
        if x.shape != (1, k):  # e.g. (1,1,1,K) from a pooling layer: flatten first
            src = self._add(None, Tensor(self._unique(f"{x.name}/flat"), (1, k), DType.INT8, Role.ACTIVATION, x.quant))
            self._node(op, "reshape", [x.name], [src], ReshapeAttrs((k,)), "_flatten")
        # Measured: tflite-micro and the reference kernels use the double product here, per tensor, per channel
        # and for uint8 (tests/test_tflite_frontend.py::test_requantization_multiplier_rule_matches_the_runtime).
        requant = self._multipliers(x.quant.s, wq.scale, y.quant.s, float_product=False)
        act_min, act_max = self._activation(op, y)
        w = self._add_weight(op.inputs[1], data, wq)
        b = self._add_bias(op, x, wq.scale)
        dst = y.name
        if y.shape != (1, cout):  # keep_num_dims: compute (1, C_out), then restore the file's shape
            dst = self._add(None, Tensor(self._unique(f"{y.name}/2d"), (1, cout), DType.INT8, Role.ACTIVATION, y.quant))
        self._node(op, "fully_connected", [src, w] + ([b] if b else []), [dst],
                   FullyConnectedAttrs(requant, act_min, act_max))
        if dst != y.name:
            self._node(op, "reshape", [dst], [y.name], ReshapeAttrs(y.shape[1:]), "_unflatten")

    def _op_average_pool_2d(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        self._rank4(op, x)
        kernel = (op.options["filter_h"], op.options["filter_w"])
        if min(kernel) <= 0:
            raise ModelError(f"operator {op.index} (AVERAGE_POOL_2D) has filter {list(kernel)}")
        stride = self._stride(op)
        padding = self._padding(op, x, out, kernel, stride, (1, 1))
        act_min, act_max = self._activation(op, out)
        uint8 = self._t(op.inputs[0]).type == "UINT8"
        self._node(op, "avg_pool2d", [x.name], [out.name],
                   AvgPool2dAttrs(kernel, stride, padding, act_min, act_max, round_half_up=uint8))

    def _op_mean(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        self._rank4(op, x)
        axes = sorted({int(a) % 4 for a in self._const_data(op.inputs[1], "MEAN axis", ("INT32", "INT64")).ravel()})
        if axes != [1, 2]:
            raise UnsupportedModelError(f"operator {op.index} (MEAN) reduces axes {axes}; only the spatial axes "
                                        "[1, 2] of an NHWC tensor are supported")
        requant = Requant.from_scales([x.quant.s / out.quant.s])
        self._node(op, "mean", [x.name], [out.name], MeanAttrs(requant, keepdims=bool(op.options["keep_dims"])))

    def _op_reshape(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        if x.size != out.size:
            raise ModelError(f"operator {op.index} (RESHAPE): {list(x.shape)} -> {list(out.shape)} changes the size")
        self._node(op, "reshape", [x.name], [out.name], ReshapeAttrs(out.shape[1:]))

    def _op_softmax(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        if out.quant.s != 1.0 / 256 or out.quant.zp != -128:
            raise UnsupportedModelError(f"operator {op.index} (SOFTMAX): output quantization s={out.quant.s} "
                                        f"zp={out.quant.zp} (int8 form); TFLite requires 1/256 and -128")
        beta = op.options["beta"]
        try:
            attrs = SoftmaxAttrs.from_scale(beta, x.quant.s)
        except ValueError as e:
            raise UnsupportedModelError(f"operator {op.index} (SOFTMAX): {e}") from None
        self._node(op, "softmax", [x.name], [out.name], attrs)

    def _op_add(self, op: TflOperator) -> None:
        for i in op.inputs[:2]:
            if i in self.names or self.model.buffers[self._t(i).buffer] == b"":
                continue
            raise UnsupportedModelError(f"operator {op.index} (ADD) has a constant operand; only the sum of two "
                                        "activations is supported")
        a, b, out = self._act(op.inputs[0]), self._act(op.inputs[1]), self._out(op)
        if a.shape != b.shape or a.shape != out.shape:
            raise UnsupportedModelError(f"operator {op.index} (ADD) broadcasts {list(a.shape)} and {list(b.shape)}; "
                                        "only same-shape adds are supported")
        act_min, act_max = self._activation(op, out)
        attrs = AddAttrs.from_scales(a.quant.s, b.quant.s, out.quant.s, act_min, act_max)
        self._node(op, "add", [a.name, b.name], [out.name], attrs)

    def _op_pad(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        if len(op.inputs) < 2 or op.inputs[1] < 0:
            raise ModelError(f"operator {op.index} (PAD) has no paddings input")
        pads = self._const_data(op.inputs[1], "PAD paddings", ("INT32", "INT64")).astype(np.int64)
        if pads.shape != (len(x.shape), 2) or (pads < 0).any():
            raise ModelError(f"operator {op.index} (PAD): paddings {pads.tolist()} do not fit input {list(x.shape)}")
        if pads[0].any():
            raise UnsupportedModelError(f"operator {op.index} (PAD) pads the batch dimension")
        if x.quant != out.quant:
            raise ModelError(f"operator {op.index} (PAD): input and output quantization differ")
        self._node(op, "pad", [x.name], [out.name], PadAttrs(tuple((int(a), int(b)) for a, b in pads[1:])))

    def _op_quantize(self, op: TflOperator) -> None:
        src = self._t(op.inputs[0])
        if src.type not in _QUANTIZED:
            raise UnsupportedModelError(f"operator {op.index} (QUANTIZE) converts a {src.type} tensor inside the "
                                        "graph; only a float graph input may be quantized")
        x, out = self._act(op.inputs[0]), self._out(op)
        requant = Requant.from_scales([x.quant.s / out.quant.s])
        self._node(op, "requantize", [x.name], [out.name], RequantizeAttrs(requant))

    def _op_dequantize(self, op: TflOperator) -> None:
        raise UnsupportedModelError(f"operator {op.index} (DEQUANTIZE) is inside the graph; float ops are not "
                                    "supported (DEQUANTIZE is accepted only as the last op before a graph output)")
