"""C text helpers: identifiers, comments and array initializers, deterministic byte for byte."""

from __future__ import annotations

import re

import numpy as np

_CTYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
           np.dtype(np.uint8): "uint8_t",
           np.dtype(np.uint32): "uint32_t", np.dtype(np.float32): "float"}


def ctype(dtype: np.dtype) -> str:
    try:
        return _CTYPES[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"no C type for {dtype}") from None


def identifier(text: str, max_len: int = 40) -> str:
    """A C identifier fragment from any tensor or node name (letters, digits, underscores)."""
    s = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()
    s = s[-max_len:].lstrip("_") if len(s) > max_len else s
    return s or "t"


def comment(text: str) -> str:
    """Text that is safe inside a /* */ comment on one line."""
    return re.sub(r"\s+", " ", str(text)).replace("*/", "* /").replace("/*", "/ *")


def shape(dims) -> str:
    return "(" + ",".join(str(int(d)) for d in dims) + ")"


def int_literal(v: int) -> str:
    """A C literal for an int32 value (INT32_MIN has no literal of type int)."""
    v = int(v)
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def float_literal(v: float) -> str:
    """A C float literal that parses to exactly float32(v): the shortest decimal that round-trips."""
    f = np.float32(v)
    if not np.isfinite(f):
        raise ValueError(f"no C literal for {v}")
    return np.format_float_scientific(f, unique=True, exp_digits=2) + "f"


def array_body(values: np.ndarray, per_line: int = 24, indent: str = "    ") -> str:
    """The values of an initializer list, ``per_line`` to a line, flattened in C order."""
    flat = np.asarray(values).ravel()
    if flat.size == 0:
        raise ValueError("C has no empty arrays")
    if flat.dtype == np.float32:
        items, per_line = [float_literal(v) for v in flat], min(per_line, 8)
    elif flat.dtype == np.uint32:
        items, per_line = [f"{v}u" for v in flat.tolist()], min(per_line, 12)
    else:
        items = [int_literal(v) for v in flat.tolist()] if flat.dtype.itemsize >= 4 else [str(v) for v in flat.tolist()]
    lines = [indent + ", ".join(items[i : i + per_line]) + "," for i in range(0, len(items), per_line)]
    return "\n".join(lines)
