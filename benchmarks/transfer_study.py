"""Transfer study on a shifted domain: Fashion-MNIST on ImageNet MobileNetV1-0.25, searched plans against presets.

    .venv/bin/python benchmarks/transfer_study.py --fresh [--workers 2] [--train-images 5000] [--choose-recipe]
    .venv/bin/python benchmarks/transfer_study.py --task vww --fresh [--workers 2]

(``--test-images N`` and a small ``--train-images`` make a quick check, not the study.)

``--task vww`` is the same study on the 800 Visual Wake Words images of ../shared/data/vww96 (person / no
person, 96x96) with a new 2-class head: a stratified quarter (200 images, ``--held-out 0.25 --split-seed 0``, the
rows ``train`` and ``plan`` leave out) is the test set, the other 600 the training images, of which 30 % are the
validation split; the recipe (``choose_recipe``) and fp32 full fine-tuning's lr are always chosen on it (the
defaults were chosen on Fashion-MNIST). Writes vww_study.{json,md} and works in
build/vww_study.

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared/models) with a new 10-class head
(``--new-head 10 --seed 0``) on Fashion-MNIST (Debian package ``dataset-fashion-mnist``, read in place): a
stratified subset of ``--train-images`` of the 60,000 training images (``fashion-mnist:N``; the whole set does
not fit the time), the official 10,000 test images (``fashion-mnist:test``) for every reported number. Nothing is
chosen on the test images: the plans (and with ``--choose-recipe`` the recipe) are chosen on a validation split
(30 %, stratified, split seed 0) of the training subset. Stages:

1. recipe: the 4-bit remainder default (``DEFAULT_RECIPE``: lr 0.003 for backbone weights and biases, head lr 0.01,
   cosine, 6 epochs, batch-1 SGD, QAS; benchmarks/results/remainder_study.md). With ``--choose-recipe``, chosen on
   the validation split instead: the lr schedule first (constant, cosine, warm-up + cosine), then under it the
   head's lr (on classifier-only), on last-k:5 one lr for all against a separate backbone lr, a separate bias lr,
   and 1-3 epochs, each kept when it beats the simpler choice by more than one standard error of the difference
   (``choose_recipe``), and classifier-only's own best lr (its row is trained at it: the fair baseline);
2. ``tinytrain plan`` at 256 KB and at 128 KB with that recipe: contributions, gain model, finalists (remainder
   bits 0 / 4 / 8 traded) ranked by successive halving (the first rung at three quarters of the recipe, the last
   rung's finalists trained with ``--final-seeds`` 3 seeds and ranked by their mean), every rung under the
   recipe's cosine over its own steps, then every finalist trained at full length (the rank check: each rung's
   Spearman with it, the noise floor at full length; the 128 KB search re-uses every finalist run of the 256 KB
   one from the shared cache);
3. every row trained on the whole training subset with ``tinytrain train --engine c`` (the emitted C: the device's
   arithmetic), scored on the test set by the emitted C forward; peak SRAM from ``tinytrain compile``'s
   report.json. Rows: classifier-only, bias-only (the biases of the deepest last k that fits), every last-k:N that
   fits 256 KB (4-bit remainders), the sparse presets, the searched plans (a searched plan equal to a preset is
   that preset's run), the searched 256 KB plan without QAS (at its own best lr on the validation split), the
   stronger backbone MobileNetV1-0.5 at ``--input-size 128`` on every preset that fits 256 KB (``wide_rows``; not
   searched), and three fp32 rows (an fp32 twin of the graph, common/fp32.py), trained
   beside the device rows (``Fp32Rows``): the twin trained the device's way (batch-1 SGD, the recipe's lrs,
   schedule and epochs) on classifier-only and on the deepest last-k:N that fits 256 KB, each paired against its
   device row (device = fp32), and full fine-tuning (every parameter, Adam on batches of 32, cosine, 10 epochs, at
   the lr earlier runs chose on the validation split, ``--choose-fp32-lr`` to choose again): the ceiling.

Wall time (2 idle cores, 2 workers, an empty $TINYTRAIN_CACHE: every C build included): 51 min (2026-11-28): the
searches 21.4 min (3 seeds per last-rung finalist; the frozen features by the C forward), the device rows, the
no-QAS lr choice and the fp32 rows together 30 min. An earlier run took
72 min with half-length first rungs, the fp32 rows one at a time after the device rows and ``train --engine c``
running the frozen layers at every step; it now computes them once per image (api._training_step,
bit-identical: every row of that run has the same accuracy and paired difference in this one).

Accuracies come with 95 % intervals; differences are paired per test image (mean of d_i in {-1, 0, 1} +- 1.96
standard errors). Writes benchmarks/results/transfer_study.json and .md; work files in build/transfer_study.
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
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
from common import accuracy_ci as ci, paired  # noqa: E402
from common.study_fp32 import Fp32Rows  # noqa: E402
from common.study_report import markdown  # noqa: E402



@dataclass(frozen=True)
class Study:
    task: str  # "fashion-mnist" or "vww" (TASKS)
    model: str  # relative to the project root
    train: str  # the training data spec (a stratified subset of Fashion-MNIST's training images, or a file)
    test: str | None  # the test data spec; None: the held-out part of ``train``
    held_out: float | None  # with test None: the stratified fraction of ``train`` held out for testing (seed 0)
    head: int
    seed: int
    val: float  # validation fraction of the training subset (stratified, split seed 0)
    ft_steps: int  # steps of each contribution fine-tune
    workers: int
    build: Path
    final_seeds: int = 3  # seeds of each last-rung finalist at full length (plan --final-seeds)

    @property
    def model_path(self) -> Path:
        return ROOT / self.model

    def data_args(self) -> list[str]:
        """The training data arguments of train and plan (the held-out test part never reaches them)."""
        held = ["--held-out", f"{self.held_out:g}", "--split-seed", "0"] if self.test is None else []
        return ["--data", self.train, *held]


@dataclass(frozen=True)
class Recipe:
    lr: float
    bias_lr: float
    head_lr: float
    epochs: int
    schedule: tuple[str, float] = ("constant", 0.0)  # (--lr-schedule, --warmup)

    def flags(self) -> list[str]:
        return ["--lr", f"{self.lr:g}", "--bias-lr", f"{self.bias_lr:g}", "--head-lr", f"{self.head_lr:g}",
                *self.schedule_flags()]

    def schedule_flags(self) -> list[str]:
        kind, warmup = self.schedule  # always given: plan's default is cosine, train's the plan file's own
        return ["--lr-schedule", kind] + (["--warmup", f"{warmup:g}"] if warmup else [])


# the 4-bit remainder default recipe (benchmarks/results/remainder_study.md: last-k:14 +3.0 over classifier-only)
DEFAULT_RECIPE = Recipe(0.003, 0.003, 0.01, 6, ("cosine", 0.0))


def default_recipe() -> tuple[Recipe, dict]:
    r = DEFAULT_RECIPE
    return r, {"source": "the 4-bit remainder default recipe (benchmarks/results/remainder_study.md), not re-chosen",
               "chosen": {"lr": r.lr, "bias_lr": r.bias_lr, "head_lr": r.head_lr, "epochs": r.epochs,
                          "schedule": r.schedule[0], "warmup": r.schedule[1], "classifier_only_lr": r.head_lr}}


# ---- running tinytrain commands ---------------------------------------------------------------------------------

def run(study: Study, argv: list[str], log: list) -> dict:
    """Run one tinytrain command from the project root; its --json object (exit on failure)."""
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "tinytrain.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    log.append({"command": shlex.join(["tinytrain", *argv]), "exit": r.returncode,
                "seconds": round(time.time() - t0, 1)})
    if r.returncode != 0:
        raise SystemExit(f"tinytrain {shlex.join(argv)} failed: {r.stderr.strip()[-2000:]}")
    lines = r.stdout.strip().splitlines()
    return json.loads(lines[-1]) if "--json" in argv and lines else {}


def rel(path: Path) -> str:
    return os.path.relpath(path, ROOT)


def write_plan(study: Study, name: str, plan: dict) -> str:
    path = study.build / "plans" / f"{file_name(name)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan) + "\n")
    return rel(path)


def file_name(name: str) -> str:
    return name.replace(" ", "_").replace(":", "-").replace("@", "at")


def peak_sram(study: Study, plan_file: str, name: str, log: list, model: list[str]) -> int:
    """compile's peak of a plan; ``model``: the model argument and its flags (--input-size)."""
    out = study.build / "compile" / file_name(name)
    run(study, ["compile", *model, "--new-head", str(study.head), "--sram", "4m", "--flash", "4m",
                "--plan", plan_file, "-o", rel(out)], log)
    return int(json.loads((out / "report.json").read_text())["peak_sram_bytes"])


