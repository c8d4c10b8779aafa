"""The stack high-water mark of the training step on every QEMU board, for every zoo model with its shipped plan and
the VWW TFLite models of ../shared — the measurement the stack reservation (tinytrain/cores.py STACK_BYTES) rests on.

    .venv/bin/python benchmarks/stack.py [--steps 2] [--inferences 1]

For each model and plan (``qemu_instructions.models()``: the shipped plans of models/plans, VWW_PLAN for the
MobileNetV1-0.25 VWW models, which ship none; here also every shipped plan, the wide one included, and
../shared/models/person_detect.tflite) and each board (qemu-m4 mps2-an386, qemu-m7 mps2-an500, qemu-m55
mps3-an547): compile for the board's core with an SRAM budget of the board's RAM less 64 KB (stack use does not
depend on where buffers are), link with a stack of PROBE_STACK bytes, run --steps training steps and --inferences
inferences on QEMU. The startup code paints the stack and the harness prints how much of it was written
(firmware/c/tt_startup.c tt_stack_used): the high-water mark over the whole run — reset, harness,
forward, loss, backward, updates, state save, inference.

Writes benchmarks/results/stack.json and .md; the reservation = max measured + MARGIN_BYTES, rounded up to 64.

    .venv/bin/python benchmarks/stack.py --field

The field runtime given raw input instead (FIELD_MODELS, a new head, FIELD_SETTINGS): a stream of --field-samples
random inputs through tt_learn_input / tt_observe_input (the frozen prefix's forward, learning with replay, imprints,
guard checks, drift statistics, the buffer in a simulated flash) on qemu-m4 and qemu-m7 (field_runtime/qemu.py:
the QEMU field harness linked with firmware/field.py's RAW_STACK, prints the painted stack's high-water mark). Writes
benchmarks/results/stack_field.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from common.qemu_instructions import SHARED, VWW_PLAN, models, random_step

from tinytrain.engines import qemu as engine_qemu
from tinytrain.errors import TinyTrainError
from tinytrain.firmware.boards import get_board
from tinytrain.cores import STACK_BYTES, STACK_MARGIN_BYTES
from tinytrain.training.sparse import load_plan, parse_plan

from common import ROOT, write_results  # noqa: E402  (puts the checkout on sys.path)
BOARDS = ("qemu-m4", "qemu-m7", "qemu-m55")
PROBE_STACK = 16 * 1024   # reserved while measuring: far above any measured use, so the mark is never clipped
KB = 1024


def workloads() -> list[tuple[str, Path, object, str]]:
    """(name, model, plan, plan source): qemu_instructions' list, every other shipped plan, person detection."""
    out = models()
    named = {(str(path), src) for _, path, _, src in out}
    for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
        model = ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx")
        src = str(plan_path.relative_to(ROOT))
        if (str(model), src) not in named:
            out.append((plan_path.stem, model, load_plan(plan_path), src))
    person = SHARED / "models" / "person_detect.tflite"
    if person.exists():
        out.append(("person_detect (TFLM)", person, parse_plan(VWW_PLAN), "VWW_PLAN"))
    return out


def measure(name, path, plan, plan_source, board, args, work: Path) -> dict:
    b = get_board(board)
    _, tg, _, x, y = random_step(path, plan, args.steps + args.inferences)
    row = {"model": name, "plan": plan_source, "board": board, "machine": b.qemu.machine, "core": b.core,
           "steps": args.steps, "inferences": args.inferences}
    try:
        engine_qemu.emit_compile_dir(tg, work / "compile", b.ram_max - 64 * KB, b.flash_max, target=b.core)
        fw = engine_qemu.build(work / "compile", board, work / "project", stack_bytes=PROBE_STACK)
    except TinyTrainError as e:  # the board's memory map cannot hold it (e.g. 1.1 MB of weights in 512 KB of flash)
        return {**row, "stack_used_bytes": None, "not_run": str(e).splitlines()[0]}
    t0 = time.time()
    r = engine_qemu.run(fw, board, train=(x[:args.steps], y[:args.steps]), test=(x[args.steps:], y[args.steps:]))
    return {**row, "stack_used_bytes": r.stack_bytes, "qemu_seconds": round(time.time() - t0, 2)}


def cell(v) -> str:
    return "does not fit the board" if v is None else f"{v} B"


def markdown(rows, meta) -> str:
    by_model: dict[tuple[str, str], dict[str, int]] = {}
    for r in rows:
        by_model.setdefault((r["model"], r["plan"]), {})[r["board"]] = r["stack_used_bytes"]
    lines = ["# Stack high-water mark of the training step", "",
             f"`{meta['command']}` — {meta['date']}; stack painted at reset, measured over {meta['steps']} training "
             f"steps and {meta['inferences']} inference(s) (firmware linked with a {PROBE_STACK} B stack; compiled for "
             "the board's core, SRAM budget its RAM less 64 KB, flash budget its flash).", "",
             "| model | plan | " + " | ".join(f"{b} ({get_board(b).qemu.machine})" for b in BOARDS) + " |",
             "|---|---|" + "---:|" * len(BOARDS)]
    for (model, plan), marks in by_model.items():
        lines.append(f"| {model} | {plan} | " + " | ".join(cell(marks.get(b)) for b in BOARDS)
                     + " |")
    lines += ["", f"Largest: **{meta['max_stack_used_bytes']} B**. Reservation (tinytrain/cores.py STACK_BYTES): max + "
              f"{STACK_MARGIN_BYTES} B margin, rounded up to 64 B = **{meta['reservation_bytes']} B** "
              f"(in the code: {STACK_BYTES} B).", ""]
    return "\n".join(lines)


