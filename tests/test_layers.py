"""The package layers a reader can rely on (issue 42 item 6): no import cycle between tinytrain's packages (each
sub-package one node, each top-level module its own node), whether the import is at a module's top or in a function."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinytrain"


def _node(module: str) -> str:
    """tinytrain.a.b -> tinytrain.a (a sub-package or a top-level module)."""
    return ".".join(module.split(".")[:2])


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tinytrain":
            names |= {f"tinytrain.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tinytrain."):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("tinytrain.")}
    return names


def import_graph() -> dict[str, dict[str, set[str]]]:
    """node -> imported node -> the files that import it."""
    edges: dict[str, dict[str, set[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        source = _node(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for name in _imported(ast.parse(path.read_text())):
            target = _node(name)
            if target != source:
                edges.setdefault(source, {}).setdefault(target, set()).add(str(path.relative_to(PACKAGE.parent)))
    return edges


def _cycle_from(start: str, edges: dict[str, dict[str, set[str]]]) -> list[str] | None:
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, {}):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_no_import_cycle_between_packages():
    edges = import_graph()
    cycles = [c for c in (_cycle_from(n, edges) for n in sorted(edges)) if c]
    described = [" -> ".join(c) + "  (" + ", ".join(sorted(edges[c[0]][c[1]])) + ")" for c in cycles]
    assert not cycles, "\n".join(described)
