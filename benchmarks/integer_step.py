"""The integer-only training step (plan "backward": "int") against the fp32 backward: accuracy on Fashion-MNIST and
instructions per step on the QEMU cores (issue 30).

    .venv/bin/python benchmarks/integer_step.py [--train-images 3000] [--epochs 3] [--workers 2]
                                                [--plans last-k:1,last-k:2,last-k:3]
                                                [--boards qemu-m0plus,qemu-m3,qemu-m4,qemu-riscv32]
                                                [--deep-boards qemu-m0plus,qemu-m3,qemu-m4]

1. Accuracy: ImageNet MobileNetV1-0.25 128x128 (../shared/models/mobilenet_v1_0.25_128_quant.tflite) with a new
   10-class head on Fashion-MNIST (Debian ``dataset-fashion-mnist``): each of ``--plans`` (classifier-only, and the
   deeper last-k:2 / last-k:3 whose gradient flows back through the head, the global pool, the last pointwise and
   depthwise convolutions in int16-range integers), batch-1 SGD, a constant lr of 0.01, 4-bit remainders,
   stochastic rounding, ``--epochs`` over a stratified subset of ``--train-images`` training images. Each run is the
   emitted C built for the host (``engine_c.CTrainer``: the cores' arithmetic bit for bit), fp32 and integer from
   the same initial head and sample order; accuracy on the 10,000 official test images, the difference paired per
   test image (95 %).
2. Instructions and exactness: MobileNetV1-0.25 VWW 96x96 (models/mbv1-0.25-vww.onnx) with a new 10-class head,
   classifier-only, on each of ``--boards``, and the TFLite MobileNetV1-0.25 128x128 + head's last-k:2 and last-k:3
   (the VWW model's fully-connected head has no integer input gradient) on each of ``--deep-boards`` (QEMU -icount:
   deterministic counts), with the fp32 and the integer step: the instructions per training step and per inference
   (their difference: loss + backward + update); the losses, the state after training and the logits against the
   host C bit for bit, and the host C against the simulator (the losses and the state bit for bit). On M0+, M3 and rv32imac the fp32 step is software float.

Writes benchmarks/results/OUT.{json,md} (``--out``, default integer_step).
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

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
ZOO = ROOT / "models" / "mbv1-0.25-vww.onnx"
OUT = ROOT / "benchmarks" / "results"
HEAD, SEED = 10, 0
BACKWARDS = ("fp32", "int")
BOARDS = "qemu-m0plus,qemu-m3,qemu-m4,qemu-riscv32"
DEEP_BOARDS = "qemu-m0plus,qemu-m3,qemu-m4"
BUILD_TIMEOUT = 3600  # s: a MobileNetV1 128 firmware on a busy machine
_DATA: dict = {}  # set before the worker processes fork


def plan(graph, name: str, backward: str, recipe: dict, steps: int = 0):
    """Preset ``name`` with the recipe's lrs (``head_lr`` on the new head) and, over ``steps``, its lr schedule."""
    from tinytrain.training.sparse import preset, with_lr_schedule

    p = preset(name, graph, lr=recipe["lr"], bias_lr=recipe["lr"], head_lr=recipe["head_lr"])
    return replace(with_lr_schedule(p, recipe["schedule"], 0.0, steps) if steps else p, backward=backward)


def load_data(train_images: int, test_images: int) -> None:
    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    graph = new_head(load_model(MODEL), HEAD, seed=SEED)
    train, test = load_dataset(f"fashion-mnist:{train_images}"), load_dataset("fashion-mnist:test")
    _DATA.update(graph=graph, x=model_inputs(graph, train.x), y=train.y.astype(np.int64),
                 x_test=model_inputs(graph, test.x[:test_images]), y_test=test.y[:test_images].astype(np.int64))