FIELD_MODELS = (("mbv1-0.25-vww 96x96", ROOT / "models" / "mbv1-0.25-vww.onnx", 3),
                ("MobileNetV1-0.25 128x128 (the field study's)", SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite",
                 10))
FIELD_SETTINGS = dict(replay=8, replay_k=2, guard=4, guard_every=3, imprint=2, drift_warmup=4)


def field_stack(args) -> None:
    """--field: the field runtime's stack given raw input (module docstring); results in stack_field.*."""
    import numpy as np
    from tinytrain.field_runtime.api import field_model
    from tinytrain.field_runtime.qemu import qemu_field
    from tinytrain.firmware.field import RAW_STACK
    rows, n = [], args.field_samples
    for name, path, classes in FIELD_MODELS:
        p = field_model(path, max_classes=classes, **FIELD_SETTINGS)
        shape = p.graph.tensors[p.graph.inputs[0]].shape[1:]
        rng = np.random.default_rng(5)
        x = rng.integers(-128, 128, (n, *shape)).astype(np.int8).reshape(n, -1)
        y = np.where(np.arange(n) % 4 == 3, -1, rng.integers(0, classes, n))
        for board in ("qemu-m4", "qemu-m7"):
            t0 = time.time()
            r = qemu_field(p, x, y, board, raw=True, flash=True)
            rows.append({"model": name, "board": board, "samples": n, "stack_used_bytes": r.stack_bytes,
                         "linked_stack_bytes": RAW_STACK, "qemu_seconds": round(time.time() - t0, 2)})
            print(f"{name:48s} {board:8s} {r.stack_bytes} B", flush=True)
    top = max(r["stack_used_bytes"] for r in rows)
    meta = {"command": f"python benchmarks/stack.py --field --field-samples {n}", "date": time.strftime("%Y-%m-%d"),
            "host": platform.node(), "max_stack_used_bytes": top, "margin_bytes": STACK_MARGIN_BYTES,
            "reservation_bytes": -(-(top + STACK_MARGIN_BYTES) // 64) * 64, "stack_bytes_in_code": RAW_STACK,
            "settings": FIELD_SETTINGS}
    lines = ["# Stack high-water mark of the field runtime given raw input", "",
             f"`{meta['command']}` — {meta['date']}; stack painted at reset, measured over a stream of {n} random "
             f"inputs (3 of 4 labelled) through tt_learn_input / tt_observe_input, the buffer in a simulated flash "
             f"(firmware linked with a {RAW_STACK} B stack).", "", "| model | board | stack used |", "|---|---|---:|"]
    lines += [f"| {r['model']} | {r['board']} | {r['stack_used_bytes']} B |" for r in rows]
    lines += ["", f"Largest: **{top} B**. Reservation (tinytrain/firmware/field.py RAW_STACK): max + "
              f"{STACK_MARGIN_BYTES} B margin, rounded up to 64 B = **{meta['reservation_bytes']} B** (in the code: "
              f"{RAW_STACK} B).", ""]
    write_results("stack_field", "\n".join(lines), {"meta": meta, "rows": rows}, meta["command"])
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--inferences", type=int, default=1)
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--field", action="store_true", help="the field runtime given raw input (stack_field.*)")
    ap.add_argument("--field-samples", type=int, default=24)
    args = ap.parse_args()
    if args.field:
        field_stack(args)
        return
    rows = []
    for name, path, plan, src in workloads():
        for board in args.boards.split(","):
            with tempfile.TemporaryDirectory(prefix="tt-stack-") as tmp:
                row = measure(name, path, plan, src, board, args, Path(tmp))
            print(f"{name:28s} {src:40s} {board:9s} {cell(row['stack_used_bytes'])}", flush=True)
            rows.append(row)
    top = max(r["stack_used_bytes"] for r in rows if r["stack_used_bytes"] is not None)
    meta = {"command": "python benchmarks/stack.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
            "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "steps": args.steps,
            "inferences": args.inferences, "probe_stack_bytes": PROBE_STACK, "max_stack_used_bytes": top,
            "margin_bytes": STACK_MARGIN_BYTES, "reservation_bytes": -(-(top + STACK_MARGIN_BYTES) // 64) * 64,
            "stack_bytes_in_code": STACK_BYTES}
    out = ROOT / "benchmarks" / "results"
    (out / "stack.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "stack.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
