"""The host C engine: emit the graph's C project, compile it once with the host compiler, run batches.

The shared library is built for the host's own instruction set (``-march=native``) and cached under a directory
keyed by the sha256 of the emitted sources, the compiler, its flags and the target ``-march=native`` resolves to, so
a graph is compiled once per machine (``$TINYTRAIN_CACHE``, else ``$XDG_CACHE_HOME/tinytrain``, else
``~/.cache/tinytrain``); ``TINYTRAIN_VERBOSE_BUILD=1`` prints each build's compiler and command (or that it was
cached) on stderr. The C code is the one ``tinytrain compile`` emits for a host target (the plan's target is not a
Cortex-M: host kernels for pointwise and depthwise convolutions, bindings/conv2d.py); this engine only adds the host
compiler and a ctypes call per sample.
Graphs are immutable: a graph object is emitted and hashed once per process, then reused.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np

from tinytrain.codegen import MODEL_SOURCE, render_project
from tinytrain.codegen.state import pack, unpack
from tinytrain.engines import HOST_CC
from tinytrain.errors import TinyTrainError
from tinytrain.ir import Graph
from tinytrain.memory.report import forward_memory_report, memory_report
from tinytrain.names import TARGET
from tinytrain.ops import loss_ops
from tinytrain.training.device_step import device_schedule

# Same C as on the device: C99, no fused multiply-add contraction, no fast-math (docs/design.md §4).
# -fno-delete-null-pointer-checks works around a GCC 12 wrong-code bug (x86-64, -O2 and -O3): once IPA-CP has
# propagated constant tt_arena addresses into a kernel, IVOPTs may emit a store as a zero-based TARGET_MEM_REF
# (`MEM[(float *)0B + C + _k + iv * 4]`). local-pure-const and modref take that for a NULL dereference
# ("NULL memory access; terminating BB"), skip the store, and mark the kernel pure, so DCE drops the call
# (mbv1-0.25-vww, bias_last_k=2: both tt_clamp_mask_f32 calls of the backward pass vanished at -O3).
# The flag turns off that NULL-dereference inference. -fno-ipa-cp-clone is not enough: a kernel with a single
# call site is specialized without cloning, also at -O2. Reduced case (returns 1 when miscompiled):
#   static float a[4096];
#   static __attribute__((noinline)) void f(float *o, const float *g, const signed char *y, int n)
#   { for (int i = 0; i < n; i++) o[i] = (y[i] > -128 && y[i] < 127) ? g[i] : 0.0f; }
#   int main(void) { for (int i = 0; i < 1024; i++) ((signed char *)a)[i] = 1;
#     for (int i = 1024; i < 2048; i++) a[i] = 1.0f;
#     f(a + 2048, a + 1024, (signed char *)a + 256, 256); return a[2048] != 1.0f; }
# Reportedly fixed upstream by GCC commit 13dfb01e5c30 (IVOPTs rewrites zero-based TARGET_MEM_REFs as MEM_REFs).
# -march=native: the host's own vector instructions (AVX2 / AVX-512 on x86-64) in the loops gcc vectorizes, above all
# the host kernels of kernels/conv2d_rows.c.j2. Integer results are the same at any vector width; fp32 loops are
# vectorized only across independent outputs (no reassociation without fast-math, no contraction with
# -ffp-contract=off; the kernels' explicit fused multiply-adds, tt_fmaf, are VFMADD at any width), so every fp32
# result keeps its bits. The cache key includes the target options -march=native resolves to.
HOST_CFLAGS = ("-std=c99", "-O2", "-march=native", "-ffp-contract=off", "-fno-delete-null-pointer-checks", "-Wall",
               "-Wextra", "-Werror", "-fPIC", "-shared")
# The training step's host build: -O3 vectorizes the int8 loops (1.7x faster on mbv2-w0.35 before -march=native);
# fp32 results are unchanged, tests compare it with an -O1 build.
TRAIN_CFLAGS = tuple("-O3" if f == "-O2" else f for f in HOST_CFLAGS)
LIBRARY = "libtinytrain_model.so"
PROGRESS_STEPS = 32  # training steps between progress reports

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
def _compiler_id(cc: str, cflags: tuple[str, ...]) -> str:
    """The compiler's version line and, for a build for the host's own instruction set, the target options it
    resolves to on this machine (``-march=native`` names a different target on another machine sharing the cache)."""
    if shutil.which(cc) is None:
        raise CompilerError(f"host C compiler {cc!r} not found; install gcc (or use the simulator engine)")
    r = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    version = r.stdout.splitlines()[0] if r.stdout else cc
    if "-march=native" not in cflags:
        return version
    r = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise CompilerError(f"{cc} -march=native -Q --help=target failed: {r.stderr.strip()[-500:]}")
    return version + "\n" + r.stdout


def build(graph: Graph, cache_dir: str | Path | None = None, *, planner: str = "greedy", cc: str = HOST_CC,
          cflags: tuple[str, ...] = HOST_CFLAGS) -> Path:
    """Emit and compile ``graph`` (unless cached); return the shared library's path."""

    memory = forward_memory_report(graph, sram_budget=1 << 62, flash_budget=1 << 62, planner=planner)
    return compile_files(render_project(graph, memory), cache_dir, cc=cc, cflags=cflags)


