"""What can updating the backbone win on Fashion-MNIST at all, and with which optimizer? An fp32,
memory-unconstrained ceiling for the transfer study (transfer_study.py).

    .venv/bin/python benchmarks/transfer_ceiling.py [--workers 2]

(about 30 min on 2 cores). The fp32 PyTorch twin of ImageNet MobileNetV1-0.25 128x128 with the study's new
10-class head (vww_study.torch_twin: every weight dequantized, every activation clamped to its int8 range) is
fine-tuned on the study's training subset (``fashion-mnist:5000``) and scored on the official 10,000 test images,
with two optimizers:

- batch-1 SGD, the device's: the study's recipe (backbone and bias lr 0.003, head lr 0.01: classifier-only's best
  under the cosine schedule on the study's validation split), cosine lr schedule, 2 epochs: classifier-only,
  last-k:5, last-k:13;
- Adam, batch 32 (not available on the device: 8 bytes of state per parameter, a batch of activations): lr 0.001
  (PyTorch's default), 8 epochs: classifier-only, last-k:13;

and, for the device's optimizer, with 6x the data: ``fashion-mnist:30000``, 1 epoch (classifier-only, last-k:5).
Nothing is chosen here (every lr is fixed above, before any run), so the test set scores every row. Gains are paired
per test image against classifier-only trained with the same optimizer and data (mean of d_i in {-1, 0, 1},
+- 1.96 standard errors). Writes benchmarks/results/transfer_ceiling.{json,md}.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from vww_study import torch_twin  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
OUT = ROOT / "benchmarks" / "results"
SEED = 0
HEAD = 10


@dataclass(frozen=True)
class Run:
    data: str  # training data spec
    last_k: int  # weights + biases of the last k layers (1: the classifier)
    optimizer: str  # "sgd" (batch 1, cosine) or "adam" (batch 32)
    epochs: int
    lr: float  # backbone weights and biases
    head_lr: float

    @property
    def name(self) -> str:
        what = "classifier-only" if self.last_k == 1 else f"last-k:{self.last_k}"
        how = "batch-1 SGD, cosine" if self.optimizer == "sgd" else "Adam, batch 32"
        return f"{what}, {how}, {self.data}, {self.epochs} epoch{'s' if self.epochs > 1 else ''}"


def runs() -> list[Run]:
    """The longest first (the pool packs them better)."""
    return [Run("fashion-mnist:30000", 5, "sgd", 1, 0.003, 0.01), Run("fashion-mnist:30000", 1, "sgd", 1, 0.003, 0.01),
            Run("fashion-mnist:5000", 13, "adam", 8, 0.001, 0.001), Run("fashion-mnist:5000", 13, "sgd", 2, 0.003, 0.01),
            Run("fashion-mnist:5000", 5, "sgd", 2, 0.003, 0.01), Run("fashion-mnist:5000", 1, "sgd", 2, 0.003, 0.01),
            Run("fashion-mnist:5000", 1, "adam", 8, 0.001, 0.001)]


def test_correct(run: Run) -> list[bool]:
    """Train the fp32 twin as ``run`` says; per official test image, is its prediction right?"""
    import torch
    import torch.nn.functional as F

    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head
    from tinytrain.training.schedule import Schedule

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    graph = new_head(load_model(MODEL), HEAD, seed=SEED)
    train, test = load_dataset(run.data), load_dataset("fashion-mnist:test")
    x, x_test = model_inputs(graph, train.x), model_inputs(graph, test.x)
    q = graph.tensors[graph.inputs[0]].quant

    def batch(xs: np.ndarray):  # int8 NHWC -> the dequantized float input, NCHW
        return torch.tensor(((xs.astype(np.float32) - q.zp) * np.float32(q.s)).transpose(0, 3, 1, 2).copy())

    model = torch_twin(graph)
    layers = [k for k, n in enumerate(graph.nodes) if n.op in ("conv2d", "fully_connected")]
    trained, head = set(layers[-run.last_k:]), layers[-1]
    groups: dict[str, list] = {"backbone": [], "head": []}
    for name, p in model.params.items():
        k = int(name[1:])
        p.requires_grad_(k in trained)
        if k in trained:
            groups["head" if k == head else "backbone"].append(p)
    params = [{"params": groups["backbone"], "lr": run.lr}, {"params": groups["head"], "lr": run.head_lr}]
    batch_size = 1 if run.optimizer == "sgd" else 32
    opt = torch.optim.SGD(params) if run.optimizer == "sgd" else torch.optim.Adam(params)
    rng = np.random.default_rng(SEED)
    order = np.concatenate([rng.permutation(len(train.y)) for _ in range(run.epochs)])
    steps = len(order) // batch_size
    schedule = Schedule.over(steps, 0.0) if run.optimizer == "sgd" else None
    base = [g["lr"] for g in opt.param_groups]
    y = torch.tensor(train.y)
    for step in range(steps):
        rows = np.sort(order[step * batch_size: (step + 1) * batch_size])
        if schedule is not None:
            for g, lr in zip(opt.param_groups, base):
                g["lr"] = lr * float(schedule.factor(step))
        opt.zero_grad()
        F.cross_entropy(model(batch(x[rows])), y[rows]).backward()
        opt.step()
    with torch.no_grad():
        pred = np.concatenate([model(batch(x_test[i: i + 500])).argmax(1).numpy() for i in range(0, len(x_test), 500)])
    return (pred == test.y).tolist()


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    d = a.astype(np.float64) - b.astype(np.float64)
    return float(d.mean()), 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if not MODEL.is_file():
        print(f"transfer_ceiling: skipped: {MODEL} not found (../shared is not beside the project)")
        return
    t0 = time.time()
    todo = runs()
    with ProcessPoolExecutor(args.workers) as pool:
        correct = dict(zip(todo, (np.array(c) for c in pool.map(test_correct, todo))))
    rows = []
    for run, c in correct.items():
        base = correct[Run(run.data, 1, run.optimizer, run.epochs, run.lr, run.head_lr)]
        acc = float(c.mean())
        gain, ci = paired(c, base)
        rows.append({**asdict(run), "name": run.name, "test_accuracy": acc,
                     "ci95": 1.96 * math.sqrt(acc * (1 - acc) / len(c)), "gain": gain, "gain_ci95": ci})
    result = {"command": "python benchmarks/transfer_ceiling.py", "model": os.path.relpath(MODEL, ROOT),
              "seconds": round(time.time() - t0, 1), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "transfer_ceiling.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "transfer_ceiling.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    lines = ["# Fashion-MNIST ceiling: fp32, unlimited memory, which optimizer", "",
             f"`{r['command']}` ({r['seconds'] / 60:.0f} min, {r['machine']}). Model `{r['model']}` + a new "
             f"{HEAD}-class head, fp32 twin in PyTorch; scored on the official 10,000 test images; every lr fixed "
             "before any run (see the script's docstring).", "",
             "| configuration | test accuracy (95 % CI) | vs classifier-only, same optimizer and data (paired) |",
             "|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['name']} | {100 * row['test_accuracy']:.1f} ± {100 * row['ci95']:.1f} | "
                     f"{100 * row['gain']:+.1f} ± {100 * row['gain_ci95']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
