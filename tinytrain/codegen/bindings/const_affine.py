"""The C binding of ``const_affine`` (ops/const_affine.py): a table lookup (bindings/table_grad.py)."""

from __future__ import annotations

from tinytrain.codegen.bindings.table_grad import table_lookup
from tinytrain.codegen.context import Binding

BINDINGS: dict[str, Binding] = {"const_affine": table_lookup}
