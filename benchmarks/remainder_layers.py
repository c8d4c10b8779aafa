"""Per-layer remainder bits: which trained layers need the sub-LSB remainders, and whether giving some layers none
buys a deeper plan in the same memory (issue 28), on the Fashion-MNIST study's 256 KB plan.

    .venv/bin/python benchmarks/remainder_layers.py [--workers 2] [--seeds 3] [--train-images 5000]

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
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
from common import paired  # noqa: E402
from transfer_study import DEFAULT_RECIPE, Task, rel, study_of, validation_correct  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--train-images", type=int, default=5000)
    args = ap.parse_args()
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
    result = {"command": "python benchmarks/remainder_layers.py " + " ".join(sys.argv[1:]),
              "train": study.train, "n_fit": int(len(task.fit)), "n_val": int(len(task.val)), "steps": steps,
              "seeds": args.seeds, "rows": rows, "seconds": round(time.time() - t0, 1),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    out = ROOT / "benchmarks" / "results"
    (out / "remainder_layers.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "remainder_layers.md").write_text(markdown(result))
    print(f"wrote {rel(out / 'remainder_layers.md')} ({result['seconds']:.0f} s)")


def markdown(r: dict) -> str:
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
    main()
