"""What an op's ONNX handler reads and records: the converter's methods for the handlers (``ONNX`` and
``ONNX_QOPERATOR`` of ``tinytrain/ops/<op>.py``, and the converter's own in boundary.py and clamp.py).

A handler ``h(cv, node)`` reads its inputs (``dq_input`` for a float op between DequantizeLinear and
QuantizeLinear, ``qlinear_input`` for a QOperator op's integer input, ``weight`` / ``bias`` for constants) and
records its output: ``defer`` a float computation until the QuantizeLinear that fixes its output, ``set_output``
an integer one (QOperator), ``record`` one in its input's form. Errors: ``unsupported`` / ``malformed``, each one
line naming the node (``label``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx

from tinytrain.frontends.onnx.channels import depthwise_weight
from tinytrain.frontends.onnx.constants import QConst
from tinytrain.frontends.onnx.emit import IRBuilder
from tinytrain.frontends.onnx.fold import AffineFolds
from tinytrain.frontends.onnx.layout import Permuted
from tinytrain.frontends.onnx.parse import attrs_of, elem_type_name, node_label, resolve_padding
from tinytrain.frontends.onnx.values import (Act, FVal, Pending, SoftmaxOut, ir_shape, onnx_shape, reshape_keeps_order,
                                            same_quant)
from tinytrain.ir import DType, QuantParams, Role, Tensor


class Reader(IRBuilder, AffineFolds):
    """The ONNX values during conversion and the reading / recording methods of the op handlers."""

    def __init__(self, model: onnx.ModelProto, name: str):
        super().__init__(model, name)
        self.values: dict[str, Act | FVal | SoftmaxOut] = {}

    # ----- node facts
    attrs = staticmethod(attrs_of)
    label = staticmethod(node_label)
    padding = staticmethod(resolve_padding)
    ir_shape = staticmethod(ir_shape)
    onnx_shape = staticmethod(onnx_shape)
    keeps_order = staticmethod(reshape_keeps_order)

    def value(self, node: onnx.NodeProto, idx: int):
        name = node.input[idx]
        if name in self.values:
            return self.values[name]
        if name in self.inits:
            arr = self.inits[name]
            if arr is None:
                raise self.unsupported(f"{node_label(node)}: constant '{name}' has element type "
                                       f"{elem_type_name(self.init_types[name])}, which tinytrain does not support")
            if arr.dtype.kind == "f":
                return FVal("fconst", array=arr.astype(np.float64), source=name)
            return arr
        raise self.malformed(f"{node_label(node)} reads '{name}', which nothing produces")

    # ----- integer activations (QOperator)
    def act_in(self, node: onnx.NodeProto, idx: int, quant: QuantParams | None = None, dtype: str | None = None) -> Act:
        """The integer activation at input idx; ``quant`` (from the consuming op) must match it."""
        v = self.value(node, idx)
        if isinstance(v, SoftmaxOut):
            raise self.unsupported(f"{node_label(node)} consumes the output of Softmax {v.source}; "
                                   f"Softmax is only supported as the model's last op")
        if not isinstance(v, Act):
            raise self.unsupported(f"{node_label(node)}: input '{node.input[idx]}' is not an int8/uint8 activation "
                                   f"(a constant or a float value); this pattern is not supported")
        if quant is not None:
            self.bind_quant(v, quant, dtype, node)
        return v

    def bind_quant(self, act: Act, quant: QuantParams, dtype: str | None, node: onnx.NodeProto) -> None:
        if dtype is not None and dtype != act.dtype:
            raise self.malformed(f"{node_label(node)} reads '{act.ir}' as {dtype} but it is {act.dtype}")
        if act.quant is None:
            act.quant = quant
            self.tensors[act.ir] = Tensor(act.ir, ir_shape(act.shape), DType.INT8, Role.INPUT, quant)
        elif not same_quant(act.quant, quant):
            raise self.unsupported(f"{node_label(node)} reads '{act.ir}' with scale {quant.s:.8g}, zero point {quant.zp} "
                                   f"but it was produced with scale {act.quant.s:.8g}, zero point {act.quant.zp}; "
                                   f"insert an explicit requantization (QuantizeLinear) between them")

    def new_act(self, ir: str, ir_shape_: tuple[int, ...], dtype: str) -> Act:
        return Act(ir, onnx_shape(ir_shape_), dtype, self.tensors[ir].quant)

    def qlinear_input(self, node: onnx.NodeProto, idx: int, s_idx: int, zp_idx: int, what: str = "input") -> Act:
        """A QOperator op's integer input ``idx`` with its scale and zero point at ``s_idx``, ``zp_idx``."""
        q, dtype = self.act_quant(node, s_idx, zp_idx, what)
        return self.act_in(node, idx, q, dtype)

    def qlinear_output(self, node: onnx.NodeProto, s_idx: int, zp_idx: int) -> tuple[QuantParams, str]:
        return self.act_quant(node, s_idx, zp_idx, "output")

    def set_output(self, node: onnx.NodeProto, ir: str, dtype: str) -> None:
        """Record output 0 as the integer activation held by IR tensor ``ir``."""
        self.values[node.output[0]] = self.new_act(ir, self.tensors[ir].shape, dtype)

    # ----- float values (QDQ and the QOperator float islands)
    def resolved(self, node: onnx.NodeProto, idx: int):
        """The value at input idx; a pending standalone Relu/Clip becomes a dequantized activation.

        Used where the clamp feeds a float op other than QuantizeLinear (QOperator float islands such as
        DQ -> Relu -> GlobalAveragePool): it is applied in the source's own quantization, which is exact
        (Q(min(x, c)) == min(Q(x), Q(c)) for a monotone Q).
        """
        v = self.value(node, idx)
        if isinstance(v, FVal) and v.kind == "pending" and v.pending.op == "clamp":
            src = self.tensors[v.pending.args["x"]]
            ir = self.materialize(v.pending, src.quant, node.input[idx] + "_clamped")
            v = FVal("dq", act=self.new_act(ir, self.tensors[ir].shape, v.pending.args["dtype"]), source=v.source)
            self.values[node.input[idx]] = v
        return v

    def dq_input(self, node: onnx.NodeProto, idx: int, what: str = "input", per_channel: bool = False) -> Act:
        """A float input that must be a dequantized activation (``per_channel``: one quantized per channel may be,
        channels.py: the reader undoes its gain)."""
        v = self.resolved(node, idx)
        if isinstance(v, FVal) and v.kind == "dq":
            if v.act.gain is not None and not per_channel:
                raise self.unsupported(f"{node_label(node)} reads '{node.input[idx]}', quantized per channel, which "
                                       f"only a depthwise Conv can read exactly; quantize activations per tensor "
                                       f"(NNCF: QuantizationParameters(per_channel=False))")
            return v.act
        if isinstance(v, Permuted):
            raise self.unsupported(f"{node_label(node)} reads '{node.input[idx]}', the NHWC transpose made by "
                                   f"{v.source}; only constant Mul / Div / Add / Sub, QuantizeLinear / DequantizeLinear "
                                   f"and the transpose back may read it")
        if isinstance(v, FVal) and v.kind == "softmax" or isinstance(v, SoftmaxOut):
            raise self.unsupported(f"{node_label(node)} consumes a Softmax output; Softmax is only supported as the "
                                   f"last op")
        if isinstance(v, FVal) and v.kind == "pending":
            raise self.unsupported(f"{node_label(node)}: its {what} is the float output of {v.pending.source} with no "
                                   f"QuantizeLinear in between (NNCF fuses a Conv / Gemm with the activation after "
                                   f"it so), and only a Relu / Clip is taken there; quantize that output too: "
                                   f"onnxruntime quantize_static or tinytrain quantize of the float model do")
        if isinstance(v, FVal) and v.kind == "input":
            raise self.unsupported(f"{node_label(node)} reads the float input directly; quantize the model with "
                                   f"onnxruntime quantize_static first")
        raise self.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is not a dequantized int8 activation")

    def int_or_dq(self, node: onnx.NodeProto, idx: int) -> tuple[Act, bool]:
        """The int8 activation at input idx, directly (QOperator: ops onnxruntime runs on int8 data) or through a
        DequantizeLinear (QDQ); the flag says which, so the result is recorded in the same form (``record``)."""
        v = self.resolved(node, idx)
        if isinstance(v, Act):
            return v, False
        if isinstance(v, FVal) and v.kind == "dq":
            return v.act, True
        raise self.unsupported(f"{node_label(node)}: input '{node.input[idx]}' is not an int8 activation or its "
                               f"DequantizeLinear; quantize the whole model (quantize_static)")

    def record(self, node: onnx.NodeProto, ir: str, like: Act, dq: bool) -> None:
        """Record output 0 (IR tensor ``ir``) as an integer activation, or its DequantizeLinear when ``dq``."""
        act = self.new_act(ir, self.tensors[ir].shape, like.dtype)
        self.values[node.output[0]] = FVal("dq", act=act, source=node_label(node)) if dq else act

    def defer(self, node: onnx.NodeProto, op: str, shape: tuple[int, ...], emit: Callable, reopens: bool = False,
              **args: Any) -> Pending:
        """Record output 0 as a float computation of ``op`` (ONNX ``shape``) that ``emit(cv, pending, yq,
        out_hint)`` emits once a QuantizeLinear fixes its output quantization yq (module values.py: Pending)."""
        p = Pending(op, tuple(shape), args, node_label(node), emit=emit, reopens=reopens)
        self.values[node.output[0]] = FVal("pending", pending=p, source=node_label(node))
        return p

    def pending_value(self, p: Pending) -> FVal:
        """The float value of a pending computation (to record as an output: ``values[name] = ...``)."""
        return FVal("pending", pending=p, source=p.source)

    def channels_first(self, node: onnx.NodeProto) -> None:
        """A com.microsoft QLinear pool must read NCHW (channels_last=0)."""
        if attrs_of(node).get("channels_last", 0):
            raise self.unsupported(f"{node_label(node)}: channels_last=1 is not supported (NCHW only)")

    def layout_input(self, node: onnx.NodeProto) -> Act | FVal:
        """Input 0 of a layout op (reshape, pad): an integer activation or a float value; never a Softmax's."""
        v = self.resolved(node, 0) if node.op_type == "Pad" else self.value(node, 0)
        if isinstance(v, SoftmaxOut) or (isinstance(v, FVal) and v.kind == "softmax"):
            raise self.unsupported(f"{node_label(node)} consumes a Softmax output; Softmax is only supported as the "
                                   f"last op")
        return v

    def layout_act(self, node: onnx.NodeProto) -> tuple[Act, bool]:
        """Input 0 of a layout op that copies int8 values (pad): the activation, and whether it is read through
        a DequantizeLinear (then its output is recorded so too: ``relayout``)."""
        v = self.layout_input(node)
        if isinstance(v, FVal) and v.kind == "dq":
            return v.act, True
        if isinstance(v, Act):
            return v, False
        raise self.unsupported(f"{node_label(node)} reads '{node.input[0]}', which is not a quantized activation")

    def relayout(self, node: onnx.NodeProto, ir: str, like: Act, dq: bool) -> None:
        """Record output 0 (IR tensor ``ir``, ``like``'s type and quantization) in the form ``layout_act`` gave."""
        new = Act(ir, onnx_shape(self.tensors[ir].shape), like.dtype, like.quant)
        self.values[node.output[0]] = FVal("dq", act=new, source=node_label(node)) if dq else new

    def reshape_input(self, node: onnx.NodeProto, target: Callable[[tuple[int, ...]], tuple[int, ...]]) -> None:
        """Reshape input 0 (an activation, its DequantizeLinear, or a pending computation) to ``target(shape)``
        of its ONNX shape, where the NCHW -> NHWC layout keeps the element order."""
        v = self.layout_input(node)
        label = node_label(node)
        if isinstance(v, Act):
            src = v.shape
        elif isinstance(v, FVal) and v.kind == "dq":
            src = v.act.shape
        elif isinstance(v, FVal) and v.kind == "pending":
            src = v.pending.shape
        else:
            raise self.unsupported(f"{label} reshapes '{node.input[0]}', which is not a quantized activation")
        dst = target(src)
        if int(np.prod(dst, dtype=np.int64)) != int(np.prod(src, dtype=np.int64)):
            raise self.malformed(f"{label}: cannot reshape {src} to {dst}")
        if not dst or dst[0] != src[0]:
            raise self.unsupported(f"{label}: reshaping {src} to {dst} changes the batch dimension; keep the batch "
                                   f"axis first")
        if not reshape_keeps_order(src, dst):
            raise self.unsupported(f"{label}: reshaping {src} to {dst} changes the element order between ONNX's NCHW "
                                   f"and tinytrain's NHWC layout (only reshapes of 1x1 spatial maps are supported); "
                                   f"pool to 1x1 before flattening")
        if isinstance(v, Act):
            ir = self.emit_reshape(v.ir, dst, node.output[0], label)
            self.values[node.output[0]] = Act(ir, dst, v.dtype, self.tensors[ir].quant)
        elif v.kind == "dq":
            ir = self.emit_reshape(v.act.ir, dst, node.output[0], label)
            self.values[node.output[0]] = FVal("dq", act=Act(ir, dst, v.act.dtype, self.tensors[ir].quant),
                                               source=v.source)
        else:
            self.values[node.output[0]] = FVal("pending", pending=Pending("reshape", dst, {"inner": v.pending}, label))

    # ----- constants
    def weight(self, node: onnx.NodeProto, idx: int, what: str = "weight") -> QConst:
        """A float op's weight input: must be the DequantizeLinear of an int8 constant."""
        v = self.value(node, idx)
        if isinstance(v, FVal) and v.kind == "qconst":
            return v.qconst
        if isinstance(v, FVal) and v.kind == "fconst":
            raise self.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is float; quantize the model to "
                                   f"int8 with onnxruntime quantize_static first")
        raise self.unsupported(f"{node_label(node)}: {what} '{node.input[idx]}' is not a constant; tinytrain needs "
                               f"constant weights (DequantizeLinear of an int8 initializer)")

    def depthwise_weight(self, node: onnx.NodeProto, x: Act, w: QConst, groups: int) -> QConst:
        """The weight of a depthwise Conv whose input is quantized per channel, scaled by its gain (channels.py)."""
        return depthwise_weight(self, node, x, w, groups)

    def bias(self, node: onnx.NodeProto, idx: int):
        """A float op's bias input: None, a QConst (DequantizeLinear of a constant) or a float array."""
        if idx >= len(node.input) or not node.input[idx]:
            return None
        v = self.value(node, idx)
        if isinstance(v, FVal) and v.kind == "qconst":
            return v.qconst
        if isinstance(v, FVal) and v.kind == "fconst":
            return v.array
        raise self.unsupported(f"{node_label(node)}: bias '{node.input[idx]}' is not a constant")

    @staticmethod
    def real(qc: QConst) -> np.ndarray:
        """The real values of a quantized constant."""
        shape = [1] * qc.data.ndim
        if qc.axis is not None:
            shape[qc.axis] = qc.scale.size
        return (qc.data.astype(np.float64) - qc.zero_point.reshape(shape)) * qc.scale.reshape(shape)

    def pool_geometry(self, node: onnx.NodeProto, hw: tuple[int, int]):
        """(kernel, stride, padding, count_include_pad) of a 2-D AveragePool / MaxPool on an H x W input."""
        a = attrs_of(node)
        label = node_label(node)
        kernel = tuple(a.get("kernel_shape", ()))
        if len(kernel) != 2:
            raise self.unsupported(f"{label}: kernel_shape {kernel} is not 2-D")
        stride = tuple(a.get("strides", (1, 1)))
        if len(stride) != 2 or min(kernel + stride) < 1:
            raise self.malformed(f"{label}: kernel_shape {list(kernel)} and strides {list(stride)} must be 2-D and "
                                 f"positive")
        if tuple(a.get("dilations", (1, 1))) != (1, 1):
            raise self.unsupported(f"{label}: dilated pooling is not supported")
        padding = resolve_padding(a, hw, kernel, stride, (1, 1), label)
        if a.get("ceil_mode", 0):
            for i in range(2):
                span = hw[i] + padding[i] + padding[i + 2] - kernel[i]
                if span % stride[i]:
                    raise self.unsupported(f"{label}: ceil_mode=1 adds a partial window; use ceil_mode=0 or adjust "
                                           f"the padding")
        return kernel, stride, padding, bool(a.get("count_include_pad", 0))
