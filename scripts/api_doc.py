"""The function table of docs/guide/api.md from the functions themselves: each public function of ``tinytrain``
(``tinytrain.__all__``) with its signature as ``inspect`` reads it and what it returns; the "what" column is the
page's own (kept by function name; a new function starts with its docstring's first line).

    .venv/bin/python scripts/api_doc.py          # rewrites the table between the page's generated markers
    .venv/bin/python scripts/api_doc.py --check  # exit 1 if the page differs (tests/test_docs.py checks it too)
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tinytrain  # noqa: E402
from tinytrain.cli_reference import regenerate  # noqa: E402

PAGE = ROOT / "docs" / "guide" / "api.md"
BLOCK = re.compile(r"(<!-- generated: api-functions -->\n).*?(<!-- end generated -->)", re.S)
ROW = re.compile(r"^\| `(\w+)\(.*?\)` \| (.*?) \| (.*) \|$", re.M)


def functions() -> dict:
    return {name: obj for name in tinytrain.__all__ if inspect.isfunction(obj := getattr(tinytrain, name))}


def signature(name: str, fn) -> str:
    """``name(a, b, *, c=1, **options)``: the parameters as a caller writes them (no annotations)."""
    parts, star = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
        elif p.default is p.empty:
            parts.append(p.name)
        else:
            default = f'"{p.default}"' if isinstance(p.default, str) else repr(p.default)
            parts.append(f"{p.name}={default}")
    return f"{name}({', '.join(parts)})"


def returns(fn, kept: str) -> str:
    annotation = inspect.signature(fn).return_annotation
    if annotation is inspect.Signature.empty:
        return kept
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return f"`{text}`".replace("|", "\\|")


def table(current: str) -> str:
    kept = {m.group(1): (m.group(2), m.group(3)) for m in ROW.finditer(current)}
    rows = []
    for name, fn in functions().items():
        old_returns, what = kept.get(name, ("", (inspect.getdoc(fn) or "").split("\n")[0]))
        rows.append(f"| `{signature(name, fn)}` | {returns(fn, old_returns)} | {what} |")
    return "| function | returns | what |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def page(current: str) -> str:
    block = BLOCK.search(current)
    assert block, f"{PAGE} has no <!-- generated: api-functions --> block"
    return current[:block.start()] + block.group(1) + table(block.group(0)) + block.group(2) + current[block.end():]


def main(argv: list[str]) -> int:
    return regenerate(PAGE, page(PAGE.read_text()), argv, ".venv/bin/python scripts/api_doc.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
