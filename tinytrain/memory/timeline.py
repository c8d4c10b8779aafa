"""The memory timeline PNG: SRAM over the schedule's steps, stacked by role, with the budget and the peak."""

from __future__ import annotations

from pathlib import Path

from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport

# Stack order (bottom up) and colours; buffer roles map onto these bands.
BANDS = (
    ("weights", "trainable copies + optimizer state", "#8c6bb1"),
    ("remainders", "weight remainders (sub-LSB state)", "#bcbddc"),
    ("runtime", "runtime + stack (estimate)", "#bdbdbd"),
    ("lines", "line buffers (streamed region)", "#9ecae1"),
    ("activations", "activations", "#6baed6"),
    ("saved", "saved for backward", "#fd8d3c"),
    ("gradients", "gradients", "#e6550d"),
    ("scratch", "kernel scratch", "#74c476"),
)
ROLE_BAND = {"input": "activations", "output": "activations", "activation": "activations", "saved": "saved",
             "gradient": "gradients", "scratch": "scratch", "ring": "lines"}


def band_series(report: MemoryReport) -> dict[str, list[int]]:
    """Bytes per band at every step (the arena's live bytes split by role, plus the static SRAM)."""
    by_role = report.live_by_role()
    series = {band: [0] * len(by_role) for band, _, _ in BANDS}
    for step, roles in enumerate(by_role):
        series["weights"][step] = report.trainable_sram_bytes + report.optimizer_state_bytes - report.remainder_bytes
        series["remainders"][step] = report.remainder_bytes
        series["runtime"][step] = report.runtime_sram_bytes + report.stack_bytes
        for role, n in roles.items():
            series[ROLE_BAND.get(role, "activations")][step] += n
    return series


def write_timeline(report: MemoryReport, graph: Graph, path: str | Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = band_series(report)
    steps = list(range(len(series["weights"])))
    kb = 1024.0
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=100)
    ax.stackplot(steps, *[[v / kb for v in series[band]] for band, _, _ in BANDS],
                 labels=[label for _, label, _ in BANDS], colors=[c for _, _, c in BANDS], step="mid", linewidth=0)
    ax.axhline(report.sram_budget_bytes / kb, color="#cb181d", linestyle="--", linewidth=1,
               label=f"budget {report.sram_budget_bytes / kb:.0f} KB")
    ax.axhline(report.peak_sram_bytes / kb, color="black", linestyle=":", linewidth=1,
               label=f"peak SRAM {report.peak_sram_bytes / kb:.1f} KB (arena as planned)")
    if report.stream is not None:
        last = report.stream.steps - 1
        ax.axvspan(-0.5, last + 0.5, color="#deebf7", alpha=0.5, linewidth=0, zorder=0)
        ax.annotate(f"steps 0-{last} streamed row by row", xy=(last / 2, 0), xytext=(0, 4),
                    textcoords="offset points", ha="center", fontsize=7)
    node = graph.nodes[report.peak_step]
    ax.annotate(f"peak: step {report.peak_step} ({node.op})", xy=(report.peak_step, report.peak_sram_bytes / kb),
                xytext=(12, -22), textcoords="offset points", fontsize=8,
                arrowprops={"arrowstyle": "->", "linewidth": 0.8})
    ax.set_xlim(0, max(len(steps) - 1, 1))
    ax.set_ylim(0, max(report.sram_budget_bytes, report.peak_sram_bytes) / kb * 1.12)
    ax.set_xlabel("schedule step (node)")
    ax.set_ylabel("SRAM (KB)")
    ax.set_title(title or f"{graph.name}: SRAM over the schedule")
    ax.grid(axis="y", linewidth=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, ncol=4, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path
