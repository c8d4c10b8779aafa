"""The TFLite importer's handlers of the ops beyond the MobileNet set (ops/max_pool2d.py, ...), mixed into
``tflite._Importer``; each maps one builtin op as TFLite Micro's int8 reference kernel computes it."""

from __future__ import annotations

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.frontends.tflite_reader import TflOperator
from tinytrain.ops import hard_swish, logistic
from tinytrain.ops.max_pool2d import MaxPool2dAttrs
from tinytrain.tables import TableAttrs

MORE_OPS = ("HARD_SWISH", "LOGISTIC", "MAX_POOL_2D")


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