def predictions(name: str, backward: str, epochs: int, recipe: dict) -> np.ndarray:
    """Train the emitted C (host build) of plan ``name`` with the fp32 or integer step; its class for every test
    image."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.engines.order import sample_order
    from tinytrain.training.train_graph import build_training_graph

    d = _DATA
    order = sample_order(np.arange(len(d["y"])), epochs * len(d["y"]), SEED)
    trainer = CTrainer(build_training_graph(d["graph"], plan(d["graph"], name, backward, recipe, len(order))))
    trainer.train(d["x"], d["y"], order)
    return trainer.predict(d["x_test"]).argmax(axis=1)


def start_accuracy(args):
    """The training runs, started in ``args.workers`` processes (forked before anything else runs); None without
    ../shared."""
    if not MODEL.is_file() or not args.plans:
        return None
    load_data(args.train_images, args.test_images)
    pool = mp.get_context("fork").Pool(args.workers)
    return pool, {(p, b): pool.apply_async(predictions, (p, b, args.epochs, recipe(args))) for p in args.plans.split(",")
                  for b in BACKWARDS}


def recipe(args) -> dict:
    return {"lr": args.lr, "head_lr": args.head_lr or args.lr, "schedule": args.schedule}


def accuracy(args, started) -> dict:
    """Their test accuracies and the paired differences, when the runs ``start_accuracy`` started end."""
    if started is None:
        return {"skipped": "no --plans" if not args.plans else f"{MODEL} not found (../shared is not beside the project)"}
    pool, jobs = started
    with pool:
        correct = {key: job.get() == _DATA["y_test"] for key, job in jobs.items()}
    plans = args.plans.split(",")
    rows, paired = [], []
    for p in plans:
        for b in BACKWARDS:
            c = correct[p, b]
            rows.append({"plan": p, "backward": b, "accuracy": float(c.mean()),
                         "ci95": 1.96 * math.sqrt(c.mean() * (1 - c.mean()) / len(c))})
        diff = correct[p, "int"].astype(np.float64) - correct[p, "fp32"]
        paired.append({"plan": p, "paired_diff": float(diff.mean()),
                       "paired_ci95": 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff))})
    return {"model": os.path.relpath(MODEL, ROOT), "train_images": args.train_images, "epochs": args.epochs,
            "recipe": recipe(args),
            "test_images": len(_DATA["y_test"]), "rows": rows, "paired": paired}


def instructions(board: str, model: Path, name: str, backward: str, work: Path, rec: dict) -> dict:
    """Train 4 steps and run 2 inferences of ``model``'s plan ``name`` on ``board``; compare bit for bit."""
    from tinytrain import simulator
    from tinytrain.engines import qemu as engine_qemu
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.firmware import BOARDS as ALL
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head
    from tinytrain.training.train_graph import build_training_graph

    graph = new_head(load_model(model), HEAD, seed=SEED)
    tg = build_training_graph(graph, plan(graph, name, backward, rec))
    rng = np.random.default_rng(SEED)
    x = rng.integers(-128, 128, (6, *graph.tensors[graph.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, HEAD, 6)
    engine_qemu.emit_compile_dir(tg, work / "compile", 256 * 1024, 1024 * 1024, target=ALL[board].core)
    fw = engine_qemu.build(work / "compile", board, work / "project", timeout=BUILD_TIMEOUT)
    r = engine_qemu.run(fw, board, train=(x[:4], y[:4]), test=(x[4:], y[4:]))
    host = CTrainer(tg, work / "host")
    losses = host.train(x[:4], y[:4])
    row = {"board": board, "core": ALL[board].core, "model": os.path.relpath(model, ROOT), "plan": name,
           "backward": backward,
           "insns_per_step": int(np.mean(r.step_insns)), "insns_per_inference": int(np.mean(r.predict_insns)),
           "stack_used_bytes": r.stack_bytes, "same_losses": bool(np.array_equal(r.losses.view(np.uint32),
                                                                                 losses.view(np.uint32))),
           "same_state": r.state == host.state_bytes(), "same_logits": bool(np.array_equal(r.logits,
                                                                                          host.predict(x[4:])))}
    state = simulator.init_state(tg)
    sim = simulator.train(tg, state, x[:4], y[:4])
    # the losses (float32 bits) and the state bit for bit: the simulator is the spec of both backwards (design §3b)
    row["host_equals_simulator"] = bool(np.array_equal(np.asarray(sim, np.float32).view(np.uint32),
                                                       losses.view(np.uint32))) and all(
        np.array_equal(host.state().tensors[k], v) for k, v in state.tensors.items())
    row["insns_loss_backward_update"] = row["insns_per_step"] - row["insns_per_inference"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-images", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--test-images", type=int, default=10000, help="the first N official test images")
    ap.add_argument("--plans", default="last-k:1,last-k:2,last-k:3", help="the accuracy runs' plans")
    ap.add_argument("--lr", type=float, default=0.01, help="the lr of the backbone's weights and biases")
    ap.add_argument("--head-lr", type=float, default=0.0, help="the new head's lr (default: --lr)")
    ap.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                    help="the accuracy runs' lr schedule (cosine: over the whole run)")
    ap.add_argument("--boards", default=BOARDS, help="boards running the VWW model's classifier-only step")
    ap.add_argument("--deep-plans", default="last-k:2,last-k:3")
    ap.add_argument("--deep-boards", default=DEEP_BOARDS, help="boards running --deep-plans of the TFLite model")
    ap.add_argument("--out", default="integer_step", help="benchmarks/results/OUT.{json,md}")
    args = ap.parse_args()
    t0 = time.time()
    started = start_accuracy(args)  # its processes train while the QEMU runs below build and run
    runs = [(b, ZOO, "last-k:1") for b in args.boards.split(",") if b]
    if MODEL.is_file():
        runs += [(b, MODEL, p) for p in args.deep_plans.split(",") if p for b in args.deep_boards.split(",") if b]
    cores = []
    for board, model, name in runs:
        for backward in BACKWARDS:
            with tempfile.TemporaryDirectory(prefix="tt-int-") as tmp:
                cores.append(instructions(board, model, name, backward, Path(tmp), recipe(args)))
            print(cores[-1], flush=True)
    result = {"command": "python benchmarks/integer_step.py " + " ".join(
                  f"--{k.replace('_', '-')} {v if v != '' else chr(34) * 2}" for k, v in vars(args).items()),
              "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "zoo_model": os.path.relpath(ZOO, ROOT), "cores": cores, "accuracy": accuracy(args, started),
              "seconds": round(time.time() - t0, 1)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / f"{args.out}.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# The integer-only training step against the fp32 backward", "",
             f"`{r['command']}` ({r['seconds'] / 60:.0f} min, {r['machine']}, {r['date']}).", "",
             "## Instructions per step and exactness (a new 10-class head)", "",
             "| board | core | model | plan | backward | insns / step | insns / inference | loss + backward + update "
             "| stack B | QEMU = host C (losses, state, logits) | host C = simulator (losses, state) |",
             "|---|---|---|---|---|---:|---:|---:|---:|---|---|"]
    for c in r["cores"]:
        same = "yes" if c["same_losses"] and c["same_state"] and c["same_logits"] else "**no**"
        sim = {True: "yes", False: "**no**", None: "(not measured)"}[c.get("host_equals_simulator")]
        lines.append(f"| {c['board']} | {c['core']} | `{Path(c['model']).name}` | {c['plan']} | {c['backward']} | "
                     f"{c['insns_per_step']:,} | {c['insns_per_inference']:,} | {c['insns_loss_backward_update']:,} | "
                     f"{c['stack_used_bytes']} | {same} | {sim} |")
    return "\n".join(lines + _accuracy_markdown(r["accuracy"]))


def _accuracy_markdown(a: dict) -> list[str]:
    lines = ["", "## Accuracy (Fashion-MNIST, official test images)", ""]
    if "skipped" in a:
        return lines + [f"Skipped: {a['skipped']}.", ""]
    rec = a.get("recipe", {"lr": 0.01, "head_lr": 0.01, "schedule": "constant"})
    lines += [f"`{a['model']}` + a new 10-class head, {a['train_images']} training images, {a['epochs']} epochs, "
              f"the first {a['test_images']:,} test images, batch-1 SGD, {rec['schedule']} lr {rec['lr']:g} "
              f"(head {rec['head_lr']:g}), 4-bit remainders, stochastic rounding; the emitted C on the host.", "",
              "| plan | backward | test accuracy (95 % CI) |", "|---|---|---|"]
    lines += [f"| {row['plan']} | {row['backward']} | {100 * row['accuracy']:.2f} ± {100 * row['ci95']:.1f} |"
              for row in a["rows"]]
    lines += ["", "| plan | paired difference int − fp32 (points, 95 %) |", "|---|---|"]
    lines += [f"| {p['plan']} | **{100 * p['paired_diff']:+.2f} ± {100 * p['paired_ci95']:.2f}** |"
              for p in a["paired"]]
    return lines + [""]


if __name__ == "__main__":
    main()
