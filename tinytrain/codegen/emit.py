"""The C project of a graph's int8 forward pass: kernels, frozen constants, one arena, the schedule.

Codegen only reads the graph and the memory plan (docs/design.md §2): every activation is placed at the
offset the planner gave its buffer (a view such as a reshape output shares its buffer's offset), and
nothing is planned here. The output is deterministic: the same graph and plan give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from tinytrain import __version__
from tinytrain.codegen import cformat
from tinytrain.codegen.bindings import BINDINGS, Band, Call, Kernel
from tinytrain.csources import codegen_runtime, codegen_templates
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, Tensor
from tinytrain.memory.report import MemoryReport

RUNTIME_FILES = ("tt_fixedpoint.h", "tt_simd.h", "tt_stream.h")
# Cores with the Arm DSP extension (SXTB16, SMLAD): a project compiled for one of them (the plan's target, from
# `tinytrain compile --target` or the firmware board's core) defines TT_ARM_DSP 1, which selects tt_simd.h's DSP
# inner products. This is the one place the target chooses code; any other target gets the portable C reference.
DSP_TARGETS = frozenset({"cortex-m4", "cortex-m7", "cortex-m55"})


def arm_dsp(target: str) -> bool:
    """Whether a project for ``target`` uses the Arm DSP inner products (tt_simd.h)."""
    return target in DSP_TARGETS
MODEL_SOURCE = "tinytrain_model.c"
MODEL_HEADER = "tinytrain_model.h"


@dataclass(frozen=True)
class _Array:
    name: str
    ctype: str
    values: np.ndarray
    comment: str


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(codegen_templates()),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


def streamed_input(plan: MemoryReport) -> bool:
    """Whether the step reads its input row by row into a line buffer (memory/stream.py sources)."""
    return plan.stream is not None and any(b.source for b in plan.stream.buffers)


def arena_offsets(graph: Graph, plan: MemoryReport) -> dict[str, int]:
    """Tensor name -> arena offset, from the planner's buffers (views share their buffer's offset)."""
    offsets: dict[str, int] = {}
    for b in plan.buffers:
        for name in (b.use.tensor,) + tuple(b.use.views):
            t = graph.tensors.get(name)
            whole = plan.stream is None or name not in {r.tensor for r in plan.stream.rings}
            if t is None or (whole and t.nbytes > b.use.size):
                raise ValueError(f"memory plan buffer {name!r} does not match this graph; plan it with "
                                 "tinytrain.memory.report.plan_forward(graph, ...)")
            if b.offset % 16 or b.offset + b.use.size > plan.arena_bytes:
                raise ValueError(f"memory plan puts {name!r} at {b.offset}, outside a {plan.arena_bytes}-byte arena")
            offsets[name] = b.offset
    return offsets


class _Context:
    """What bindings see: tensors, arena pointers and flash constants, named deterministically."""

    def __init__(self, graph: Graph, offsets: dict[str, int]) -> None:
        self.graph = graph
        self.offsets = offsets
        self.pointers: dict[str, str] = {}     # tensor -> pointer variable, in order of first use
        self.constants: dict[str, _Array] = {}  # C name -> array, in order of first use
        self._const_names: dict[str, str] = {}
        self._taken: set[str] = set()

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

    def const(self, name: str) -> str:
        if name not in self._const_names:
            t = self.graph.tensors[name]
            if not t.is_constant:
                raise ValueError(f"{name} is not a constant")
            cname = self._unique("tt_" + cformat.identifier(name))
            self._const_names[name] = cname
            self.constants[cname] = _Array(cname, cformat.ctype(t.data.dtype), t.data,
                                           f"{cformat.shape(t.shape)} {t.dtype.value} {t.role.value} {cformat.comment(name)}")
        return self._const_names[name]

    def trainable_rows(self, name: str) -> int | None:
        """Rows of a weight that are an SRAM copy when only some are (training steps); None: one array."""
        return None

    def frozen(self, name: str) -> str:
        raise ValueError(f"{name} has no separate frozen rows")

    def band(self, node: Node) -> Band | None:
        """The output rows a windowed kernel computes when ``node`` runs in a streamed region; None: all of them."""
        return None

    def table(self, node: Node, what: str, values: np.ndarray) -> str:
        cname = self._unique(f"tt_{cformat.identifier(node.name, 32)}_{what}")
        self.constants[cname] = _Array(cname, cformat.ctype(values.dtype), np.asarray(values),
                                       f"({values.size},) {what} of node {cformat.comment(node.name)}")
        return cname

    def _unique(self, base: str) -> str:
        name, k = base, 2
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        return name


def _signature(kernel: Kernel, width: int = 96) -> str:
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


def _step_comment(k: int, node: Node, graph: Graph) -> str:
    ins = " ".join(cformat.shape(graph.tensors[i].shape) for i in node.inputs[:1] if i)
    outs = " ".join(cformat.shape(graph.tensors[o].shape) for o in node.outputs)
    return f"{k}: {node.op} {cformat.comment(node.name)}: {ins} -> {outs}"


def bind_call(env: jinja2.Environment, bindings: dict, node: Node, ctx, kernels: dict[str, tuple[Kernel, str]]) -> Call:
    """The kernel call of ``node``; its kernel (one per specialization) is rendered into ``kernels`` once."""
    binding = bindings.get(node.op)
    if binding is None:
        raise UnsupportedModelError(f"codegen: no C kernel for op {node.op!r} (node {node.name}); "
                                    f"supported: {', '.join(sorted(bindings))}, reshape")
    call: Call = binding(node, ctx)
    _render_kernel(env, call.kernel, kernels)
    return call


def _render_kernel(env: jinja2.Environment, kern: Kernel, kernels: dict[str, tuple[Kernel, str]]) -> None:
    """Render ``kern`` into ``kernels`` unless it is there, after the kernels it calls."""
    for inner in kern.calls:
        _render_kernel(env, inner, kernels)
    if kern.name in kernels:
        if kernels[kern.name][0] != kern:
            raise AssertionError(f"two different kernels named {kern.name}")
        return
    text = env.get_template(f"kernels/{kern.family}.c.j2").render(
        name=kern.name, k=dict(kern.consts), signature=_signature(kern))
    kernels[kern.name] = (kern, text.strip("\n"))


def render_project(graph: Graph, plan: MemoryReport) -> dict[str, str]:
    """File name -> text of the emitted project (model source, header, runtime).

    A training graph (one with update nodes) gives the training project of ``emit_train``."""
    from tinytrain.codegen.emit_train import is_training_graph, render_training_project

    if is_training_graph(graph):
        return render_training_project(graph, plan)
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise UnsupportedModelError(f"codegen: the C API takes one input and one output; this model has "
                                    f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
    from tinytrain.codegen.emit_stream import render_region
    from tinytrain.ops import get_op

    env = _environment()
    ctx = _Context(graph, arena_offsets(graph, plan))
    ctx.act(graph.inputs[0])
    kernels: dict[str, tuple[Kernel, str]] = {}
    steps = []
    used: set[str] = set()  # pointer variables some kernel call reads or writes
    for k, node in enumerate(graph.nodes):
        if plan.stream is not None and k < plan.stream.steps:
            if k == 0:
                step, region_used = render_region(graph, plan.stream, ctx, lambda n, c: bind_call(env, BINDINGS, n, c, kernels),
                                                  lambda j, n: _step_comment(j, n, graph))
                steps.append(step)
                used.update(region_used)
            continue
        if get_op(node.op).view:
            ctx.act(node.inputs[0])
            ctx.act(node.outputs[0])
            steps.append({"comment": _step_comment(k, node, graph) + " (a view: same arena bytes, no code)", "code": ""})
            continue
        call = bind_call(env, BINDINGS, node, ctx, kernels)
        steps.append({"comment": _step_comment(k, node, graph), "code": f"{call.kernel.name}({', '.join(call.args)});"})
        used.update(call.args)

    ctx.act(graph.outputs[0])
    pointers = []
    for name, var in ctx.pointers.items():
        if var not in used:  # e.g. a view that is the graph output: tt_predict reads it by offset
            continue
        t = graph.tensors[name]
        role = "input" if name in graph.inputs else "output" if name in graph.outputs else "activation"
        pointers.append({"name": var, "offset": ctx.offsets[name],
                         "comment": f"{cformat.shape(t.shape)} {role} {cformat.comment(name)}"})
    width = max((len(p["name"]) + len(str(p["offset"])) for p in pointers), default=0)
    for p in pointers:
        p["pad"] = width - len(p["name"]) - len(str(p["offset"]))
    constants = [{"name": c.name, "ctype": c.ctype, "count": c.values.size, "comment": c.comment,
                  "body": cformat.array_body(c.values)} for c in ctx.constants.values()]

    def io(name: str) -> dict:
        t = graph.tensors[name]
        return {"shape": cformat.shape(t.shape), "nbytes": t.nbytes, "offset": ctx.offsets[name],
                "zp": t.quant.zp if t.quant else 0, "scale": repr(t.quant.s) if t.quant else "1.0",
                "rows": t.shape[1] if len(t.shape) > 2 else 1,
                "row_bytes": t.nbytes // t.shape[1] if len(t.shape) > 2 else t.nbytes}

    common = {
        "version": __version__,
        "model_name": cformat.comment(graph.name),
        "sha256": graph.source_sha256 or "(none: graph built in memory)",
        "arena_bytes": plan.arena_bytes,
        "input": io(graph.inputs[0]),
        "output": io(graph.outputs[0]),
        "uint8_io": graph.uint8_io,
        "arm_dsp": arm_dsp(plan.target),
        "streamed_input": streamed_input(plan),
    }
    files = {
        MODEL_HEADER: env.get_template("model.h.j2").render(**common),
        MODEL_SOURCE: env.get_template("model.c.j2").render(
            **common, planner=plan.planner, steps=steps, kernels=[text for _, text in kernels.values()],
            constants=constants, pointers=pointers,
            const_bytes=sum(c.values.nbytes for c in ctx.constants.values())),
    }
    runtime = codegen_runtime()
    for name in RUNTIME_FILES:
        files[name] = runtime.joinpath(name).read_text(encoding="utf-8")
    return files


def emit_project(graph: Graph, memory_plan: MemoryReport, out_dir: str | Path) -> list[Path]:
    """Write the C project of ``graph`` laid out by ``memory_plan`` into ``out_dir``; return the files written.

    Other files in ``out_dir`` (e.g. report.json) are left alone.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_project(graph, memory_plan).items():
        path = out / name
        path.write_bytes(text.encode("utf-8"))
        written.append(path)
    return written
