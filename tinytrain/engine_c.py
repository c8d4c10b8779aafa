"""The host C engine: emit the graph's C project, compile it once with the host compiler, run batches.

The shared library is cached under a directory keyed by the sha256 of the emitted sources, the
compiler and its flags, so a graph is compiled once per machine (``$TINYTRAIN_CACHE``, else
``$XDG_CACHE_HOME/tinytrain``, else ``~/.cache/tinytrain``). The C code is the one ``tinytrain
compile`` emits; this engine only adds the host compiler and a ctypes call per sample.
Graphs are immutable: a graph object is emitted and hashed once per process, then reused.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

from tinytrain.errors import TinyTrainError
from tinytrain.ir import Graph

HOST_CC = "gcc"
# Same C as on the device: C99, no fused multiply-add contraction, no fast-math (design.md §4).
HOST_CFLAGS = ("-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
LIBRARY = "libtinytrain_model.so"

_LOADED: dict[Path, ctypes.CDLL] = {}
_BUILT: dict[tuple[int, str, str], tuple[weakref.ref, Path]] = {}  # (id(graph), cache dir, planner) -> library


class CompilerError(TinyTrainError):
    """The host C compiler is missing or rejected the emitted code."""


def default_cache_dir() -> Path:
    if os.environ.get("TINYTRAIN_CACHE"):
        return Path(os.environ["TINYTRAIN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tinytrain"


@functools.lru_cache(maxsize=None)
def _compiler_id(cc: str) -> str:
    if shutil.which(cc) is None:
        raise CompilerError(f"host C compiler {cc!r} not found; install gcc (or use the simulator engine)")
    r = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return r.stdout.splitlines()[0] if r.stdout else cc


def build(graph: Graph, cache_dir: str | Path | None = None, *, planner: str = "greedy", cc: str = HOST_CC,
          cflags: tuple[str, ...] = HOST_CFLAGS) -> Path:
    """Emit and compile ``graph`` (unless cached); return the shared library's path."""
    from tinytrain.codegen import render_project
    from tinytrain.memory.report import plan_forward

    plan = plan_forward(graph, sram_budget=1 << 62, flash_budget=1 << 62, planner=planner)
    files = render_project(graph, plan)
    h = hashlib.sha256()
    for part in (_compiler_id(cc), *cflags, *(f"{n}\0{t}" for n, t in sorted(files.items()))):
        h.update(part.encode("utf-8") + b"\0")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / h.hexdigest()[:32]
    if (final / LIBRARY).exists():
        return final / LIBRARY
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        cmd = [cc, *cflags, "-o", LIBRARY, "tinytrain_model.c"]
        r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise CompilerError(f"{' '.join(cmd)} failed in {tmp} (a tinytrain bug, please report it):\n"
                                f"{r.stderr[-4000:]}")
        try:
            os.rename(tmp, final)
        except OSError:  # another process built the same library first
            if not (final / LIBRARY).exists():
                raise
    finally:
        if tmp.exists() and tmp != final:
            shutil.rmtree(tmp, ignore_errors=True)
    return final / LIBRARY


def load(graph: Graph, cache_dir: str | Path | None = None, planner: str = "greedy") -> ctypes.CDLL:
    """The compiled model as a ctypes library (built if needed), initialized once."""
    key = (id(graph), str(cache_dir), planner)
    ref, path = _BUILT.get(key, (None, None))
    if ref is None or ref() is not graph:  # this very graph object was not built yet: emit, hash, build
        path = build(graph, cache_dir, planner=planner)
        _BUILT[key] = (weakref.ref(graph, lambda _, k=key: _BUILT.pop(k, None)), path)
    lib = _LOADED.get(path)
    if lib is None:
        lib = ctypes.CDLL(str(path))
        lib.tt_init.argtypes, lib.tt_init.restype = [], None
        lib.tt_predict.argtypes, lib.tt_predict.restype = [ctypes.c_void_p, ctypes.c_void_p], None
        lib.tt_init()
        _LOADED[path] = lib
    return lib


def predict(graph: Graph, x: np.ndarray, cache_dir: str | Path | None = None, planner: str = "greedy") -> np.ndarray:
    """int8 outputs (N, ...) of the C forward pass for an internal int8 input batch (N, H, W, C).

    Inputs are the graph's internal int8 form (``simulator.to_internal`` of a uint8 model's input).
    """
    t_in, t_out = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
    x = np.ascontiguousarray(x)
    if x.dtype != np.int8 or x.shape[1:] != t_in.shape[1:]:
        raise ValueError(f"input: expected int8 (N,{','.join(map(str, t_in.shape[1:]))}), got {x.dtype} {x.shape}")
    lib = load(graph, cache_dir, planner)
    y = np.empty((x.shape[0],) + t_out.shape[1:], np.int8)
    for i in range(x.shape[0]):
        lib.tt_predict(x[i].ctypes.data, y[i].ctypes.data)
    return y
