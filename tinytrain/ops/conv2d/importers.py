"""conv2d's hooks (ops/__init__.py): the ONNX readers (Conv between DequantizeLinear and QuantizeLinear,
QLinearConv), the TFLite readers (CONV_2D, DEPTHWISE_CONV_2D), the ONNX exporter and the PyTorch twin.

ONNX imports requantize with onnxruntime's float32 arithmetic (``quant.ort_requant``); TFLite imports as the runtime
that runs the model computes the multipliers: int8 (tflite-micro, per channel, also for a single scale)
double(s_in) * double(s_w) / double(s_out), uint8 (TF1-style, the reference kernels' GetQuantizedConvolutionMultipler)
double(float32(s_in * s_w)) / double(s_out).
"""

from __future__ import annotations

import numpy as np

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ops.conv2d.forward import Conv2dAttrs, output_hw
from tinytrain.quant import Requant, activation_range, ort_requant

_DUMMY_REQUANT = Requant((1 << 30,), (0,))


def _geometry(cv, node, x, w) -> tuple[tuple, tuple, tuple, int, tuple[int, int]]:
    """(stride, padding, dilation, groups, (Ho, Wo)) of a Conv / QLinearConv on x (NCHW) with weight w (OIHW)."""
    label, a = cv.label(node), cv.attrs(node)
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
        raise cv.unsupported(f"{label}: grouped convolution with group={groups} (neither 1 nor the {cin} input "
                             f"channels) is not supported; only regular and depthwise convolutions")
    stride = tuple(int(s) for s in a.get("strides", (1, 1)))
    dilation = tuple(int(d) for d in a.get("dilations", (1, 1)))
    if len(stride) != 2 or len(dilation) != 2:
        raise cv.unsupported(f"{label}: only 2-D convolutions are supported")
    if min(stride + dilation) < 1:
        raise cv.malformed(f"{label}: strides {list(stride)} and dilations {list(dilation)} must be positive")
    padding = cv.padding(a, (h, wd), (kh, kw), stride, dilation, label)
    ho, wo = output_hw(h, wd, kh, kw, Conv2dAttrs(stride, padding, _DUMMY_REQUANT, dilation, groups))
    if ho <= 0 or wo <= 0:
        raise cv.malformed(f"{label}: the kernel does not fit the input {x.shape}")
    return stride, padding, dilation, groups, (ho, wo)


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    a = p.args
    s_x = cv.tensors[a["x"]].quant.s
    s_w = cv.tensors[a["w"]].quant.scale
    amin, amax = activation_range(yq.zp, yq.s, p.lo, p.hi, half_even=True)
    stride, padding, dilation, groups = a["geometry"]
    attrs = Conv2dAttrs(stride, padding, ort_requant(s_x, s_w, yq.s), dilation, groups, amin, amax)
    ins = [a["x"], a["w"]] + cv.bias_tensor(a["bias"], s_x, s_w, a["w"].removesuffix("_quantized") + "_bias")
    return cv.add_node("conv2d", p.source, ins, out_hint, yq, attrs, p.source)


def _defer(cv, node, x, w, bias_of) -> None:
    """The convolution of x with weight w deferred to its output quantization; ``bias_of(s_w)``: its int32 bias."""
    stride, padding, dilation, groups, (ho, wo) = _geometry(cv, node, x, w)
    w_ir = cv.weight_tensor(w, w.data.transpose(0, 2, 3, 1), 0, cv.label(node))
    bias = bias_of(np.asarray(cv.tensors[w_ir].quant.scale))
    cv.defer(node, "conv2d", (1, w.data.shape[0], ho, wo), onnx_emit, reopens=True, x=x.ir, w=w_ir, bias=bias,
             geometry=(stride, padding, dilation, groups))


def onnx_conv(cv, node) -> None:
    """DQ(x), DQ(w int8 per-channel axis 0), DQ(b int32) -> Conv [-> Relu | Clip] -> Q."""
    x = cv.dq_input(node, 0, per_channel=True)
    w = cv.weight(node, 1)
    if x.gain is not None:  # an input quantized per channel (NNCF): its gain into the weight scale
        w = cv.depthwise_weight(node, x, w, int(cv.attrs(node).get("group", 1)))
    _defer(cv, node, x, w, lambda s_w: cv.bias_int32(cv.bias(node, 2), x.quant.s, s_w, cv.label(node)))


