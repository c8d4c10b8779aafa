"""Which state a trained int8 weight keeps between steps, and the device against its fp32 twin (issue 28).

    .venv/bin/python benchmarks/remainder_study.py [--workers 2] [--train-images 5000] [--epochs 6]

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared/models) with a new 10-class head on
Fashion-MNIST (Debian package ``dataset-fashion-mnist``): a stratified subset of ``--train-images`` training images,
the official 10,000 test images. The recipe is the ceiling study's (benchmarks/fp32_ceiling.py): batch-1 SGD,
cosine lr schedule, lr 0.003, head lr 0.01, 6 epochs, on last-k:14 (the deep preset where fp32 gained +2.9 points
over classifier-only) and on classifier-only. Every device run is the emitted C (``--engine c``: the device's
arithmetic, bit for bit the Cortex-M step).

1. Choose (validation split: 30 % of the subset, stratified, split seed 0): the weight state on last-k:14 —
   ``remainder_bits`` 0 (int8 weights, stochastic rounding: the old device), 4 (half a byte beside each trained
   weight) and 8 (a byte: an int16 fixed-point master whose rounded high byte the forward reads), 8 with round-to-nearest at
   the finer grid, and momentum 0.9 (4 bytes per weight, lr / 10) on int8 weights. Kept: the most accurate per byte
   (the fewest bytes within one standard error of the best).
2. Report (official test images, trained on the whole subset): the device with the chosen state against its fp32
   twin trained the same way (common/fp32.py: the same layers, batch-1 SGD, lrs, schedule, epochs and sample
   count; fp32 weights), on last-k:14 and classifier-only, with the int8-only device beside them; differences paired
   per test image (95 %).

Writes benchmarks/results/remainder_study.{json,md}.
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
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
from common import accuracy_ci, paired  # noqa: E402
MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
OUT = ROOT / "benchmarks" / "results"
HEAD, SEED, VAL = 10, 0, 0.3
LR, HEAD_LR = 0.003, 0.01


@dataclass(frozen=True)
class Config:
    """One device run: the preset, the weight state and the update's options."""

    name: str
    last_k: int
    remainder_bits: int
    rounding: str = "stochastic"
    momentum: float = 0.0

    @property
    def bytes_per_weight(self) -> float:
        """SRAM per trained weight: the int8 weight, its remainder (4 bits: half a byte; 8: a byte), a float32
        momentum."""
        rem = 0 if not self.remainder_bits else 0.5 if self.remainder_bits <= 4 else 1
        return 1 + rem + 4 * (self.momentum > 0)


CHOICES = (Config("int8, stochastic rounding", 14, 0), Config("remainder 4 bits", 14, 4),
           Config("remainder 8 bits", 14, 8), Config("remainder 8 bits, nearest", 14, 8, "nearest"),
           Config("int8 + momentum 0.9", 14, 0, momentum=0.9))


class Data:
    """The graph with its new head and the int8 inputs of the training subset and the test set."""

    def __init__(self, train_images: int) -> None:
        from tinytrain.data import load_dataset, model_inputs, stratified_split
        from tinytrain.frontends import load_model
        from tinytrain.training.head import new_head

        self.graph = new_head(load_model(MODEL), HEAD, seed=SEED)
        train, test = load_dataset(f"fashion-mnist:{train_images}"), load_dataset("fashion-mnist:test")
        self.x, self.y = model_inputs(self.graph, train.x), train.y.astype(np.int64)
        self.x_test, self.y_test = model_inputs(self.graph, test.x), test.y.astype(np.int64)
        self.fit, self.val = stratified_split(self.y, VAL, 0)


_DATA: Data | None = None  # set before the worker processes fork


