"""What every forward convolution variant's signature shares, in its order: output and input, then the variant's
weights and tables, the bias and requantization tables, the sizes, the band, the zero points and clamp range; and
the kernel name suffix and template parameters they imply."""

from __future__ import annotations

from tinytrain.codegen.bindings.common import (band_params, bias_wzp_suffix, requant_tables, rounding_suffix,
                                               rq_helper, weight_param)
from tinytrain.codegen.bindings.conv2d.layer import Conv
from tinytrain.codegen.context import Signature


def head(c: Conv) -> Signature:
    """The output and input pointers (an output pixel's inputs contiguous: pointwise)."""
    s = Signature()
    s.add("int8_t *out", c.ctx.act(c.y.name), "(P,Co)" if c.pointwise else "(Ho,Wo,Co)")
    s.add("const int8_t *inp", c.ctx.act(c.x.name), "(P,Ci)" if c.pointwise else "(H,W,Ci)")
    return s


def int8_weight(s: Signature, c: Conv) -> bool:
    """The int8 weight as the graph has it (common.weight_param: split into SRAM and flash rows in a step that
    updates some); whether split."""
    shape = "(Co,Ci)" if c.pointwise else (f"(Co,{c.kh},{c.kw})" if c.depthwise else f"(Co,{c.kh},{c.kw},Ci)")
    return weight_param(s, c.ctx, c.w, shape)


def requant(s: Signature, c: Conv, packed: bool) -> None:
    """The bias, and the requantization tables (the weight zero points in them unless a packed table has taken
    them off the weights)."""
    if c.bias is not None:
        s.add("const int32_t *bias", c.ctx.const(c.bias), "(Co,)")
    requant_tables(s, c.ctx, c.node, c.node.attrs.requant, c.cout, c.wzp if c.has_wzp and not packed else None)


def sizes(c: Conv, ci: bool, co: bool, planar: bool = False) -> dict[str, int]:
    """The sizes passed at run time: those not constants of the kernel (``ci`` / ``co``: the channel counts are
    parameters; ``planar``: the widths are constants). Without padding no bounds checks: no input height."""
    ci_, co_ = ({"Ci": c.cin} if ci else {}), ({"Co": c.cout} if co else {})
    if c.pointwise:
        return dict(P=c.pixels, **ci_, **co_)
    return dict(**({"H": c.h} if c.padded else {}), **({} if planar else {"W": c.wd}), **ci_,
                **({} if c.band else {"Ho": c.ho}), **({} if planar else {"Wo": c.wo}), **co_)


def tail(s: Signature, c: Conv, run_sizes: dict[str, int], split: bool, host: bool = False,
         zb: bool = False) -> tuple[str, dict]:
    """The sizes, the band's rows, the zero points and clamp range; returns the kernel name suffix and the template
    parameters. A device kernel whose output range is the full int8 range (ReLU6 folded into the output
    quantization, or no activation) stores its outputs saturated (SSAT) without the clamp's instructions, and has
    no act_min / act_max parameters (conv2d.c.j2, depthwise_conv2d.c.j2 "sat"); "zb" kernels have the input zero
    point in a table."""
    a = c.node.attrs
    s.ints(**run_sizes)
    if c.band:
        band_params(s, c.band)
    sat = not host and (a.act_min, a.act_max) == (-128, 127)
    s.int32s(**({} if zb else {"in_zp": c.x.quant.zp}), out_zp=c.y.quant.zp,
             **({} if sat else dict(act_min=a.act_min, act_max=a.act_max)))
    suffix = (bias_wzp_suffix(c.bias is not None, c.has_wzp) + rounding_suffix(a.requant)
              + ("_split" if split else "") + ("_band" if c.band else "") + ("_sat" if sat else ""))
    return suffix, dict(c.geometry, rq=rq_helper(a.requant), split=split, band=c.band is not None, sat=sat)
