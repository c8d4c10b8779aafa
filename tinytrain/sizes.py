"""Memory sizes as users write them: 256k, 256K, 256KB, 262144, 1m, 1MB, 512b (docs/design.md §5).

A bare number below 1024 is refused: no budget of a microcontroller is that small, so ``--sram 32`` is a unit
forgotten (``32k``); a size that small is written with its unit, ``32b``."""

from __future__ import annotations

import re

from tinytrain.errors import UsageError, param

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2}


def parse_size(text: str, name: str = "size") -> int:
    """Bytes in ``text``; binary units (1k = 1024 bytes). ``name`` is the parameter an error names."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read {param(name, text)}: write e.g. 256k, 256KB, 262144 or 1m")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0 or value != int(value):
        raise UsageError(f"{param(name, text)} must be a positive whole number of bytes")
    if not m.group(2) and value < 1024:
        raise UsageError(f"{param(name, text)} is {int(value)} byte{'s' * (value != 1)}: did you mean {m.group(1)}k? "
                         f"(write {m.group(1)}b for bytes)")
    return int(value)


def format_size(nbytes: int) -> str:
    if nbytes >= 1024 * 1024:
        return f"{nbytes / 1024 / 1024:.2f} MB"
    if nbytes >= 1024:
        return f"{nbytes / 1024:.1f} KB"
    return f"{nbytes} B"