# ---- data and graph (in process: validation fine-tunes, test predictions) ---------------------------------------

class Task:
    """The graph with its new head, the training subset (fit / validation rows) and the test set, as int8 inputs
    (``model``: the study's, or another model at ``input_size``)."""

    def __init__(self, study: Study, model: str | None = None, input_size: int | None = None) -> None:
        import tinytrain
        from tinytrain.data import load_dataset, model_inputs
        from tinytrain.splits import held_out_split, stratified_split

        self.graph = tinytrain.load_model(ROOT / (model or study.model), new_head=study.head, seed=study.seed,
                                          input_size=input_size)
        if study.test is None:  # a file's held-out part, the rows train --held-out and plan --held-out leave out
            data = load_dataset(ROOT / study.train)
            rows, test_rows = held_out_split(data.y, study.held_out, 0)
            train, test = data.subset(rows), data.subset(test_rows)
        else:
            train, test = load_dataset(study.train), load_dataset(study.test)
        self.x, self.y = model_inputs(self.graph, train.x), train.y
        self.x_test, self.y_test = model_inputs(self.graph, test.x), test.y
        self.fit, self.val = stratified_split(self.y, study.val, 0)
        self.job: dict | None = None  # the validation fine-tunes' inputs (search.measure.prepare_job), built once

    def test_correct(self, state_file: str) -> np.ndarray:
        """Per test image: does the emitted C forward with the trained state predict its label?"""
        from tinytrain.state_file import load_state
        from tinytrain.engines.host_c import predict
        from tinytrain.simulator import with_state

        g = with_state(self.graph, load_state(str(ROOT / state_file), self.graph))
        return predict(g, self.x_test).argmax(axis=1) == self.y_test


