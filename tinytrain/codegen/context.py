"""What every emitter and binding shares: the kernel and call types, the bindings' view of a graph (``Context``),
the jinja2 environment of ``codegen/templates``, kernel rendering and the runtime headers.

The forward emitter (``emit.py``), the training emitter (``emit_train.py``) and the streamed region
(``emit_stream.py``) build on this module; the bindings (``codegen/bindings/``) return its ``Call``s, built with a
``Signature`` so that a kernel's parameter list and its call's arguments come from one place.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import jinja2
import numpy as np

from tinytrain.codegen import cformat
from tinytrain.cores import core_of
from tinytrain.csources import codegen_runtime, codegen_templates
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, Tensor
from tinytrain.memory.arena import ArenaLayout
from tinytrain.names import unique_name

MODEL_SOURCE = "tinytrain_model.c"
MODEL_HEADER = "tinytrain_model.h"
# tt_simd.h includes its parts by kernel family (instructions, inline asm, inner products, depthwise taps, stores,
# loops); the kernels include tt_simd.h alone.
SIMD_FILES = ("tt_simd.h", "tt_simd_ops.h", "tt_simd_asm.h", "tt_simd_dot.h", "tt_simd_depthwise.h", "tt_simd_store.h",
              "tt_simd_loops.h")
RUNTIME_FILES = ("tt_fixedpoint.h",) + SIMD_FILES + ("tt_rows.h", "tt_stream.h")
def core_build(target: str) -> bool:
    """Whether ``target`` is a microcontroller core (tinytrain/cores.py), not a host."""
    return core_of(target) is not None


def fpv5(target: str) -> bool:
    """Whether a project for ``target`` may use the FPv5 rounding instructions (tt_float.h tt_floor_clamped)."""
    core = core_of(target)
    return core is not None and core.fpv5


def has_fpu(target: str) -> bool:
    """Whether every board of ``target`` has a single-precision FPU (hard-float builds)."""
    core = core_of(target)
    return core is not None and core.fpu


def arm_dsp(target: str) -> bool:
    """Whether ``target`` has the Arm DSP extension: tt_simd.h's inner products are its instructions there."""
    core = core_of(target)
    return core is not None and core.dsp


def dsp_kernels(target: str) -> bool:
    """Whether a project for ``target`` defines TT_ARM_DSP 1: the device kernels' inner products in the DSP
    instructions' shapes (tt_simd.h), the instructions themselves where the compiler targets the extension
    (``arm_dsp``), their exact C models elsewhere (Cortex-M3, M0+, RISC-V: the same integers in portable C). A host
    build gets the portable C reference and, for pointwise and depthwise convolutions, the host kernels vectorized
    across channels (bindings/conv2d.py, kernels/conv2d_rows.c.j2)."""
    return core_build(target)


def host_build(target: str) -> bool:
    """Whether a project for ``target`` is built for a host (no microcontroller core): stack VLAs,
    channel-vectorized kernels."""
    return not core_build(target)


@dataclass(frozen=True)
class Param:
    decl: str     # e.g. "const int8_t *inp"
    comment: str  # shape of a pointer, e.g. "(H,W,Ci)"


@dataclass(frozen=True)
class Kernel:
    family: str                         # codegen/templates/kernels/<family>.c.j2
    name: str                           # the C function, unique per specialization
    consts: tuple[tuple[str, Any], ...]  # template parameters
    params: tuple[Param, ...]
    calls: tuple[Kernel, ...] = ()      # kernels its body calls (emitted before it)


@dataclass(frozen=True)
class Call:
    kernel: Kernel
    args: tuple[str, ...]


@dataclass
class Signature:
    """A kernel's parameters and a call's arguments, added side by side."""

    params: list[Param] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def add(self, decl: str, arg: Any, comment: str = "") -> None:
        self.params.append(Param(decl, comment))
        self.args.append(str(arg))

    def ints(self, **values: int) -> None:
        for name, v in values.items():
            self.add(f"int {name}", int(v))

    def int32s(self, **values: int) -> None:
        for name, v in values.items():
            self.add(f"int32_t {name}", int(v))

    def call(self, family: str, name: str, consts: dict[str, Any], calls: tuple[Kernel, ...] = ()) -> Call:
        return Call(Kernel(family, name, tuple(sorted(consts.items())), tuple(self.params), calls), tuple(self.args))


