"""Fully connected, int8: x (N,K), w (C_out,K), bias (C_out,) int32 or absent -> (N,C_out).

Backward as conv2d's (fp32, real values): clamp mask, then g_x = g_z @ W, g_w = g_z^T @ x (selected
output channels), g_b = sum g_z.

Imports: TFLite FULLY_CONNECTED (the multiplier double(s_in) * double(s_w) / double(s_out), measured on the runtimes
for int8 and uint8 alike); ONNX Gemm (transA 0, alpha > 0 folded into the weight scale, beta into the bias),
MatMul (a constant Add after it folds into the bias), QLinearMatMul and com.microsoft QGemm, with onnxruntime's
float32 requantization; exported as Gemm (transB 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tinytrain import f32
from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, Resize, TfliteRead, integer_form
from tinytrain.ops.bias_grad import BiasGradAttrs
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.ops.conv2d import input_magnitude, weight_factors, weight_magnitude
from tinytrain.ops.conv2d.integer import input_gradient
from tinytrain.ops.conv2d.integer import Conv2dGradInputIntAttrs, bound as conv_bound, reference as conv_reference
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.quant import Requant, activation_range, ort_requant, requantize


@dataclass(frozen=True)
class FullyConnectedAttrs:
    requant: Requant
    act_min: int = -128
    act_max: int = 127


def infer_shapes(a: FullyConnectedAttrs, ins) -> list[tuple[int, ...]]:
    x, w = ins[0], ins[1]
    if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"fully_connected: input {x.shape} does not match weight {w.shape}")
    return [(x.shape[0], w.shape[0])]


def accumulate(x: np.ndarray, zx: int, w: np.ndarray, zw, bias: np.ndarray | None) -> np.ndarray:
    xz = x.astype(np.float64) - zx
    wz = w.astype(np.float64) - np.asarray(zw, np.float64).reshape(-1, 1)
    acc = (xz @ wz.T).astype(np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    return acc


def reference(a: FullyConnectedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    bias = arrays[2] if len(arrays) > 2 else None
    acc = accumulate(arrays[0], ins[0].quant.zp, arrays[1], ins[1].quant.zero_point, bias)
    return [requantize(acc, a.requant, outs[0].quant.zp, a.act_min, a.act_max)]


def macs(a: FullyConnectedAttrs, ins, outs) -> int:
    return ins[1].shape[0] * ins[1].shape[1]



# ---- backward (fp32, real values; float32 sums in the kernels' order, kernels/fully_connected_grad.c.j2) ----

@dataclass(frozen=True)
class FullyConnectedGradInputAttrs:
    """g_x (N,K) = g_z (N,C_out) @ s_w (w - zw)."""


@dataclass(frozen=True)
class FullyConnectedGradWeightAttrs:
    """g_w (C_sel,K) = g_z[:, channels]^T @ s_x (x - zx), all channels when None."""

    channels: tuple[int, ...] | None = None


def grad_input_shapes(a: FullyConnectedGradInputAttrs, ins) -> list[tuple[int, ...]]:
    g, w = ins
    if len(g.shape) != 2 or g.shape[1] != w.shape[0]:
        raise ValueError(f"fully_connected_grad_input: gradient {g.shape} does not match weight {w.shape}")
    return [(g.shape[0], w.shape[1])]


def grad_input_reference(a: FullyConnectedGradInputAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """gx[n,k] = sum_o (gz[n,o] * s_w[o]) * (w[o,k] - zw[o]) from +0 in order o = 0..Co-1, each term one fmaf, the
    first factor rounded to float32 (docs/design.md §3b)."""

    gq, d = (v.astype(np.float64) for v in weight_factors(arrays[0], arrays[1], ins[1]))  # (N,Co), (Co,K): exact
    gx = np.zeros((gq.shape[0], d.shape[1]), np.float32)
    for o in range(d.shape[0]):
        gx = f32.fma_product(gq[:, o, None] * d[o], gx)
    return [gx]


def grad_weight_shapes(a: FullyConnectedGradWeightAttrs, ins) -> list[tuple[int, ...]]:
    g, x = ins
    cout = g.shape[1]
    if a.channels is not None and (not a.channels or list(a.channels) != sorted(set(a.channels))
                                   or a.channels[0] < 0 or a.channels[-1] >= cout):
        raise ValueError(f"fully_connected_grad_weight: channels {a.channels} are not increasing channels of {cout}")
    return [(cout if a.channels is None else len(a.channels), x.shape[1])]


def grad_weight_reference(a: FullyConnectedGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """gw[s,k] = (gz[s] * s_x) * (x[k] - zx) (kernels/fully_connected_grad.c.j2: batch 1, one float32 product); a
    batch's further samples are added in order, each with one fmaf."""
    g = arrays[0].astype(np.float32) * np.float32(ins[1].quant.s)
    if a.channels is not None:
        g = g[:, np.asarray(a.channels)]
    x = (arrays[1].astype(np.int32) - np.int32(ins[1].quant.zp)).astype(np.float32)
    gw = g[0][:, None] * x[0][None, :]
    for n in range(1, len(g)):
        gw = f32.fmaf(g[n][:, None], x[n][None, :], gw)
    return [gw]


