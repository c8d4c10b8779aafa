"""The C side: emit a graph (inference or training step) as a portable C99 project from the templates and runtime
headers of the top-level ``codegen/`` folder.

``emit_project(graph, layout, out_dir, options)`` writes ``tinytrain_model.h/.c`` and the runtime headers;
``render_project(graph, layout, choices, options)`` returns the same files as text. ``layout`` is the
:class:`tinytrain.memory.arena.ArenaLayout` of the graph (or its ``MemoryReport``, ``memory.report.memory_report``);
``options`` the :class:`tinytrain.codegen.options.EmitOptions` (target core, plain kernels, the gradient proof);
codegen never re-plans.
"""

from tinytrain.codegen.context import MODEL_HEADER, MODEL_SOURCE, arena_offsets
from tinytrain.codegen.project import emit_project, render_project

__all__ = ["MODEL_HEADER", "MODEL_SOURCE", "arena_offsets", "emit_project", "render_project"]
