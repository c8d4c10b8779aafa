"""What can updating the backbone win on the VWW dev set at all? An fp32, memory-unconstrained, cross-validated
ceiling for the VWW study (vww_study.py).

    .venv/bin/python benchmarks/vww_ceiling.py [--folds 4] [--epochs 4]

(about 15-25 min on 2 cores). The fp32 PyTorch twin of ImageNet MobileNetV1-0.25 128x128 with the study's new
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
for as many epochs; the standard error of the mean gain is std(d) / sqrt(800). Writes benchmarks/results/vww_ceiling.{json,md}.
Needs ../shared (skips with a message without it).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
from common.fp32 import torch_twin  # noqa: E402

SHARED = ROOT.parent / "shared"
MODEL = "../shared/models/mobilenet_v1_0.25_128_quant.tflite"
DATA = "../shared/data/vww96/vww96_dev800.npz"

OUT = ROOT / "benchmarks" / "results"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--render", action="store_true", help="only rewrite vww_ceiling.md from vww_ceiling.json")
    args = ap.parse_args()
    if args.render:
        (OUT / "vww_ceiling.md").write_text(markdown(json.loads((OUT / "vww_ceiling.json").read_text())) + "\n")
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
    graph = new_head(load_model(ROOT / MODEL), 2, seed=args.seed)
    ds = load_dataset(ROOT / DATA)
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
    result = {"command": ".venv/bin/python benchmarks/vww_ceiling.py " + shlex.join(sys.argv[1:]),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "torch": torch.__version__,
              "model": MODEL, "data": DATA, "folds": args.folds, "epochs": args.epochs, "seed": args.seed,
              "images": int(len(ds.y)), "rows": rows, "total_seconds": round(time.time() - t_start, 1)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vww_ceiling.json").write_text(json.dumps(result) + "\n")
    (OUT / "vww_ceiling.md").write_text(markdown(result) + "\n")
    print(markdown(result))


def markdown(r: dict) -> str:
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


if __name__ == "__main__":
    main()
