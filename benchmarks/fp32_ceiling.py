"""What can updating the backbone win at all? The fp32, memory-unconstrained ceilings of the two transfer studies
(transfer_study.py): Fashion-MNIST (a shifted domain, the official test images) and VWW (800 dev images,
cross-validated). Both fine-tune the fp32 PyTorch twin of ImageNet MobileNetV1-0.25 128x128 with the study's new
head (common/fp32.py: every weight dequantized, every activation clamped to its int8 range).

    python benchmarks/fp32_ceiling.py --task fashion-mnist [--workers 2]   # -> results/transfer_ceiling.{json,md}
    python benchmarks/fp32_ceiling.py --task vww [--folds 4] [--epochs 4]  # -> results/vww_ceiling.{json,md}
    python benchmarks/fp32_ceiling.py --task ... --render                  # only rewrite the .md from the .json

Both need ../shared (they skip with a message without it).

**Fashion-MNIST** (about 30 min on 2 cores). The fp32 PyTorch twin of ImageNet MobileNetV1-0.25 128x128 with the
study's new
10-class head (common/fp32.py: every weight dequantized, every activation clamped to its int8 range) is
fine-tuned (common/fp32.py) on the study's training subset (``fashion-mnist:5000``) and scored on the official
10,000 test images:

- batch-1 SGD, the device's optimizer, cosine lr schedule: the study's recipe (backbone and bias lr 0.003, head lr
  0.01), 2 epochs: classifier-only, last-k:5, last-k:13; and 6 epochs: classifier-only, last-k:14, and last-k:14
  with its weights kept on their int8 grid (stochastically rounded after every step, as the device stores them:
  what int8 weight storage alone costs) or on a grid 256 times finer (what an int16 copy of them would give back);
- Adam on batches of 32 (not available on the device: 8 bytes of state per parameter, a batch of activations),
  cosine, 10 epochs: classifier-only (lr 0.01), last-k:14 and all 28 layers (lr 0.001, PyTorch's default);

and, for the device's optimizer, with 6x the data: ``fashion-mnist:30000``, 1 epoch (classifier-only, last-k:5).
The 2-epoch and 30,000-image rows were fixed before any run. The 6-epoch and Adam rows were added after exploratory
runs on the study's validation split (the training subset's 30 %, stratified, split seed 0; fit on the other 70 %),
never on the test images: there, Adam for 10 epochs reached 88.2-88.9 % (all 28 layers, lr 0.001) and 88.5 %
(last-k:14) against 85.0 % for classifier-only (lr 0.01), and 6 epochs of batch-1 SGD 87.8 % (last-k:14) against
86.2 % (classifier-only); 2 epochs of SGD stop too early for the backbone. Gains are paired per test image against
classifier-only trained with the same optimizer, epochs and data (mean of d_i in {-1, 0, 1}, +- 1.96 standard
errors). Writes benchmarks/results/transfer_ceiling.{json,md}.

**VWW** (about 15-25 min on 2 cores). The fp32 PyTorch twin of ImageNet MobileNetV1-0.25 128x128 with the study's
new
2-class head (common/fp32.py: every weight dequantized, every activation clamped to its int8 range) is
fine-tuned on ../shared/data/vww96/vww96_dev800.npz with stratified ``--folds``-fold cross-validation (every
one of the 800 images is held out exactly once), batch-1 SGD, ``--epochs`` epochs, for each configuration:

- classifier-only: the new head's weights and bias;
- bias-only: the head + every bias;
- last-k:K: the weights and biases of the last K layers (K = 28: every parameter, full fine-tuning);
- head first: the head alone for ``--epochs`` epochs, then last-k:K for ``--epochs`` more (linear probing
  then fine-tuning), against classifier-only trained as long (K = 1: its control);
- flip: the same with a random horizontal flip of each training image (p = 1/2).

Each configuration runs at three learning rates and reports the best (picked on the held-out predictions: the
same optimism for every row). Gains are paired per image (d_i in {-1, 0, 1}) against classifier-only trained
for as many epochs; the standard error of the mean gain is std(d) / sqrt(800). Writes
benchmarks/results/vww_ceiling.{json,md}.
Needs ../shared (skips with a message without it).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import asdict, dataclass, replace  # noqa: E402

import numpy as np  # noqa: E402

from common import RESULTS, ROOT, SHARED, paired  # noqa: E402  (puts the checkout on sys.path)
from common.fp32 import Fp32Recipe, fit_predict, torch_twin  # noqa: E402

# ---- Fashion-MNIST: a fixed recipe grid, scored on the official test images ----------------------------------

FMNIST_MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
FMNIST_SEED = 0
FMNIST_HEAD = 10


@dataclass(frozen=True)
class Run:
    data: str  # training data spec
    recipe: Fp32Recipe

    @property
    def name(self) -> str:
        return f"{self.recipe.describe()}, {self.data}"

    @property
    def baseline(self) -> "Run":
        """classifier-only with the same optimizer, schedule, epochs and data."""
        r = self.recipe
        base = next(b for b in runs() if b.data == self.data and b.recipe.last_k == 1 and
                    (b.recipe.optimizer, b.recipe.epochs, b.recipe.schedule) == (r.optimizer, r.epochs, r.schedule))
        return base


def runs() -> list[Run]:
    """The longest first (the pool packs them better)."""
    five, thirty = "fashion-mnist:5000", "fashion-mnist:30000"
    sgd6 = Fp32Recipe(14, "sgd", 6, 0.003, 0.01)
    return [Run(five, sgd6), Run(five, replace(sgd6, grid_bits=8)), Run(five, replace(sgd6, grid_bits=16)),
            Run(five, Fp32Recipe(28, "adam", 10, 0.001, 0.001)), Run(five, Fp32Recipe(14, "adam", 10, 0.001, 0.001)),
            Run(thirty, Fp32Recipe(5, "sgd", 1, 0.003, 0.01)), Run(thirty, Fp32Recipe(1, "sgd", 1, 0.003, 0.01)),
            Run(five, Fp32Recipe(1, "sgd", 6, 0.003, 0.01)),
            Run(five, Fp32Recipe(13, "sgd", 2, 0.003, 0.01)), Run(five, Fp32Recipe(1, "adam", 10, 0.01, 0.01)),
            Run(five, Fp32Recipe(5, "sgd", 2, 0.003, 0.01)), Run(five, Fp32Recipe(1, "sgd", 2, 0.003, 0.01))]


def test_correct(run: Run) -> list[bool]:
    """Train the fp32 twin as ``run`` says; per official test image, is its prediction right?"""
    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    graph = new_head(load_model(FMNIST_MODEL), FMNIST_HEAD, seed=FMNIST_SEED)
    train, test = load_dataset(run.data), load_dataset("fashion-mnist:test")
    x, x_test = model_inputs(graph, train.x), model_inputs(graph, test.x)
    pred = fit_predict(graph, x, train.y, np.arange(len(train.y)), x_test, run.recipe, FMNIST_SEED)
    return (pred == test.y).tolist()


def fashion_mnist(args: argparse.Namespace) -> None:
    if args.render:
        (RESULTS / "transfer_ceiling.md").write_text(fmnist_markdown(json.loads((RESULTS / "transfer_ceiling.json")
                                                                                 .read_text())))
        return
    if not FMNIST_MODEL.is_file():
        print(f"transfer_ceiling: skipped: {FMNIST_MODEL} not found (../shared is not beside the project)")
        return
    t0 = time.time()
    todo = runs()
    with ProcessPoolExecutor(args.workers) as pool:
        correct = dict(zip(todo, (np.array(c) for c in pool.map(test_correct, todo))))
    rows = []
    for run, c in correct.items():
        base = correct[run.baseline]
        acc = float(c.mean())
        gain, ci = paired(c, base)
        rows.append({"data": run.data, **asdict(run.recipe), "name": run.name, "test_accuracy": acc,
                     "ci95": 1.96 * math.sqrt(acc * (1 - acc) / len(c)), "gain": gain, "gain_ci95": ci})
    result = {"command": "python benchmarks/fp32_ceiling.py --task fashion-mnist",
              "model": os.path.relpath(FMNIST_MODEL, ROOT),
              "seconds": round(time.time() - t0, 1), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "transfer_ceiling.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "transfer_ceiling.md").write_text(fmnist_markdown(result))
    print(fmnist_markdown(result))


def fmnist_markdown(r: dict) -> str:
    lines = ["# Fashion-MNIST ceiling: fp32, unlimited memory, which optimizer", "",
             f"`{r['command']}` ({r['seconds'] / 60:.0f} min, {r['machine']}). Model `{r['model']}` + a new "
             f"{FMNIST_HEAD}-class head, fp32 twin in PyTorch; scored on the official 10,000 test images; every "
             "configuration fixed on the validation split or before any run, none on the test images (the script's "
             "docstring).", "",
             "| configuration | test accuracy (95 % CI) | vs classifier-only, same optimizer, epochs, data (paired) |",
             "|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['name']} | {100 * row['test_accuracy']:.1f} ± {100 * row['ci95']:.1f} | "
                     f"{100 * row['gain']:+.1f} ± {100 * row['gain_ci95']:.1f} |")
    return "\n".join(lines) + "\n"

# ---- VWW: cross-validated on the 800 dev images --------------------------------------------------------------

VWW_MODEL = "../shared/models/mobilenet_v1_0.25_128_quant.tflite"
VWW_DATA = "../shared/data/vww96/vww96_dev800.npz"



@dataclass(frozen=True)
class Config:
    name: str
    last_k: int  # weights + biases of the last k layers (1: the classifier)
    lrs: tuple[float, ...]
    all_biases: bool = False
    head_first: bool = False
    flip: bool = False


def configs(n_layers: int) -> list[Config]:
    lrs = (3e-4, 1e-3, 3e-3)
    return [
        Config("classifier-only", 1, lrs),
        Config("bias-only (head + every bias)", 1, lrs, all_biases=True),
        *(Config(f"last-k:{k}", k, lrs) for k in (2, 3, 5, 9)),
        Config(f"last-k:{n_layers} (full fine-tuning)", n_layers, (1e-4, 3e-4, 1e-3)),
        Config("classifier-only, twice the epochs (the control of the head-first rows)", 1, lrs, head_first=True),
        Config("head first, then last-k:3", 3, lrs, head_first=True),
        Config("head first, then last-k:9", 9, lrs, head_first=True),
        Config("classifier-only + flip", 1, lrs, flip=True),
        Config("last-k:3 + flip", 3, lrs, flip=True),
    ]


def folds_of(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Stratified fold index of every row."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(y), np.int64)
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        fold[rows] = np.arange(len(rows)) % k
    return fold


class Runner:
    """The twin, the images and the frozen-prefix activations (computed once per cut and flip)."""

    def __init__(self, graph, x, y, epochs: int, seed: int) -> None:
        import torch

        self.graph, self.x, self.y, self.epochs, self.seed = graph, x, y, epochs, seed
        self.twin = torch_twin(graph)
        self.layer_steps = [i for i, (_, node) in enumerate(self.twin.steps)
                            if node.op in ("conv2d", "fully_connected")]
        self._prefix: dict = {}
        self.torch = torch

    def prefix(self, lo: int, flip: bool):
        if (lo, flip) not in self._prefix:
            x = self.torch.flip(self.x, [3]) if flip else self.x
            with self.torch.no_grad():
                self._prefix[(lo, flip)] = self.twin.run(x, 0, lo)
        return self._prefix[(lo, flip)]

    def fold_predictions(self, cfg: Config, lr: float, train_rows: np.ndarray, test_rows: np.ndarray) -> np.ndarray:
        torch = self.torch
        import torch.nn.functional as F

        lo = 0 if cfg.all_biases else self.layer_steps[len(self.layer_steps) - cfg.last_k]
        model = torch_twin(self.graph)
        steps = model.steps
        node_ids = {k for k, _ in steps[lo:]}
        head = {f"w{steps[self.layer_steps[-1]][0]}", f"b{steps[self.layer_steps[-1]][0]}"}
        trainable = {name for name in model.params if int(name[1:]) in node_ids
                     and (name in head or not cfg.all_biases or name.startswith("b"))}
        for name, p in model.params.items():
            p.requires_grad_(name in trainable)
        base, flipped = self.prefix(lo, False), (self.prefix(lo, True) if cfg.flip else None)
        rng = np.random.default_rng(self.seed)

        def fit(names: set[str]) -> None:
            opt = torch.optim.SGD([model.params[n] for n in sorted(names)], lr=lr)
            for _ in range(self.epochs):
                for i in train_rows[rng.permutation(len(train_rows))]:
                    inp = flipped[i : i + 1] if cfg.flip and rng.random() < 0.5 else base[i : i + 1]
                    opt.zero_grad()
                    F.cross_entropy(model.run(inp, lo, len(steps)).flatten(1), self.y[i : i + 1]).backward()
                    opt.step()

        if cfg.head_first:
            fit(head)
        fit(trainable)
        with torch.no_grad():
            return model.run(base[test_rows], lo, len(steps)).flatten(1).argmax(1).numpy()


def vww(args: argparse.Namespace) -> None:
    if args.render:
        (RESULTS / "vww_ceiling.md").write_text(vww_markdown(json.loads((RESULTS / "vww_ceiling.json").read_text()))
                                                + "\n")
        return
    if not (SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite").exists():
        print("skipped: ../shared (the ImageNet model and VWW data) is not beside the project")
        return
    import torch

    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    torch.set_num_threads(1)
    t_start = time.time()
    graph = new_head(load_model(ROOT / VWW_MODEL), 2, seed=args.seed)
    ds = load_dataset(ROOT / VWW_DATA)
    q = graph.tensors[graph.inputs[0]].quant
    x = (model_inputs(graph, ds.x).astype(np.float32) - q.zp) * np.float32(q.s)  # the int8 input, dequantized
    runner = Runner(graph, torch.tensor(x.transpose(0, 3, 1, 2)), torch.tensor(ds.y), args.epochs, args.seed)
    fold = folds_of(ds.y, args.folds, args.seed)
    rows = []
    for cfg in configs(len(runner.layer_steps)):
        runs = {}
        for lr in cfg.lrs:
            t0 = time.time()
            correct = np.zeros(len(ds.y), bool)
            for f in range(args.folds):
                test = np.flatnonzero(fold == f)
                correct[test] = runner.fold_predictions(cfg, lr, np.flatnonzero(fold != f), test) == ds.y[test]
            runs[str(lr)] = {"accuracy": float(correct.mean()), "correct": correct.astype(int).tolist(),
                             "seconds": round(time.time() - t0, 1)}
            print(f"{cfg.name:40s} lr {lr:g}: {100 * correct.mean():.2f} % ({time.time() - t0:.0f} s)", flush=True)
        best = max(runs, key=lambda k: runs[k]["accuracy"])
        rows.append({"config": asdict(cfg), "lr": float(best), "accuracy": runs[best]["accuracy"],
                     "correct": runs[best]["correct"],
                     "runs": {k: {"accuracy": v["accuracy"], "seconds": v["seconds"]} for k, v in runs.items()}})
    refs = {c.head_first: next(r for r in rows if r["config"]["last_k"] == 1 and not r["config"]["all_biases"]
                               and not r["config"]["flip"] and r["config"]["head_first"] == c.head_first)
            for c in configs(len(runner.layer_steps))}
    for r in rows:
        ref = refs[r["config"]["head_first"]]
        r["reference"] = ref["config"]["name"]
        d = np.asarray(r["correct"]) - np.asarray(ref["correct"])
        r["gain_points"] = round(100 * float(d.mean()), 2)
        r["gain_standard_error_points"] = round(100 * float(d.std(ddof=1) / np.sqrt(len(d))), 2)
    result = {"command": "python benchmarks/fp32_ceiling.py " + shlex.join(sys.argv[1:]),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "torch": torch.__version__,
              "model": VWW_MODEL, "data": VWW_DATA, "folds": args.folds, "epochs": args.epochs, "seed": args.seed,
              "images": int(len(ds.y)), "rows": rows, "total_seconds": round(time.time() - t_start, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "vww_ceiling.json").write_text(json.dumps(result) + "\n")
    (RESULTS / "vww_ceiling.md").write_text(vww_markdown(result) + "\n")
    print(vww_markdown(result))


def vww_markdown(r: dict) -> str:
    lines = [
        "# fp32 ceiling on the VWW dev set: what updating the backbone can win",
        "",
        f"Reproduce: `{r['command']}` ({r['total_seconds'] / 60:.1f} min here, {r['machine']}, torch {r['torch']}).",
        "",
        f"fp32 PyTorch twin of `{r['model']}` with the study's new 2-class head, `{r['data']}` ({r['images']} images), "
        f"stratified {r['folds']}-fold cross-validation (each image held out once), batch-1 SGD, {r['epochs']} epochs "
        "(head first: that many more); the best of three lrs per row, picked on the held-out predictions. Gain: "
        "paired per image against classifier-only, ± one standard error.",
        "",
        "| configuration | accuracy (CV) | gain over classifier-only (as many epochs) | lr | accuracy at each lr |",
        "|---|---:|---:|---:|---|",
    ]
    for row in r["rows"]:
        runs = ", ".join(f"{float(k):g}: {100 * v['accuracy']:.1f} %" for k, v in row["runs"].items())
        gain = ("—" if row["reference"] == row["config"]["name"] else
                f"{row['gain_points']:+.1f} ± {row['gain_standard_error_points']:.1f} points")
        lines.append(f"| {row['config']['name']} | {100 * row['accuracy']:.1f} % | {gain} | {row['lr']:g} | {runs} |")
    compared = [row for row in r["rows"] if row["reference"] != row["config"]["name"]]
    best = max(compared, key=lambda row: row["gain_points"])
    backbone = [row for row in compared if not row["config"]["flip"]]
    top = max(backbone, key=lambda row: row["gain_points"])
    lines += [
        "",
        "## Reading",
        "",
        f"- Best configuration that updates the backbone (no augmentation): {top['config']['name']}, "
        f"{top['gain_points']:+.1f} ± {top['gain_standard_error_points']:.1f} points over classifier-only trained as long. "
        "A 2-point gain for a sparse plan over classifier-only is only possible if some backbone update can win "
        "2 points with unlimited memory and fp32 arithmetic; this table is that upper bound on these 800 images.",
        f"- Largest gain of any row: {best['config']['name']}, {best['gain_points']:+.1f} ± "
        f"{best['gain_standard_error_points']:.1f} points.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("fashion-mnist", "vww"), required=True)
    ap.add_argument("--workers", type=int, default=2, help="fashion-mnist: processes")
    ap.add_argument("--folds", type=int, default=4, help="vww: cross-validation folds")
    ap.add_argument("--epochs", type=int, default=4, help="vww: epochs")
    ap.add_argument("--seed", type=int, default=0, help="vww: new head, folds and sample order")
    ap.add_argument("--render", action="store_true", help="only rewrite the task's .md from its .json")
    args = ap.parse_args()
    fashion_mnist(args) if args.task == "fashion-mnist" else vww(args)


if __name__ == "__main__":
    main()
