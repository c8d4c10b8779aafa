"""The C project of a graph's int8 forward pass: kernels, frozen constants, one arena, the schedule.

Codegen only reads the graph and its arena layout (docs/design.md §2): every activation is placed at the
offset the planner gave its buffer (a view such as a reshape output shares its buffer's offset), and
nothing is planned here. The output is deterministic: the same graph and layout give the same bytes.
"""

from __future__ import annotations

from tinytrain.version import __version__
from tinytrain.codegen import cformat
from tinytrain.codegen.bindings import BINDINGS
from tinytrain.codegen.context import (MODEL_HEADER, MODEL_SOURCE, RUNTIME_FILES, Context, Kernel, arena_offsets,
                                       arm_dsp, bind_call, dsp_kernels, environment, runtime_files, step_comment,
                                       streamed_input)
from tinytrain.codegen.contract import header_contract
from tinytrain.codegen.emit_stream import render_region
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import Graph
from tinytrain.codegen.options import EmitOptions
from tinytrain.memory.arena import ArenaLayout
from tinytrain.ops import get_op


def render_forward_project(graph: Graph, layout: ArenaLayout, choices: list[str] | None = None,
                           options: EmitOptions = EmitOptions()) -> dict[str, str]:
    """File name -> text of the emitted inference project (model source, header, runtime); the bindings' kernel
    choices appended to ``choices``."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise UnsupportedModelError(f"codegen: the C API takes one input and one output; this model has "
                                    f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
    env = environment()
    ctx = Context(graph, arena_offsets(graph, layout), options.target, options.plain)
    kernels: dict[str, tuple[Kernel, str]] = {}
    steps, used = _forward_steps(graph, layout, env, ctx, kernels)
    common = {
        "version": __version__,
        "model_name": cformat.comment(graph.name),
        "sha256": graph.source_sha256 or "(none: graph built in memory)",
        "arena_bytes": layout.arena_bytes,
        "input": _io(graph, ctx, graph.inputs[0]),
        "output": _io(graph, ctx, graph.outputs[0]),
        "uint8_input": graph.uint8_input, "uint8_output": graph.uint8_output,
        "arm_dsp": arm_dsp(options.target), "dsp_kernels": dsp_kernels(options.target),
        "streamed_input": streamed_input(layout),
    }
    contract = header_contract(graph, graph.inputs[0], graph.outputs[0], "TT_OUTPUT")
    constants = [{"name": c.name, "ctype": c.ctype, "count": c.values.size, "comment": c.comment,
                  "body": cformat.array_body(c.values)} for c in ctx.constants.values()]
    files = {
        MODEL_HEADER: env.get_template("model.h.j2").render(**common, contract=contract),
        MODEL_SOURCE: env.get_template("model.c.j2").render(
            **common, planner=layout.planner, steps=steps, kernels=[text for _, text in kernels.values()],
            constants=constants, pointers=_pointers(graph, ctx, used),
            const_bytes=sum(c.values.nbytes for c in ctx.constants.values())),
    }
    files.update(runtime_files(RUNTIME_FILES))
    if choices is not None:
        choices.extend(ctx.choices)
    return files


def _forward_steps(graph: Graph, layout: ArenaLayout, env, ctx: Context,
                   kernels: dict[str, tuple[Kernel, str]]) -> tuple[list[dict], set[str]]:
    """(each step's comment and call, the pointer variables the calls use); the streamed region is one step."""
    ctx.act(graph.inputs[0])
    steps = []
    used: set[str] = set()  # pointer variables some kernel call reads or writes
    for k, node in enumerate(graph.nodes):
        if layout.stream is not None and k < layout.stream.steps:
            if k == 0:
                step, region_used = render_region(graph, layout.stream, ctx, lambda n, c: bind_call(env, BINDINGS, n, c, kernels),
                                                  lambda j, n: step_comment(j, n, graph))
                steps.append(step)
                used.update(region_used)
            continue
        if get_op(node.op).view:
            ctx.act(node.inputs[0])
            ctx.act(node.outputs[0])
            steps.append({"comment": step_comment(k, node, graph) + " (a view: same arena bytes, no code)", "code": ""})
            continue
        call = bind_call(env, BINDINGS, node, ctx, kernels)
        steps.append({"comment": step_comment(k, node, graph), "code": f"{call.kernel.name}({', '.join(call.args)});"})
        used.update(call.args)
    ctx.act(graph.outputs[0])
    return steps, used


def _pointers(graph: Graph, ctx: Context, used: set[str]) -> list[dict]:
    """The arena pointer variables some call uses, with their offsets, padded to align the offsets."""
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
    return pointers


def _io(graph: Graph, ctx: Context, name: str) -> dict:
    t = graph.tensors[name]
    return {"shape": cformat.shape(t.shape), "nbytes": t.nbytes, "offset": ctx.offsets[name],
            "zp": t.quant.zp if t.quant else 0, "scale": repr(t.quant.s) if t.quant else "1.0",
            "rows": t.shape[1] if len(t.shape) > 2 else 1,
            "row_bytes": t.nbytes // t.shape[1] if len(t.shape) > 2 else t.nbytes}
