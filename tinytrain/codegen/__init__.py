"""The C side: emit a graph's int8 forward pass as a portable C99 project (jinja2 templates + runtime).

``emit_project(graph, memory_plan, out_dir)`` writes ``tinytrain_model.h/.c`` and the runtime header;
``render_project(graph, memory_plan)`` returns the same files as text. ``memory_plan`` is the
:class:`tinytrain.memory.report.MemoryReport` of ``plan_forward``; codegen never re-plans.
"""

from tinytrain.codegen.emit import MODEL_HEADER, MODEL_SOURCE, arena_offsets, emit_project, render_project

__all__ = ["MODEL_HEADER", "MODEL_SOURCE", "arena_offsets", "emit_project", "render_project"]