def _validation_correct(plan_json: dict, steps: int, schedule: tuple[str, float], qas: bool,
                        seed: int | None = None) -> np.ndarray:
    """Per validation row: is it predicted right by a plan trained ``steps`` batch-1 steps on the fit rows (the
    search's cut model, C engine)? ``schedule``: (kind, warm-up fraction) of the lr schedule over those steps, as
    train --lr-schedule; ``seed``: the sample order's and the rounding's (None: the study's)."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.engines.cut import suffix_model
    from tinytrain.engines.order import sample_order
    from tinytrain.search.measure import _JOB
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan, with_lr_schedule
    from tinytrain.training.train_graph import build_training_graph

    job = _JOB
    seed = job["finetune"].seed if seed is None else seed
    g, p, cut = suffix_model(job["graph"], parse_plan(plan_json))
    x = job["features"][cut] if cut is not None else job["x"]
    n = len(job["train_rows"])
    order = sample_order(np.arange(n), steps, seed)
    p = with_lr_schedule(p, schedule[0], schedule[1], steps)
    trainer = CTrainer(build_training_graph(g, p, UpdateConfig(qas=qas, seed=seed)))
    trainer.train(x[:n], job["y_train"], order)
    return trainer.predict(x[n:]).argmax(axis=1) == job["y_val"]


def validation_correct(task: Task, study: Study, runs: dict[str, tuple], log: list) -> dict[str, np.ndarray]:
    """name -> (plan json, steps, schedule, qas[, seed]): per validation row, right or not; ``study.workers``
    processes."""
    import multiprocessing as mp

    from tinytrain.search.measure import FineTune, add_features, prepare_job, set_job
    from tinytrain.training.sparse import parse_plan

    t0 = time.time()
    plans = [parse_plan(r[0]) for r in runs.values()]
    if task.job is None:
        task.job = prepare_job(task.graph, task.x, task.y, task.fit, task.val, FineTune(seed=study.seed), plans)
    add_features(task.job, plans)  # the frozen features of new cuts only
    set_job(task.job)
    with mp.get_context("fork").Pool(study.workers) as pool:
        pending = {name: pool.apply_async(_validation_correct, r) for name, r in runs.items()}
        out = {name: res.get() for name, res in pending.items()}
    log.append({"validation_runs": sorted(runs), "seconds": round(time.time() - t0, 1)})
    return out


def validation_runs(task: Task, study: Study, runs: dict[str, tuple], log: list) -> dict[str, float]:
    """name -> (plan json, steps, schedule, qas[, seed]): validation accuracies (``validation_correct``)."""
    return {name: float(c.mean()) for name, c in validation_correct(task, study, runs, log).items()}


# ---- stage 1: the recipe ----------------------------------------------------------------------------------------

CONSTANT = ("constant", 0.0)
SCHEDULES = {"constant": CONSTANT, "cosine": ("cosine", 0.0), "warm-up 5 % + cosine": ("cosine", 0.05)}


def choose_recipe(task: Task, study: Study, log: list) -> tuple[Recipe, dict]:
    """Each element measured on the validation split before it is kept, the schedule first (it changes which lrs
    are best): constant lrs against cosine and warm-up + cosine (classifier-only and last-k:5 at lr 0.003, the mean
    of the two), then under it the head's lr (on classifier-only: also that row's own lr), on last-k:5 (backbone
    weights, biases and head: a plan of the depth budgets allow) one lr for all against a separate backbone lr, a
    separate bias lr, and the epochs. An element is kept when it beats the simpler choice by more than one standard
    error of a difference of two validation accuracies."""
    from tinytrain.training.sparse import preset

    n_fit, n_val = len(task.fit), len(task.val)
    plans = {"classifier-only": preset("last-k:1", task.graph).to_json(),
             "last-k:5": preset("last-k:5", task.graph).to_json()}
    measured: dict[tuple, float] = {}

    def measure(keys: list[tuple]) -> dict[tuple, float]:
        """(plan, lr, bias lr, head lr, epochs, schedule name) -> validation accuracy, each run once."""
        todo = {str(k): ({**plans[k[0]], "lr": k[1], "bias_lr": k[2], "head_lr": k[3]}, k[4] * n_fit,
                         SCHEDULES[k[5]], True) for k in keys if k not in measured}
        out = validation_runs(task, study, todo, log) if todo else {}
        measured.update({k: out[str(k)] for k in keys if str(k) in out})
        return {k: measured[k] for k in keys}

    def named(acc: dict[tuple, float]) -> dict[str, float]:
        return {f"{k[0]}, lr {k[1]:g}, bias lr {k[2]:g}, head lr {k[3]:g}, {k[4]} epochs, {k[5]}": v
                for k, v in acc.items()}

    def one_lr(p: str, lr: float, sched: str, epochs: int = 2) -> tuple:
        return (p, lr, lr, lr, epochs, sched)

    record: dict = {"n_fit": int(n_fit), "n_val": int(n_val)}
    grid = (0.001, 0.003, 0.01, 0.03)
    acc = measure([one_lr(p, 0.003, s) for s in SCHEDULES for p in plans])
    record["schedule"] = named(acc)
    base = acc[one_lr("last-k:5", 0.003, "constant")]
    se = math.sqrt(2 * base * (1 - base) / n_val)  # standard error of a difference of two validation accuracies
    record["difference_se"] = se
    mean = {s: np.mean([acc[one_lr(p, 0.003, s)] for p in plans]) for s in SCHEDULES}
    top = max([s for s in SCHEDULES if s != "constant"], key=mean.get)
    sched = top if mean[top] > mean["constant"] + se else "constant"
    record["schedule_note"] = (f"{top} vs constant (mean of the two plans): {100 * (mean[top] - mean['constant']):+.1f}"
                               f" points (one standard error of the difference: {100 * se:.1f}): "
                               + ("kept." if sched == top else "not kept."))

    acc = measure([one_lr("classifier-only", v, sched) for v in (*grid, 0.1)])
    record["head_lr"] = named(acc)
    head_lr = max(acc, key=acc.get)[1]
    acc = measure([one_lr("last-k:5", v, sched) for v in grid])
    record["one_lr"] = named(acc)
    single = max(acc, key=acc.get)
    lr, base = single[1], acc[single]
    acc = measure([("last-k:5", v, v, head_lr, 2, sched) for v in grid])
    record["separate_head_lr"] = named(acc)
    sep = max(acc, key=acc.get)
    if acc[sep] > base + se:
        lr, base = sep[1], acc[sep]
        chosen_head = head_lr
    else:
        chosen_head = lr
    acc = measure([("last-k:5", lr, lr * f, chosen_head, 2, sched) for f in (3, 10)])
    record["separate_bias_lr"] = named(acc)
    bias = max(acc, key=acc.get)
    bias_lr = bias[2] if acc[bias] > base + se else lr
    acc = measure([("last-k:5", lr, bias_lr, chosen_head, e, sched) for e in (1, 2, 3)])
    record["epochs"] = named(acc)
    # fewer epochs unless more are better by a standard error (each epoch is a pass over the data on the device)
    top_acc = max(acc.values())
    epochs = min(k[4] for k, v in acc.items() if v >= top_acc - se)
    recipe = Recipe(lr, bias_lr, chosen_head, epochs, SCHEDULES[sched])
    # classifier-only's own best lr with the recipe's schedule and epochs: the fair baseline row
    acc = measure([one_lr("classifier-only", v, sched, epochs) for v in (*grid, 0.1)])
    record["classifier_only_lr"] = named(acc)
    classifier_lr = max(acc, key=acc.get)[1]
    record["chosen"] = {"lr": lr, "bias_lr": bias_lr, "head_lr": chosen_head, "epochs": epochs,
                        "schedule": recipe.schedule[0], "warmup": recipe.schedule[1], "classifier_only_lr": classifier_lr}
    return recipe, record


# ---- stage 2 and 3: search, rows ----------------------------------------------------------------------------------

def search(study: Study, recipe: Recipe, budget: str, log: list) -> dict:
    out = study.build / "plans" / f"searched-{budget}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run(study, ["plan", study.model, *study.data_args(), "--new-head", str(study.head), "--seed",
                str(study.seed), "--sram", budget, "--val", str(study.val), *recipe.flags(), "--epochs",
                str(recipe.epochs), "--ft-steps", str(study.ft_steps), "--final-seeds", str(study.final_seeds),
                "--workers", str(study.workers),
                "--cache", rel(study.build / "cache"), "--no-progress", "--json", "-o", rel(out)], log)
    return {"plan_file": rel(out), **json.loads(out.with_name(out.stem + ".search.json").read_text())}


WIDE_MODEL = "../shared/models/mobilenet_v1_0.5_160_quant.tflite"  # the stronger backbone, run at 128x128
WIDE_SIZE = 128


def wide_rows(study: Study, recipe: Recipe, classifier_lr: float, budget: int = 256 * 1024) -> dict[str, dict]:
    """MobileNetV1-0.5 (ImageNet, 160x160) at ``--input-size 128``: the presets of the plan search that fit
    ``budget`` (candidates.presets and sparse_presets under compile's peak; the recipe's lrs, classifier-only
    at ``classifier_lr`` as the study's), as rows (not searched: a second search does not fit the study's hour)."""
    import tinytrain
    from tinytrain.search.candidates import presets, sparse_presets
    from tinytrain.search.memory import MemoryOracle
    from tinytrain.search.space import Space

    graph = tinytrain.load_model(ROOT / WIDE_MODEL, new_head=study.head, seed=study.seed, input_size=WIDE_SIZE)
    space, mem = Space.of(graph), MemoryOracle(graph)

    def plan(choice):
        lrs = (classifier_lr,) * 3 if choice == space.last_k(1) else (recipe.lr, recipe.bias_lr, recipe.head_lr)
        return space.plan(choice, *lrs)

    found = presets(space, lambda c: mem(plan(c)) <= budget) + sparse_presets(space, lambda c: mem(plan(c)) <= budget)
    return {f"MobileNetV1-0.5 @{WIDE_SIZE}: {c.name}": {"plan": plan(c.choice).to_json(), "model": WIDE_MODEL,
                                                        "model_flags": ["--input-size", str(WIDE_SIZE)]}
            for c in found}


def same_plan(a: dict, b: dict) -> bool:
    """The same plan trained the same way: equal but for the lr schedule (every row gets the recipe's)."""
    return {k: v for k, v in a.items() if k != "lr_schedule"} == {k: v for k, v in b.items() if k != "lr_schedule"}


def scale_lrs(plan: dict, factor: float) -> dict:
    return {**plan, **{k: v * factor for k, v in plan.items() if k in ("lr", "bias_lr", "head_lr")}}


def train_row(study: Study, task: Task, name: str, plan_file: str, epochs: int, log: list, model: list[str],
              *extra: str) -> dict:
    state = study.build / "states" / f"{file_name(name)}.npz"
    state.parent.mkdir(parents=True, exist_ok=True)
    out = run(study, ["train", *model, *study.data_args(), "--new-head", str(study.head), "--seed",
                      str(study.seed), "--plan", plan_file, "--epochs", str(epochs), "--engine", "c", *extra,
                      "--state-out", rel(state), "--json"], log)
    correct = task.test_correct(rel(state))
    return {"plan_file": plan_file, "train_seconds": out["seconds"], "final_loss": out["final_loss"],
            "correct": correct}


def search_rows(searches: dict, classifier_lr: float) -> dict[str, dict]:
    """Every finalist preset of the searches (at the default remainder bits; the presets that fit each budget),
    classifier-only at its own best lr (the baseline every row is compared with), and the searched plans (one
    equal to a preset is that preset's run: training is deterministic)."""
    rows: dict[str, dict] = {}
    for s in searches.values():
        for f in s["finalists"]:
            if f["preset"] and " @r" not in f["name"]:  # other remainder bits: searched plans' alternatives
                rows.setdefault(f["name"], {"plan": f["plan"]})
    lr = classifier_lr
    rows["classifier-only"]["plan"] = {**rows["classifier-only"]["plan"], "lr": lr, "bias_lr": lr, "head_lr": lr}
    for b, s in searches.items():
        rows[f"searched {b}"] = {"plan": s["plan"], "chosen": s["chosen"]}
        if s["chosen"] in rows and same_plan(rows[s["chosen"]]["plan"], s["plan"]):
            rows[f"searched {b}"]["same_as"] = s["chosen"]
    return rows


def noqas_row(task: Task, study: Study, recipe: Recipe, searched: dict, log: list) -> dict:
    """int8 without QAS: the searched plan at its own best lr (the lr factor chosen on the validation split)."""
    factors = (1.0, 1e2, 1e4)
    runs = {f"x{f:g}": (scale_lrs(searched, f), recipe.epochs * len(task.fit), recipe.schedule, False)
            for f in factors}
    val = validation_runs(task, study, runs, log)
    best = max(factors, key=lambda f: val[f"x{f:g}"])
    return {"plan": runs[f"x{best:g}"][0], "validation": val, "lr_factor": best, "extra": ["--no-qas"]}


def train_rows(study: Study, tasks: dict, rows: dict[str, dict], recipe: Recipe, log: list, t_start: float) -> None:
    """Compile (peak SRAM) and train every row with ``tinytrain train --engine c``, ``study.workers`` at a time,
    scored on the test set (``tasks``: by a row's "model", None the study's)."""

    def one(item):
        name, row = item
        plan_file = write_plan(study, name, row["plan"])
        model = [row.get("model", study.model), *row.get("model_flags", [])]
        row["peak_sram_bytes"] = peak_sram(study, plan_file, name, log, model)
        row.update(train_row(study, tasks[row.get("model")], name, plan_file, recipe.epochs, log, model,
                             *recipe.schedule_flags(), *row.get("extra", [])))
        print(f"  {name}: {100 * row['correct'].mean():.1f} % ({time.time() - t_start:.0f} s)", flush=True)
        return name

    with ThreadPoolExecutor(study.workers) as pool:
        list(pool.map(one, [(n, r) for n, r in rows.items() if "same_as" not in r]))
    for row in rows.values():
        if "same_as" in row:
            row.update({k: v for k, v in rows[row["same_as"]].items() if k not in row})


MODEL = "../shared/models/mobilenet_v1_0.25_128_quant.tflite"
VWW = "../shared/data/vww96/vww96_dev800.npz"


def study_of(args: argparse.Namespace) -> Study:
    """The study of ``args.task``: Fashion-MNIST (a training subset, the official test set) or the 800 VWW
    images (a quarter held out as the test set: the same rows as train --held-out 0.25 --split-seed 0)."""
    from tinytrain.data import FASHION_MNIST_DIR

    needs = [ROOT / MODEL] + ([ROOT / VWW] if args.task == "vww" else [])
    if any(not p.exists() for p in needs) or (args.task == "fashion-mnist" and not FASHION_MNIST_DIR.is_dir()):
        raise SystemExit(f"needs {', '.join(map(str, needs))}"
                         + (f" and {FASHION_MNIST_DIR} (apt-get install dataset-fashion-mnist)"
                            if args.task == "fashion-mnist" else ""))
    if args.task == "vww":
        return Study("vww", MODEL, VWW, None, 0.25, 2, 0, 0.3, args.ft_steps, args.workers,
                     ROOT / "build" / "vww_study", args.final_seeds)
    test = "fashion-mnist:test" + (f":{args.test_images}" if args.test_images else "")
    return Study("fashion-mnist", MODEL, f"fashion-mnist:{args.train_images}", test, None, 10, 0, 0.3,
                 args.ft_steps, args.workers, ROOT / "build" / "transfer_study", args.final_seeds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("fashion-mnist", "vww"), default="fashion-mnist",
                    help="vww: the 800 VWW images of ../shared, a quarter held out as the test set "
                         "(writes vww_study.*)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--train-images", type=int, default=5000,
                    help="stratified subset of Fashion-MNIST's 60,000 training images (default 5000)")
    ap.add_argument("--ft-steps", type=int, default=1000, help="steps of each contribution fine-tune")
    ap.add_argument("--final-seeds", type=int, default=3,
                    help="seeds of each finalist of the searches' last rung, at full length (default 3)")
    ap.add_argument("--test-images", type=int, default=0,
                    help="a stratified subset of the test set, for a quick check only (default 0: all 10,000)")
    ap.add_argument("--fresh", action="store_true", help="start from an empty build/transfer_study (or vww_study)")
    ap.add_argument("--choose-recipe", action="store_true",
                    help="choose the recipe on the validation split (choose_recipe: schedule, lrs, 1-3 epochs) "
                         "instead of the 4-bit remainder default (6 epochs, lr 0.003, head lr 0.01, cosine; "
                         "the VWW study always chooses)")
    ap.add_argument("--choose-fp32-lr", action="store_true",
                    help="choose fp32 full fine-tuning's Adam lr on the validation split (0.0003 or 0.001) instead "
                         "of the lr earlier Fashion-MNIST runs chose (0.001; the VWW study always chooses)")
    args = ap.parse_args()
    study = study_of(args)
    if args.fresh and study.build.exists():
        shutil.rmtree(study.build)
    t_start = time.time()
    log: list = []
    task = Task(study)
    print(f"data: {len(task.y)} training images ({len(task.fit)} fit / {len(task.val)} validation), "
          f"{len(task.y_test)} test images", flush=True)

    choose = args.choose_recipe or study.task != "fashion-mnist"  # the default recipe was chosen on Fashion-MNIST
    recipe, recipe_record = choose_recipe(task, study, log) if choose else default_recipe()
    print(f"recipe: {recipe} ({time.time() - t_start:.0f} s)", flush=True)
    searches = {b: search(study, recipe, b, log) for b in ("256k", "128k")}
    print(f"searches done ({time.time() - t_start:.0f} s)", flush=True)

    rows = search_rows(searches, recipe_record["chosen"]["classifier_only_lr"])
    # the twins trained the device's way: classifier-only and the deepest last-k:N that fits 256 KB
    deepest = max((int(n.split(":")[1]) for n in rows if n.startswith("last-k:") and " at " not in n),
                  default=None)
    fp32_pending = Fp32Rows(task, recipe, [1] + ([deepest] if deepest else []), study,
                            args.choose_fp32_lr or study.task != "fashion-mnist")
    rows["searched 256k, no QAS"] = noqas_row(task, study, recipe, rows["searched 256k"]["plan"], log)
    rows.update(wide_rows(study, recipe, recipe_record["chosen"]["classifier_only_lr"]))
    train_rows(study, {None: task, WIDE_MODEL: Task(study, WIDE_MODEL, WIDE_SIZE)}, rows, recipe, log, t_start)
    fp32 = fp32_pending.collect(log)
    for name, row in fp32.items():
        print(f"  {name}: {100 * row['correct'].mean():.1f} % ({time.time() - t_start:.0f} s)", flush=True)

    result = report(study, task, recipe, recipe_record, searches, rows, fp32, log, time.time() - t_start)
    out = ROOT / "benchmarks" / "results"
    name = study.build.name
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown(result, WIDE_MODEL, WIDE_SIZE))
    print(f"wrote {rel(out / (name + '.md'))} ({result['seconds']:.0f} s)")


