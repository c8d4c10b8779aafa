"""The layout's promises: one place per op down to the C binding, registries collected from their packages."""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import tinytrain
from tinytrain import ops
from tinytrain.codegen import bindings
from tinytrain.codegen.bindings import BINDINGS
from tinytrain.ops import _registry
from tinytrain.ops.grad_weight_sgd_update import FUSED


def _defined(op_module: str) -> set[str]:
    """The ops ``tinytrain/ops/<op_module>.py`` defines, with the fused updates of its grad-weight ops."""
    module = importlib.import_module(f"tinytrain.ops.{op_module}")
    names = {op.name for op in getattr(module, "OPS", None) or (module.OP,)}
    return names | {FUSED[name].name for name in names if name in FUSED}


def test_every_binding_module_mirrors_an_ops_module():
    """codegen/bindings/<m>.py binds only ops of tinytrain/ops/<m>.py (or of the grad-weight ops there, fused)."""
    op_modules = {m.name for m in pkgutil.iter_modules(ops.__path__)}
    for info in pkgutil.iter_modules(bindings.__path__):
        module = importlib.import_module(f"tinytrain.codegen.bindings.{info.name}")
        if info.name == "common":
            assert not hasattr(module, "BINDINGS")
            continue
        assert info.name in op_modules, f"codegen/bindings/{info.name}.py has no tinytrain/ops/{info.name}.py"
        extra = set(getattr(module, "BINDINGS", {})) - _defined(info.name)
        assert not extra, f"codegen/bindings/{info.name}.py binds {sorted(extra)}, not ops of ops/{info.name}.py"


def test_the_collected_registries_cover_every_op_with_a_kernel():
    registry = _registry()
    assert set(BINDINGS) <= set(registry)
    # reshape is a view (no code); quantize and dequantize have no C kernel
    assert set(registry) - set(BINDINGS) == {"dequantize", "quantize", "reshape"}


def _executed(tree: ast.AST):
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
            yield from (n for s in child.orelse for n in (s, *_executed(s)))
            continue
        yield child
        yield from _executed(child)