def grad_input_macs(a, ins, outs) -> int:
    return ins[1].shape[0] * ins[1].shape[1]


def grad_weight_macs(a, ins, outs) -> int:
    return outs[0].shape[0] * outs[0].shape[1]


def grad_input_bound(a: FullyConnectedGradInputAttrs, ins, bounds) -> list[float]:
    return [bounds[0] * float(weight_magnitude(ins[1]).sum(axis=0).max())]


def grad_weight_bound(a: FullyConnectedGradWeightAttrs, ins, bounds) -> list[float]:
    return [bounds[0] * input_magnitude(ins[1])]


def backward(b, node, out_grads) -> list[str | None]:
    a: FullyConnectedAttrs = node.attrs
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    result: list[str | None] = [None] * len(node.inputs)
    if b.needs_grad(x):
        result[0] = b.emit("fully_connected_grad_input", [gz, w], FullyConnectedGradInputAttrs(),
                           f"{node.name}.grad_input")[0]
    if b.needs_grad(w):
        result[1] = b.emit("fully_connected_grad_weight", [gz, x], FullyConnectedGradWeightAttrs(),
                           f"{node.name}.grad_weight")[0]
    if bias and b.needs_grad(bias):
        result[2] = b.emit("bias_grad", [gz], BiasGradAttrs(), f"{node.name}.grad_bias")[0]
    return result


# ---- integer weight gradient (plan "backward": "int", training/integer_step.py) ----------------------------

