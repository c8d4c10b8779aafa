"""C template bindings: one function per op turns a node into a call of a specialized kernel.

A binding decides the kernel family (a template under ``templates/kernels/``), the template
parameters that specialize it (kernel size, stride, padding, variant) and the kernel's parameter
list together with the call's arguments, so signature and call come from one place. What varies
per layer at run time (sizes, zero points, clamp range) is passed as plain ints; what shapes the
loops is a template parameter. Kernels with the same name are the same code and are emitted once.

Every binding reads the node and its tensors through the emitter's context (``ctx``):
``ctx.tensor(name)``, ``ctx.act(name)`` (pointer into the arena), ``ctx.const(name)`` (a frozen
graph constant in flash) and ``ctx.table(node, what, values)`` (a derived int32 table in flash).

Requantization rounds as the node's ``Requant`` says: the template parameter ``rq`` names the C helper
(``tt_requantize``, TFLite's double rounding, ``tt_requantize_single``, TFLITE_SINGLE_ROUNDING, or
``tt_requantize_fp32`` / ``tt_requantize_fp32_wide``, onnxruntime's float32 requantization in integers, the
first for shifts in -32..-2 only); single-rounding kernels carry ``_sr`` in their name, float32-rounding ones
``_f32`` (``_f32w``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tinytrain.ir import Node, Tensor


@dataclass(frozen=True)
class Param:
    decl: str     # e.g. "const int8_t *inp"
    comment: str  # shape of a pointer, e.g. "(H,W,Ci)"


@dataclass(frozen=True)
class Kernel:
    family: str                         # templates/kernels/<family>.c.j2
    name: str                           # the C function, unique per specialization
    consts: tuple[tuple[str, Any], ...]  # template parameters
    params: tuple[Param, ...]
    calls: tuple[Kernel, ...] = ()      # kernels its body calls (emitted before it)


@dataclass(frozen=True)
class Call:
    kernel: Kernel
    args: tuple[str, ...]


@dataclass
class _Signature:
    params: list[Param] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def add(self, decl: str, arg: Any, comment: str = "") -> None:
        self.params.append(Param(decl, comment))
        self.args.append(str(arg))

    def ints(self, **values: int) -> None:
        for name, v in values.items():
            self.add(f"int {name}", int(v))

    def int32s(self, **values: int) -> None:
        for name, v in values.items():
            self.add(f"int32_t {name}", int(v))

    def call(self, family: str, name: str, consts: dict[str, Any], calls: tuple[Kernel, ...] = ()) -> Call:
        return Call(Kernel(family, name, tuple(sorted(consts.items())), tuple(self.params), calls), tuple(self.args))


def _bias(node: Node) -> str | None:
    return node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None


def _weight_zero_points(w: Tensor, cout: int) -> np.ndarray:
    zp = np.asarray(w.quant.zero_point if w.quant is not None else (0,), np.int64)
    return np.broadcast_to(zp, (cout,)).astype(np.int32)


def _per_channel(values, cout: int) -> np.ndarray:
    v = np.asarray(values, np.int64)
    if v.size not in (1, cout):
        raise ValueError(f"{v.size} requantization parameters for {cout} channels")
    return np.broadcast_to(v, (cout,)).astype(np.int32)


# The longest input vector a convolution kernel widens into a stack buffer once per output pixel (conv2d.c.j2 "xw"):
# 256 int8 channels, 512 bytes of int16 (+ 256 bytes of im2col window), part of the measured stack (memory/report.py
# STACK_BYTES: the models measured have 256-channel pointwise inputs).
XW_MAX = 256
FP32_FAST_SHIFTS = range(-32, -1)  # tt_requantize_fp32_s8's precondition: scales 2^-32 .. 2^-2, as int8 layers have


def _rq(requant) -> str:
    """The C requantization helper of a Requant (a template parameter of the kernel). Float32 rounding with every
    shift in FP32_FAST_SHIFTS gets tt_requantize_fp32 (whose int8-output form has a 32-bit fast path), any other
    tt_requantize_fp32_wide (the exact arithmetic alone)."""
    if requant.fp32:
        return "tt_requantize_fp32" if all(s in FP32_FAST_SHIFTS for s in requant.shift) else "tt_requantize_fp32_wide"
    return "tt_requantize_single" if requant.single_rounding else "tt_requantize"


def _sr(*requants) -> str:
    """Kernel name suffix of the rounding: "" (double), "_sr" (single), "_f32" / "_f32w" (onnxruntime's float32,
    tt_requantize_fp32 / _wide), or if mixed "_sr" + one code per Requant (0 double, 1 single, f / w float32)."""
    codes = [{"tt_requantize_fp32": "f", "tt_requantize_fp32_wide": "w"}.get(_rq(r), str(int(r.single_rounding)))
             for r in requants]
    if all(c == "0" for c in codes):
        return ""
    if all(c == "1" for c in codes):
        return "_sr"
    if all(c in "fw" for c in codes) and len(set(codes)) == 1:
        return "_f32" if codes[0] == "f" else "_f32w"
    return "_sr" + "".join(codes)


def _requant_tables(sig: _Signature, ctx, node: Node, requant, cout: int, wzp: np.ndarray | None) -> None:
    """Per output channel: the weight zero points (if any) and the requantization, multiplier and shift side by side
    (one double-word load per output on a Cortex-M)."""
    if wzp is not None:
        sig.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
    rq = np.stack([_per_channel(requant.multiplier, cout), _per_channel(requant.shift, cout)], axis=1)
    sig.add("const int32_t *rq", ctx.table(node, "requant", rq.reshape(-1)), "(Co,2): multiplier, shift")


def _weight(sig: _Signature, ctx, w: Tensor, comment: str) -> bool:
    """Add the weight pointer. In a training step whose plan updates only the first Cs output channels of
    ``w`` (``ctx.trainable_rows``), ``weight`` is the SRAM copy of those rows and ``weight_frozen`` the flash
    original, read for rows >= Cs (template parameter ``split``); returns whether it is split."""
    rows = ctx.trainable_rows(w.name)
    if rows is None:
        sig.add("const int8_t *weight", ctx.const(w.name), comment)
        return False
    sig.add("const int8_t *weight", ctx.const(w.name), comment.replace("(Co,", "(Cs,"))
    sig.add("const int8_t *weight_frozen", ctx.frozen(w.name), comment + ", rows >= Cs")
    sig.ints(Cs=rows)
    return True


def _suffix(has_bias: bool, has_wzp: bool) -> str:
    return ("" if has_bias else "_nobias") + ("_wzp" if has_wzp else "")


@dataclass(frozen=True)
class Band:
    """A band of output rows of a windowed kernel in a streamed region (codegen/emit_stream.py): C expressions
    of the first and end output rows and of the rows the input and output buffers start at (line buffers)."""

    oy_begin: str
    oy_end: str
    in_row0: str
    out_row0: str


def _band(sig: _Signature, band: Band) -> None:
    """The rows a windowed kernel computes (template parameter ``band``): output rows [oy_begin, oy_end), input
    row r at inp + (r - in_row0) * W * Ci, output row oy at out + (oy - out_row0) * Wo * Co."""
    sig.add("int oy_begin", band.oy_begin)
    sig.add("int oy_end", band.oy_end)
    sig.add("int in_row0", band.in_row0)
    sig.add("int out_row0", band.out_row0)


def _window_name(kh: int, kw: int, sh: int, sw: int, dh: int = 1, dw: int = 1, pt: int = 0, pl: int = 0,
                 padded: bool = False) -> str:
    s = f"{kh}x{kw}_s{sh}" + ("" if sh == sw else f"x{sw}")
    if (dh, dw) != (1, 1):
        s += f"_d{dh}" + ("" if dh == dw else f"x{dw}")
    if padded:
        s += f"_p{pt}x{pl}"
    return s


def conv2d(node: Node, ctx) -> Call:
    a = node.attrs
    x, w, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    _, ho, wo, _ = y.shape
    bias = _bias(node)
    wzp = _weight_zero_points(w, cout)
    has_wzp = bool(np.any(wzp))
    depthwise = a.groups != 1
    padded = any(a.padding)
    pointwise = not depthwise and (kh, kw) == (1, 1) and a.stride == (1, 1) and not padded
    (sh, sw), (dh, dw), (pt, pl) = a.stride, a.dilation, a.padding[:2]
    k = dict(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, padded=padded,
             has_bias=bias is not None, has_wzp=has_wzp)
    s = _Signature()
    if pointwise:
        s.add("int8_t *out", ctx.act(y.name), "(P,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(P,Ci)")
        split = _weight(s, ctx, w, "(Co,Ci)")
    else:
        s.add("int8_t *out", ctx.act(y.name), "(Ho,Wo,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(H,W,Ci)")
        split = _weight(s, ctx, w, f"(Co,{kh},{kw})" if depthwise else f"(Co,{kh},{kw},Ci)")
    if bias is not None:
        s.add("const int32_t *bias", ctx.const(bias), "(Co,)")
    _requant_tables(s, ctx, node, a.requant, cout, wzp if has_wzp else None)
    band = None if pointwise else ctx.band(node)
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    else:  # without padding no bounds checks: the input height is not needed
        s.ints(**({"H": h} if padded else {}), W=wd, Ci=cin, **({} if band else {"Ho": ho}), Wo=wo, Co=cout)
    if band:
        _band(s, band)
    s.int32s(in_zp=x.quant.zp, out_zp=y.quant.zp, act_min=a.act_min, act_max=a.act_max)
    suffix = (_suffix(bias is not None, has_wzp) + _sr(a.requant) + ("_split" if split else "")
              + ("_band" if band else ""))
    k["rq"], k["split"], k["band"] = _rq(a.requant), split, band is not None
    if depthwise:
        mult = cout // cin
        name = f"tt_depthwise_conv_{_window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}" + (
            f"_m{mult}" if mult > 1 else "") + f"_s8{suffix}"
        return s.call("depthwise_conv2d", name, dict(k, mult=mult))
    # The input vector of an output pixel (pointwise: Ci channels, regular: the kh * kw * Ci window) widened once
    # into a stack buffer when it is short enough (conv2d.c.j2 "xw"), for weights whose rows are one array (their
    # blocks of 4 rows are read as a row and offsets from it).
    xw = XW_MAX if cin * (1 if pointwise else kh * kw) <= XW_MAX and not split else 0
    stage = "_xw" if xw else ""
    if pointwise:
        return s.call("conv2d", f"tt_conv_1x1{stage}_s8{suffix}", dict(k, pointwise=True, xw=xw))
    return s.call("conv2d", f"tt_conv_{_window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}{stage}_s8{suffix}",
                  dict(k, pointwise=False, xw=xw))


def fully_connected(node: Node, ctx) -> Call:
    a = node.attrs
    x, w, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    cout, depth = w.shape
    bias = _bias(node)
    wzp = _weight_zero_points(w, cout)
    has_wzp = bool(np.any(wzp))
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(Co,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(K,)")
    split = _weight(s, ctx, w, "(Co,K)")
    if bias is not None:
        s.add("const int32_t *bias", ctx.const(bias), "(Co,)")
    _requant_tables(s, ctx, node, a.requant, cout, wzp if has_wzp else None)
    s.ints(K=depth, Co=cout)
    s.int32s(in_zp=x.quant.zp, out_zp=y.quant.zp, act_min=a.act_min, act_max=a.act_max)
    return s.call("fully_connected", f"tt_fully_connected_s8{_suffix(bias is not None, has_wzp)}{_sr(a.requant)}"
                  + ("_split" if split else ""), dict(has_bias=bias is not None, has_wzp=has_wzp, rq=_rq(a.requant),
                                                      split=split))


def add(node: Node, ctx) -> Call:
    a = node.attrs
    x1, x2, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    s.add("const int8_t *in1", ctx.act(x1.name), "(N,)")
    s.add("const int8_t *in2", ctx.act(x2.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(in1_zp=x1.quant.zp, in1_multiplier=a.input1.multiplier[0], in1_shift=a.input1.shift[0],
             in2_zp=x2.quant.zp, in2_multiplier=a.input2.multiplier[0], in2_shift=a.input2.shift[0],
             out_zp=y.quant.zp, out_multiplier=a.output.multiplier[0], out_shift=a.output.shift[0])
    s.ints(left_shift=a.left_shift)
    s.int32s(act_min=a.act_min, act_max=a.act_max)
    return s.call("add", "tt_add_s8" + _sr(a.input1, a.input2, a.output),
                  dict(rq1=_rq(a.input1), rq2=_rq(a.input2), rq_out=_rq(a.output)))


def avg_pool2d(node: Node, ctx) -> Call:
    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = x.shape
    _, ho, wo, _ = y.shape
    (kh, kw), (sh, sw), (pt, pl) = a.kernel, a.stride, a.padding[:2]
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(Ho,Wo,C)")
    s.add("const int8_t *inp", ctx.act(x.name), "(H,W,C)")
    s.ints(H=h, W=wd, C=c, Ho=ho, Wo=wo)
    rq = None
    if a.output is not None:  # another output quantization: multiplier and shift per valid-cell count
        s.add("const int32_t *multiplier", ctx.table(node, "multiplier", _per_channel(a.output.multiplier, kh * kw)),
              f"({kh * kw},) by count - 1")
        s.add("const int32_t *shift", ctx.table(node, "shift", _per_channel(a.output.shift, kh * kw)),
              f"({kh * kw},) by count - 1")
        s.int32s(in_zp=x.quant.zp, out_zp=y.quant.zp)
        rounding, rq = "requant", _rq(a.output)
        suffix = "_rq" + _sr(a.output)
    elif a.round_half_even:
        s.int32s(in_zp=x.quant.zp)
        rounding, suffix = "half_even", "_half_even"
    else:
        rounding, suffix = ("half_up", "_half_up") if a.round_half_up else ("away", "")
    s.int32s(act_min=a.act_min, act_max=a.act_max)
    name = f"tt_avg_pool_{_window_name(kh, kw, sh, sw, pt=pt, pl=pl, padded=any(a.padding))}_s8"
    return s.call("avg_pool2d", name + suffix,
                  dict(kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl, rounding=rounding, rq=rq))


def mean(node: Node, ctx) -> Call:
    """Mean over H, W: 1/count is in the multiplier (folded as tflite-micro's QuantizedMeanOrSum does, or
    already in the Requant: ops/mean.py's mean_multiplier)."""
    from tinytrain.ops.mean import mean_multiplier

    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = x.shape
    count = h * wd
    multiplier, shift = mean_multiplier(a, count)
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(C,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(P,C)")
    s.ints(P=count, C=c)
    s.int32s(in_zp=x.quant.zp, multiplier=multiplier, shift=shift,
             out_zp=y.quant.zp, act_min=a.act_min, act_max=a.act_max)
    return s.call("mean", "tt_mean_s8" + _sr(a.requant), dict(rq=_rq(a.requant)))


def pad(node: Node, ctx) -> Call:
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    dims, pads = list(x.shape[1:]), list(node.attrs.pads)
    if len(dims) > 3:
        raise ValueError(f"pad: {len(dims)} non-batch dimensions, the C kernel handles up to 3")
    dims, pads = [1] * (3 - len(dims)) + dims, [(0, 0)] * (3 - len(pads)) + pads
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(O0,O1,O2)")
    s.add("const int8_t *inp", ctx.act(x.name), "(D0,D1,D2)")
    s.ints(D0=dims[0], D1=dims[1], D2=dims[2], B0=pads[0][0], B1=pads[1][0], B2=pads[2][0],
           O0=dims[0] + sum(pads[0]), O1=dims[1] + sum(pads[1]), O2=dims[2] + sum(pads[2]))
    s.add("int value", y.quant.zp)
    return s.call("pad", "tt_pad_s8", {})


def requantize(node: Node, ctx) -> Call:
    r = node.attrs.requant
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(in_zp=x.quant.zp, multiplier=r.multiplier[0], shift=r.shift[0], out_zp=y.quant.zp)
    return s.call("requantize", "tt_requantize_tensor_s8" + _sr(r), dict(rq=_rq(r)))


def softmax(node: Node, ctx) -> Call:
    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    depth = x.shape[-1]
    s = _Signature()
    s.add("int8_t *out", ctx.act(y.name), "(R,D)")
    s.add("const int8_t *inp", ctx.act(x.name), "(R,D)")
    s.ints(R=x.size // depth, D=depth)
    s.int32s(input_multiplier=a.input_multiplier)
    s.ints(input_left_shift=a.input_left_shift)
    s.int32s(diff_min=a.diff_min)
    return s.call("softmax", "tt_softmax_s8", {})


Binding = Callable[[Node, Any], Call]

BINDINGS: dict[str, Binding] = {
    "add": add,
    "avg_pool2d": avg_pool2d,
    "conv2d": conv2d,
    "fully_connected": fully_connected,
    "mean": mean,
    "pad": pad,
    "requantize": requantize,
    "softmax": softmax,
}
