"""Instructions per training step and per inference on every emulated core, side by side, for the shipped plans.

    .venv/bin/python benchmarks/cores.py [--steps 2] [--inferences 1] [--board qemu-m4 ...] [--plan NAME ...]

For each shipped plan (models/plans/*.json, with its model models/NAME.onnx) and each QEMU board (Cortex-M4, M7,
M55, M33, M3, M0+ code, RISC-V rv32imac and rv32imafc): the compile for the board's core (`emit_compile_dir`,
--sram 256k --flash 1m, target = the core: Arm DSP inner products on M4/M7/M55/M33, portable C on the others) ->
the firmware, linked with RAM = 256 KB -> QEMU (-icount shift=0: the counts are deterministic) trains --steps
steps and runs --inferences inferences on synthetic images (uniform random pixels, seed 0). The losses, the
state after training and the logits are compared bit for bit with the host C (engine_c.CTrainer) of the same
graph. When a firmware does not link at 256 KB of RAM and 1 MB of flash the overflow is recorded and the
instructions are measured with all the board's memory instead (instruction counts do not depend on where memory
is); when even that does not link, the row says so.

On the cores without an FPU (M3, M0+, rv32imac) the fp32 backward is software float (libgcc's __aeabi_f* /
__addsf3 ...): the soft-float column of the issue's comparison; the integer-only step (plan "backward": "int")
against it: benchmarks/integer_step.py.

Writes benchmarks/results/cores.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tinytrain.engines import qemu as engine_qemu
from tinytrain.codegen.context import arm_dsp, has_fpu
from tinytrain.data import model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.firmware import BOARDS
from tinytrain.frontends import load_model
from tinytrain.training.sparse import load_plan
from tinytrain.training.train_graph import build_training_graph

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
KB, MB = 1024, 1024 * 1024
CORE_BOARDS = ("qemu-m4", "qemu-m7", "qemu-m55", "qemu-m33", "qemu-m3", "qemu-m0plus", "qemu-riscv32", "qemu-riscv32f")


def shipped_plans() -> list[Path]:
    return sorted((ROOT / "models" / "plans").glob("*.json"))


def model_of(plan_path: Path) -> Path:
    """models/plans/mbv2-w0.35-wide.json -> models/mbv2-w0.35.onnx"""
    return ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx")


def _overflow(error: Exception) -> dict:
    """What a failed link says: the region and the bytes it overflowed by."""
    m = re.search(r"region `(\w+)' overflowed by (\d+) bytes", str(error))
    return {"overflow": f"{m.group(1)} +{m.group(2)} B" if m else str(error).splitlines()[0][:200]}


def link(tg, board: str, work: Path) -> tuple[engine_qemu.Firmware | None, dict]:
    """The firmware at 256 KB of RAM and 1 MB of flash, or (not linking there) with all the board's memory; None
    when even that does not link. The link facts."""
    b = BOARDS[board]
    report = engine_qemu.emit_compile_dir(tg, work / "compile", 256 * KB, 1 * MB, target=b.core)
    facts = {"report_peak_sram_bytes": report["peak_sram_bytes"], "report_fits": report["fits"]}
    try:
        return engine_qemu.build(work / "compile", board, work / "project"), {**facts, "links_at_256k": True}
    except engine_qemu.QemuError as e:
        facts.update(links_at_256k=False, **_overflow(e))
    try:
        engine_qemu.emit_compile_dir(tg, work / "compile_all", b.ram_max - 64 * KB, b.flash_max, target=b.core)
        return engine_qemu.build(work / "compile_all", board, work / "project_all"), facts
    except engine_qemu.QemuError as e:
        return None, {**facts, "overflow_with_all_memory": _overflow(e)["overflow"]}


def measure(tg, board: str, data, host: dict, work: Path) -> dict:
    (x, y), steps = data, host["steps"]
    fw, row = link(tg, board, work)
    b = BOARDS[board]
    row.update(board=board, core=b.core, dsp=arm_dsp(b.core), fpu=has_fpu(b.core) or "-mabi=ilp32f" in b.cpu_flags)
    if fw is None:
        return row
    t0 = time.time()
    r = engine_qemu.run(fw, board, train=(x[:steps], y[:steps]), test=(x[steps:], y[steps:]))
    row.update(firmware_ram_bytes=fw.ram_bytes, firmware_flash_bytes=fw.flash_bytes, stack_used_bytes=r.stack_bytes,
               insns_per_step=int(np.mean(r.step_insns)), insns_per_inference=int(np.mean(r.predict_insns)),
               same_losses=bool(np.array_equal(r.losses.view(np.uint32), host["losses"].view(np.uint32))),
               same_state=r.state == host["state"], same_logits=bool(np.array_equal(r.logits, host["logits"])),
               qemu_seconds=round(time.time() - t0, 2))
    return row


def host_reference(tg, x, y, steps: int) -> dict:
    host = CTrainer(tg)
    losses = host.train(x[:steps], y[:steps])
    return {"steps": steps, "losses": losses, "state": host.state_bytes(), "logits": host.predict(x[steps:])}


def measure_plan(plan_path: Path, boards, args, work: Path) -> list[dict]:
    graph = load_model(model_of(plan_path))
    tg = build_training_graph(graph, load_plan(plan_path))
    rng = np.random.default_rng(0)
    shape = graph.tensors[graph.inputs[0]].shape[1:]
    x = model_inputs(graph, rng.integers(0, 256, (args.steps + args.inferences, *shape), dtype=np.uint8))
    y = rng.integers(0, graph.tensors[graph.outputs[0]].shape[-1], len(x))
    host = host_reference(tg, x, y, args.steps)
    rows = []
    for board in boards:
        row = measure(tg, board, (x, y), host, work / plan_path.stem / board)
        rows.append({"plan": str(plan_path.relative_to(ROOT)), "model": model_of(plan_path).stem, **row})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    boards = list(dict.fromkeys(r["board"] for r in rows))
    plans = list(dict.fromkeys(r["plan"] for r in rows))
    cell = {(r["plan"], r["board"]): r for r in rows}

    def m(r, key):
        if key not in r:
            return f"does not link ({r['overflow_with_all_memory']})"
        star = "" if r["links_at_256k"] else f"* ({r['overflow']})"
        exact = "" if r["same_losses"] and r["same_state"] and r["same_logits"] else " ≠host"
        return f"{r[key] / 1e6:,.1f}M{star}{exact}"

    def kb(r):
        done = "insns_per_step" in r
        return f"{r['firmware_ram_bytes'] / KB:.1f} / {r['firmware_flash_bytes'] / KB:.0f}" if done else "—"

    head = "| plan | " + " | ".join(boards) + " |"
    rule = "|---|" + "---:|" * len(boards)
    kinds = "| core | " + " | ".join(
        f"{cell[(plans[0], b)]['core']} ({'DSP' if cell[(plans[0], b)]['dsp'] else 'no DSP'}, "
        f"{'FPU' if cell[(plans[0], b)]['fpu'] else 'soft float'})" for b in boards) + " |"
    lines = ["# Instructions per training step and per inference on every core (QEMU -icount shift=0)", "",
             f"Measured by `{meta['command']}` on {meta['host']}, {meta['qemu']}, {meta['gcc']}, {meta['riscv_gcc']}; "
             f"{meta['steps']} training steps and {meta['inferences']} inference(s) per plan and core, synthetic "
             "images. Every firmware's losses, state and logits are bit-identical to the host C's (a cell would say "
             "≠host otherwise). * = does not link with a 256 KB RAM region and 1 MB of flash (the region and bytes "
             "over), measured with all the board's memory instead.", "",
             "## Training step (instructions)", "", head, rule, kinds]
    lines += [f"| {p} | " + " | ".join(m(cell[(p, b)], "insns_per_step") for b in boards) + " |" for p in plans]
    lines += ["", "## Inference (instructions)", "", head, rule]
    lines += [f"| {p} | " + " | ".join(m(cell[(p, b)], "insns_per_inference") for b in boards) + " |" for p in plans]
    lines += ["", "## RAM / flash of the firmware (KB)", "", head, rule]
    lines += [f"| {p} | " + " | ".join(kb(cell[(p, b)]) for b in boards) + " |" for p in plans]
    lines += ["", "qemu-m0plus runs the -mcpu=cortex-m0plus code on mps2-an385's Cortex-M3 (QEMU's Cortex-M0 machine, "
              "microbit, has 16 KB of RAM): the counts are those of the M0+ instructions. M3, M0+ and rv32imac compute "
              "the fp32 backward in software float (libgcc); an integer-only step is not built yet (issue 30 item 2). "
              "qemu-m55 links code and weights into the AN547's 4 MB SRAM at 0x21000000 (the vector table in its "
              "512 KB ITCM). Boards: docs/guide/boards.md."]
    return "\n".join(lines) + "\n"


def first_line(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--inferences", type=int, default=1)
    ap.add_argument("--board", nargs="+", default=list(CORE_BOARDS), choices=CORE_BOARDS)
    ap.add_argument("--plan", nargs="+", help="plan names (models/plans/NAME.json); default: every shipped plan")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cores"))
    ap.add_argument("--from-json", nargs="+", metavar="JSON",
                    help="measure nothing: the rows of these earlier runs' JSON files (plans run apart), one table")
    args = ap.parse_args()
    if args.from_json:
        runs = [json.loads(Path(f).read_text()) for f in args.from_json]
        meta = {**runs[0], "command": "; ".join(r["command"] for r in runs)}
        rows = [row for r in runs for row in r["rows"]]
        Path(args.out + ".json").write_text(json.dumps({**{k: v for k, v in meta.items() if k != "rows"},
                                                        "rows": rows}, indent=1) + "\n")
        Path(args.out + ".md").write_text(markdown(rows, meta))
        return
    plans = [p for p in shipped_plans() if not args.plan or p.stem in args.plan]
    meta = {"command": "benchmarks/cores.py " + " ".join(sys.argv[1:]), "steps": args.steps,
            "inferences": args.inferences, "host": platform.machine(),
            "qemu": first_line(["qemu-system-arm", "--version"]), "gcc": first_line(["arm-none-eabi-gcc", "--version"]),
            "riscv_gcc": first_line(["riscv64-unknown-elf-gcc", "--version"])}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tinytrain-cores-") as tmp:
        for plan_path in plans:  # the files after each plan: a long run's results so far
            rows += measure_plan(plan_path, args.board, args, Path(tmp))
            Path(args.out + ".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
            Path(args.out + ".md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
