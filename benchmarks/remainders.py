"""Weight remainders (issue 28): is keeping sub-LSB bits of the trained int8 weights worth it (the study,
``remainders.py``), and which layers need them (``remainders.py layers``)?

Which state a trained int8 weight keeps between steps, and the device against its fp32 twin (issue 28).

    python benchmarks/remainders.py [--workers 2] [--train-images 5000] [--epochs 6]

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared/models) with a new 10-class head on
Fashion-MNIST (Debian package ``dataset-fashion-mnist``): a stratified subset of ``--train-images`` training images,
the official 10,000 test images. The recipe is the ceiling study's (benchmarks/fp32_ceiling.py): batch-1 SGD,
cosine lr schedule, lr 0.003, head lr 0.01, 6 epochs, on last-k:14 (the deep preset where fp32 gained +2.9 points
over classifier-only) and on classifier-only. Every device run is the emitted C (``--engine c``: the device's
arithmetic, bit for bit the Cortex-M step).

1. Choose (validation split: 30 % of the subset, stratified, split seed 0): the weight state on last-k:14 —
   ``remainder_bits`` 0 (int8 weights, stochastic rounding: the old device), 4 (half a byte beside each trained
      weight) and 8 (a byte: an int16 fixed-point master whose rounded high byte the forward reads), 8 with
   round-to-nearest at
   the finer grid, and momentum 0.9 (4 bytes per weight, lr / 10) on int8 weights. Kept: the most accurate per byte
   (the fewest bytes within one standard error of the best).
2. Report (official test images, trained on the whole subset): the device with the chosen state against its fp32
   twin trained the same way (common/fp32.py: the same layers, batch-1 SGD, lrs, schedule, epochs and sample
   count; fp32 weights), on last-k:14 and classifier-only, with the int8-only device beside them; differences paired
   per test image (95 %).

Writes benchmarks/results/remainder_study.{json,md}.

**layers**: Per-layer remainder bits: which trained layers need the sub-LSB remainders, and whether giving some
layers none
buys a deeper plan in the same memory (issue 28), on the Fashion-MNIST study's 256 KB plan.

    python benchmarks/remainders.py layers [--workers 2] [--seeds 3] [--train-images 5000]

The data, the model and the recipe are the transfer study's (benchmarks/transfer_study.py: ImageNet
MobileNetV1-0.25 + a new 10-class head, a stratified subset of Fashion-MNIST's training images, batch-1 SGD, lr
0.003, head lr 0.01, cosine, 6 epochs). Everything here is measured on its validation split (30 % of the subset,
stratified, split seed 0), never on the test images: the plans are trained on the fit rows by the emitted C (the
search's cut model: the device's arithmetic, bit for bit) with ``--seeds`` seeds each (the sample order and the
stochastic rounding), and compared per validation image with the plan's uniform default (4 bits in every layer)
trained with the same seed.

The plan is ``last-k:17 at 1/4``, the study's searched 256 KB plan (the biases of the last 17 layers and a quarter
of the output channels of each one's weights; the classifier in full). Per-layer variants (a plan file's
``weights[].remainder_bits``; "lower" are the trained layers nearer the input, the classifier not among them):
uniform 0 / 4 / 8; the classifier at 0 or 8, the rest at 4; the lower or the upper half of the backbone layers
at 0, the rest at 4. And the trades: for each rule that gives some layers 0 bits, the deepest ``last-k:N at 1/4``
that fits 256 KB under it. Peak SRAM: ``tinytrain compile``'s (search/memory.py).

Writes benchmarks/results/remainder_layers.{json,md}.
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
from dataclasses import asdict, dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import RESULTS, ROOT, accuracy_ci, paired  # noqa: E402  (puts the checkout on sys.path)
from transfer_study import DEFAULT_RECIPE, Task, rel, study_of, validation_correct  # noqa: E402

# ---- the study: int8 only, 4 or 8 remainder bits, against the fp32 twin --------------------------------------

MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
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
        from tinytrain.data import load_dataset, model_inputs
        from tinytrain.splits import stratified_split
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


def study_main() -> None:
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
    result = {"command": "python benchmarks/remainders.py"
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
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "remainder_study.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "remainder_study.md").write_text(study_markdown(result))
    print(study_markdown(result))


def study_markdown(r: dict) -> str:
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

# ---- layers: per-layer remainder bits on the Fashion-MNIST study's 256 KB plan -------------------------------

BUDGET = 256 * 1024
RATIO = 0.25
DEPTH = 17  # the study's searched 256 KB plan: last-k:17 at 1/4
# name -> the bits of backbone layer i of m (0: nearest the input) and of the classifier
RULES = {
    "4 everywhere (the default)": (lambda i, m: 4, 4),
    "0 everywhere": (lambda i, m: 0, 0),
    "8 everywhere": (lambda i, m: 8, 8),
    "classifier 0, the rest 4": (lambda i, m: 4, 0),
    "classifier 8, the rest 4": (lambda i, m: 4, 8),
    "lower half 0, upper half 4": (lambda i, m: 0 if i < m // 2 else 4, 4),
    "lower half 4, upper half 0": (lambda i, m: 4 if i < m // 2 else 0, 4),
}
TRADES = ("0 everywhere", "lower half 0, upper half 4", "lower half 4, upper half 0")


def with_rule(plan, rule: str):
    """``plan`` with each weight entry's own remainder bits by ``rule`` (the plan's default then unused)."""
    backbone, head = RULES[rule]
    ws = sorted(plan.weights, key=lambda w: w.conv)
    m = len(ws) - 1  # the last entry is the classifier
    bits = [backbone(i, m) for i in range(m)] + [head]
    return replace(plan, weights=tuple(replace(w, remainder_bits=b) for w, b in zip(ws, bits)))


def candidates(task: Task) -> dict[str, dict]:
    """name -> {"plan": plan json, "peak_sram_bytes"}: every rule on last-k:17 at 1/4, and each trade."""
    from tinytrain.search.memory import MemoryOracle
    from tinytrain.search.space import Space

    space, mem = Space.of(task.graph), MemoryOracle(task.graph)
    r = DEFAULT_RECIPE

    def plan(depth: int, rule: str):
        return with_rule(space.plan(space.last_k(depth, ratio=RATIO), r.lr, r.bias_lr, r.head_lr), rule)

    out = {f"last-k:{DEPTH} at 1/4, {rule}": plan(DEPTH, rule) for rule in RULES}
    for rule in TRADES:
        depth = max(d for d in range(1, space.n_layers + 1) if mem(plan(d, rule)) <= BUDGET)
        if depth > DEPTH:
            out[f"last-k:{depth} at 1/4, {rule} (the deepest that fits)"] = plan(depth, rule)
    return {name: {"plan": p.to_json(), "peak_sram_bytes": mem(p)} for name, p in out.items()}


def layers_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="per-layer remainder bits (remainders.py layers)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--train-images", type=int, default=5000)
    args = ap.parse_args(argv)
    study = study_of(argparse.Namespace(task="fashion-mnist", train_images=args.train_images, test_images=0,
                                        ft_steps=0, workers=args.workers, final_seeds=1))
    t0, log = time.time(), []
    task = Task(study)
    rows = candidates(task)
    steps, recipe = DEFAULT_RECIPE.epochs * len(task.fit), DEFAULT_RECIPE
    runs = {(name, s): (row["plan"], steps, recipe.schedule, True, s) for name, row in rows.items()
            for s in range(args.seeds)}
    got = validation_correct(task, study, {f"{n} | seed {s}": r for (n, s), r in runs.items()}, log)
    ref = next(iter(rows))
    seeds = range(args.seeds)
    for name, row in rows.items():
        correct = np.stack([got[f"{name} | seed {s}"] for s in seeds])
        base = np.stack([got[f"{ref} | seed {s}"] for s in seeds])
        d, half = paired(correct.ravel(), base.ravel())
        row.update(accuracy=float(correct.mean()), per_seed=[float(c.mean()) for c in correct],
                   vs_default=d, vs_default_ci95=half)
        print(f"{name}: {100 * row['accuracy']:.2f} % ({100 * d:+.2f} ± {100 * half:.2f}), "
              f"{row['peak_sram_bytes'] / 1024:.1f} KB", flush=True)
    result = {"command": "python benchmarks/remainders.py layers " + " ".join(sys.argv[2:]),
              "train": study.train, "n_fit": int(len(task.fit)), "n_val": int(len(task.val)), "steps": steps,
              "seeds": args.seeds, "rows": rows, "seconds": round(time.time() - t0, 1),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    out = ROOT / "benchmarks" / "results"
    (out / "remainder_layers.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "remainder_layers.md").write_text(layers_markdown(result))
    print(f"wrote {rel(out / 'remainder_layers.md')} ({result['seconds']:.0f} s)")


def layers_markdown(r: dict) -> str:
    lines = ["# Per-layer remainder bits (validation split)", "",
             f"`{r['command'].strip()}` ({r['seconds'] / 60:.0f} min, {r['machine']['cpus']} cores). Fashion-MNIST "
             f"`{r['train']}`: trained on {r['n_fit']} fit rows for {r['steps']} batch-1 steps (the transfer "
             f"study's recipe), scored on {r['n_val']} validation rows, {r['seeds']} seeds each; the difference "
             "is paired per (seed, validation image) with the uniform default trained with the same seed (95 %).",
             "", "| plan | validation accuracy (mean of the seeds) | vs 4 bits everywhere | peak SRAM | fits 256 KB |",
             "|---|---|---|---|---|"]
    for name, row in r["rows"].items():
        lines.append(f"| {name} | {100 * row['accuracy']:.2f} % | {100 * row['vs_default']:+.2f} ± "
                     f"{100 * row['vs_default_ci95']:.2f} | {row['peak_sram_bytes'] / 1024:.1f} KB | "
                     f"{'yes' if row['peak_sram_bytes'] <= BUDGET else 'no'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["layers"]:
        layers_main(sys.argv[2:])
    else:
        study_main()
