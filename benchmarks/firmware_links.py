"""fits => links, measured: for every board `tinytrain firmware` knows, the RAM its firmware needs by
tinytrain/firmware/fit.py (the step, the board's stack, the harness's heap and statics) against what the linker
places in the RAM region, for a step compiled at exactly that budget — the measurement fit.py's HARNESS_BYTES rests on.

    .venv/bin/python benchmarks/firmware_links.py [--update last-k:1]

The step: MobileNetV1-0.25 VWW (models/mbv1-0.25-vww.onnx, a new 2-class head) with --update (default last-k:1,
small enough for the 32 KB boards), compiled per core. Per board: the budget = fit.py's need; the firmware is
linked (make, the board's cross compiler) and its RAM sections summed (stack, .data, .bss, minimum heap); the
same step one byte tighter must be refused by render_firmware before any linker. Writes
benchmarks/results/firmware_links.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from tinytrain.api import load_model
from tinytrain.engines import qemu as engine_qemu
from tinytrain.errors import BudgetError
from tinytrain.firmware import BOARDS, render_firmware
from tinytrain.firmware.fit import ram_need
from tinytrain.training.resolve import resolve_plan
from tinytrain.training.train_graph import build_training_graph

from common import ROOT  # noqa: E402
MODEL = ROOT / "models" / "mbv1-0.25-vww.onnx"
OUT = ROOT / "benchmarks" / "results" / "firmware_links"


def measure(update: str) -> list[dict]:
    g = load_model(MODEL, new_head=2)
    step = build_training_graph(g, resolve_plan(g, update=update))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        probes = {}
        for name, b in BOARDS.items():
            if b.core not in probes:
                probes[b.core] = engine_qemu.emit_compile_dir(step, root / f"probe-{b.core}", 256 * 1024,
                                                              1024 * 1024, target=b.core)
            need = ram_need(probes[b.core], b)
            row = {"board": name, "core": b.core, "harness": "semihosting" if b.qemu else "serial",
                   "step_bytes": need.step, "stack_bytes": need.stack, "heap_bytes": need.heap,
                   "harness_reserve_bytes": need.harness, "need_bytes": need.total, "board_ram_bytes": b.ram_max}
            flash = min(1024 * 1024, b.flash_max)
            if need.total > b.ram_max or probes[b.core]["flash_bytes"] > flash:
                why = "RAM" if need.total > b.ram_max else "flash"
                rows.append({**row, "linked_ram_bytes": None, "slack_bytes": None, "one_less_refused": None,
                             "too_small": why})
                continue
            exact = engine_qemu.emit_compile_dir(step, root / name / "exact", need.total, flash, target=b.core)
            assert exact["sram_budget_bytes"] == need.total
            fw = engine_qemu.build(root / name / "exact", name, root / name / "project")
            engine_qemu.emit_compile_dir(step, root / name / "short", need.total - 1, flash, target=b.core)
            try:
                render_firmware(root / name / "short", name)
                refused = False
            except BudgetError:
                refused = True
            rows.append({**row, "linked_ram_bytes": fw.ram_bytes, "slack_bytes": need.total - fw.ram_bytes,
                         "one_less_refused": refused})
            print(f"{name}: need {need.total} linked {fw.ram_bytes} slack {need.total - fw.ram_bytes}", flush=True)
    return rows


def markdown(rows: list[dict], update: str, command: str) -> str:
    lines = ["# fits => links: the RAM each board's firmware needs (fit.py) and what the linker placed",
             "", f"`{command}`: MobileNetV1-0.25 VWW, new 2-class head, `--update {update}`, compiled per core at "
             "exactly the RAM its firmware needs (the RAM region = that budget). No image buffer: the harnesses read "
             "samples row by row.", "",
             "| board | harness | step | stack | heap | harness reserve | need = budget | linked RAM | slack | "
             "1 B less refused |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        linked = "—" if r["linked_ram_bytes"] is None else f"{r['linked_ram_bytes']:,}"
        slack = "—" if r["slack_bytes"] is None else f"{r['slack_bytes']:,}"
        refused = {None: f"— (the step needs more {r.get('too_small')} than the board has)", True: "yes",
                   False: "**no**"}[r["one_less_refused"]]
        lines.append(f"| {r['board']} | {r['harness']} | {r['step_bytes']:,} | {r['stack_bytes']:,} | "
                     f"{r['heap_bytes']:,} | {r['harness_reserve_bytes']:,} | {r['need_bytes']:,} | {linked} | "
                     f"{slack} | {refused} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", default="last-k:1")
    args = ap.parse_args()
    command = "benchmarks/firmware_links.py" + ("" if args.update == "last-k:1" else f" --update {args.update}")
    t0 = time.time()
    rows = measure(args.update)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps({"command": command, "update": args.update, "rows": rows,
                                                    "seconds": round(time.time() - t0, 1),
                                                    "machine": platform.platform()}, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(markdown(rows, args.update, command))
    print(f"wrote {OUT.with_suffix('.md')} and .json")


if __name__ == "__main__":
    main()