def compile_files(files: dict[str, str], cache_dir: str | Path | None = None, *, cc: str = HOST_CC,
                  cflags: tuple[str, ...] = HOST_CFLAGS) -> Path:
    """Compile an emitted project (file name -> text) into a shared library, cached by content."""

    h = hashlib.sha256()
    for part in (_compiler_id(cc, cflags), *cflags, *(f"{n}\0{t}" for n, t in sorted(files.items()))):
        h.update(part.encode("utf-8") + b"\0")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / h.hexdigest()[:32]
    cmd = [cc, *cflags, "-o", LIBRARY, MODEL_SOURCE]
    if (final / LIBRARY).exists():
        _show_build(cmd, final, "cached")
        return final / LIBRARY
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        t0 = time.perf_counter()
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
    _show_build(cmd, final, f"built in {time.perf_counter() - t0:.1f} s")
    return final / LIBRARY


def _show_build(cmd: list[str], where: Path, what: str) -> None:
    """With TINYTRAIN_VERBOSE_BUILD=1 in the environment: the compiler, its command and the library on stderr."""
    if os.environ.get("TINYTRAIN_VERBOSE_BUILD", "") not in ("", "0"):
        print(f"tinytrain: host C build ({what}): {_compiler_id(cmd[0], ())}: {' '.join(cmd)} -> {where / LIBRARY}",
              file=sys.stderr)


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


# ---- the training step --------------------------------------------------------------------------------------

def _private_copy(path: Path) -> ctypes.CDLL:
    """Load a private copy of a library: its static state (weights, step) belongs to one trainer only."""
    tmp = Path(tempfile.mkdtemp(prefix="tinytrain-lib-"))
    try:
        shutil.copy(path, tmp / path.name)
        return ctypes.CDLL(str(tmp / path.name))
    finally:  # the mapping stays valid once loaded
        shutil.rmtree(tmp, ignore_errors=True)


