"""Long names (TFLite's ``a/b/c;d/e/f``) shortened for the text reports and errors; report.json keeps them whole."""

from __future__ import annotations


def short_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: a TFLite name's first part (before ``;``, an ellipsis marking the
    rest), then its end after an ellipsis."""
    first = name.split(";", 1)[0] + ("…" if ";" in name else "")
    return first if len(first) <= width else "…" + first[-(width - 1):]
