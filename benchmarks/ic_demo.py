"""Image-classification demo (MLPerf Tiny IC): ResNet-8 pretrained on CIFAR-10 learns Fashion-MNIST on the device.

    .venv/bin/python benchmarks/ic_demo.py [--train-images 1500] [--test-images 0]

The MLPerf Tiny ResNet-8 (``../shared/models/pretrainedResnet_quant.tflite``, int8, 32x32x3, raw pixels in) gets a
new 10-class head (``--new-head 10 --seed 0``) and learns Fashion-MNIST (Debian package ``dataset-fashion-mnist``):
28x28 gray images resized bilinearly to 32x32 and repeated into the three channels (``tinytrain.data``, derived from
the model's input shape and quantization). A stratified subset of ``--train-images`` of the 60,000 training images
(the whole set does not fit the time budget of a demo) is split 70 / 30 into fit and validation rows (stratified,
split seed 0); every choice (each row's lr, the searched plan, the fp32 twin's lr) is made on the validation rows.
Each row is then trained on the whole training subset and scored once on the official 10,000 test images.

Rows: classifier-only, bias-only, last-k:2, last-k:4 and the deepest last-k:N whose training step fits 256 KB (peak
SRAM from ``tinytrain compile``'s planner, every preset's in the json), a plan searched by ``tinytrain plan --sram
256k`` (short fine-tunes, a time limit), and the fp32 twin (PyTorch, every parameter, Adam on batches of 32,
cosine: common/fp32.py, 5 epochs: the reference a device does not have). The int8 rows run the emitted C
(``--engine c``: the device's arithmetic: batch-1 SGD, QAS, stochastic rounding), 2 epochs.
Accuracies with 95 % intervals; differences paired per test image. Writes benchmarks/results/ic_demo.{json,md,png};
work files in build/ic_demo.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)

from common import accuracy_ci as ci, paired  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "pretrainedResnet_quant.tflite"
LRS = (0.01, 0.03)  # each int8 row's lr is the better of these on the validation rows
EPOCHS = 2
BUDGET = 256 * 1024
FP32_LRS = (3e-4, 1e-3)
FP32_EPOCHS = 5


@dataclass(frozen=True)
class Task:
    graph: object
    x: np.ndarray  # the training subset as the model's int8 inputs
    y: np.ndarray
    fit: np.ndarray
    val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    train_spec: str


def load_task(train_images: int, test_images: int) -> Task:
    from tinytrain.api import load_model
    from tinytrain.data import load_dataset, model_inputs
    from tinytrain.splits import stratified_split

    graph = load_model(MODEL, new_head=10, seed=0)
    train_spec = f"fashion-mnist:{train_images}"
    train = load_dataset(train_spec)
    test = load_dataset("fashion-mnist:test" + (f":{test_images}" if test_images else ""))
    fit, val = stratified_split(train.y, 0.3, 0)
    return Task(graph, model_inputs(graph, train.x), train.y, fit, val, model_inputs(graph, test.x), test.y,
                train_spec)


def train_predict(graph, plan_json: dict, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
                  x_eval: np.ndarray) -> np.ndarray:
    """Train ``plan_json`` on ``rows`` for EPOCHS epochs with the emitted C (batch 1, seed 0); predicted classes of
    ``x_eval`` by the C forward with the trained state."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.engines.order import sample_order
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan
    from tinytrain.training.train_graph import build_training_graph

    trainer = CTrainer(build_training_graph(graph, parse_plan(plan_json), UpdateConfig(seed=0)))
    trainer.train(x[rows], y[rows], sample_order(np.arange(len(rows)), EPOCHS * len(rows), 0))
    return trainer.predict(x_eval).argmax(axis=1)


def with_lr(plan_json: dict, lr: float) -> dict:
    return {**plan_json, "lr": lr, "bias_lr": lr, "head_lr": lr}


