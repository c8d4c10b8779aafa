"""The C binding of ``leaky_relu`` (ops/leaky_relu.py): a table lookup (bindings/table_grad.py)."""

from __future__ import annotations

from tinytrain.codegen.bindings.table_grad import table_lookup
from tinytrain.codegen.context import Binding

BINDINGS: dict[str, Binding] = {"leaky_relu": table_lookup}
