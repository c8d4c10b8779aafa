"""Every engine equals the spec, bit for bit, on every shipped plan (models/plans): the simulator against the host
C (``--on host``), the host C against the firmware on the QEMU boards at --sram 256k --flash 1m, through a power
cut and a resume (``--on qemu``), and the same at each board's flash with the state streamed and saved every
``--save-every`` samples, with the stack it takes (``--on resume``). Default: host,qemu; exit 1 if anything differs.

    python benchmarks/exactness.py [--on host,qemu,resume] [--plan NAME ...] [--steps 4] [--save-every 2]
                                   [--boards qemu-m4,qemu-m7,qemu-m55]
                                   [--from-json JSON]     # --on qemu: only re-render an earlier run's table

**host** -> results/sim_exactness.{json,md}. For each plan of models/plans (with its model models/<model>.onnx): the
training graph, STEPS synthetic samples
(seed 0), both engines free-running from the initial state — the simulator (simulator.train) and the host C
(engine_c.CTrainer, what `train --engine c` runs) — then one more image through the trained weights. Compared: the
losses' float32 bits, the packed state (tt_state.bin) and the int8 logits; beside them each engine's time per step
(the simulator's is the fp32 backward in the kernels' float32 order, docs/design.md §3b). A few minutes on 2 cores.
The QEMU cores equal the host C (--on qemu).

**qemu** -> results/shipped_plans_exactness.{json,md}. For each plan of models/plans (with its model
models/<model>.onnx, the plan's state: 4-bit weight remainders by
default) and each board: the compile for the board's core at `tinytrain train`'s defaults (--sram 256k --flash 1m,
`engine_qemu.emit_compile_dir`) -> the firmware, its RAM region the 256 KB budget, its state saved to the board's
flash after every sample -> QEMU trains 2 samples (synthetic images, seed 0) and is killed right after the first
save
(a power cut) -> run again on the same flash: it resumes from the saved state, trains the 2nd sample and runs 1
inference. Compared with the host C (engine_c.CTrainer) training both samples uninterrupted: the resumed loss, the
final state (tt_state.bin), the newest state in flash and the logits, byte for byte; and with the simulator (the
spec:
simulator.train from simulator.init_state): both losses' bits and the packed state. The report's peak SRAM and flash
are
set beside the firmware's linked RAM and flash (arm-none-eabi-size: vectors + code + constants + .data image).

**resume** -> results/state_resume.{json,md}. For each plan of models/plans on its model (models/<model>.onnx) and
each board: the training firmware at 256 KB of
SRAM (flash budget: the board's), its state saved to the board's flash every --save-every samples, run on --steps
samples until its first save and killed (a power cut), run again on the same flash (it resumes from the saved state
and skips the samples it had consumed) to the end; compared with the host C's uninterrupted training: the resumed
losses, the final state (tt_state.bin) and the newest state in flash, byte for byte. Also the state's bytes, the
firmware's RAM sections and the stack high-water mark of the run (streaming included) against the measured
reservation of the memory report. A plan whose firmware the board cannot hold (e.g. more weights than its flash) is
listed as not run, with the reason.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import RESULTS, ROOT  # (puts the checkout on sys.path)

from tinytrain import simulator  # noqa: E402
from tinytrain.codegen.state import pack, state_layout, state_size, unpack  # noqa: E402
from tinytrain.data import model_inputs  # noqa: E402
from tinytrain.engines import qemu as engine_qemu  # noqa: E402
from tinytrain.engines.host_c import CTrainer  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.firmware import BOARDS  # noqa: E402
from tinytrain.firmware.persist import newest  # noqa: E402
from tinytrain.engines.qemu import QemuTrainer, run as qemu_run  # noqa: E402
from tinytrain.firmware.boards import get_board  # noqa: E402
from tinytrain.frontends import load_model  # noqa: E402
from tinytrain.cores import STACK_BYTES, STACK_MEASURED_BYTES  # noqa: E402
from tinytrain.training.sparse import load_plan  # noqa: E402
from tinytrain.training.train_graph import build_training_graph  # noqa: E402

# ---- the simulator against the host C -----------------------------------------------------------------------

def host_measure(plan_path: Path, steps: int, cache: Path) -> dict:
    """One plan: both engines trained on the same samples, compared byte for byte."""
    g = load_model(ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx"))
    tg = build_training_graph(g, load_plan(plan_path))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (steps + 1, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, g.tensors[g.outputs[0]].shape[-1], steps + 1)
    c = CTrainer(tg, cache)
    t0 = time.process_time()
    losses = np.asarray(c.train(x[:steps], y[:steps]), np.float32)
    c_ms = (time.process_time() - t0) / steps * 1000
    state = simulator.init_state(tg)
    t0 = time.process_time()
    sim_losses = np.asarray(simulator.train(tg, state, x[:steps], y[:steps]), np.float32)
    sim_ms = (time.process_time() - t0) / steps * 1000
    host = unpack(tg, c.state_bytes()).tensors
    equal = sum(int(np.sum(np.asarray(state.tensors[k]) == v)) for k, v in host.items())
    logits = simulator.forward(simulator.with_state(g, state), {g.inputs[0]: x[steps:]})[g.outputs[0]]
    return {"model": plan_path.stem.rsplit("-", 1)[0], "plan": str(plan_path.relative_to(ROOT)), "steps": steps,
            "same_losses": bool(np.array_equal(sim_losses.view(np.uint32), losses.view(np.uint32))),
            "same_state": pack(tg, state) == c.state_bytes(),
            "state_equal_fraction": equal / sum(v.size for v in host.values()),
            "same_logits": bool(np.array_equal(logits.reshape(len(logits), -1), c.predict(x[steps:]))),
            "losses": [float(v) for v in losses], "sim_ms_per_step": round(sim_ms, 1),
            "c_ms_per_step": round(c_ms, 2)}


def host_markdown(rows: list[dict], meta: dict) -> str:
    yes = lambda v: "identical" if v else "DIFFERENT"  # noqa: E731
    lines = ["# The simulator against the host C on every shipped plan: bit for bit", "",
             f"`{meta['command']}` — {meta['date']}. {rows[0]['steps'] if rows else 0} synthetic samples (seed 0), "
             "both engines free-running from the initial state (4-bit weight remainders, the default), then one "
             "more image through the trained weights. The simulator's fp32 backward sums in the kernels' float32 "
             "order with their fused multiply-adds (docs/design.md §3b, tinytrain/f32.py); the QEMU cores equal the "
             "host C (shipped_plans_exactness.md). Times: CPU time per training step on a shared 2-core host "
             "(indicative).", "",
             "| plan | losses (float32 bits) | state (tt_state.bin) | logits after training | simulator ms / step "
             "| host C ms / step |",
             "|---|---|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {Path(r['plan']).stem} | {yes(r['same_losses'])} | {yes(r['same_state'])} "
                     f"| {yes(r['same_logits'])} | {r['sim_ms_per_step']:.0f} | {r['c_ms_per_step']:.1f} |")
    return "\n".join(lines + [""])


def host(args: argparse.Namespace) -> bool:
    out = str(RESULTS / "sim_exactness") if args.out is None else args.out + "sim_exactness"
    meta = {"command": " ".join(["python benchmarks/exactness.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d")}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tt-sim-exact-") as cache:
        for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
            if args.plan and plan_path.stem not in args.plan:
                continue
            rows.append(host_measure(plan_path, args.steps, Path(cache)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    Path(out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    Path(out + ".md").write_text(host_markdown(rows, meta))
    print(host_markdown(rows, meta))
    return all(r["same_losses"] and r["same_state"] and r["same_logits"] for r in rows)

# ---- the host C against the QEMU boards, through a power cut --------------------------------------------------

SRAM, FLASH = 256 * 1024, 1024 * 1024
STEPS = 2  # samples trained; the power is cut after the first one's save


def reference(plan_path: Path) -> dict:
    """The training graph, its samples, the host C's uninterrupted training and how the simulator's compares: its
    int8 logits of the initial model (exact), its losses and its state after the steps."""
    g = load_model(ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx"))
    tg = build_training_graph(g, load_plan(plan_path))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (STEPS + 1, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, g.tensors[g.outputs[0]].shape[-1], STEPS + 1)
    c = CTrainer(tg)
    sim_logits = simulator.forward(g, {g.inputs[0]: x[STEPS:]})[g.outputs[0]]
    same_logits = bool(np.array_equal(sim_logits, c.predict(x[STEPS:])))
    losses = c.train(x[:STEPS], y[:STEPS])
    state = simulator.init_state(tg)
    sim_losses = simulator.train(tg, state, x[:STEPS], y[:STEPS])
    host = unpack(tg, c.state_bytes()).tensors
    equal = sum(int(np.sum(np.asarray(state.tensors[k]) == v)) for k, v in host.items())
    return {"graph": tg, "x": x, "y": y, "losses": losses, "state": c.state_bytes(), "logits": c.predict(x[STEPS:]),
            "sim_same_logits": same_logits, "sim_same_state": pack(tg, state) == c.state_bytes(),
            "sim_same_losses": bool(np.array_equal(np.asarray(sim_losses, np.float32).view(np.uint32),
                                                   np.asarray(losses, np.float32).view(np.uint32))),
            "sim_loss_rel_diff": float(np.max(np.abs(sim_losses - losses) / np.abs(losses))),
            "sim_state_equal_fraction": equal / sum(v.size for v in host.values())}


def qemu_measure(ref: dict, board: str, work: Path) -> dict:
    """One plan on one board: link at 256 KB / 1 MB, train with a power cut after the first save, resume, compare."""
    tg, x, y = ref["graph"], ref["x"], ref["y"]
    n = state_size(state_layout(tg))
    report = engine_qemu.emit_compile_dir(tg, work / "compile", SRAM, FLASH, target=BOARDS[board].core)
    row = {"board": board, "state_bytes": n, "report_peak_sram_bytes": report["peak_sram_bytes"],
           "report_flash_bytes": report["flash_bytes"]}
    try:
        fw = engine_qemu.build(work / "compile", board, work / "project", save_every=1)
    except TinyTrainError as e:
        reason = [line.split("ld: ")[-1] for line in str(e).splitlines() if "overflowed" in line]
        return {**row, "fits": False, "not_run": "; ".join(reason) or str(e).splitlines()[0]}
    flash = work / "flash.bin"
    t0 = time.time()
    engine_qemu.run(fw, board, train=(x[:STEPS], y[:STEPS]), flash=flash, stop_after_saves=1)
    cut = newest(flash.read_bytes(), n).position
    r = engine_qemu.run(fw, board, train=(x[:STEPS], y[:STEPS]), test=(x[STEPS:], y[STEPS:]), flash=flash)
    saved = newest(flash.read_bytes(), n)
    return {**row, "fits": True, "firmware_ram_bytes": fw.ram_bytes, "firmware_flash_bytes": fw.flash_bytes,
            "position_at_cut": cut, "resumed": f"tt: flash resumed sequence 1 position {cut}" in r.stdout,
            "same_losses": bool(np.array_equal(r.losses.view(np.uint32), ref["losses"][cut:].view(np.uint32))),
            "same_state": r.state == ref["state"], "same_flash_state": saved.state == ref["state"],
            "same_logits": bool(np.array_equal(r.logits, ref["logits"])), "stack_used_bytes": r.stack_bytes,
            "qemu_seconds": round(time.time() - t0, 1)}


DEVICE_CHECKS = ("resumed", "same_losses", "same_state", "same_flash_state", "same_logits")
SIM_KEYS = ("sim_same_logits", "sim_same_state", "sim_same_losses", "sim_loss_rel_diff", "sim_state_equal_fraction")


def identical(r: dict) -> bool:
    """QEMU, resumed after the power cut, = the host C's uninterrupted training, byte for byte."""
    return r["fits"] and all(r[k] for k in DEVICE_CHECKS)


