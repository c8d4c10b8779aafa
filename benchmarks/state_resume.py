"""Every shipped plan trains, saves its state to flash and resumes on QEMU at --sram 256k (the state streamed).

    .venv/bin/python benchmarks/state_resume.py [--boards qemu-m4,qemu-m7,qemu-m55] [--steps 4] [--save-every 2]

For each plan of models/plans on its model (models/<model>.onnx) and each board: the training firmware at 256 KB of
SRAM (flash budget: the board's), its state saved to the board's flash every --save-every samples, run on --steps
samples until its first save and killed (a power cut), run again on the same flash (it resumes from the saved state
and skips the samples it had consumed) to the end; compared with the host C's uninterrupted training: the resumed
losses, the final state (tt_state.bin) and the newest state in flash, byte for byte. Also the state's bytes, the
firmware's RAM sections and the stack high-water mark of the run (streaming included) against the measured
reservation of the memory report. A plan whose firmware the board cannot hold (e.g. more weights than its flash) is
listed as not run, with the reason.

Writes benchmarks/results/state_resume.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from tinytrain.codegen.state import state_layout, state_size
from tinytrain.data import model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.engines.qemu import QemuTrainer, run
from tinytrain.errors import TinyTrainError
from tinytrain.firmware.boards import get_board
from tinytrain.firmware.persist import newest
from tinytrain.frontends import load_model
from tinytrain.memory.report import STACK_BYTES, STACK_MEASURED_BYTES
from tinytrain.training.sparse import load_plan
from tinytrain.training.train_graph import build_training_graph

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
SRAM = 256 * 1024


def measure(plan_path: Path, board: str, steps: int, save_every: int, work: Path) -> dict:
    model = ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx")
    g = load_model(model)
    tg = build_training_graph(g, load_plan(plan_path))
    n = state_size(state_layout(tg))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (steps, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, g.tensors[g.outputs[0]].shape[-1], steps)
    flash = work / "flash.bin"
    row = {"model": model.name, "plan": str(plan_path.relative_to(ROOT)), "board": board, "sram_budget": SRAM,
           "state_bytes": n}
    t0 = time.time()
    try:
        q = QemuTrainer(tg, board=board, sram_budget=SRAM, flash_budget=get_board(board).flash_max,
                        save_every=save_every, flash=flash)
    except TinyTrainError as e:  # the board's memory map cannot hold it: the linker's own words
        lines = str(e).splitlines()
        reason = [line.split("ld: ")[-1] for line in lines if "overflowed" in line or "tinytrain:" in line]
        return {**row, "not_run": "; ".join(reason) or lines[0]}
    q.train(x, y, stop_after_saves=1)
    cut = newest(flash.read_bytes(), n)
    r = run(q.firmware, board, train=(x, y), flash=flash)
    seconds = time.time() - t0
    c = CTrainer(tg)
    want = c.train(x, y)
    saved = newest(flash.read_bytes(), n)
    return {**row, "firmware_ram_bytes": q.firmware.ram_bytes, "position_at_cut": cut.position,
            "losses_equal": bool(np.array_equal(r.losses.view(np.uint32), want[save_every:].view(np.uint32))),
            "state_equal": r.state == c.state_bytes(), "flash_state_equal": saved.state == c.state_bytes(),
            "stack_used_bytes": r.stack_bytes, "qemu_seconds": round(seconds, 1)}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Train, save to flash, power cut, resume on QEMU at --sram 256k (the state streamed)", "",
             f"`{meta['command']}` — {meta['date']}; {meta['steps']} samples, a save every {meta['save_every']}, "
             "QEMU killed right after the first save, run again on the same flash to the end; compared byte for byte "
             "with the host C's uninterrupted training. Stack: the run's high-water mark (saves and loads included) "
             f"against the measured {STACK_MEASURED_BYTES} B the reservation ({STACK_BYTES} B) rests on.", "",
             "| model | plan | board | state | firmware RAM | resumed at | losses | tt_state.bin | flash state "
             "| stack |",
             "|---|---|---|---:|---:|---:|---|---|---|---:|"]
    ok = {True: "identical", False: "DIFFERENT"}
    for r in rows:
        if "not_run" in r:
            lines.append(f"| {r['model']} | {r['plan']} | {r['board']} | {r['state_bytes']} B | not run: "
                         f"{r['not_run']} | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['plan']} | {r['board']} | {r['state_bytes']} B | "
                     f"{r['firmware_ram_bytes']} B | sample {r['position_at_cut']} | {ok[r['losses_equal']]} | "
                     f"{ok[r['state_equal']]} | "
                     f"{ok[r['flash_state_equal']]} | {r['stack_used_bytes']} B |")
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default="qemu-m4,qemu-m7,qemu-m55")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--save-every", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
        for board in args.boards.split(","):
            with tempfile.TemporaryDirectory(prefix="tt-resume-") as tmp:
                rows.append(measure(plan_path, board, args.steps, args.save_every, Path(tmp)))
            print(rows[-1], flush=True)
    command = (f"python benchmarks/state_resume.py --boards {args.boards} --steps {args.steps} "
               f"--save-every {args.save_every}")
    meta = {"command": command, "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "steps": args.steps,
            "save_every": args.save_every}
    out = ROOT / "benchmarks" / "results"
    (out / "state_resume.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "state_resume.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
