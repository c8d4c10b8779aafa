"""The C binding of ``hard_sigmoid`` (ops/hard_sigmoid.py): a table lookup (bindings/table.py)."""

from __future__ import annotations

from tinytrain.codegen.bindings.table import table_lookup
from tinytrain.codegen.context import Binding

BINDINGS: dict[str, Binding] = {"hard_sigmoid": table_lookup}
