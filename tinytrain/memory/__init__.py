"""Memory of a step on the device (docs/design.md §2): schedule, lifetimes, in-place pairs, arena planners,
SRAM / flash accounting, and the reports.

    schedule.reorder (Graph -> Graph)  ->  lifetimes.buffer_lifetimes  ->  inplace.choose
      ->  planner (add_buffer / tie / offset / total_size)  ->  report.memory_report -> MemoryReport
      ->  text.report_text, timeline.write_timeline, report.check_budget

Planning never edits the graph; the code generator reads ``MemoryReport.buffers`` (tensor, offset, views).
"""
