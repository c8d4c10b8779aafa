"""The C side: emit a graph (inference or training step) as a portable C99 project from the templates and runtime
headers of the top-level ``codegen/`` folder.

``emit_project(graph, memory_plan, out_dir)`` writes ``tinytrain_model.h/.c`` and the runtime headers;
``render_project(graph, memory_plan)`` returns the same files as text. ``memory_plan`` is the
:class:`tinytrain.memory.report.MemoryReport` of the graph (``memory.report.memory_report``); codegen never re-plans.
"""

from tinytrain.codegen.context import MODEL_HEADER, MODEL_SOURCE, arena_offsets
from tinytrain.codegen.project import emit_project, render_project

__all__ = ["MODEL_HEADER", "MODEL_SOURCE", "arena_offsets", "emit_project", "render_project"]