def grad_weight_int_reference(a: FullyConnectedGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """g_w (C_sel,K) int32 = g_z[:, channels]^T @ (x - zx), exact integers (g_z int32 of scale s_g: g_w has scale
    s_g s_x). Its overflow proof is the bound rule (training/finite.py)."""
    g = arrays[0].astype(np.int64)
    if a.channels is not None:
        g = g[:, np.asarray(a.channels)]
    x = arrays[1].astype(np.int64) - ins[1].quant.zp
    return [(g.T @ x).astype(np.int32)]


def grad_weight_int_bound(a: FullyConnectedGradWeightAttrs, ins, bounds) -> list[float]:
    """N |g_z|max max|x - zx| (integers; N the batch, 1 on a device)."""
    zx = ins[1].quant.zp
    return [bounds[0] * ins[0].shape[0] * max(abs(-128 - zx), abs(127 - zx))]


# ---- integer input gradient (plan "backward": "int"): ops/conv2d/integer.py's arithmetic on a (C_out, K) weight ----

@dataclass(frozen=True)
class FullyConnectedGradInputIntAttrs:
    pre_shift: int = 0  # r
    shift: int = 0  # T
    limit: int = 2 ** 15 - 1  # L

    def as_conv(self):
        """The same arithmetic as a pointwise convolution's (ops/conv2d/integer.py) on N pixels."""

        return Conv2dGradInputIntAttrs((1, 1), (0, 0, 0, 0), (1, 1), pre_shift=self.pre_shift, shift=self.shift,
                                       limit=self.limit)


def _as_pointwise(w: np.ndarray) -> np.ndarray:
    return w.reshape(w.shape[0], 1, 1, w.shape[1])


def grad_input_int_shapes(a: FullyConnectedGradInputIntAttrs, ins) -> list[tuple[int, ...]]:
    return grad_input_shapes(FullyConnectedGradInputAttrs(), ins[:2]) + [(1,)]


def grad_input_int_reference(a: FullyConnectedGradInputIntAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """[g_x (N,K), e_x]: gs = (g_z M + half(r)) >> r, acc = gs @ (w - zw) (int32, exact), (acc + half(t)) >> t
    within the limit, t chosen at run time (ops/conv2d/integer.py, whose bound rule and shifts it shares)."""

    g, w, m = arrays[:3]
    out = replace(outs[0], shape=(g.shape[0], 1, 1, w.shape[1]))
    gx, e = conv_reference(a.as_conv(), [g.reshape(g.shape[0], 1, 1, -1), _as_pointwise(w), m, *arrays[3:]], ins,
                           [out, outs[1]])
    return [gx.reshape(outs[0].shape), e]


def grad_input_int_bound(a: FullyConnectedGradInputIntAttrs, ins, bounds) -> list[float]:
    w = replace(ins[1], shape=(ins[1].shape[0], 1, 1, ins[1].shape[1]), data=_as_pointwise(ins[1].data))
    return conv_bound(a.as_conv(), [ins[0], w, *ins[2:]], bounds)


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    a = p.args
    s_x = cv.tensors[a["x"]].quant.s
    s_w = cv.tensors[a["w"]].quant.scale
    amin, amax = activation_range(yq.zp, yq.s, p.lo, p.hi, half_even=True)
    attrs = FullyConnectedAttrs(ort_requant(s_x, s_w, yq.s), amin, amax)
    ins = [a["x"], a["w"]] + cv.bias_tensor(a["bias"], s_x, s_w, a["w"].removesuffix("_quantized") + "_bias")
    return cv.add_node("fully_connected", p.source, ins, out_hint, yq, attrs, p.source)


def _weight_tensor(cv, node, x, w, trans_b: bool) -> str:
    label = cv.label(node)
    if len(x.shape) != 2:
        raise cv.unsupported(f"{label}: input of shape {x.shape}; only 2-D (batch, features) inputs are supported "
                             f"(flatten before the layer)")
    if w.data.ndim != 2:
        raise cv.unsupported(f"{label}: weight of shape {tuple(w.data.shape)} is not 2-D")
    data = w.data if trans_b else w.data.T
    if data.shape[1] != x.shape[1]:
        raise cv.malformed(f"{label}: weight {tuple(w.data.shape)} does not match input {x.shape}")
    return cv.weight_tensor(w, np.ascontiguousarray(data), 0 if trans_b else 1, label)


def _onnx_layer(cv, node, x, w, trans_b: bool, alpha: float, bias, beta: float) -> None:
    label = cv.label(node)
    if alpha != 1.0:
        if not alpha > 0:
            raise cv.unsupported(f"{label}: alpha={alpha}; only a positive alpha is supported")
        w = replace(w, scale=w.scale * alpha)
    w_ir = _weight_tensor(cv, node, x, w, trans_b)
    s_w = np.asarray(cv.tensors[w_ir].quant.scale)
    floats = isinstance(bias, np.ndarray)  # else None or a quantized constant (DequantizeLinear of one)
    if bias is not None and beta != 1.0:
        bias, floats = (np.asarray(bias, np.float64) if floats else cv.real(bias)) * beta, True
    if bias is not None and floats:
        bias = np.asarray(bias, np.float64).reshape(-1)
    elif bias is not None and bias.data.ndim > 1:
        bias = cv.real(bias).reshape(-1)
    b = cv.bias_int32(bias, x.quant.s, s_w, label)
    cv.defer(node, "fully_connected", (1, cv.tensors[w_ir].shape[0]), onnx_emit, reopens=True, x=x.ir, w=w_ir,
             bias=b)


def onnx_gemm(cv, node) -> None:
    a = cv.attrs(node)
    if a.get("transA", 0):
        raise cv.unsupported(f"{cv.label(node)}: transA=1 is not supported")
    x = cv.dq_input(node, 0)
    w = cv.weight(node, 1)
    _onnx_layer(cv, node, x, w, bool(a.get("transB", 0)), float(a.get("alpha", 1.0)), cv.bias(node, 2),
                float(a.get("beta", 1.0)))


def onnx_matmul(cv, node) -> None:
    x = cv.dq_input(node, 0)
    w = cv.weight(node, 1)
    _onnx_layer(cv, node, x, w, False, 1.0, None, 1.0)


def _qlinear_layer(cv, node, x, w_idx: int, trans_b: bool, bias_idx: int | None, y_idx: int) -> None:
    w = cv.qconst(node, w_idx, w_idx + 1, w_idx + 2, 0 if trans_b else 1, "weight")
    if w.data.ndim != 2:
        raise cv.unsupported(f"{cv.label(node)}: weight of shape {tuple(w.data.shape)} is not 2-D (batched MatMul "
                             f"with per-batch weights is not supported)")
    w_ir = _weight_tensor(cv, node, x, w, trans_b)
    bias = None
    if bias_idx is not None and len(node.input) > bias_idx and node.input[bias_idx]:
        bias = cv.qconst_raw_int32(node, bias_idx, "bias")
    yq, dtype = cv.qlinear_output(node, y_idx, y_idx + 1)
    p = cv.defer(node, "fully_connected", (1, cv.tensors[w_ir].shape[0]), onnx_emit, reopens=True, x=x.ir, w=w_ir,
                 bias=bias)
    cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)


def onnx_qlinear_matmul(cv, node) -> None:
    """QLinearMatMul (2-D; weights (K, N), per-column scales allowed)."""
    _qlinear_layer(cv, node, cv.qlinear_input(node, 0, 1, 2), 3, False, None, 6)


def onnx_qgemm(cv, node) -> None:
    """com.microsoft QGemm (int32 bias, y_scale present)."""
    label, a = cv.label(node), cv.attrs(node)
    if a.get("transA", 0):
        raise cv.unsupported(f"{label}: transA=1 is not supported")
    if float(a.get("alpha", 1.0)) != 1.0:
        raise cv.unsupported(f"{label}: alpha={a['alpha']} is not supported (only 1)")
    if len(node.input) < 8 or not node.input[7]:
        raise cv.unsupported(f"{label} has a float output (no y_scale); quantize the model's outputs too")
    _qlinear_layer(cv, node, cv.qlinear_input(node, 0, 1, 2), 3, bool(a.get("transB", 0)), 6, 7)


def tflite_fully_connected(im, op) -> None:
    x, y = im.act(op.inputs[0]), im.act(op.outputs[0])
    if len(op.outputs) != 1:
        raise ModelError(f"operator {op.index} (FULLY_CONNECTED) has {len(op.outputs)} outputs")
    if op.options["weights_format"] != 0:
        raise UnsupportedModelError(f"operator {op.index} (FULLY_CONNECTED) uses shuffled weights")
    data, wt, wq, _ = im.weight(op.inputs[1], 2, 0)
    cout, k = data.shape
    if x.size != k:
        raise UnsupportedModelError(f"operator {op.index} (FULLY_CONNECTED): input {list(x.shape)} is not one "
                                    f"row of {k} (batched rows inside the model are not supported)")
    if y.size != cout:
        raise ModelError(f"operator {op.index} (FULLY_CONNECTED): output {list(y.shape)} for {cout} units")
    src = x.name
    if x.shape != (1, k):  # e.g. (1,1,1,K) from a pooling layer: flatten first
        src = im.tensor_like(x, f"{x.name}/flat", (1, k))
        im.node(op, "reshape", [x.name], [src], ReshapeAttrs((k,)), "_flatten")
    # Measured: tflite-micro and the reference kernels use the double product here, per tensor, per channel
    # and for uint8 (tests/frontends/test_tflite_frontend.py::test_requantization_multiplier_rule_matches_the_runtime).
    requant = im.multipliers(x.quant.s, wq.scale, y.quant.s, float_product=False)
    act_min, act_max = im.activation(op, y)
    w = im.add_weight(op.inputs[1], data, wq)
    b = im.add_bias(op, x, wq.scale)
    dst = y.name if y.shape == (1, cout) else im.tensor_like(y, f"{y.name}/2d", (1, cout))
    im.node(op, "fully_connected", [src, w] + ([b] if b else []), [dst], FullyConnectedAttrs(requant, act_min, act_max))
    if dst != y.name:  # keep_num_dims: compute (1, C_out), then restore the file's shape
        im.node(op, "reshape", [dst], [y.name], ReshapeAttrs(y.shape[1:]), "_unflatten")


def export(ex, n) -> None:
    a = n.attrs
    ins = [ex.dq(n.inputs[0], n.name), ex.weight(n.inputs[1], n.name)] + ex.bias(n, n.name)
    f = ex.node("Gemm", ins, f"{n.outputs[0]}_float", n.name, transB=1)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    b = params[1] if len(params) > 1 else None
    return t.torch.clamp(t.F.linear(xs[0].flatten(1), params[0], b), *clamp)


ONNX = {"Gemm": onnx_gemm, "MatMul": onnx_matmul}
ONNX_QOPERATOR = {"QLinearMatMul": onnx_qlinear_matmul, "com.microsoft.QGemm": onnx_qgemm}
TFLITE = {"FULLY_CONNECTED": TfliteRead(tflite_fully_connected, (8, (("activation", 0, "<b", 0),
                                                                     ("weights_format", 1, "<b", 0),
                                                                     ("keep_num_dims", 2, "<B", 0))),
                                        required=2, constants=(1, 2))}
DOC = OpDoc("FULLY_CONNECTED", "Gemm, MatMul (+Add) / QGemm, QLinearMatMul", "int32 acc, requantize",
            "input and weight gradients", "input, clamp mask")


def integer_input_gradient(node, rewrite):
    """fully_connected_grad_input -> fully_connected_grad_input_int (a pointwise convolution's arithmetic)."""
    return input_gradient(node, rewrite, "fully_connected_grad_input_int", False, FullyConnectedGradInputIntAttrs)


def integer_weight_gradient(rewrite, node, s_g: float) -> float:
    return s_g * float(np.float32(rewrite.tensors[node.inputs[1]].quant.s))


OP = OpDef("fully_connected", FullyConnectedAttrs, infer_shapes, reference, macs, backward=backward,
           resize=Resize(features=True), export=export, twin=twin, doc=DOC, layer=True)
GRAD_INPUT = OpDef("fully_connected_grad_input", FullyConnectedGradInputAttrs, grad_input_shapes,
                   grad_input_reference, grad_input_macs, bound=grad_input_bound, integer=integer_input_gradient)
GRAD_WEIGHT = OpDef("fully_connected_grad_weight", FullyConnectedGradWeightAttrs, grad_weight_shapes,
                    grad_weight_reference, grad_weight_macs, bound=grad_weight_bound,
                    integer=integer_form("fully_connected_grad_weight_int", integer_weight_gradient))
GRAD_WEIGHT_INT = OpDef("fully_connected_grad_weight_int", FullyConnectedGradWeightAttrs, grad_weight_shapes,
                        grad_weight_int_reference, grad_weight_macs, bound=grad_weight_int_bound)
GRAD_INPUT_INT = OpDef("fully_connected_grad_input_int", FullyConnectedGradInputIntAttrs, grad_input_int_shapes,
                       grad_input_int_reference, grad_input_macs, bound=grad_input_int_bound)
OPS = (OP, GRAD_INPUT, GRAD_WEIGHT, GRAD_WEIGHT_INT, GRAD_INPUT_INT)
