"""The TFLite importer's handlers of the ops beyond the MobileNet set (ops/max_pool2d.py, ...), mixed into
``tflite._Importer``; each maps one builtin op as TFLite Micro's int8 reference kernel computes it."""

from __future__ import annotations

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.frontends.tflite_reader import TflOperator
from tinytrain.ops import hard_swish, logistic
from tinytrain.ops.concat import ConcatAttrs
from tinytrain.ops.max_pool2d import MaxPool2dAttrs
from tinytrain.ops.mul import MulAttrs, broadcast_shape
from tinytrain.quant import Requant
from tinytrain.tables import TableAttrs

MORE_OPS = ("CONCATENATION", "HARD_SWISH", "LOGISTIC", "MAX_POOL_2D", "MUL")


class MoreOps:
    """Handlers ``_op_<name>`` (the importer's helpers ``_act``, ``_out``, ``_node``, ... are its own)."""

    def _op_max_pool_2d(self, op: TflOperator) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        self._rank4(op, x)
        kernel = (op.options["filter_h"], op.options["filter_w"])
        if min(kernel) <= 0:
            raise ModelError(f"operator {op.index} (MAX_POOL_2D) has filter {list(kernel)}")
        stride = self._stride(op)
        padding = self._padding(op, x, out, kernel, stride, (1, 1))
        if x.quant != out.quant:
            raise UnsupportedModelError(f"operator {op.index} (MAX_POOL_2D): input and output quantization differ "
                                        "(TFLite's kernel does not rescale)")
        act_min, act_max = self._activation(op, out)
        self._node(op, "max_pool2d", [x.name], [out.name], MaxPool2dAttrs(kernel, stride, padding, act_min, act_max))

    def _table_op(self, op: TflOperator, kind: str, make) -> None:
        x, out = self._act(op.inputs[0]), self._out(op)
        if x.shape != out.shape:
            raise ModelError(f"operator {op.index} ({op.name}): input {list(x.shape)} and output {list(out.shape)} differ")
        try:
            table = make(x.quant, out.quant)
        except ValueError as e:
            raise UnsupportedModelError(f"operator {op.index} ({op.name}): {e}") from None
        self._node(op, kind, [x.name], [out.name], TableAttrs(table, kind))

    def _op_hard_swish(self, op: TflOperator) -> None:
        self._table_op(op, "hard_swish", hard_swish.tflite_table)

    def _op_logistic(self, op: TflOperator) -> None:
        self._table_op(op, "logistic", logistic.tflite_table)

    def _op_mul(self, op: TflOperator) -> None:
        """Two activations (TFLite's int8 Mul / BroadcastMul): multiplier of s_a * s_b / s_y in double."""
        for i in op.inputs[:2]:
            if i not in self.names and self.model.buffers[self._t(i).buffer] != b"":
                raise UnsupportedModelError(f"operator {op.index} (MUL) has a constant operand; only the product of "
                                            "two activations is supported")
        a, b, out = self._act(op.inputs[0]), self._act(op.inputs[1]), self._out(op)
        try:
            if broadcast_shape(a.shape, b.shape) != out.shape:
                raise ValueError(f"output {list(out.shape)}")
        except ValueError as e:
            raise UnsupportedModelError(f"operator {op.index} (MUL): {list(a.shape)} x {list(b.shape)}: {e}; "
                                        "operands of the output's rank, each dimension equal or 1") from None
        act_min, act_max = self._activation(op, out)
        requant = Requant.from_scales([a.quant.s * b.quant.s / out.quant.s])
        self._node(op, "mul", [a.name, b.name], [out.name], MulAttrs(requant, act_min, act_max))

    def _op_concatenation(self, op: TflOperator) -> None:
        """TFLite Micro's int8 kernel copies: every input must have the output's quantization."""
        xs, out = [self._act(i) for i in op.inputs], self._out(op)
        axis = op.options["axis"] % len(out.shape)
        if op.options["activation"] != 0:
            raise UnsupportedModelError(f"operator {op.index} (CONCATENATION) has a fused activation")
        for x in xs:
            if x.quant != out.quant:
                raise UnsupportedModelError(f"operator {op.index} (CONCATENATION): input {x.name!r} is quantized "
                                            "unlike the output (TFLite Micro's int8 kernel does not rescale)")
        if axis == 0:
            raise UnsupportedModelError(f"operator {op.index} (CONCATENATION) joins along the batch axis")
        self._node(op, "concat", [x.name for x in xs], [out.name], ConcatAttrs(axis, (None,) * len(xs)))
