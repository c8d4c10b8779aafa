"""Op handlers shared by the QDQ and QOperator frontends, and the helpers the format handlers use.

A handler reads its node's inputs from the :class:`Converter` and records its output value:
QuantizeLinear / DequantizeLinear, the layout ops (Flatten, Reshape, Squeeze, Unsqueeze,
Identity, Pad), Relu / Clip, the float islands (GlobalAveragePool, ReduceMean, AveragePool) and a
trailing Softmax / LogSoftmax (dropped, see onnx_requant).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from tinytrain.frontends.onnx_convert import Converter, Handler
from tinytrain.frontends.onnx_parse import QConst, attrs_of, elem_type_name, node_label, resolve_padding
from tinytrain.frontends.onnx_requant import round_half_even
from tinytrain.frontends.onnx_values import Act, ConvGeom, FVal, Pending, SoftmaxOut, onnx_shape, reshape_keeps_order, same_quant
from tinytrain.ops.conv2d import Conv2dAttrs, output_hw
from tinytrain.quant import Requant

_DUMMY_REQUANT = Requant((1 << 30,), (0,))


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
    if min(stride + dilation) < 1:
        raise cv.malformed(f"{label}: strides {list(stride)} and dilations {list(dilation)} must be positive")
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
    if len(stride) != 2 or min(kernel + stride) < 1:
        raise cv.malformed(f"{label}: kernel_shape {list(kernel)} and strides {list(stride)} must be 2-D and positive")
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