def device_predictions(config: Config, rows: np.ndarray, eval_x: str, epochs: int) -> np.ndarray:
    """Train the emitted C (host build) on ``rows`` as ``config`` says; its predicted class of every eval image."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.engines.order import sample_order
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import preset, with_lr_schedule
    from tinytrain.training.train_graph import build_training_graph

    d = _DATA
    lr_scale = 1 - config.momentum  # momentum mu multiplies the steady step by 1 / (1 - mu)
    plan = preset(f"last-k:{config.last_k}", d.graph, lr=LR * lr_scale, head_lr=HEAD_LR * lr_scale,
                  remainder_bits=config.remainder_bits)
    steps = epochs * len(rows)
    plan = with_lr_schedule(plan, "cosine", 0.0, steps)
    update = UpdateConfig(momentum=config.momentum, rounding=Rounding(config.rounding), seed=SEED)
    trainer = CTrainer(build_training_graph(d.graph, plan, update))
    trainer.train(d.x, d.y, sample_order(rows, steps, SEED))
    x = d.x[d.val] if eval_x == "val" else d.x_test
    return trainer.predict(x).argmax(axis=1)


def twin_predictions(last_k: int, epochs: int) -> np.ndarray:
    """The fp32 twin trained as the device is (batch-1 SGD, same layers, lrs, schedule, epochs): test predictions."""
    from common.fp32 import Fp32Recipe, fit_predict

    d = _DATA
    recipe = Fp32Recipe(last_k, "sgd", epochs, LR, HEAD_LR)
    return fit_predict(d.graph, d.x, d.y, np.arange(len(d.y)), d.x_test, recipe, SEED)


def _job(job: tuple) -> np.ndarray:
    kind, *args = job
    return device_predictions(*args) if kind == "device" else twin_predictions(*args)


def run_jobs(jobs: dict[str, tuple], workers: int) -> dict[str, np.ndarray]:
    with mp.get_context("fork").Pool(workers) as pool:
        pending = {name: pool.apply_async(_job, (job,)) for name, job in jobs.items()}
        return {name: res.get() for name, res in pending.items()}


def stored_validation(path: Path, n: int) -> dict[str, float]:
    """name -> validation accuracy of each choice, as an earlier run recorded it."""
    rows = {r["name"]: r["val_accuracy"] for r in json.loads(path.read_text())["validation"]}
    return {c.name: rows[c.name] for c in CHOICES}


def choose(val: dict[str, np.ndarray | float]) -> tuple[Config, list[dict]]:
    """The configuration with the fewest bytes per weight within one standard error of the most accurate; ``val``:
    per choice, its correctness per validation image (or its accuracy)."""
    n = len(_DATA.val)
    acc = {name: float(np.mean(v)) for name, v in val.items()}
    rows = [{**asdict(c), "bytes_per_weight": c.bytes_per_weight, "val_accuracy": acc[c.name],
             "val_ci95": 1.96 * math.sqrt(acc[c.name] * (1 - acc[c.name]) / n)} for c in CHOICES]
    best = max(rows, key=lambda r: r["val_accuracy"])
    close = [c for c, r in zip(CHOICES, rows) if r["val_accuracy"] >= best["val_accuracy"] - r["val_ci95"] / 1.96]
    return min(close, key=lambda c: (c.bytes_per_weight, -acc[c.name])), rows


def main() -> None:
    global _DATA
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--train-images", type=int, default=5000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--choice-from", metavar="JSON",
                    help="take the validation accuracies of stage 1 from an earlier run's remainder_study.json")
    args = ap.parse_args()
    if not MODEL.is_file():
        print(f"remainder_study: skipped: {MODEL} not found (../shared is not beside the project)")
        return
    t0 = time.time()
    _DATA = Data(args.train_images)
    if args.choice_from:
        chosen, choice_rows = choose(stored_validation(Path(args.choice_from), len(_DATA.val)))
    else:
        val = run_jobs({c.name: ("device", c, _DATA.fit, "val", args.epochs) for c in CHOICES}, args.workers)
        chosen, choice_rows = choose({name: pred == _DATA.y[_DATA.val] for name, pred in val.items()})
    print(f"chosen on validation: {chosen.name}", flush=True)
    every = np.arange(len(_DATA.y))
    int8 = Config("int8, stochastic rounding", 14, 0)
    jobs = {"device last-k:14": ("device", chosen, every, "test", args.epochs),
            "device last-k:14, int8 only": ("device", int8, every, "test", args.epochs),
            "device classifier-only": ("device", Config("classifier-only", 1, chosen.remainder_bits), every, "test",
                                       args.epochs),
            "device classifier-only, int8 only": ("device", Config("classifier-only", 1, 0), every, "test",
                                                  args.epochs),
            "fp32 twin last-k:14": ("twin", 14, args.epochs), "fp32 twin classifier-only": ("twin", 1, args.epochs)}
    test = {name: pred == _DATA.y_test for name, pred in run_jobs(jobs, args.workers).items()}
    write(args, chosen, choice_rows, test, time.time() - t0)


def write(args, chosen: Config, choice_rows: list[dict], test: dict[str, np.ndarray], seconds: float) -> None:
    pairs = [("device last-k:14", "fp32 twin last-k:14"), ("device last-k:14, int8 only", "fp32 twin last-k:14"),
             ("device classifier-only", "fp32 twin classifier-only"),
             ("device classifier-only, int8 only", "fp32 twin classifier-only"),
             ("device last-k:14", "device classifier-only"), ("fp32 twin last-k:14", "fp32 twin classifier-only"),
             ("device last-k:14", "device last-k:14, int8 only")]
    result = {"command": "python benchmarks/remainder_study.py"
                         + (f" --choice-from {args.choice_from}" if args.choice_from else "")
                         + (f" --train-images {args.train_images}" if args.train_images != 5000 else "")
                         + (f" --epochs {args.epochs}" if args.epochs != 6 else ""),
              "model": os.path.relpath(MODEL, ROOT), "train_images": args.train_images, "epochs": args.epochs,
              "lr": LR, "head_lr": HEAD_LR, "seconds": round(seconds, 1),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "chosen": asdict(chosen),
              "validation": choice_rows,
              "test": [{"row": name, "accuracy": float(c.mean()), "ci95": accuracy_ci(c)[1]} for name, c in test.items()],
              "paired": [{"a": a, "b": b, "diff": paired(test[a], test[b])[0], "ci95": paired(test[a], test[b])[1]}
                         for a, b in pairs]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "remainder_study.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "remainder_study.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# The trained weights' state, and the device against its fp32 twin", "",
             f"`{r['command']}` ({r['seconds'] / 60:.0f} min, {r['machine']}). Model `{r['model']}` + a new 10-class "
             f"head, Fashion-MNIST: {r['train_images']} training images (30 % of them the validation split for the "
             f"choice), the official 10,000 test images for the report. Recipe: batch-1 SGD, cosine, lr {r['lr']}, "
             f"head lr {r['head_lr']}, {r['epochs']} epochs; device rows are the emitted C (`--engine c`).", "",
             "## Choice (validation split, last-k:14)", "",
             "| weight state | bytes per trained weight | validation accuracy (95 % CI) |", "|---|---:|---|"]
    for v in r["validation"]:
        lines.append(f"| {v['name']} | {v['bytes_per_weight']:g} | {100 * v['val_accuracy']:.1f} ± "
                     f"{100 * v['val_ci95']:.1f} |")
    lines += ["", f"Chosen (fewest bytes within one standard error of the best): **{r['chosen']['name']}**.", "",
              "## Report (official test images)", "", "| row | test accuracy (95 % CI) |", "|---|---|"]
    lines += [f"| {t['row']} | {100 * t['accuracy']:.1f} ± {100 * t['ci95']:.1f} |" for t in r["test"]]
    lines += ["", "| paired difference | points (95 % CI) |", "|---|---|"]
    lines += [f"| {p['a']} − {p['b']} | {100 * p['diff']:+.1f} ± {100 * p['ci95']:.1f} |" for p in r["paired"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