def _imports(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, at module level or inside functions.

    ``import a.b`` and ``from a.b import c`` name ``a.b``, or ``a.b.c`` when that is a module itself. Relative
    imports are resolved against the importing module. A package's implicit import of its parents is not an edge,
    nor is an import under ``if TYPE_CHECKING:`` (annotations only, never executed).
    """
    root = package.parent
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
               for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, set())
        is_package = path.name == "__init__.py"
        for node in _executed(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_of_tinytrain_has_no_cycle():
    graph = _imports(Path(tinytrain.__file__).parent)
    assert len(graph) > 50 and "tinytrain.ops" in graph["tinytrain.verify"]  # the walk sees imports
    assert _cycles(graph) == []


def _package(module: str) -> str:
    """tinytrain.a.b -> tinytrain.a: a sub-package, or a module at the top of tinytrain/ (each its own layer)."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages():
    """Issue 42: the packages are layers: no cycle among them, each sub-package one node, whether the import is at a
    module's top or inside a function."""
    packages: dict[str, set[str]] = {}
    for module, imported in _imports(Path(tinytrain.__file__).parent).items():
        packages.setdefault(_package(module), set()).update(_package(m) for m in imported if _package(m) != _package(module))
    assert "tinytrain.ops" in packages["tinytrain.training"]  # the walk sees imports
    assert _cycles(packages) == []


def test_no_module_in_tinytrain_is_longer_than_400_lines():
    """Issue 42: modules with one job; none in tinytrain/ over 400 lines."""
    root = Path(tinytrain.__file__).parent
    long = {str(p.relative_to(root)): n for p in root.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_function_local_imports_are_few_and_say_why():
    """Issue 42: imports of tinytrain sit at the top of their module; at most 20 inside functions, each where
    laziness is needed (onnx, onnxruntime's quantizer, Flower, the API behind ``import tinytrain``), each with a
    ``# lazy`` comment in the lines above it or on it."""
    root = Path(tinytrain.__file__).parent
    local = []
    for path in root.rglob("*.py"):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tinytrain":
                    said = any("# lazy" in line for line in lines[fn.lineno - 1:node.end_lineno])
                    local.append((f"{path.relative_to(root)}:{node.lineno}", said))
    assert len(local) <= 20, local
    assert [where for where, said in local if not said] == []


def test_no_template_is_longer_than_250_lines():
    """Issue 42: one kernel variant, one template (a family's variants are included from its selecting template)."""
    root = Path(__file__).resolve().parents[1]
    long = {str(p.relative_to(root)): n for p in [*root.glob("codegen/**/*.j2"), *root.glob("firmware/**/*.j2")]
            if (n := len(p.read_text().splitlines())) > 250}
    assert long == {}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_function_in_tinytrain_is_longer_than_60_lines():
    """Small functions with one job (issue 31): none in tinytrain/ over 60 lines."""
    root = Path(tinytrain.__file__).parent
    long = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.add((str(path.relative_to(root)), node.name))
    assert not long, sorted(long)


def _hand_lists(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """(line, op names) of every tuple, list or set literal and dict's keys in ``source`` whose strings are all
    registered op names: a list of ops kept by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        strings = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if strings and all(s in names for s in strings):
            found.append((node.lineno, strings))
    return found


def _own_files(path: Path, root: Path) -> str | None:
    """The op module (ops/<m>.py or the package ops/<m>/) a file belongs to: itself, or its C binding's."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] == "ops" and len(parts) > 1:
        return parts[1]
    if parts[:2] == ("codegen", "bindings") and len(parts) > 2:
        return parts[2]
    return None


def test_no_op_name_is_listed_by_hand_outside_its_own_files():
    """Issue 42: an op is found from its own modules (``OpDef`` hooks, ``declared``), never from a list of op names:
    a collection of op names may appear only in the op's module or its C binding."""
    root = Path(tinytrain.__file__).parent
    registry = _registry()
    names = set(registry)
    owners = {}
    for module in ops.op_modules():
        short = module.__name__.split(".")[2]
        owners[short] = _defined(short)
    bad = []
    for path in sorted(root.rglob("*.py")):
        own = owners.get(_own_files(path, root), set())
        for line, listed in _hand_lists(path.read_text(), names):
            if not set(listed) <= own:
                bad.append(f"{path.relative_to(root)}:{line}: {listed}")
    assert not bad, bad


def test_the_hand_list_check_sees_a_hand_list():
    names = {"conv2d", "fully_connected", "mse"}
    source = 'LAYERS = ("conv2d", "fully_connected")\nLOSSES = ("xent", "mse")\nK = {"conv2d": 1}\nif op == "mse": pass\n'
    assert _hand_lists(source, names) == [(1, ["conv2d", "fully_connected"]), (3, ["conv2d"])]


def test_every_op_module_declares_its_hooks_by_the_registered_names():
    """The importers' handler tables are collected from the op modules, one owner per source op, and every forward
    op that imports has its exporter and its docs row."""
    onnx_types = ops.declared("ONNX")
    assert {"Conv", "Gemm", "Mul", "Reshape"} <= set(onnx_types)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "MUL"} <= set(ops.declared("TFLITE"))
    for name, op in _registry().items():
        if op.doc is not None:
            assert op.export is not None, name


def test_the_ops_page_is_generated_from_the_registry():
    """docs/guide/ops.md is scripts/ops_doc.py's output: a row per forward op from its module's ``OpDef.doc``."""
    import runpy

    generator = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "ops_doc.py"))
    assert generator["main"](["--check"]) == 0
    assert "| `conv2d` | CONV_2D, DEPTHWISE_CONV_2D |" in generator["page"]()


def test_the_worked_example_of_adding_an_op_touches_at_most_five_files():
    """docs/guide/adding-an-op.md's worked example: the commit it names adds the op in at most five files, each of
    the kinds the page lists (skipped outside a git checkout with that commit)."""
    import re
    import subprocess

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "guide" / "adding-an-op.md").read_text()
    sha = re.search(r"git show --stat (\w+)", page).group(1)
    run = subprocess.run(["git", "show", "--name-only", "--format=", sha], cwd=root, capture_output=True, text=True)
    if run.returncode:
        pytest.skip(f"commit {sha} is not in this checkout")
    files = run.stdout.split()
    assert len(files) <= 5, files
    kinds = (r"tinytrain/ops/\w+\.py", r"tinytrain/codegen/bindings/\w+\.py", r"codegen/templates/kernels/\w+\.c\.j2",
             r"tests/test_\w+\.py", r"docs/guide/ops\.md")
    assert all(any(re.fullmatch(k, f) for k in kinds) for f in files), files
    op = next(Path(f).stem for f in files if f.startswith("tinytrain/ops/"))
    assert op in _registry() and op in BINDINGS and f"| `{op}` |" in (root / "docs" / "guide" / "ops.md").read_text()


def test_the_field_runtimes_share_one_status_tuple_without_importing_each_other():
    """The classifier's and the autoencoder's field runtimes name tt_field_status's values from one module
    (field_runtime/status.py); the autoencoder's does not pull in the classifier's (the cycle the copy avoided)."""
    import subprocess
    import sys

    from tinytrain.field_runtime import anomaly, board, host, runtime, status

    assert anomaly.STATUS is runtime.STATUS is host.STATUS is board.STATUS is status.STATUS
    src = Path(tinytrain.__file__).parent / "field_runtime"
    assert [p.name for p in sorted(src.glob("*.py")) if "STATUS = (" in p.read_text()] == ["status.py"]
    code = "import sys, tinytrain.field_runtime.anomaly; print('tinytrain.field_runtime.runtime' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