@dataclass(frozen=True)
class Band:
    """A band of output rows of a windowed kernel in a streamed region (codegen/emit_stream.py): C expressions
    of the first and end output rows and of the rows the input and output buffers start at (line buffers)."""

    oy_begin: str
    oy_end: str
    in_row0: str
    out_row0: str


# binding(node, ctx) -> the call of the node's kernel (codegen/bindings/: one module per op)
Binding = Callable[[Node, Any], Call]


@dataclass(frozen=True)
class Array:
    """A constant array of the emitted source (a flash table, or the initial values of an SRAM array)."""

    name: str
    ctype: str
    values: np.ndarray
    comment: str


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment of the emitted project's templates (``codegen/templates``); one per process, so each
    template is compiled once (the plan search renders a project per fine-tune: compiling them each time took a
    tenth of its time)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(codegen_templates()),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


def runtime_files(names: tuple[str, ...]) -> dict[str, str]:
    """File name -> text of the runtime headers ``names`` (``codegen/runtime``), copied into a project."""
    runtime = codegen_runtime()
    return {name: (runtime / name).read_text(encoding="utf-8") for name in names}


def streamed_input(layout: ArenaLayout) -> bool:
    """Whether the step reads its input row by row into a line buffer (memory/stream.py sources)."""
    return layout.stream is not None and any(b.source for b in layout.stream.buffers)


def arena_offsets(graph: Graph, layout: ArenaLayout) -> dict[str, int]:
    """Tensor name -> arena offset, from the planner's buffers (views share their buffer's offset)."""
    offsets: dict[str, int] = {}
    for b in layout.buffers:
        for name in (b.use.tensor,) + tuple(b.use.views):
            t = graph.tensors.get(name)
            whole = layout.stream is None or name not in {r.tensor for r in layout.stream.rings}
            if t is None or (whole and t.nbytes > b.use.size):
                raise ValueError(f"memory plan buffer {name!r} does not match this graph; plan it with "
                                 "tinytrain.memory.report.forward_memory_report(graph, ...)")
            if b.offset % 16 or b.offset + b.use.size > layout.arena_bytes:
                raise ValueError(f"memory plan puts {name!r} at {b.offset}, outside a {layout.arena_bytes}-byte arena")
            offsets[name] = b.offset
    return offsets


class Context:
    """What bindings see: tensors, arena pointers and flash constants, named deterministically."""

    def __init__(self, graph: Graph, offsets: dict[str, int], target: str = "", plain: tuple[str, ...] = ()) -> None:
        self.graph = graph
        self.offsets = offsets
        self.host = host_build(target)         # bindings may choose the host kernels
        self.plain = frozenset(plain)          # nodes whose kernels derive no table from their weight (EmitOptions)
        self.pointers: dict[str, str] = {}     # tensor -> pointer variable, in order of first use
        self.constants: dict[str, Array] = {}  # C name -> array, in order of first use
        self._const_names: dict[str, str] = {}
        self._taken: set[str] = set()
        self.choices: list[str] = []           # the kernel variants bindings chose, why (tinytrain compile --explain)

    def tensor(self, name: str) -> Tensor:
        return self.graph.tensors[name]

    def act(self, name: str) -> str:
        t = self.graph.tensors[name]
        if t.is_constant:
            raise UnsupportedModelError(f"codegen: constant {name} used as an activation; fold it before compiling")
        if t.dtype != DType.INT8:
            raise UnsupportedModelError(f"codegen: activation {name} is {t.dtype.value}; the C forward pass is int8")
        if name not in self.offsets:
            raise ValueError(f"memory plan has no buffer for {name!r}; plan this graph before emitting it")
        return self.pointers.setdefault(name, f"a{len(self.pointers)}")

    def extent(self, name: str) -> tuple[int, int]:
        """The arena bytes [start, end) the buffer of activation ``name`` occupies (ctx.act's pointer)."""
        return self.offsets[name], self.offsets[name] + self.graph.tensors[name].nbytes

    def const(self, name: str) -> str:
        if name not in self._const_names:
            t = self.graph.tensors[name]
            if not t.is_constant:
                raise ValueError(f"{name} is not a constant")
            cname = self._unique("tt_" + cformat.identifier(name))
            self._const_names[name] = cname
            self.constants[cname] = Array(cname, cformat.ctype(t.data.dtype), t.data,
                                           f"{cformat.shape(t.shape)} {t.dtype.value} {t.role.value} {cformat.comment(name)}")
        return self._const_names[name]

    def trainable_rows(self, name: str) -> int | None:
        """Rows of a weight that are an SRAM copy when only some are (training steps); None: one array."""
        return None

    def trainable(self, name: str) -> bool:
        """Does the step update this constant (its kernels then read an SRAM copy, never a table derived from it)?"""
        return False

    def frozen(self, name: str) -> str:
        raise ValueError(f"{name} has no separate frozen rows")

    def band(self, node: Node) -> Band | None:
        """The output rows a windowed kernel computes when ``node`` runs in a streamed region; None: all of them."""
        return None

    def table(self, node: Node, what: str, values: np.ndarray) -> str:
        cname = self._unique(f"tt_{cformat.identifier(node.name, 32)}_{what}")
        self.constants[cname] = Array(cname, cformat.ctype(values.dtype), np.asarray(values),
                                       f"({values.size},) {what} of node {cformat.comment(node.name)}")
        return cname

    def _unique(self, base: str) -> str:
        name = unique_name(base, self._taken, first=2)
        self._taken.add(name)
        return name