def qemu_markdown(rows: list[dict], meta: dict) -> str:
    kb = lambda b: f"{b / 1024:.1f} KB"  # noqa: E731
    lines = ["# Every shipped plan on qemu-m4 / m7 / m55 at --sram 256k --flash 1m: trains, saves, resumes after a "
             "power cut, bit for bit", "",
             f"`{meta['command']}` — {meta['date']}, {meta['qemu']}, {meta['gcc']}. {STEPS} synthetic samples (seed "
             "0), the state (4-bit weight remainders, the default) saved to the board's flash after each; QEMU killed "
             "right after the first save, run again on the same flash: it resumes at sample 1, trains sample 2 and "
             "runs 1 inference. *identical*: the resumed loss, tt_state.bin, the newest state in flash and the "
             "logits equal the host C's uninterrupted training byte for byte. Peak SRAM: the memory report's (the "
             "linker holds the RAM region to the 256 KB budget, 1 byte more is refused), then the firmware's RAM "
             "sections (they add the QEMU harness's whole input image, which the report leaves to the caller: the "
             "step reads it row by row); flash: the report's figure (codegen/flash.py), then the firmware's linked "
             "flash (arm-none-eabi-size: vectors, code, constants, .data image).", "",
             "| model | plan | core | fits? | peak SRAM (report / firmware RAM) | state | flash (report / linked) "
             "| identical? |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        linked = kb(r["firmware_flash_bytes"]) if r["fits"] else r["not_run"]
        ram = kb(r["firmware_ram_bytes"]) if r["fits"] else "—"
        same = "yes" if identical(r) else ("not run" if not r["fits"] else "NO: " + ", ".join(
            k for k in DEVICE_CHECKS if not r[k]))
        lines.append(f"| {r['model']} | {Path(r['plan']).stem} | {r['board']} ({BOARDS[r['board']].qemu.machine}) "
                     f"| {'yes' if r['fits'] else 'no'} | {kb(r['report_peak_sram_bytes'])} / {ram} | {r['state_bytes']} B "
                     f"| {kb(r['report_flash_bytes'])} / {linked} | {same} |")
    lines += ["", "## The simulator against the host C (same samples, same plan)", "",
              "The simulator is the spec: its fp32 backward sums in the kernels' float32 order with their fused "
              "multiply-adds (docs/design.md §3b, tinytrain/f32.py), so its losses (float32 bits) and its state "
              "(tt_state.bin) equal the host C's (tests/codegen/test_codegen_train_models.py; benchmarks/exactness.py --on host "
              "measures only this part, in a few minutes).", "",
              "| plan | int8 logits of the initial model | losses | state |", "|---|---|---|---|"]
    yes = lambda v: "identical" if v else "DIFFERENT"  # noqa: E731
    for r in {r["plan"]: r for r in rows}.values():
        same_losses = r.get("sim_same_losses", r["sim_loss_rel_diff"] == 0)
        lines.append(f"| {Path(r['plan']).stem} | {yes(r['sim_same_logits'])} | {yes(same_losses)} | "
                     f"{yes(r['sim_same_state'])} ({100 * r['sim_state_equal_fraction']:.3f} % of elements) |")
    return "\n".join(lines + [""])


def first_line(cmd: list[str]) -> str:
    import subprocess

    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()[0]


def qemu(args: argparse.Namespace) -> bool:
    out = str(RESULTS / "shipped_plans_exactness") if args.out is None else args.out + "shipped_plans_exactness"
    if args.from_json:
        run = json.loads(Path(args.from_json).read_text())
        Path(out + ".md").write_text(qemu_markdown(run["rows"], run["meta"]))
        return True
    meta = {"command": " ".join(["python benchmarks/exactness.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d"), "host": platform.machine(),
            "qemu": first_line(["qemu-system-arm", "--version"]), "gcc": first_line(["arm-none-eabi-gcc", "--version"])}
    rows = []
    for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
        if args.plan and plan_path.stem not in args.plan:
            continue
        ref = reference(plan_path)
        for board in args.boards.split(","):
            with tempfile.TemporaryDirectory(prefix="tt-exact-") as tmp:
                row = qemu_measure(ref, board, Path(tmp))
            rows.append({"model": plan_path.stem.rsplit("-", 1)[0], "plan": str(plan_path.relative_to(ROOT)), **row,
                         **{k: ref[k] for k in SIM_KEYS}})
            rows[-1]["identical"] = identical(rows[-1])
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            Path(out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
            Path(out + ".md").write_text(qemu_markdown(rows, meta))
    print(qemu_markdown(rows, meta))
    return all(r["identical"] for r in rows)


# ---- resume: the state streamed to each board's flash, saved every N samples, and the stack it takes ----------

def resume_measure(plan_path: Path, board: str, steps: int, save_every: int, work: Path) -> dict:
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
    r = qemu_run(q.firmware, board, train=(x, y), flash=flash)
    seconds = time.time() - t0
    c = CTrainer(tg)
    want = c.train(x, y)
    saved = newest(flash.read_bytes(), n)
    return {**row, "firmware_ram_bytes": q.firmware.ram_bytes, "position_at_cut": cut.position,
            "losses_equal": bool(np.array_equal(r.losses.view(np.uint32), want[save_every:].view(np.uint32))),
            "state_equal": r.state == c.state_bytes(), "flash_state_equal": saved.state == c.state_bytes(),
            "stack_used_bytes": r.stack_bytes, "qemu_seconds": round(seconds, 1)}


def resume_markdown(rows: list[dict], meta: dict) -> str:
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


def resume(args: argparse.Namespace) -> bool:
    out = str(RESULTS / "state_resume") if args.out is None else args.out + "state_resume"
    rows = []
    for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
        if args.plan and plan_path.stem not in args.plan:
            continue
        for board in args.boards.split(","):
            with tempfile.TemporaryDirectory(prefix="tt-resume-") as tmp:
                rows.append(resume_measure(plan_path, board, args.steps, args.save_every, Path(tmp)))
            print(rows[-1], flush=True)
    command = (f"python benchmarks/exactness.py --on resume --boards {args.boards} --steps {args.steps} "
               f"--save-every {args.save_every}")
    meta = {"command": command, "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "steps": args.steps,
            "save_every": args.save_every}
    Path(out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    Path(out + ".md").write_text(resume_markdown(rows, meta))
    print(resume_markdown(rows, meta))
    return all(r.get("not_run") or (r["losses_equal"] and r["state_equal"] and r["flash_state_equal"]) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--on", default="host,qemu", help="comma-separated, of host, qemu, resume (default host,qemu)")
    ap.add_argument("--plan", nargs="+", help="plan names (models/plans/NAME.json); default: every shipped plan")
    ap.add_argument("--steps", type=int, default=4, help="host, resume: samples trained")
    ap.add_argument("--save-every", type=int, default=2, help="resume: samples between saves")
    ap.add_argument("--boards", default="qemu-m4,qemu-m7,qemu-m55", help="qemu, resume: the boards")
    ap.add_argument("--from-json", metavar="JSON", help="qemu: measure nothing, the table of an earlier run's JSON")
    ap.add_argument("--out", help="a prefix for the result files (default: benchmarks/results/)")
    args = ap.parse_args()
    on = args.on.split(",")
    ok = all([host(args) if "host" in on else True, qemu(args) if "qemu" in on else True,
              resume(args) if "resume" in on else True])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
