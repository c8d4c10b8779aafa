"""What several bindings share: bias and weight parameters, weight zero points, the requantization helper and
its kernel-name suffix, row bands, window names, channel selections, and the dequantization of the fp32 kernels.
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Band, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import Node, Tensor


def bias_input(node: Node) -> str | None:
    return node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None


def weight_zero_points(w: Tensor, cout: int) -> np.ndarray:
    zp = np.asarray(w.quant.zero_point if w.quant is not None else (0,), np.int64)
    return np.broadcast_to(zp, (cout,)).astype(np.int32)


def per_channel(values, cout: int) -> np.ndarray:
    v = np.asarray(values, np.int64)
    if v.size not in (1, cout):
        raise ValueError(f"{v.size} requantization parameters for {cout} channels")
    return np.broadcast_to(v, (cout,)).astype(np.int32)


FP32_FAST_SHIFTS = range(-32, -1)  # tt_requantize_fp32_s8's precondition: scales 2^-32 .. 2^-2, as int8 layers have


def rq_helper(requant) -> str:
    """The C requantization helper of a Requant (a template parameter of the kernel). Float32 rounding with every
    shift in FP32_FAST_SHIFTS gets tt_requantize_fp32 (whose int8-output form has a 32-bit fast path), any other
    tt_requantize_fp32_wide (the exact arithmetic alone)."""
    if requant.fp32:
        return "tt_requantize_fp32" if all(s in FP32_FAST_SHIFTS for s in requant.shift) else "tt_requantize_fp32_wide"
    return "tt_requantize_single" if requant.single_rounding else "tt_requantize"


def rq_operand(helper: str, multiplier, shift):
    """What a kernel passes its _s8 requantization helper beside the multiplier: the shift, or for
    tt_requantize_fp32_s8 the float32 bits of the scale multiplier * 2^(shift - 31) (which its FPU path loads as is:
    tt_fixedpoint.h TT_FP32_FPU; the integer path takes the shift back from the exponent). Scalars or arrays."""
    if helper != "tt_requantize_fp32":
        return shift
    m, e = np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    if np.any((m < 1 << 30) | (m & 0x7F != 0)):
        raise ValueError("tt_requantize_fp32_s8 needs multipliers in [2^30, 2^31) with 24-bit significands")
    bits = ((e + 126) << 23) + (m >> 7) - (1 << 23)  # sign 0, exponent shift - 1, significand m >> 7
    return bits.astype(np.int32) if bits.ndim else int(bits)


def rounding_suffix(*requants) -> str:
    """Kernel name suffix of the rounding: "" (double), "_sr" (single), "_f32" / "_f32w" (onnxruntime's float32,
    tt_requantize_fp32 / _wide), or if mixed "_sr" + one code per Requant (0 double, 1 single, f / w float32)."""
    codes = [{"tt_requantize_fp32": "f", "tt_requantize_fp32_wide": "w"}.get(rq_helper(r), str(int(r.single_rounding)))
             for r in requants]
    if all(c == "0" for c in codes):
        return ""
    if all(c == "1" for c in codes):
        return "_sr"
    if all(c in "fw" for c in codes) and len(set(codes)) == 1:
        return "_f32" if codes[0] == "f" else "_f32w"
    return "_sr" + "".join(codes)


def requant_tables(sig: Signature, ctx, node: Node, requant, cout: int, wzp: np.ndarray | None) -> None:
    """Per output channel: the weight zero points (if any) and the requantization, multiplier and shift (rq_operand)
    side by side (one double-word load per output on a Cortex-M)."""
    if wzp is not None:
        sig.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
    multiplier = per_channel(requant.multiplier, cout)
    rq = np.stack([multiplier, rq_operand(rq_helper(requant), multiplier, per_channel(requant.shift, cout))], axis=1)
    second = "scale's float32 bits" if rq_helper(requant) == "tt_requantize_fp32" else "shift"
    sig.add("const int32_t *rq", ctx.table(node, "requant", rq.reshape(-1)), f"(Co,2): multiplier, {second}")


def weight_param(sig: Signature, ctx, w: Tensor, comment: str) -> bool:
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


def bias_wzp_suffix(has_bias: bool, has_wzp: bool) -> str:
    return ("" if has_bias else "_nobias") + ("_wzp" if has_wzp else "")


def band_params(sig: Signature, band: Band) -> None:
    """The rows a windowed kernel computes (template parameter ``band``): output rows [oy_begin, oy_end), input
    row r at inp + (r - in_row0) * W * Ci, output row oy at out + (oy - out_row0) * Wo * Co."""
    sig.add("int oy_begin", band.oy_begin)
    sig.add("int oy_end", band.oy_end)
    sig.add("int in_row0", band.in_row0)
    sig.add("int out_row0", band.out_row0)


def window_name(kh: int, kw: int, sh: int, sw: int, dh: int = 1, dw: int = 1, pt: int = 0, pl: int = 0,
                 padded: bool = False) -> str:
    s = f"{kh}x{kw}_s{sh}" + ("" if sh == sw else f"x{sw}")
    if (dh, dw) != (1, 1):
        s += f"_d{dh}" + ("" if dh == dw else f"x{dw}")
    if padded:
        s += f"_p{pt}x{pl}"
    return s


def channel_range(channels, cout: int, node: Node) -> tuple[int, int]:
    """(c0, Cs) of a contiguous channel selection (plans select channels 0..n-1)."""
    if channels is None:
        return 0, cout
    c0 = channels[0]
    if tuple(channels) != tuple(range(c0, c0 + len(channels))):
        raise UnsupportedModelError(f"codegen: node {node.name} updates non-contiguous channels {channels}; "
                                    "the C kernels take a channel range")
    return c0, len(channels)


def weight_dequant(s: Signature, ctx, node: Node, w: Tensor) -> bool:
    """Add the float32 per-channel scale (and the zero points when any is non-zero); True if zero points."""
    cout = w.shape[0]
    scale = np.broadcast_to(np.asarray(w.quant.scale, np.float32), (cout,))
    s.add("const float *w_scale", ctx.table(node, "w_scale", np.ascontiguousarray(scale)), "(Co,)")
    wzp = weight_zero_points(w, cout)
    if np.any(wzp):
        s.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
        return True
    return False


def input_dequant(s: Signature, x: Tensor) -> None:
    s.int32s(in_zp=x.quant.zp)
    s.add("float in_scale", float_literal(x.quant.s))