def choose_lr(task: Task, plan_json: dict) -> tuple[float, dict[str, float]]:
    """The lr of LRS with the best validation accuracy (fit rows -> validation rows)."""
    val = {}
    for lr in LRS:
        pred = train_predict(task.graph, with_lr(plan_json, lr), task.x, task.y, task.fit, task.x[task.val])
        val[f"{lr:g}"] = float((pred == task.y[task.val]).mean())
    best = max(LRS, key=lambda lr: val[f"{lr:g}"])
    return best, val


def peak_sram(graph, plan_json: dict) -> int:
    from tinytrain.api import compile as compile_step
    from tinytrain.errors import BudgetError

    try:
        return int(compile_step(graph, sram="64m", flash="64m", plan=plan_json).report.peak_sram_bytes)
    except BudgetError:
        return 1 << 40


def preset_rows(task: Task) -> tuple[dict[str, dict], dict[str, int]]:
    """classifier-only, bias-only, last-k:2, last-k:4 and the deepest last-k:N whose step fits BUDGET (the rows:
    a demo's time); the peak SRAM of every preset."""
    from tinytrain.training.sparse import layers, preset

    specs = {"classifier-only": "last-k:1", "bias-only": "bias-only"}
    specs |= {f"last-k:{n}": f"last-k:{n}" for n in range(2, len(layers(task.graph)) + 1)}
    plans = {name: preset(spec, task.graph).to_json() for name, spec in specs.items()}
    peaks = {name: peak_sram(task.graph, plan) for name, plan in plans.items()}
    deepest = max(int(n.split(":")[1]) for n in plans if n.startswith("last-k") and peaks[n] <= BUDGET)
    keep = ["classifier-only", "bias-only"] + [f"last-k:{n}" for n in sorted({2, 4, deepest}) if n <= deepest]
    return {n: {"plan": plans[n], "peak_sram_bytes": peaks[n]} for n in keep if peaks[n] <= BUDGET}, peaks


def searched_plan(task: Task, lr: float, build: Path, log: list) -> dict:
    """``tinytrain plan`` at 256 KB on the training subset (its own validation split: the same 30 %), a demo's
    budget of time: 500-step contribution fine-tunes, 3 minutes of them, finalists trained for one epoch."""
    out = build / "searched-256k.json"
    argv = ["plan", os.path.relpath(MODEL, ROOT), "--data", task.train_spec, "--new-head", "10", "--seed", "0",
            "--sram", "256k", "--val", "0.3", "--lr", f"{lr:g}", "--epochs", "1", "--ft-steps", "500",
            "--time-limit", "180", "--proposals", "2", "--workers", "1",
            "--cache", os.path.relpath(build / "cache", ROOT),
            "--no-progress", "--json", "-o", os.path.relpath(out, ROOT)]
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "tinytrain.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    log.append({"command": shlex.join(["tinytrain", *argv]), "exit": r.returncode, "seconds": round(time.time() - t0)})
    if r.returncode != 0:
        raise SystemExit(f"tinytrain plan failed: {r.stderr.strip()[-2000:]}")
    search = json.loads(out.with_name(out.stem + ".search.json").read_text())
    return {"plan": json.loads(out.read_text()), "chosen": search["chosen"], "seconds": search.get("seconds")}


def fp32_twin(task: Task) -> dict:
    """Every parameter of the fp32 twin, Adam (batch 32, cosine), FP32_EPOCHS; lr chosen on the validation rows."""
    from common.fp32 import Fp32Recipe, fit_predict

    n_layers = sum(n.op in ("conv2d", "fully_connected") for n in task.graph.nodes)
    recipes = {lr: Fp32Recipe(n_layers, "adam", FP32_EPOCHS, lr, lr) for lr in FP32_LRS}
    val = {f"{lr:g}": float((fit_predict(task.graph, task.x, task.y, task.fit, task.x[task.val], r, 0)
                             == task.y[task.val]).mean()) for lr, r in recipes.items()}
    best = max(FP32_LRS, key=lambda lr: val[f"{lr:g}"])
    pred = fit_predict(task.graph, task.x, task.y, np.arange(len(task.y)), task.x_test, recipes[best], 0)
    return {"recipe": recipes[best].describe(), "validation": val, "correct": pred == task.y_test}


