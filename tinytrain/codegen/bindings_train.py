"""C template bindings of the training step: loss, backward and update ops (fp32), one function per op.

Same contract as ``bindings.py`` (kernel family, template parameters, parameter list and call arguments
from one place). Training bindings read the emitter's training context, which adds to the forward one:
``ctx.fp(name)`` (an fp32 tensor in the arena), ``ctx.bits(name)`` (a packed uint8 clamp mask in the arena),
``ctx.state(name)`` (a tensor the step updates in place: the SRAM copy of a trainable weight or bias, or a
momentum buffer), ``ctx.scalar(name)`` (the C
expression of an int32 graph input of one element: the label or the step counter) and ``ctx.scratch(node)``
(the fp32 scratch the memory plan reserved for the node's kernel, ``OpDef.scratch``).

Every fp32 kernel reads saved int8 activations and int8 weights and dequantizes them on the fly, with
the float32 scale of the simulator (``ops/conv2d.py: dequantize_input / dequantize_weight``).
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings import Binding, Call, Param, _Signature, _weight, _weight_zero_points, _window_name
from tinytrain.codegen.cformat import float_literal
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Node, Tensor
from tinytrain.ops import grad_weight_sgd_update as fused
from tinytrain.ops.conv2d import grad_input_block
from tinytrain.ops.sgd_update import GRAD, MOMENTUM, PARAM, SCALE, STEP, Rounding


def _channel_range(channels, cout: int, node: Node) -> tuple[int, int]:
    """(c0, Cs) of a contiguous channel selection (plans select channels 0..n-1)."""
    if channels is None:
        return 0, cout
    c0 = channels[0]
    if tuple(channels) != tuple(range(c0, c0 + len(channels))):
        raise UnsupportedModelError(f"codegen: node {node.name} updates non-contiguous channels {channels}; "
                                    "the C kernels take a channel range")
    return c0, len(channels)


def _weight_dequant(s: _Signature, ctx, node: Node, w: Tensor) -> bool:
    """Add the float32 per-channel scale (and the zero points when any is non-zero); True if zero points."""
    cout = w.shape[0]
    scale = np.broadcast_to(np.asarray(w.quant.scale, np.float32), (cout,))
    s.add("const float *w_scale", ctx.table(node, "w_scale", np.ascontiguousarray(scale)), "(Co,)")
    wzp = _weight_zero_points(w, cout)
    if np.any(wzp):
        s.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
        return True
    return False


def _input_dequant(s: _Signature, x: Tensor) -> None:
    s.int32s(in_zp=x.quant.zp)
    s.add("float in_scale", float_literal(x.quant.s))


def _conv_geometry(a, w_shape, padding, groups, cin, cout) -> tuple[str, dict]:
    _, kh, kw, _ = w_shape
    (sh, sw), (dh, dw), (pt, pl) = a.stride, a.dilation, padding[:2]
    padded = any(padding)
    if groups != 1:
        variant = "depthwise"
    elif (kh, kw) == (1, 1) and a.stride == (1, 1) and not padded:
        variant = "pointwise"
    else:
        variant = "regular"
    k = dict(variant=variant, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, padded=padded,
             mult=cout // cin if groups != 1 else 1)
    window = _window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)
    if variant == "pointwise":
        tag = "1x1"
    elif variant == "depthwise":
        tag = f"depthwise_{window}" + (f"_m{k['mult']}" if k["mult"] > 1 else "")
    else:
        tag = window
    return tag, k


def conv2d_grad_input(node: Node, ctx) -> Call:
    a = node.attrs
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = gx.shape
    tag, k = _conv_geometry(a, w.shape, a.padding, a.groups, cin, cout)
    s = _Signature()
    pointwise = k["variant"] == "pointwise"
    s.add("float *gx", ctx.fp(gx.name), "(P,Ci)" if pointwise else "(H,W,Ci)")
    s.add("const float *gz", ctx.fp(g.name), "(P,Co)" if pointwise else "(Ho,Wo,Co)")
    k["split"] = _weight(s, ctx, w, "(Co,Ci)" if pointwise else (
        f"(Co,{k['kh']},{k['kw']})" if k["variant"] == "depthwise" else f"(Co,{k['kh']},{k['kw']},Ci)"))
    has_wzp = _weight_dequant(s, ctx, node, w)
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    else:
        s.ints(H=h, W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    k["has_wzp"] = has_wzp
    block = grad_input_block(a, [g, w], [gx])
    k["block"] = block > 0
    if block:  # B channels at a time through the node's scratch (ops/conv2d.py)
        s.add("float *scratch", ctx.scratch(node), "(H,W,B)")
        s.ints(B=block)
    return s.call("conv2d_grad_input", f"tt_conv_{tag}_grad_input_f32" + ("_wzp" if has_wzp else "")
                  + ("_split" if k["split"] else "") + ("_blocked" if k["block"] else ""), k)


def conv2d_grad_weight(node: Node, ctx) -> Call:
    return _conv2d_grad_weight(node, ctx, node.attrs, node.inputs, ctx.fp(node.outputs[0]))


def _conv2d_grad_weight(node: Node, ctx, a, inputs, gw: str) -> Call:
    """The weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression)."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = x.shape
    c0, cs = _channel_range(a.channels, cout, node)
    tag, k = _conv_geometry(a, (cout,) + tuple(a.kernel) + (0,), a.padding, a.groups, cin, cout)
    pointwise = k["variant"] == "pointwise"
    s = _Signature()
    s.add("float *gw", gw, "(Cs,Ci)" if pointwise else (
        f"(Cs,{k['kh']},{k['kw']})" if k["variant"] == "depthwise" else f"(Cs,{k['kh']},{k['kw']},Ci)"))
    s.add("const float *gz", ctx.fp(g.name), "(P,Co)" if pointwise else "(Ho,Wo,Co)")
    s.add("const int8_t *inp", ctx.act(x.name), "(P,Ci)" if pointwise else "(H,W,Ci)")
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    elif k["padded"]:
        s.ints(H=h, W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    else:  # no bounds checks: the input height is not needed
        s.ints(W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    s.ints(c0=c0, Cs=cs)
    _input_dequant(s, x)
    return s.call("conv2d_grad_weight", f"tt_conv_{tag}_grad_weight_f32", k)


def fully_connected_grad_input(node: Node, ctx) -> Call:
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    cout, depth = w.shape
    s = _Signature()
    s.add("float *gx", ctx.fp(gx.name), "(K,)")
    s.add("const float *gz", ctx.fp(g.name), "(Co,)")
    split = _weight(s, ctx, w, "(Co,K)")
    has_wzp = _weight_dequant(s, ctx, node, w)
    s.ints(K=depth, Co=cout)
    return s.call("fully_connected_grad", "tt_fully_connected_grad_input_f32" + ("_wzp" if has_wzp else "")
                  + ("_split" if split else ""), dict(variant="input", has_wzp=has_wzp, split=split))


def fully_connected_grad_weight(node: Node, ctx) -> Call:
    return _fully_connected_grad_weight(node, ctx, node.attrs, node.inputs, ctx.fp(node.outputs[0]))


def _fully_connected_grad_weight(node: Node, ctx, a, inputs, gw: str) -> Call:
    """The weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression)."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    cout, depth = g.shape[1], x.shape[1]
    c0, cs = _channel_range(a.channels, cout, node)
    s = _Signature()
    s.add("float *gw", gw, "(Cs,K)")
    s.add("const float *gz", ctx.fp(g.name), "(Co,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(K,)")
    s.ints(K=depth, c0=c0, Cs=cs)
    _input_dequant(s, x)
    return s.call("fully_connected_grad", "tt_fully_connected_grad_weight_f32",
                  dict(variant="weight", has_wzp=False, split=False))


def softmax_xent(node: Node, ctx, grad: bool = False) -> Call:
    q, label = ctx.tensor(node.inputs[0]), node.inputs[1]
    out = ctx.tensor(node.outputs[0])
    if q.shape[0] != 1:
        raise UnsupportedModelError("codegen: a training step takes one sample (batch 1)")
    s = _Signature()
    s.add("float *grad" if grad else "float *loss", ctx.fp(out.name), "(D,)" if grad else "(1,)")
    s.add("const int8_t *logits", ctx.act(q.name), "(D,)")
    s.ints(D=q.shape[-1])
    s.int32s(zp=q.quant.zp)
    s.add("float scale", float_literal(q.quant.s))
    s.add("int label", ctx.scalar(label))
    return s.call("softmax_xent", "tt_softmax_xent_grad_f32" if grad else "tt_softmax_xent_loss_f32", dict(grad=grad))


def softmax_xent_grad(node: Node, ctx) -> Call:
    return softmax_xent(node, ctx, grad=True)


def clamp_mask(node: Node, ctx) -> Call:
    g, y, out = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = _Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *g", ctx.fp(g.name), "(N,)")
    s.add("const int8_t *y", ctx.act(y.name), "(N,)")
    s.ints(N=out.size)
    s.int32s(act_min=node.attrs.act_min, act_max=node.attrs.act_max)
    return s.call("clamp_mask", "tt_clamp_mask_f32", {})


def pack_clamp_mask(node: Node, ctx) -> Call:
    """A forward node of the training step: the clamp mask of a saved output, in bits (``ctx.bits``)."""
    y, bits = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    s = _Signature()
    s.add("uint8_t *bits", ctx.bits(bits.name), "((N+7)/8,)")
    s.add("const int8_t *y", ctx.act(y.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(act_min=node.attrs.act_min, act_max=node.attrs.act_max)
    return s.call("pack_clamp_mask", "tt_pack_clamp_mask_s8", {})


def clamp_mask_packed(node: Node, ctx) -> Call:
    g, bits, out = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = _Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *g", ctx.fp(g.name), "(N,)")
    s.add("const uint8_t *bits", ctx.bits(bits.name), "((N+7)/8,)")
    s.ints(N=out.size)
    return s.call("clamp_mask_packed", "tt_clamp_mask_packed_f32", {})


def grad_accumulate(node: Node, ctx) -> Call:
    a, b, out = (ctx.tensor(n) for n in (*node.inputs, node.outputs[0]))
    s = _Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *a", ctx.fp(a.name), "(N,)")
    s.add("const float *b", ctx.fp(b.name), "(N,)")
    s.ints(N=out.size)
    return s.call("grad_accumulate", "tt_grad_accumulate_f32", {})


def bias_grad(node: Node, ctx) -> Call:
    g, gb = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    c = g.shape[-1]
    s = _Signature()
    s.add("float *gb", ctx.fp(gb.name), "(C,)")
    s.add("const float *g", ctx.fp(g.name), "(P,C)")
    s.ints(P=g.size // c, C=c)
    return s.call("bias_grad", "tt_bias_grad_f32", {})


def mean_grad(node: Node, ctx) -> Call:
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = gx.shape
    s = _Signature()
    s.add("float *gx", ctx.fp(gx.name), "(P,C)")
    s.add("const float *g", ctx.fp(g.name), "(C,)")
    s.ints(P=h * wd, C=c)
    return s.call("mean_grad", "tt_mean_grad_f32", {})


def mean_grad_masked(node: Node, ctx) -> Call:
    g, bits, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, h, wd, c = gx.shape
    s = _Signature()
    s.add("float *gx", ctx.fp(gx.name), "(P,C)")
    s.add("const float *g", ctx.fp(g.name), "(C,)")
    s.add("const uint8_t *bits", ctx.bits(bits.name), "((P*C+7)/8,)")
    s.ints(P=h * wd, C=c)
    return s.call("mean_grad_masked", "tt_mean_grad_masked_f32", {})


def avg_pool2d_grad(node: Node, ctx) -> Call:
    a = node.attrs
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, ho, wo, c = g.shape
    _, h, wd, _ = gx.shape
    (kh, kw), (sh, sw), (pt, pl) = a.kernel, a.stride, a.padding[:2]
    s = _Signature()
    s.add("float *gx", ctx.fp(gx.name), "(H,W,C)")
    s.add("const float *g", ctx.fp(g.name), "(Ho,Wo,C)")
    s.ints(H=h, W=wd, C=c, Ho=ho, Wo=wo)
    name = f"tt_avg_pool_{_window_name(kh, kw, sh, sw, pt=pt, pl=pl, padded=any(a.padding))}_grad_f32"
    return s.call("avg_pool2d_grad", name, dict(kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl))


def pad_grad(node: Node, ctx) -> Call:
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    dims, pads = list(gx.shape[1:]), list(node.attrs.pads)
    if len(dims) > 3:
        raise UnsupportedModelError(f"pad_grad: {len(dims)} non-batch dimensions, the C kernel handles up to 3")
    dims, pads = [1] * (3 - len(dims)) + dims, [(0, 0)] * (3 - len(pads)) + pads
    s = _Signature()
    s.add("float *gx", ctx.fp(gx.name), "(D0,D1,D2)")
    s.add("const float *g", ctx.fp(g.name), "(O0,O1,O2)")
    s.ints(D0=dims[0], D1=dims[1], D2=dims[2], B0=pads[0][0], B1=pads[1][0], B2=pads[2][0],
           O1=dims[1] + sum(pads[1]), O2=dims[2] + sum(pads[2]))
    return s.call("pad_grad", "tt_pad_grad_f32", {})


def sgd_update(node: Node, ctx) -> Call:
    names = list(node.inputs) + [""] * (STEP + 1 - len(node.inputs))
    return _sgd_update(node, ctx, node.attrs, names[PARAM], ctx.fp(names[GRAD]), names[SCALE], names[MOMENTUM],
                       names[STEP], block=False)


def _sgd_update(node: Node, ctx, a, param: str, grad: str, scale: str, momentum: str, step: str, block: bool) -> Call:
    """The update of ``param`` by the gradient at ``grad`` (a C pointer expression). ``block``: a kernel that
    updates a block of rows of the selection, given the index i0 of its first element (0 here)."""
    p, k = ctx.tensor(param), ctx.tensor(scale)
    ptype = {DType.INT8: "int8_t", DType.INT32: "int32_t"}.get(p.dtype)
    if ptype is None:
        raise UnsupportedModelError(f"codegen: cannot update {p.dtype.value} parameter {p.name}")
    cout = p.shape[0]
    c0, cs = _channel_range(a.channels, cout, node)
    if ctx.trainable_rows(p.name) not in (None, cs):
        raise AssertionError(f"{p.name}: {ctx.trainable_rows(p.name)} rows in SRAM, {cs} updated")
    stochastic = a.rounding is Rounding.STOCHASTIC
    block = block and stochastic  # only the draws depend on the element's index in the selection
    s = _Signature()
    s.add(f"{ptype} *param", ctx.state(p.name), "(Cs,E)")
    s.add("const float *grad", grad, "(Cs,E)")
    s.add("const float *scale", ctx.const(k.name), "(Cs,)")
    if momentum:
        s.add("float *momentum", ctx.state(momentum), "(Cs,E)")
    s.ints(Cs=cs, E=p.size // cout)
    if momentum:
        s.add("float mu", float_literal(a.momentum))
    if stochastic:
        s.add("uint32_t seed", f"{a.seed & 0xFFFFFFFF}u")
        s.add("uint32_t stream", f"{a.stream & 0xFFFFFFFF}u")
    if a.reads_step:
        s.add("uint32_t step", f"(uint32_t){ctx.scalar(step)}")
    scheduled = a.schedule is not None
    if scheduled:
        s.add("uint32_t warmup", f"{a.schedule.warmup}u")
        s.add("uint32_t steps", f"{a.schedule.steps}u")
        s.add("float lr_floor", float_literal(a.schedule.floor))
    if block:
        s.ints(i0=0)
    bits = "s8" if ptype == "int8_t" else "s32"
    name = (f"tt_sgd_update_{bits}_{'stochastic' if stochastic else 'nearest'}" + ("_momentum" if momentum else "")
            + ("_cosine" if scheduled else "") + ("_block" if block else ""))
    return s.call("sgd_update", name, dict(ptype=ptype, stochastic=stochastic, momentum=bool(momentum), block=block,
                                           scheduled=scheduled))


# The fused kernel (template grad_weight_sgd_update) calls the two kernels on the block of rows r0 .. r0+rows-1 of
# the selection: their parameters named here get these arguments, the others the fused kernel's parameter of the
# same name (its parameters: the union of theirs but the block's own, plus scratch and B).
_BLOCK_GRAD_ARGS = {"gw": "scratch", "c0": "c0 + r0", "Cs": "rows"}
_BLOCK_UPDATE_ARGS = {"param": "param + r0 * E", "grad": "scratch", "scale": "scale + r0",
                      "momentum": "momentum + r0 * E", "Cs": "rows", "i0": "r0 * E"}
_BLOCK_ONLY = ("gw", "grad", "i0")


def _param_name(p: Param) -> str:
    return p.decl.split()[-1].lstrip("*")


def _grad_weight_sgd_update(node: Node, ctx, grad_weight) -> Call:
    """The fused node (ops/grad_weight_sgd_update.py): ``grad_weight`` (a grad-weight binding body) and the update,
    called per block of ``attrs.block`` rows with the block's gradient in the node's scratch."""
    a = node.attrs
    names = list(node.inputs) + [""] * (fused.STEP + 1 - len(node.inputs))
    scratch = ctx.scratch(node)
    update = _sgd_update(node, ctx, a.update, names[fused.PARAM], scratch, names[fused.SCALE], names[fused.MOMENTUM],
                         names[fused.STEP], block=True)
    grad = grad_weight(node, ctx, a.grad, (names[fused.G_Z], names[fused.X]), scratch)
    s = _Signature()
    args: dict[str, str] = {}
    for call in (update, grad):
        for p, arg in zip(call.kernel.params, call.args, strict=True):
            name = _param_name(p)
            if name in _BLOCK_ONLY:
                continue
            if name in args:
                if args[name] != arg:
                    raise AssertionError(f"{node.name}: {name} is {args[name]} for the update, {arg} for the gradient")
                continue
            args[name] = arg
            s.add(p.decl, arg, p.comment)
    s.add("float *scratch", scratch, "(B,E)")
    s.ints(B=a.block)
    consts = dict(grad_kernel=grad.kernel.name, update_kernel=update.kernel.name,
                  grad_args=tuple(_BLOCK_GRAD_ARGS.get(n, n) for n in map(_param_name, grad.kernel.params)),
                  update_args=tuple(_BLOCK_UPDATE_ARGS.get(n, n) for n in map(_param_name, update.kernel.params)))
    return s.call("grad_weight_sgd_update", f"{grad.kernel.name}_{update.kernel.name.removeprefix('tt_')}", consts,
                  (grad.kernel, update.kernel))


def conv2d_grad_weight_sgd_update(node: Node, ctx) -> Call:
    return _grad_weight_sgd_update(node, ctx, _conv2d_grad_weight)


def fully_connected_grad_weight_sgd_update(node: Node, ctx) -> Call:
    return _grad_weight_sgd_update(node, ctx, _fully_connected_grad_weight)


TRAIN_BINDINGS: dict[str, Binding] = {
    "avg_pool2d_grad": avg_pool2d_grad,
    "bias_grad": bias_grad,
    "clamp_mask": clamp_mask,
    "clamp_mask_packed": clamp_mask_packed,
    "conv2d_grad_input": conv2d_grad_input,
    "conv2d_grad_weight": conv2d_grad_weight,
    "conv2d_grad_weight_sgd_update": conv2d_grad_weight_sgd_update,
    "fully_connected_grad_input": fully_connected_grad_input,
    "fully_connected_grad_weight": fully_connected_grad_weight,
    "fully_connected_grad_weight_sgd_update": fully_connected_grad_weight_sgd_update,
    "grad_accumulate": grad_accumulate,
    "mean_grad": mean_grad,
    "mean_grad_masked": mean_grad_masked,
    "pack_clamp_mask": pack_clamp_mask,
    "pad_grad": pad_grad,
    "sgd_update": sgd_update,
    "softmax_xent": softmax_xent,
    "softmax_xent_grad": softmax_xent_grad,
}
