"""Small int8 IR graphs built directly (no frontend): layers with random weights, calibrated quantization.

Every layer's output quantization is chosen from its real-valued output range on a fixed calibration batch,
so graphs behave like real post-training-quantized models (ReLU6 ranges, a few saturated values).
"""

from __future__ import annotations

import numpy as np

from tinytrain import builder
from tinytrain.ir import DType, Graph, Node, QuantParams, Role
from tinytrain.ops import get_op
from tinytrain.ops.add import AddAttrs
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.conv2d import Conv2dAttrs, accumulate
from tinytrain.ops.fully_connected import FullyConnectedAttrs
from tinytrain.ops.fully_connected import accumulate as fc_accumulate
from tinytrain.ops.max_pool2d import MaxPool2dAttrs
from tinytrain.ops.mean import MeanAttrs
from tinytrain.ops.pad import PadAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.ops.softmax import SoftmaxAttrs
from tinytrain.quant import Requant, activation_range
from tinytrain.verify import verify

ACT_BOUNDS = {None: (None, None), "relu": (0.0, None), "relu6": (0.0, 6.0)}


def _out_quant(real: np.ndarray, act: str | None) -> QuantParams:
    lo, hi = float(min(real.min(), 0.0)), float(max(real.max(), 0.0))
    if act is not None:
        lo = 0.0
        hi = min(hi, 6.0) if act == "relu6" else hi
    hi = max(hi, lo + 1e-3)
    s = (hi - lo) / 255.0
    zp = int(np.clip(round(-128 - lo / s), -128, 127))
    return QuantParams.per_tensor(s, zp)