def onnx_qlinear_conv(cv, node) -> None:
    """QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B int32 with scale x_scale * w_scale])."""
    x = cv.qlinear_input(node, 0, 1, 2)
    w = cv.qconst(node, 3, 4, 5, 0, "weight")
    yq, dtype = cv.qlinear_output(node, 6, 7)
    _defer(cv, node, x, w, lambda s_w: cv.qconst_raw_int32(node, 8, "bias") if len(node.input) > 8 and node.input[8]
           else None)
    cv.set_output(node, cv.materialize(cv.values[node.output[0]].pending, yq, node.output[0]), dtype)


def tflite_conv(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    im.rank4(op, x)
    data, wt, wq, shift = im.weight(op.inputs[1], 4, 0)
    if data.shape[3] != x.shape[3]:
        raise UnsupportedModelError(f"operator {op.index} (CONV_2D): filter depth {data.shape[3]} != input "
                                    f"channels {x.shape[3]} (grouped convolution is not supported)")
    _tflite_layer(im, op, x, out, data, wq, shift, groups=1)


def tflite_depthwise_conv(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    im.rank4(op, x)
    data, wt, wq, shift = im.weight(op.inputs[1], 4, 3)
    if data.shape[0] != 1:
        raise ModelError(f"depthwise weight {wt.name!r} has shape {list(data.shape)}, expected [1,KH,KW,C*m]")
    cin, cout = x.shape[3], data.shape[3]
    multiplier = op.options["depth_multiplier"]
    if cout % cin or (multiplier > 0 and cout != cin * multiplier):
        raise ModelError(f"operator {op.index} (DEPTHWISE_CONV_2D): {cout} output channels for {cin} input "
                         f"channels and depth multiplier {multiplier}")
    _tflite_layer(im, op, x, out, np.ascontiguousarray(data.transpose(3, 1, 2, 0)), wq, shift, groups=cin)


def _tflite_layer(im, op, x, out, data: np.ndarray, wq, shift: int, groups: int) -> None:
    stride = im.stride(op)
    dilation = (op.options["dilation_h"], op.options["dilation_w"])
    if min(dilation) <= 0:
        raise ModelError(f"operator {op.index} ({op.name}) has dilation {list(dilation)}")
    padding = im.padding(op, x, out, data.shape[1:3], stride, dilation)
    if out.shape[3] != data.shape[0]:
        raise ModelError(f"operator {op.index} ({op.name}): output has {out.shape[3]} channels, filter "
                         f"{data.shape[0]}")
    # tflite-micro int8: per-channel double; uint8 (reference kernels): GetQuantizedConvolutionMultipler.
    requant = im.multipliers(x.quant.s, wq.scale, out.quant.s, float_product=shift != 0)
    act_min, act_max = im.activation(op, out)
    w = im.add_weight(op.inputs[1], data, wq)
    b = im.add_bias(op, x, wq.scale)
    attrs = Conv2dAttrs(stride, padding, requant, dilation, groups, act_min, act_max)
    im.node(op, "conv2d", [x.name, w] + ([b] if b else []), [out.name], attrs)


def export(ex, n) -> None:
    a = n.attrs
    w = ex.g.tensors[n.inputs[1]]
    ins = [ex.dq(n.inputs[0], n.name), ex.weight(n.inputs[1], n.name)] + ex.bias(n, n.name)
    f = ex.node("Conv", ins, f"{n.outputs[0]}_float", n.name, kernel_shape=list(w.shape[1:3]),
                strides=list(a.stride), pads=list(a.padding), dilations=list(a.dilation), group=a.groups)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    """params: the weight (OIHW) and the bias, if any."""
    a = node.attrs
    pt, pl, pb, pr = a.padding
    b = params[1] if len(params) > 1 else None
    y = t.F.conv2d(t.F.pad(xs[0], (pl, pr, pt, pb)), params[0], b, a.stride, 0, a.dilation, a.groups)
    return t.torch.clamp(y, *clamp)


_CONV_OPTIONS = (1, (("padding", 0, "<b", 0), ("stride_w", 1, "<i", 0), ("stride_h", 2, "<i", 0),
                     ("activation", 3, "<b", 0), ("dilation_w", 4, "<i", 1), ("dilation_h", 5, "<i", 1)))
_DEPTHWISE_OPTIONS = (2, (("padding", 0, "<b", 0), ("stride_w", 1, "<i", 0), ("stride_h", 2, "<i", 0),
                          ("depth_multiplier", 3, "<i", 0), ("activation", 4, "<b", 0), ("dilation_w", 5, "<i", 1),
                          ("dilation_h", 6, "<i", 1)))
