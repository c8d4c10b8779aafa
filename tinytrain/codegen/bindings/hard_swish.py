"""The C binding of ``hard_swish`` (ops/hard_swish.py): a table lookup (bindings/table_grad.py)."""

from __future__ import annotations

from tinytrain.codegen.bindings.table_grad import table_lookup
from tinytrain.codegen.context import Binding

BINDINGS: dict[str, Binding] = {"hard_swish": table_lookup}