class ModelBuilder(builder.GraphBuilder):
    """tinytrain's graph builder with calibrated layers: each output's quantization comes from its real range on a
    calibration batch (``values``) run through the ops' references."""

    def __init__(self, name: str = "test", seed: int = 0, calib: int = 4) -> None:
        super().__init__(name=name)
        self.rng = np.random.default_rng(seed)
        self.calib = calib
        self.values: dict[str, np.ndarray] = {}  # calibration batch of every activation
        self.layers: list[str] = []              # conv / fc node names, in order

    # -- helpers --------------------------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        k = sum(1 for n in self.nodes if n.name.startswith(prefix))
        return f"{prefix}{k}"

    def _act(self, name: str, shape, quant: QuantParams) -> str:
        return self.add_tensor(name, shape, DType.INT8, Role.ACTIVATION, quant)

    def _const(self, name: str, data: np.ndarray, role: Role, quant: QuantParams | None) -> str:
        dtype = DType.INT8 if data.dtype == np.int8 else DType.INT32
        return self.add_tensor(name, data.shape, dtype, role, quant, data)

    def _node(self, op: str, name: str, inputs, out: str, attrs) -> str:
        self.append(Node(name, op, tuple(inputs), (out,), attrs))
        ins = [self.tensors[i] if i else None for i in inputs]
        arrays = [(self.tensors[i].data if self.tensors[i].is_constant else self.values[i]) if i else None
                  for i in inputs]
        self.values[out] = get_op(op).reference(attrs, arrays, ins, [self.tensors[out]])[0]
        return out

    def _weights(self, shape, fan_in: int):
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), shape)
        s = np.maximum(np.abs(w.reshape(shape[0], -1)).max(axis=1), 1e-6) / 127.0
        q = np.clip(np.round(w / s.reshape((-1,) + (1,) * (len(shape) - 1))), -127, 127).astype(np.int8)
        return q, QuantParams(tuple(float(np.float32(v)) for v in s), (0,) * shape[0], 0)

    # -- layers ---------------------------------------------------------------------------------------
    def input(self, hwc, scale: float = 1 / 64, zp: int = -3) -> str:
        name = self.add_tensor("input", (1,) + tuple(hwc), DType.INT8, Role.INPUT, QuantParams.per_tensor(scale, zp))
        self.inputs.append(name)
        self.values[name] = self.rng.integers(-128, 128, (self.calib,) + tuple(hwc)).astype(np.int8)
        return name

    def conv(self, x: str, cout: int, k: int = 1, stride: int = 1, depthwise: bool = False, act: str | None = "relu6",
             bias: bool = True, padding=None, dilation: int = 1) -> str:
        xt = self.tensors[x]
        cin = xt.shape[3]
        groups = cin if depthwise else 1
        if depthwise:
            cout = cout or cin
        name = self._name("dw" if depthwise else "conv")
        w, wq = self._weights((cout, k, k, cin // groups), k * k * cin // groups)
        wname = self._const(f"{name}.weight", w, Role.WEIGHT, wq)
        s_b = np.float32(xt.quant.s) * np.asarray(wq.scale, np.float32)
        inputs = [x, wname]
        b = None
        if bias:
            b = np.round(self.rng.normal(0, 0.1, cout) / s_b).astype(np.int32)
            inputs.append(self._const(f"{name}.bias", b, Role.BIAS,
                                      QuantParams(tuple(float(v) for v in s_b), (0,) * cout, 0)))
        p = (k - 1) * dilation // 2 if padding is None else padding
        pads = (p, p, p, p) if isinstance(p, int) else tuple(p)
        geo = Conv2dAttrs((stride, stride), pads, Requant((1 << 30,), (1,)), (dilation, dilation), groups)
        (shape,) = get_op("conv2d").infer_shapes(geo, [xt, self.tensors[wname]])
        acc = accumulate(geo, self.values[x], xt, w, self.tensors[wname], b, (self.calib,) + shape[1:])
        yq = _out_quant(acc * s_b, act)
        lo, hi = activation_range(yq.zp, yq.s, *ACT_BOUNDS[act])
        attrs = Conv2dAttrs((stride, stride), pads, Requant.from_scales(s_b.astype(np.float64) / yq.s),
                            (dilation, dilation), groups, lo, hi)
        self.layers.append(name)
        return self._node("conv2d", name, inputs, self._act(f"{name}.out", shape, yq), attrs)

    def fc(self, x: str, cout: int, act: str | None = None) -> str:
        xt = self.tensors[x]
        k = xt.shape[1]
        name = self._name("fc")
        w, wq = self._weights((cout, k), k)
        wname = self._const(f"{name}.weight", w, Role.WEIGHT, wq)
        s_b = np.float32(xt.quant.s) * np.asarray(wq.scale, np.float32)
        b = np.round(self.rng.normal(0, 0.1, cout) / s_b).astype(np.int32)
        bname = self._const(f"{name}.bias", b, Role.BIAS, QuantParams(tuple(float(v) for v in s_b), (0,) * cout, 0))
        acc = fc_accumulate(self.values[x], xt.quant.zp, w, wq.zero_point, b)
        yq = _out_quant(acc * s_b, act)
        lo, hi = activation_range(yq.zp, yq.s, *ACT_BOUNDS[act])
        attrs = FullyConnectedAttrs(Requant.from_scales(s_b.astype(np.float64) / yq.s), lo, hi)
        self.layers.append(name)
        return self._node("fully_connected", name, [x, wname, bname], self._act(f"{name}.out", (1, cout), yq), attrs)

    def add(self, a: str, b: str, act: str | None = None) -> str:
        ta, tb = self.tensors[a], self.tensors[b]
        real = ((self.values[a].astype(np.float64) - ta.quant.zp) * ta.quant.s
                + (self.values[b].astype(np.float64) - tb.quant.zp) * tb.quant.s)
        yq = _out_quant(real, act)
        lo, hi = activation_range(yq.zp, yq.s, *ACT_BOUNDS[act])
        attrs = AddAttrs.from_scales(ta.quant.s, tb.quant.s, yq.s, lo, hi)
        name = self._name("add")
        return self._node("add", name, [a, b], self._act(f"{name}.out", ta.shape, yq), attrs)

    def mean(self, x: str, keepdims: bool = True, rescale: float = 1.0) -> str:
        xt = self.tensors[x]
        q = xt.quant if rescale == 1.0 else QuantParams.per_tensor(xt.quant.s * rescale, xt.quant.zp // 2)
        attrs = MeanAttrs(Requant.from_scales([xt.quant.s / q.s]), keepdims)
        n, _, _, c = xt.shape
        name = self._name("mean")
        return self._node("mean", name, [x], self._act(f"{name}.out", (n, 1, 1, c) if keepdims else (n, c), q), attrs)

    def avg_pool(self, x: str, k: int, stride: int, padding=(0, 0, 0, 0)) -> str:
        xt = self.tensors[x]
        attrs = AvgPool2dAttrs((k, k), (stride, stride), tuple(padding))
        (shape,) = get_op("avg_pool2d").infer_shapes(attrs, [xt])
        name = self._name("pool")
        return self._node("avg_pool2d", name, [x], self._act(f"{name}.out", shape, xt.quant), attrs)

    def max_pool(self, x: str, k: int, stride: int, padding=(0, 0, 0, 0), act=(-128, 127)) -> str:
        xt = self.tensors[x]
        attrs = MaxPool2dAttrs((k, k), (stride, stride), tuple(padding), *act)
        (shape,) = get_op("max_pool2d").infer_shapes(attrs, [xt])
        name = self._name("maxpool")
        return self._node("max_pool2d", name, [x], self._act(f"{name}.out", shape, xt.quant), attrs)

    def activation(self, x: str, kind: str, alpha: float = 1 / 6, beta: float = 0.5) -> str:
        """hard_swish, logistic or hard_sigmoid as an ONNX import builds it (output quantization calibrated)."""
        from tinytrain.ops import hard_sigmoid, hard_swish, logistic
        from tinytrain.tables import TableAttrs

        xt = self.tensors[x]
        real = (self.values[x].astype(np.float64) - xt.quant.zp) * xt.quant.s
        fns = {"hard_swish": lambda r: r * np.clip(r / 6 + 0.5, 0, 1), "logistic": lambda r: 1 / (1 + np.exp(-r)),
               "hard_sigmoid": lambda r: np.clip(alpha * r + beta, 0, 1)}
        q = _out_quant(fns[kind](real), None)
        table = (hard_sigmoid.onnx_table(xt.quant, q, alpha, beta) if kind == "hard_sigmoid" else
                 {"hard_swish": hard_swish, "logistic": logistic}[kind].onnx_table(xt.quant, q))
        name = self._name(kind)
        return self._node(kind, name, [x], self._act(f"{name}.out", xt.shape, q), TableAttrs(table, kind, alpha, beta))

    def mul(self, a: str, b: str, act: str | None = None) -> str:
        """Broadcast multiply with TFLite's requantization, output quantization calibrated."""
        from tinytrain.ops.mul import MulAttrs, broadcast_shape

        ta, tb = self.tensors[a], self.tensors[b]
        real = ((self.values[a].astype(np.float64) - ta.quant.zp) * ta.quant.s
                * (self.values[b].astype(np.float64) - tb.quant.zp) * tb.quant.s)
        q = _out_quant(real, act)
        lo, hi = ACT_BOUNDS[act]
        attrs = MulAttrs(Requant.from_scales([ta.quant.s * tb.quant.s / q.s]), *activation_range(q.zp, q.s, lo, hi))
        name = self._name("mul")
        return self._node("mul", name, [a, b], self._act(f"{name}.out", broadcast_shape(ta.shape, tb.shape), q), attrs)

    def concat(self, xs: list[str]) -> str:
        """Channel concatenation into the first input's quantization (the others requantized by tables)."""
        from tinytrain.ops.concat import ConcatAttrs
        from tinytrain.tables import float32_table

        q = self.tensors[xs[0]].quant
        tables = tuple(None if self.tensors[x].quant == q else float32_table(lambda v: v, self.tensors[x].quant, q)
                       for x in xs)
        attrs = ConcatAttrs(3, tables)
        (shape,) = get_op("concat").infer_shapes(attrs, [self.tensors[x] for x in xs])
        name = self._name("concat")
        return self._node("concat", name, xs, self._act(f"{name}.out", shape, q), attrs)

    def pad(self, x: str, pads) -> str:
        xt = self.tensors[x]
        attrs = PadAttrs(tuple(tuple(p) for p in pads))
        (shape,) = get_op("pad").infer_shapes(attrs, [xt])
        name = self._name("pad")
        return self._node("pad", name, [x], self._act(f"{name}.out", shape, xt.quant), attrs)

    def reshape(self, x: str, shape) -> str:
        xt = self.tensors[x]
        name = self._name("reshape")
        return self._node("reshape", name, [x], self._act(f"{name}.out", (1,) + tuple(shape), xt.quant),
                          ReshapeAttrs(tuple(shape)))

    def requantize(self, x: str, scale_factor: float) -> str:
        xt = self.tensors[x]
        q = QuantParams.per_tensor(xt.quant.s * scale_factor, 5)
        name = self._name("requant")
        return self._node("requantize", name, [x], self._act(f"{name}.out", xt.shape, q),
                          RequantizeAttrs(Requant.from_scales([xt.quant.s / q.s])))

    def softmax(self, x: str) -> str:
        xt = self.tensors[x]
        name = self._name("softmax")
        return self._node("softmax", name, [x], self._act(f"{name}.out", xt.shape, QuantParams.per_tensor(1 / 256, -128)),
                          SoftmaxAttrs.from_scale(1.0, xt.quant.s))

    # -- blocks ---------------------------------------------------------------------------------------
    def inverted_residual(self, x: str, cout: int, expand: int, k: int = 3, stride: int = 1) -> str:
        """MobileNetV2 / MCUNet block: 1x1 expand (ReLU6) -> kxk depthwise (ReLU6) -> 1x1 project (+ identity)."""
        cin = self.tensors[x].shape[3]
        h = self.conv(x, cin * expand, 1) if expand != 1 else x
        h = self.conv(h, 0, k, stride, depthwise=True)
        h = self.conv(h, cout, 1, act=None)
        return self.add(x, h) if stride == 1 and cin == cout else h

    def classifier(self, x: str, n_classes: int, softmax: bool = True) -> str:
        c = self.tensors[x].shape[3]
        h = self.reshape(self.mean(x), (c,))
        h = self.fc(h, n_classes)
        return self.softmax(h) if softmax else h

    def build(self, *outputs: str) -> Graph:
        """The graph; an image model says its input mapping is pixel / 255 (tinytrain/input_mapping.py), as its
        calibration input (``input``'s range) does not."""
        from tinytrain.input_mapping import with_mapping

        g = super().build(outputs=tuple(outputs))
        if len(g.tensors[g.inputs[0]].shape) == 4:
            g = with_mapping(g, "unit")
        verify(g)
        return g

    def calibration_input(self) -> np.ndarray:
        return self.values[self.inputs[0]]


def tiny_mobilenet(seed: int = 0, hw: int = 16, n_classes: int = 5, width: int = 8) -> tuple[Graph, ModelBuilder]:
    """A MobileNetV2-shaped network: stem, inverted residual blocks (one with a residual), head, classifier."""
    mb = ModelBuilder("tiny_mobilenet", seed)
    x = mb.input((hw, hw, 3))
    h = mb.conv(x, width, 3, 2)
    h = mb.inverted_residual(h, width, 1)
    h = mb.inverted_residual(h, 2 * width, 3, stride=2)
    h = mb.inverted_residual(h, 2 * width, 3, k=5)
    h = mb.conv(h, 4 * width, 1)
    return mb.build(mb.classifier(h, n_classes)), mb