def report(study, task, recipe, recipe_record, searches, rows, fp32, log, seconds) -> dict:
    ref = rows["classifier-only"]["correct"]
    table = {}
    for name, row in [*rows.items(), *fp32.items()]:
        acc, half = ci(row["correct"])
        d, dhalf = paired(row["correct"], ref)
        table[name] = {"accuracy": acc, "ci95": half, "vs_classifier_only": d, "vs_classifier_only_ci95": dhalf,
                       **{k: v for k, v in row.items() if k not in ("correct",)}}
        if "device_row" in row:  # device = fp32: the device's row minus its twin, paired per test image
            d, dhalf = paired(rows[row["device_row"]]["correct"], row["correct"])
            table[name].update(device_minus_twin=d, device_minus_twin_ci95=dhalf)
    budgets = {}
    for b, limit in (("256k", 256 * 1024), ("128k", 128 * 1024)):
        fitting = [n for n, row in rows.items()  # the searched model's presets
                   if not n.startswith("searched") and "model" not in row and row["peak_sram_bytes"] <= limit]
        best = max(fitting, key=lambda n: rows[n]["correct"].mean())
        d, dhalf = paired(rows[f"searched {b}"]["correct"], rows[best]["correct"])
        budgets[b] = {"best_preset": best, "searched_minus_best_preset": d, "ci95": dhalf,
                      "searched_peak_sram_bytes": rows[f"searched {b}"]["peak_sram_bytes"],
                      "chosen": searches[b]["chosen"]}
    import tinytrain

    return {"study": {"task": study.task, "model": study.model, "train": study.train, "test": study.test,
                      "held_out": study.held_out, "new_head": study.head,
                      "seed": study.seed, "val": study.val, "ft_steps": study.ft_steps, "workers": study.workers,
                      "final_seeds": study.final_seeds},
            "n_train": int(len(task.y)), "n_test": int(len(task.y_test)),
            "recipe": recipe_record, "rows": table, "budgets": budgets,
            "searches": {b: {k: v for k, v in s.items() if k != "contributions"} for b, s in searches.items()},
            "commands": log, "seconds": round(seconds, 1), "tinytrain_version": tinytrain.__version__,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}


if __name__ == "__main__":
    main()