def kernel_signature(kernel: Kernel, width: int = 96) -> str:
    """``static void name(`` then one pointer per line with its shape comment, scalars grouped."""
    lines: list[tuple[str, str]] = []
    for p in kernel.params:
        if p.comment:
            lines.append((p.decl, p.comment))
        elif lines and not lines[-1][1] and len(lines[-1][0]) + len(p.decl) + 2 <= width:
            lines[-1] = (f"{lines[-1][0]}, {p.decl}", "")
        else:
            lines.append((p.decl, ""))
    column = max((len(decl) + 1 for decl, c in lines if c), default=0)
    out = []
    for i, (decl, c) in enumerate(lines):
        text = decl + ("," if i < len(lines) - 1 else ")")
        out.append(f"    {text:<{column}}  /* {c} */" if c else f"    {text}")
    # noinline: one out-of-line function per kernel, called once per layer; gcc -O3 specializing a kernel inlined
    # into the schedule for each layer's constants made the host forward pass 25% slower (mbv2-w0.35).
    return f"static __attribute__((noinline)) void {kernel.name}(\n" + "\n".join(out)


def step_comment(k: int, node: Node, graph: Graph) -> str:
    ins = " ".join(cformat.shape(graph.tensors[i].shape) for i in node.inputs[:1] if i)
    outs = " ".join(cformat.shape(graph.tensors[o].shape) for o in node.outputs)
    return f"{k}: {node.op} {cformat.comment(node.name)}: {ins} -> {outs}"


def bind_call(env: jinja2.Environment, bindings: dict[str, Binding], node: Node, ctx,
              kernels: dict[str, tuple[Kernel, str]]) -> Call:
    """The kernel call of ``node``; its kernel (one per specialization) is rendered into ``kernels`` once."""
    binding = bindings.get(node.op)
    if binding is None:
        raise UnsupportedModelError(f"codegen: no C kernel for op {node.op!r} (node {node.name}); "
                                    f"supported: {', '.join(sorted(bindings))}, reshape")
    call: Call = binding(node, ctx)
    render_kernel(env, call.kernel, kernels)
    return call


def render_kernel(env: jinja2.Environment, kern: Kernel, kernels: dict[str, tuple[Kernel, str]]) -> None:
    """Render ``kern`` into ``kernels`` unless it is there, after the kernels it calls."""
    for inner in kern.calls:
        render_kernel(env, inner, kernels)
    if kern.name in kernels:
        if kernels[kern.name][0] != kern:
            raise AssertionError(f"two different kernels named {kern.name}")
        return
    text = env.get_template(f"kernels/{kern.family}.c.j2").render(
        name=kern.name, k=dict(kern.consts), signature=kernel_signature(kern))
    kernels[kern.name] = (kern, text.strip("\n"))