class CTrainer:
    """A training graph's emitted C (``tt_train_step``, ``tt_predict``, state save / load), built for the host.

    The graph is scheduled by ``training.device_step.device_schedule`` (clamp masks in bits, fused updates,
    reorder; ``reorder=False``: as given) and laid out by
    ``memory.report.memory_report`` — the device's schedule and memory report. Each trainer loads its own copy
    of the library, so trainers of the same graph do not share weights. States are ``simulator.TrainState``
    and convert through the byte layout of ``codegen.state``.
    """

    def __init__(self, graph: Graph, cache_dir: str | Path | None = None, *, planner: str = "greedy",
                 inplace: bool = True, reorder: bool = True, cc: str = HOST_CC,
                 cflags: tuple[str, ...] = TRAIN_CFLAGS) -> None:
        self.graph = graph
        self.schedule = device_schedule(graph) if reorder else graph
        self.memory = memory_report(self.schedule, 1 << 62, 1 << 62, planner=planner, inplace=inplace)
        self.files = render_project(self.schedule, self.memory)
        self.library = compile_files(self.files, cache_dir, cc=cc, cflags=cflags)
        lib = self._lib = _private_copy(self.library)
        vp, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
        for name, args, res in (("tt_init", [], None), ("tt_train_step", [vp, i32, vp], i32),
                                ("tt_predict", [vp, vp], None), ("tt_state_size", [], u32),
                                ("tt_state_save", [vp], None), ("tt_state_load", [vp], i32),
                                ("tt_step_count", [], u32), ("tt_nonfinite_count", [], u32),
                                ("tt_arena_base", [], vp)):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        self._target_shape = tuple(graph.tensors[TARGET].shape[1:]) if TARGET in graph.inputs else None
        if self._target_shape is not None:
            lib.tt_set_target.argtypes, lib.tt_set_target.restype = [vp], None
        x = graph.tensors[graph.inputs[0]]
        self._x_shape = tuple(x.shape[1:])
        out = next(graph.tensors[n.inputs[0]] for n in graph.nodes if n.op in loss_ops())
        self._n_classes, self._out_size = out.shape[-1], int(np.prod(out.shape[1:]))  # mse: label 0, never read
        self._loss = ctypes.c_float()
        lib.tt_init()

    def reset(self) -> None:
        """Back to the model's initial weights, zero momentum, step 0."""
        self._lib.tt_init()

    def _image(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x)
        if x.dtype != np.int8 or x.shape[-len(self._x_shape):] != self._x_shape or x.size != int(np.prod(self._x_shape)):
            raise ValueError(f"input: expected one int8 image {self._x_shape}, got {x.dtype} {x.shape}")
        return x

    def step(self, x: np.ndarray, label: int) -> float:
        """One training step on one internal int8 image; returns the loss (before the update). A NaN or Inf
        loss means the step was not applied (the non-finite guard; ``nonfinite`` counts them)."""
        x = self._image(x)
        if self._lib.tt_train_step(x.ctypes.data, int(label), ctypes.addressof(self._loss)) < 0:
            raise ValueError(f"label {label} is not a class of this model (0..{self._n_classes - 1})")
        return float(self._loss.value)

    def _targets(self, targets: np.ndarray | None, n: int) -> np.ndarray | None:
        """The float32 targets (N, output shape) a graph with a float target (names.TARGET) needs, checked."""
        if (targets is None) != (self._target_shape is None):
            raise ValueError("targets: give float targets exactly when the training graph reads them (an mse loss "
                             "built with targets=True)")
        if targets is None:
            return None
        t = np.ascontiguousarray(targets, np.float32)
        if t.shape != (n, *self._target_shape):
            raise ValueError(f"targets: expected float32 ({n},{','.join(map(str, self._target_shape))}), got {t.shape}")
        return t

    def train(self, xs: np.ndarray, labels: np.ndarray, order=None, targets: np.ndarray | None = None,
              progress=None) -> np.ndarray:
        """Batch-1 SGD over ``xs[order]`` (default: in the given order); the per-step losses (float32). ``targets``:
        each sample's float target, for a graph whose mse loss reads one (``build_training_graph(targets=True)``);
        ``progress(n)``: called every ``PROGRESS_STEPS`` steps and at the end with the steps done since."""
        order = np.arange(len(xs)) if order is None else np.asarray(order)
        targets = self._targets(targets, len(xs))
        xs = np.ascontiguousarray(xs)
        if xs.dtype != np.int8 or xs.shape[1:] != self._x_shape:
            raise ValueError(f"input: expected int8 (N,{','.join(map(str, self._x_shape))}), got {xs.dtype} {xs.shape}")
        labels = np.asarray(labels)
        if len(labels) and (labels.min() < 0 or labels.max() >= self._n_classes):
            raise ValueError(f"labels must be classes of this model (0..{self._n_classes - 1})")
        losses = np.empty(len(order), np.float32)
        step, loss, base, stride = self._lib.tt_train_step, self._loss, xs.ctypes.data, xs[0].nbytes if len(xs) else 0
        for j, k in enumerate(order):
            if targets is not None:
                self._lib.tt_set_target(targets[k].ctypes.data)
            step(base + int(k) * stride, int(labels[k]), ctypes.addressof(loss))
            losses[j] = loss.value
            if progress is not None and (j + 1) % PROGRESS_STEPS == 0:
                progress(PROGRESS_STEPS)
        if progress is not None and len(order) % PROGRESS_STEPS:
            progress(len(order) % PROGRESS_STEPS)
        return losses

    def predict(self, xs: np.ndarray) -> np.ndarray:
        """int8 logits (N, classes) of the forward pass with the current weights (any output: (N, its size))."""
        xs = np.ascontiguousarray(xs)
        if xs.dtype != np.int8 or xs.shape[1:] != self._x_shape:
            raise ValueError(f"input: expected int8 (N,{','.join(map(str, self._x_shape))}), got {xs.dtype} {xs.shape}")
        out = np.empty((len(xs), self._out_size), np.int8)
        for i in range(len(xs)):
            self._lib.tt_predict(xs[i].ctypes.data, out[i].ctypes.data)
        return out

    @property
    def nonfinite(self) -> int:
        """Steps not applied since the last reset because their loss was NaN or Inf."""
        return int(self._lib.tt_nonfinite_count())

    def state_bytes(self) -> bytes:
        buf = ctypes.create_string_buffer(self._lib.tt_state_size())
        self._lib.tt_state_save(buf)
        return buf.raw

    def state(self):
        """The current ``simulator.TrainState`` (updated weights, biases, momentum, step)."""

        state = unpack(self.graph, self.state_bytes())
        state.nonfinite = self.nonfinite
        return state

    def load_state(self, state) -> None:
        self.load_state_bytes(pack(self.graph, state))

    def load_state_bytes(self, data: bytes) -> None:
        """``tt_state_load`` of a state in the byte layout of ``codegen.state`` (what a device receives)."""
        if self._lib.tt_state_load(data) != 0:
            raise ValueError("the library refused the state (magic, version or layout differ)")

    def arena(self) -> bytes:
        """A copy of the arena (tensor offsets: ``codegen.arena_offsets(trainer.schedule, trainer.memory)``)."""
        return ctypes.string_at(self._lib.tt_arena_base(), self.memory.arena_bytes)
