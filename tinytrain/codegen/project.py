"""A graph and its arena layout -> the emitted C project: the inference project (``emit.py``) or, for a training
graph (one with update nodes), the training project (``emit_train.py``)."""

from __future__ import annotations

from pathlib import Path

from tinytrain.codegen.emit import render_forward_project
from tinytrain.codegen.emit_train import render_training_project
from tinytrain.ir import Graph
from tinytrain.codegen.options import EmitOptions
from tinytrain.memory.arena import ArenaLayout
from tinytrain.memory.report import MemoryReport
from tinytrain.ops import get_op


def is_training_graph(graph: Graph) -> bool:
    """Whether ``graph`` updates state (an op that ``writes`` its inputs: the training step)."""
    return any(get_op(n.op).writes for n in graph.nodes)


def render_project(graph: Graph, layout: ArenaLayout | MemoryReport, choices: list[str] | None = None,
                   options: EmitOptions = EmitOptions()) -> dict[str, str]:
    """File name -> text of the emitted project (model source, header, runtime) of ``graph`` laid out by ``layout``
    (an ``ArenaLayout``, or a ``MemoryReport``: its layout), for ``options`` (target core, plain kernels, proof); the
    kernel variants the bindings chose, with why, appended to ``choices`` (tinytrain compile --explain)."""
    layout = layout.layout if isinstance(layout, MemoryReport) else layout
    if is_training_graph(graph):
        return render_training_project(graph, layout, choices, options)
    return render_forward_project(graph, layout, choices, options)


def emit_project(graph: Graph, layout: ArenaLayout | MemoryReport, out_dir: str | Path,
                 options: EmitOptions = EmitOptions()) -> list[Path]:
    """Write the C project of ``graph`` laid out by ``layout`` into ``out_dir``; return the files written.

    Other files in ``out_dir`` (e.g. report.json) are left alone.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_project(graph, layout, options=options).items():
        path = out / name
        path.write_bytes(text.encode("utf-8"))
        written.append(path)
    return written
