"""Memory sizes as users write them: 256k, 256K, 256KB, 262144, 1m, 1MB (docs/design.md §5)."""

from __future__ import annotations

import re

from tinytrain.errors import UsageError

_UNITS = {"": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2}


def parse_size(text: str) -> int:
    """Bytes in ``text``; binary units (1k = 1024 bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read size {text!r}: write e.g. 256k, 256KB, 262144 or 1m")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0 or value != int(value):
        raise UsageError(f"size {text!r} must be a positive whole number of bytes")
    return int(value)


def format_size(nbytes: int) -> str:
    if nbytes >= 1024 * 1024:
        return f"{nbytes / 1024 / 1024:.2f} MB"
    if nbytes >= 1024:
        return f"{nbytes / 1024:.1f} KB"
    return f"{nbytes} B"