def run_rows(task: Task, rows: dict[str, dict]) -> None:
    """Each int8 row: lr chosen on the validation rows, trained on the whole subset, scored on the test set."""
    everything = np.arange(len(task.y))
    for name, row in rows.items():
        t0 = time.time()
        if "lr" not in row:
            row["lr"], row["validation"] = choose_lr(task, row["plan"])
        row["plan"] = with_lr(row["plan"], row["lr"])
        row["correct"] = train_predict(task.graph, row["plan"], task.x, task.y, everything, task.x_test) == task.y_test
        row["seconds"] = round(time.time() - t0, 1)
        print(f"  {name}: lr {row['lr']:g}, test {100 * row['correct'].mean():.1f} % ({row['seconds']:.0f} s)",
              flush=True)


def untrained_head(task: Task) -> np.ndarray:
    from tinytrain.engines.host_c import predict

    return predict(task.graph, task.x_test).argmax(axis=1) == task.y_test


def summarize(rows: dict[str, dict], fp32: dict, before: np.ndarray) -> dict:
    """Accuracy +- 95 % CI per row, paired differences against classifier-only, searched against the best preset."""
    ref = rows["classifier-only"]["correct"]
    table = {"untrained new head (before)": {"correct": before}, **rows, "fp32 twin, every parameter": fp32}
    out = {}
    for name, row in table.items():
        acc, half = ci(row["correct"])
        d, dhalf = paired(row["correct"], ref)
        out[name] = {"accuracy": acc, "ci95": half, "vs_classifier_only": d, "vs_classifier_only_ci95": dhalf,
                     **{k: v for k, v in row.items() if k != "correct"}}
    presets = [n for n in rows if n != "searched 256k"]
    best = max(presets, key=lambda n: rows[n]["correct"].mean())
    d, dhalf = paired(rows["searched 256k"]["correct"], rows[best]["correct"])
    return {"rows": out, "searched_vs_best_preset": {"best_preset": best, "difference": d, "ci95": dhalf}}


