"""Memory of a step on the device (docs/design.md §2): lifetimes, in-place pairs, arena planners, the arena layout,
the footprint, the budget check, and the reports.

    lifetimes.buffer_lifetimes  ->  inplace.choose  ->  planner (add_buffer / tie / offset / total_size)
      ->  arena.arena_layout -> ArenaLayout  ->  footprint.footprint -> Footprint  ->  budget.BudgetCheck
      =  report.memory_report -> MemoryReport  ->  text.report_text, timeline.write_timeline, report.check_budget

Planning never edits the graph; the code generator reads the ``ArenaLayout`` (tensor, offset, views). The device's
order of the step is training/reorder.py's (training.device_step).
"""
