"""Small int8 IR graphs for the code generator tests, built directly in the IR (no frontend).

Requantization multipliers are drawn so that outputs spread over the int8 range instead of saturating.
``single=True`` builds a node's requantization with single rounding, ``single="fp32"`` (conv, fully
connected, count-folded mean) with onnxruntime's float32 rounding (as the ONNX frontend does for those ops,
from float32 scales), else TFLite's double rounding.
"""

from __future__ import annotations

import numpy as np

from tinytrain import builder
from tinytrain.ir import DType, Graph, QuantParams, Role
from tinytrain.ops.add import AddAttrs
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.conv2d import Conv2dAttrs
from tinytrain.ops.fully_connected import FullyConnectedAttrs
from tinytrain.ops.max_pool2d import MaxPool2dAttrs
from tinytrain.ops.mean import MeanAttrs
from tinytrain.ops.pad import PadAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.ops.softmax import SoftmaxAttrs
from tinytrain.quant import Requant
from tinytrain.verify import verify


def _requant_of(real, single: bool | str) -> Requant:
    if single == "fp32":
        return Requant.from_scales([float(np.float32(r)) for r in real], fp32=True)
    return Requant.from_scales(real, bool(single))


class GraphBuilder(builder.GraphBuilder):
    """tinytrain's graph builder with layers whose weights and quantization are drawn from ``seed``."""

    def __init__(self, seed: int = 0, name: str = "g") -> None:
        super().__init__(name=name)
        self.rng = np.random.default_rng(seed)

    def _q(self) -> QuantParams:
        return QuantParams.per_tensor(float(self.rng.uniform(0.01, 0.1)), int(self.rng.integers(-20, 21)))

    def input(self, shape, quant: QuantParams | None = None) -> str:
        name = self.add_tensor(f"input{len(self.inputs)}", shape, DType.INT8, Role.INPUT, quant or self._q())
        self.inputs.append(name)
        return name

    def const(self, name: str, data: np.ndarray, role: Role, quant: QuantParams | None = None) -> str:
        dtype = DType.INT8 if data.dtype == np.int8 else DType.INT32
        return self.add_tensor(name, data.shape, dtype, role, quant, data)

    def node(self, op: str, inputs, attrs, quant: QuantParams | None = None) -> str:
        k = len(self.nodes)
        (out,) = self.emit(op, inputs, attrs, f"{op}_{k}", DType.INT8, Role.ACTIVATION, [f"{op}{k}/out"],
                           quant or self._q())
        return out

    def _requant(self, channels: int, depth: int, single: bool | str = False) -> Requant:
        # acc ~ 74 * 73 * sqrt(depth); aim for outputs of about +-40 around the zero point.
        real = 40.0 / (74 * 73 * np.sqrt(depth)) * self.rng.uniform(0.5, 2.0, channels)
        return _requant_of(real, single)

    def conv(self, x: str, cout: int, k, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
             depthwise: bool = False, bias: bool = True, weight_zp: bool = False, act=(-128, 127),
             per_tensor: bool = False, single: bool | str = False, quant: QuantParams | None = None) -> str:
        cin = self.tensors[x].shape[3]
        kh, kw = (k, k) if isinstance(k, int) else k
        cg = 1 if depthwise else cin
        idx = len(self.nodes)
        w = self.rng.integers(-127, 128, (cout, kh, kw, cg)).astype(np.int8)
        zps = tuple(int(z) for z in self.rng.integers(-8, 9, cout)) if weight_zp else (0,) * cout
        wq = QuantParams((0.02,) * cout, zps, 0)
        ins = [x, self.const(f"conv{idx}/weight", w, Role.WEIGHT, wq)]
        if bias:
            ins.append(self.const(f"conv{idx}/bias", self.rng.integers(-5000, 5000, cout).astype(np.int32), Role.BIAS))
        requant = self._requant(1 if per_tensor else cout, kh * kw * cg, single)
        attrs = Conv2dAttrs(tuple(stride), tuple(padding), requant, tuple(dilation), cin if depthwise else 1, *act)
        return self.node("conv2d", ins, attrs, quant)

    def fully_connected(self, x: str, cout: int, bias: bool = True, weight_zp: bool = False, act=(-128, 127),
                        single: bool | str = False) -> str:
        depth = self.tensors[x].shape[1]
        idx = len(self.nodes)
        w = self.rng.integers(-127, 128, (cout, depth)).astype(np.int8)
        zps = tuple(int(z) for z in self.rng.integers(-8, 9, cout)) if weight_zp else (0,) * cout
        ins = [x, self.const(f"fc{idx}/weight", w, Role.WEIGHT, QuantParams((0.02,) * cout, zps, 0))]
        if bias:
            ins.append(self.const(f"fc{idx}/bias", self.rng.integers(-5000, 5000, cout).astype(np.int32), Role.BIAS))
        return self.node("fully_connected", ins, FullyConnectedAttrs(self._requant(cout, depth, single), *act))

    def add(self, a: str, b: str, act=(-128, 127), single: bool = False) -> str:
        out_q = self._q()
        attrs = AddAttrs.from_scales(self.tensors[a].quant.s, self.tensors[b].quant.s, out_q.s, *act,
                                     single_rounding=single)
        return self.node("add", [a, b], attrs, out_q)

    def avg_pool(self, x: str, kernel, stride, padding=(0, 0, 0, 0), half_up: bool = False, act=(-128, 127),
                 half_even: bool = False, requant: bool = False, single: bool = False) -> str:
        """``requant``: another output quantization (one multiplier per valid-cell count, as ONNX imports)."""
        if requant:
            qi, qo = self.tensors[x].quant, self._q()
            cells = kernel[0] * kernel[1]
            output = Requant.from_scales([qi.s / (c * qo.s) for c in range(1, cells + 1)], single)
            attrs = AvgPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding), *act, output=output)
            return self.node("avg_pool2d", [x], attrs, qo)
        attrs = AvgPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding), *act, half_up, half_even)
        return self.node("avg_pool2d", [x], attrs, self.tensors[x].quant)

    def max_pool(self, x: str, kernel, stride, padding=(0, 0, 0, 0), act=(-128, 127)) -> str:
        attrs = MaxPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding), *act)
        return self.node("max_pool2d", [x], attrs, self.tensors[x].quant)

    def mean(self, x: str, same_quant: bool = False, keepdims: bool = True, act=(-128, 127),
             single: bool | str = False, count_folded: bool = False) -> str:
        """``count_folded``: the Requant is s_in / (count * s_out) (as ONNX imports), else s_in / s_out."""
        qi = self.tensors[x].quant
        qo = qi if same_quant else self._q()
        shape = self.tensors[x].shape
        real = qi.s / qo.s / (shape[1] * shape[2] if count_folded else 1)
        attrs = MeanAttrs(_requant_of([real], single), keepdims, *act, count_folded=count_folded)
        return self.node("mean", [x], attrs, qo)

    def pad(self, x: str, pads) -> str:
        return self.node("pad", [x], PadAttrs(tuple(tuple(p) for p in pads)), self.tensors[x].quant)

    def requantize(self, x: str, single: bool = False) -> str:
        qi, qo = self.tensors[x].quant, self._q()
        return self.node("requantize", [x], RequantizeAttrs(Requant.from_scales([qi.s / qo.s], single)), qo)

    def reshape(self, x: str, shape) -> str:
        return self.node("reshape", [x], ReshapeAttrs(tuple(shape)), self.tensors[x].quant)

    def softmax(self, x: str, beta: float = 1.0) -> str:
        return self.node("softmax", [x], SoftmaxAttrs.from_scale(beta, self.tensors[x].quant.s),
                         QuantParams.per_tensor(1 / 256, -128))

    def build(self, *outputs: str) -> Graph:
        g = super().build(outputs=tuple(outputs))
        verify(g)
        return g

    def inputs_batch(self, g: Graph, n: int) -> np.ndarray:
        """Random int8 inputs including the extremes -128 and 127."""
        shape = (n,) + g.tensors[g.inputs[0]].shape[1:]
        x = self.rng.integers(-128, 128, shape).astype(np.int8)
        x.flat[0], x.flat[-1] = -128, 127
        return x


