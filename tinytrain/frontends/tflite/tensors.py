"""The TFLite importer's methods for the operator readers (``TFLITE`` of ``tinytrain/ops/<op>.py``): the IR tensor of
an activation (``act``, ``out``), constants (``const_data``, ``weight``, ``add_weight``, ``add_bias``), the fused
activation's clamp range, padding, strides and requantization multipliers as the runtime computes them, and ``node``
to add an IR node. uint8 (TF1-style) tensors are shifted to int8 here (the importer's docstring)."""

from __future__ import annotations

import math

import numpy as np

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.frontends.tflite.reader import TflModel, TflOperator, TflQuant, TflTensor
from tinytrain.ir import DType, Node, QuantParams, Role, Tensor
from tinytrain.quant import Requant, activation_range

QUANTIZED = ("INT8", "UINT8")
# Fused activation -> real clamp range (lo, hi); TANH (4) and SIGN_BIT (5) are not supported.
_ACTIVATIONS = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
_ACTIVATION_NAMES = {4: "TANH", 5: "SIGN_BIT"}


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


class TensorReader:
    """What the operator readers use; the importer (importer.py) sets ``model``, ``tensors``, ``nodes``, ``names``
    (TFLite tensor index -> IR tensor name), ``graph_inputs`` and ``graph_outputs``."""

    model: TflModel
    tensors: dict[str, Tensor]
    nodes: list[Node]
    names: dict[int, str]
    graph_inputs: set[int]
    graph_outputs: set[int]

    def is_constant(self, index: int) -> bool:
        """Whether tensor ``index`` is a constant (holds data and is not an activation read so far)."""
        return index not in self.names and self.model.buffers[self.tensor(index).buffer] != b""

    def tensor_like(self, t: Tensor, name: str, shape: tuple[int, ...]) -> str:
        """A new int8 activation named after ``name``, of ``shape``, quantized as ``t``."""
        return self.add(None, Tensor(self.unique(name), shape, DType.INT8, Role.ACTIVATION, t.quant))

    def tensor(self, index: int) -> TflTensor:
        return self.model.tensors[index]

    def unique(self, name: str) -> str:
        if name not in self.tensors:
            return name
        k = 1
        while f"{name}#{k}" in self.tensors:
            k += 1
        return f"{name}#{k}"

    def add(self, index: int | None, tensor: Tensor) -> str:
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

    def act(self, index: int) -> Tensor:
        """The IR tensor of an activation (created on first use)."""
        if index in self.names:
            return self.tensors[self.names[index]]
        t = self.tensor(index)
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
        tensor = Tensor(self.unique(t.name), t.shape, DType.INT8, role, QuantParams.per_tensor(q.scale[0], zp))
        self.add(index, tensor)
        return tensor

    def const_data(self, index: int, what: str, types=None) -> np.ndarray:
        t = self.tensor(index)
        if types is not None and t.type not in types:
            raise ModelError(f"{what} {t.name!r} has type {t.type}, expected {' or '.join(types)}")
        data = self.model.data(t)
        if data is None:
            raise ModelError(f"{what} {t.name!r} has no data (its buffer {t.buffer} is empty)")
        return data

    def weight(self, index: int, rank: int, channel_dim: int) -> tuple[np.ndarray, TflTensor, TflQuant, int]:
        """Weight data shifted to int8, its TFLite tensor, quantization and the int8 shift."""
        t = self.tensor(index)
        if len(t.shape) != rank:
            raise ModelError(f"weight {t.name!r} has shape {list(t.shape)}, expected rank {rank}")
        shift = self._shift(t)
        q = self._check_quant(t, t.quant)
        data = self.const_data(index, "weight")
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

    def add_weight(self, index: int, data: np.ndarray, q: TflQuant) -> str:
        quant = QuantParams(q.scale, q.zero_point, 0)
        return self.add(index, Tensor(self.unique(self.tensor(index).name), data.shape, DType.INT8, Role.WEIGHT,
                                       quant, data))

    def add_bias(self, op: TflOperator, x: Tensor, w_scales: tuple[float, ...]) -> str | None:
        if len(op.inputs) < 3 or op.inputs[2] < 0:
            return None
        index = op.inputs[2]
        t = self.tensor(index)
        cout = len(w_scales)
        if t.type != "INT32":
            raise UnsupportedModelError(f"bias {t.name!r} has type {t.type}; int32 biases are supported")
        data = self.const_data(index, "bias")
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
        return self.add(index, Tensor(self.unique(t.name), (cout,), DType.INT32, Role.BIAS, quant, data))

    def out(self, op: TflOperator) -> Tensor:
        if len(op.outputs) != 1:
            raise ModelError(f"operator {op.index} ({op.name}) has {len(op.outputs)} outputs, expected 1")
        return self.act(op.outputs[0])

    def activation(self, op: TflOperator, out: Tensor) -> tuple[int, int]:
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

    def node(self, op: TflOperator, kind: str, inputs, outputs, attrs, suffix: str = "") -> None:
        self.nodes.append(Node(f"{op.name.lower()}_{op.index}{suffix}", kind, tuple(inputs), tuple(outputs), attrs))

    def stride(self, op: TflOperator) -> tuple[int, int]:
        s = (op.options["stride_h"], op.options["stride_w"])
        if min(s) <= 0:
            raise ModelError(f"operator {op.index} ({op.name}) has stride {list(s)}")
        return s

    def padding(self, op: TflOperator, x: Tensor, out: Tensor, kernel, stride, dilation) -> tuple[int, int, int, int]:
        ho, pt, pb = padding_values(op.options["padding"], x.shape[1], kernel[0], stride[0], dilation[0])
        wo, pl, pr = padding_values(op.options["padding"], x.shape[2], kernel[1], stride[1], dilation[1])
        if len(out.shape) != 4 or out.shape[1:3] != (ho, wo):
            raise ModelError(f"operator {op.index} ({op.name}) output {out.name!r} has shape {list(out.shape)}, "
                             f"but its padding gives {ho}x{wo}")
        return pt, pl, pb, pr

    @staticmethod
    def multipliers(s_in: float, w_scales, s_out: float, float_product: bool) -> Requant:
        """Per-channel requantization, as the runtime's Prepare computes it (see the module docstring)."""
        if float_product:
            reals = [float(np.float32(s_in) * np.float32(s)) / s_out for s in w_scales]
        else:
            reals = [s_in * s / s_out for s in w_scales]
        return Requant.from_scales(reals)

    def rank4(self, op: TflOperator, x: Tensor) -> None:
        if len(x.shape) != 4:
            raise UnsupportedModelError(f"operator {op.index} ({op.name}) needs a 4-D NHWC input, got {list(x.shape)}")
