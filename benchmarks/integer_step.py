"""The integer-only training step (plan "backward": "int") against the fp32 backward: accuracy on Fashion-MNIST and
instructions per step on the QEMU cores (issue 30).

    .venv/bin/python benchmarks/integer_step.py [--train-images 3000] [--epochs 3] [--workers 2]
                                                [--boards qemu-m0plus,qemu-m3,qemu-m4,qemu-riscv32]

1. Accuracy: ImageNet MobileNetV1-0.25 128x128 (../shared/models/mobilenet_v1_0.25_128_quant.tflite) with a new
   10-class head on Fashion-MNIST (Debian ``dataset-fashion-mnist``): classifier-only (the head's weights and bias:
   the plan the integer step covers), batch-1 SGD, a constant lr of 0.01 (the integer step has no lr schedule),
   4-bit remainders, stochastic rounding, ``--epochs`` over a stratified subset of ``--train-images`` training
   images. Each run is the emitted C built for the host (``engine_c.CTrainer``: the cores' arithmetic bit for bit),
   fp32 and integer from the same initial head and sample order; accuracy on the 10,000 official test images, the
   difference paired per test image (95 %).
2. Instructions and exactness: MobileNetV1-0.25 VWW 96x96 (models/mbv1-0.25-vww.onnx) with a new 10-class head,
   classifier-only, on each board (QEMU -icount: deterministic counts) with the fp32 and the integer step: the
   instructions per training step and per inference (their difference: loss + backward + update); the losses, the
   state after training and the logits against the host C bit for bit, and for the integer step the host C against
   the simulator (the state bit for bit, the reported float32 loss within its fp32 tolerance). On M0+, M3 and rv32imac the fp32 step is software float.

Writes benchmarks/results/integer_step.{json,md}.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
ZOO = ROOT / "models" / "mbv1-0.25-vww.onnx"
OUT = ROOT / "benchmarks" / "results"
HEAD, SEED, LR = 10, 0, 0.01
BACKWARDS = ("fp32", "int")
BOARDS = "qemu-m0plus,qemu-m3,qemu-m4,qemu-riscv32"
_DATA: dict = {}  # set before the worker processes fork


def classifier_plan(graph, backward: str):
    from tinytrain.training.sparse import preset

    return replace(preset("last-k:1", graph, lr=LR), backward=backward)


def load_data(train_images: int) -> None:
    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    graph = new_head(load_model(MODEL), HEAD, seed=SEED)
    train, test = load_dataset(f"fashion-mnist:{train_images}"), load_dataset("fashion-mnist:test")
    _DATA.update(graph=graph, x=model_inputs(graph, train.x), y=train.y.astype(np.int64),
                 x_test=model_inputs(graph, test.x), y_test=test.y.astype(np.int64))


def predictions(backward: str, epochs: int) -> np.ndarray:
    """Train the emitted C (host build) with the fp32 or integer step; its class for every test image."""
    from tinytrain.engine_c import CTrainer
    from tinytrain.search.measure import sample_order
    from tinytrain.training.train_graph import build_training_graph

    d = _DATA
    trainer = CTrainer(build_training_graph(d["graph"], classifier_plan(d["graph"], backward)))
    trainer.train(d["x"], d["y"], sample_order(len(d["y"]), epochs * len(d["y"]), SEED))
    return trainer.predict(d["x_test"]).argmax(axis=1)


def accuracy(args) -> dict:
    if not MODEL.is_file():
        return {"skipped": f"{MODEL} not found (../shared is not beside the project)"}
    load_data(args.train_images)
    with mp.get_context("fork").Pool(args.workers) as pool:
        jobs = {b: pool.apply_async(predictions, (b, args.epochs)) for b in BACKWARDS}
        correct = {b: job.get() == _DATA["y_test"] for b, job in jobs.items()}
    diff = correct["int"].astype(np.float64) - correct["fp32"]
    rows = [{"backward": b, "accuracy": float(c.mean()), "ci95": 1.96 * math.sqrt(c.mean() * (1 - c.mean()) / len(c))}
            for b, c in correct.items()]
    return {"model": os.path.relpath(MODEL, ROOT), "train_images": args.train_images, "epochs": args.epochs,
            "rows": rows, "paired_diff": float(diff.mean()),
            "paired_ci95": 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff))}


def instructions(board: str, backward: str, work: Path) -> dict:
    """Train 4 steps and run 2 inferences of the zoo model's classifier-only step on ``board``; compare bit for bit."""
    from tinytrain import engine_qemu, simulator
    from tinytrain.engine_c import CTrainer
    from tinytrain.firmware import BOARDS as ALL
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head
    from tinytrain.training.train_graph import build_training_graph

    graph = new_head(load_model(ZOO), HEAD, seed=SEED)
    tg = build_training_graph(graph, classifier_plan(graph, backward))
    rng = np.random.default_rng(SEED)
    x = rng.integers(-128, 128, (6, *graph.tensors[graph.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, HEAD, 6)
    engine_qemu.emit_compile_dir(tg, work / "compile", 256 * 1024, 1024 * 1024, target=ALL[board].core)
    fw = engine_qemu.build(work / "compile", board, work / "project")
    r = engine_qemu.run(fw, board, train=(x[:4], y[:4]), test=(x[4:], y[4:]))
    host = CTrainer(tg, work / "host")
    losses = host.train(x[:4], y[:4])
    row = {"board": board, "core": ALL[board].core, "backward": backward,
           "insns_per_step": int(np.mean(r.step_insns)), "insns_per_inference": int(np.mean(r.predict_insns)),
           "stack_used_bytes": r.stack_bytes, "same_losses": bool(np.array_equal(r.losses.view(np.uint32),
                                                                                 losses.view(np.uint32))),
           "same_state": r.state == host.state_bytes(), "same_logits": bool(np.array_equal(r.logits,
                                                                                          host.predict(x[4:])))}
    if backward == "int":
        state = simulator.init_state(tg)
        sim = simulator.train(tg, state, x[:4], y[:4])
        # the state bit for bit; the reported float32 loss (read by nothing in the step) within its fp32 tolerance
        row["host_equals_simulator"] = bool(np.allclose(sim, losses, rtol=1e-6)) and all(
            np.array_equal(host.state().tensors[k], v) for k, v in state.tensors.items())
    row["insns_loss_backward_update"] = row["insns_per_step"] - row["insns_per_inference"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-images", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--boards", default=BOARDS)
    args = ap.parse_args()
    t0 = time.time()
    cores = []
    for board in args.boards.split(","):
        for backward in BACKWARDS:
            with tempfile.TemporaryDirectory(prefix="tt-int-") as tmp:
                cores.append(instructions(board, backward, Path(tmp)))
            print(cores[-1], flush=True)
    result = {"command": "python benchmarks/integer_step.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "zoo_model": os.path.relpath(ZOO, ROOT), "cores": cores, "accuracy": accuracy(args),
              "seconds": round(time.time() - t0, 1)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "integer_step.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "integer_step.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# The integer-only training step against the fp32 backward", "",
             f"`{r['command']}` ({r['seconds'] / 60:.0f} min, {r['machine']}, {r['date']}).", "",
             f"## Instructions per step and exactness (`{r['zoo_model']}` + a new 10-class head, classifier-only)", "",
             "| board | core | backward | insns / step | insns / inference | loss + backward + update | stack B "
             "| QEMU = host C (losses, state, logits) | host C = simulator (state) |", "|---|---|---|---:|---:|---:|---:|---|---|"]
    for c in r["cores"]:
        same = "yes" if c["same_losses"] and c["same_state"] and c["same_logits"] else "**no**"
        sim = {True: "yes", False: "**no**", None: "(fp32: per-op tolerance)"}[c.get("host_equals_simulator")]
        lines.append(f"| {c['board']} | {c['core']} | {c['backward']} | {c['insns_per_step']:,} | "
                     f"{c['insns_per_inference']:,} | {c['insns_loss_backward_update']:,} | {c['stack_used_bytes']} | "
                     f"{same} | {sim} |")
    a = r["accuracy"]
    lines += ["", "## Accuracy (Fashion-MNIST, official 10,000 test images)", ""]
    if "skipped" in a:
        return "\n".join(lines + [f"Skipped: {a['skipped']}.", ""])
    lines += [f"`{a['model']}` + a new 10-class head, classifier-only, {a['train_images']} training images, "
              f"{a['epochs']} epochs, batch-1 SGD, constant lr {LR}, 4-bit remainders, stochastic rounding; the "
              "emitted C on the host.", "", "| backward | test accuracy (95 % CI) |", "|---|---|"]
    lines += [f"| {row['backward']} | {100 * row['accuracy']:.2f} ± {100 * row['ci95']:.1f} |" for row in a["rows"]]
    lines += ["", f"Paired difference int − fp32: **{100 * a['paired_diff']:+.2f} ± {100 * a['paired_ci95']:.2f}** "
              "points (95 %).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