def every_op_graph(seed: int = 0) -> Graph:
    """One small graph with every forward op and the main variants (for compile / sanitizer / determinism).

    Both roundings occur: the TFLite-style nodes round twice, the ONNX-style ones (``single=True``, half-even
    and per-count average pools, count-folded means) once.
    """
    b = GraphBuilder(seed, "every_op")
    x = b.input((1, 11, 10, 3))
    p = b.pad(x, ((1, 2), (0, 1), (0, 0)))
    c1 = b.conv(p, 8, 3, stride=(2, 2), padding=(1, 1, 1, 1), act=(-128 + 20, 127), weight_zp=True)
    c5 = b.conv(c1, 8, 5, padding=(2, 2, 2, 2), bias=False)
    d1 = b.conv(c5, 16, 3, padding=(1, 1, 1, 1), depthwise=True)                 # multiplier 2
    d2 = b.conv(d1, 16, 3, stride=(2, 1), depthwise=True, weight_zp=True)        # valid, no bounds checks
    pw = b.conv(d2, 16, 1, per_tensor=True)
    s = b.add(pw, b.conv(d2, 16, 1, bias=False))
    r = b.requantize(s)
    ap = b.avg_pool(r, (2, 2), (1, 1), padding=(0, 0, 1, 1))
    m = b.mean(ap)
    m2 = b.mean(b.conv(ap, 16, 7, padding=(3, 3, 3, 3)), same_quant=True, keepdims=False)
    # single rounding (ONNX imports)
    d3 = b.conv(ap, 16, 3, padding=(1, 1, 1, 1), depthwise=True, single=True)
    s2 = b.add(b.conv(d3, 16, 1, single=True), b.requantize(d3, single=True), single=True)
    ap2 = b.avg_pool(b.avg_pool(s2, (2, 2), (1, 1), padding=(1, 1, 0, 0), half_even=True), (3, 2), (2, 1),
                     padding=(1, 0, 1, 1), requant=True, single=True)
    m3 = b.mean(ap2, keepdims=False, single=True, count_folded=True)
    f = b.reshape(m, (16,))
    y = b.fully_connected(b.add(b.add(f, m2), m3, single=True), 10, weight_zp=True, single=True)
    return b.build(b.softmax(y))