def figure(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["rows"])
    acc = [100 * summary["rows"][n]["accuracy"] for n in names]
    err = [100 * summary["rows"][n]["ci95"] for n in names]
    colors = ["#999999"] + ["#4c72b0"] * (len(names) - 3) + ["#dd8452", "#55a868"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.bar(range(len(names)), acc, yerr=err, color=colors, capsize=3)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("test accuracy, % (10,000 images, 95 % CI)")
    ax.set_title("ResNet-8 (CIFAR-10) -> Fashion-MNIST 32x32 RGB: before and after on-device training")
    for i, a in enumerate(acc):
        ax.text(i, a + 1.5, f"{a:.1f}", ha="center", fontsize=7)
    ax.set_ylim(0, 100)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(r: dict) -> str:
    lines = [
        "# IC demo: MLPerf Tiny ResNet-8 (CIFAR-10) learns Fashion-MNIST on the device",
        "",
        f"`{r['command']}` ({r['seconds'] / 60:.1f} min, one core). Model `{r['model']}` + a new 10-class head "
        f"(seed 0). Training data `{r['train']}`: a stratified subset of {r['n_train']} of the 60,000 training "
        "images (a demo's time budget; the whole set would score higher), 28x28 gray -> 32x32 bilinear, repeated "
        f"into R, G, B, raw pixels (the model's input scale is 1). Test: {r['n_test']} official test images, looked "
        "at once per row. Each int8 row's lr (of " + ", ".join(f"{v:g}" for v in LRS) + ") and the fp32 twin's lr "
        f"were chosen on a 30 % validation split of the training subset; int8 rows: {EPOCHS} epochs of batch-1 SGD "
        "with QAS and stochastic rounding in the emitted C (`--engine c`), constant lr.",
        "",
        "![before and after](ic_demo.png)",
        "",
        "| row | test accuracy (95 % CI) | vs classifier-only (paired, 95 % CI) | lr | peak SRAM |",
        "|---|---|---|---|---|",
    ]
    for name, row in r["rows"].items():
        peak = f"{row['peak_sram_bytes'] / 1024:.1f} KB" if "peak_sram_bytes" in row else "n/a"
        lr = f"{row['lr']:g}" if "lr" in row else ("n/a" if "recipe" not in row else "Adam")
        lines.append(f"| {name} | {100 * row['accuracy']:.1f} ± {100 * row['ci95']:.1f} | "
                     f"{100 * row['vs_classifier_only']:+.1f} ± {100 * row['vs_classifier_only_ci95']:.1f} | {lr} | "
                     f"{peak} |")
    lines += ["", "Peak SRAM of each preset's training step (rows above: those that fit 256 KB, a demo's selection): "
              + ", ".join(f"{k} {v / 1024:.0f} KB" for k, v in r["preset_peaks"].items()) + "."]
    s = r["searched_vs_best_preset"]
    fp32 = r["rows"]["fp32 twin, every parameter"]
    lines += ["", f"Searched plan (`tinytrain plan --sram 256k`, chose `{r['rows']['searched 256k']['chosen']}`) minus "
              f"the best preset on the test set ({s['best_preset']}): {100 * s['difference']:+.1f} ± "
              f"{100 * s['ci95']:.1f} points (paired).", "",
              f"fp32 twin: {fp32['recipe']}; validation accuracy by Adam lr: "
              + ", ".join(f"{lr} {100 * a:.1f} %" for lr, a in fp32["validation"].items()) + ".", "",
              "Commands run by the script:", "", "```"] + [c["command"] for c in r["commands"]] + ["```", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-images", type=int, default=1500)
    ap.add_argument("--test-images", type=int, default=0, help="a test subset, for a quick check only (0: all)")
    args = ap.parse_args()
    from tinytrain.data import FASHION_MNIST_DIR

    if not MODEL.exists() or not FASHION_MNIST_DIR.is_dir():
        raise SystemExit(f"needs {MODEL} and {FASHION_MNIST_DIR} (apt-get install dataset-fashion-mnist)")
    t_start, log = time.time(), []
    build = ROOT / "build" / "ic_demo"
    build.mkdir(parents=True, exist_ok=True)
    task = load_task(args.train_images, args.test_images)
    print(f"data: {len(task.fit)} fit / {len(task.val)} validation / {len(task.y_test)} test images", flush=True)
    rows, peaks = preset_rows(task)
    run_rows(task, rows)
    lr = max((n for n in rows if n.startswith("last-k")), key=lambda n: max(rows[n]["validation"].values()))
    found = searched_plan(task, rows[lr]["lr"], build, log)
    peak = peak_sram(task.graph, found["plan"])
    rows["searched 256k"] = {**found, "lr": found["plan"]["lr"], "peak_sram_bytes": peak}
    run_rows(task, {"searched 256k": rows["searched 256k"]})
    fp32 = fp32_twin(task)
    print(f"  fp32 twin: {100 * fp32['correct'].mean():.1f} %", flush=True)
    summary = summarize(rows, fp32, untrained_head(task))
    command = "python benchmarks/ic_demo.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v != ap.get_default(k))
    result = {"command": command, "model": os.path.relpath(MODEL, ROOT), "train": task.train_spec,
              "n_train": int(len(task.y)), "n_fit": int(len(task.fit)), "n_val": int(len(task.val)),
              "n_test": int(len(task.y_test)), "epochs": EPOCHS, "lrs": LRS, "preset_peaks": peaks, **summary,
              "commands": log,
              "seconds": round(time.time() - t_start, 1)}
    out = ROOT / "benchmarks" / "results"
    figure(summary, out / "ic_demo.png")
    (out / "ic_demo.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "ic_demo.md").write_text(markdown(result))
    print(f"wrote benchmarks/results/ic_demo.md ({result['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
