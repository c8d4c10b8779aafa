"""Fine-tuning improves held-out accuracy; plain int8 SGD without QAS beside it (issue 4, must-show 3).

    .venv/bin/python benchmarks/finetune.py [--jobs 2] [--engine auto|sim|c] [--quick] [--render]

Every number comes from the command line (``tinytrain train ... --held-out 0.25 --json``, run in-process so
the frozen layers' outputs are computed once per model, data set and plan; each row's exact command is in
the .md and re-runs standalone). Two starting models, each with a new, untrained 2-class head
(``--new-head 2``):

- the shipped zoo model ``models/mbv1-0.25-vww.onnx`` (else ``models/mbv2-w0.35.onnx``), pretrained on
  Fashion-MNIST (int8 ONNX);
- the ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared);

on two data sets: ``lfw`` (faces vs non-faces, 150 train / 50 held out) and VWW
(../shared/data/vww96/vww96_dev800.npz, person vs not, 600 / 200), a 25 % stratified held-out split (seed
0). Plans: head-only (``last-k:1``, the classifier alone: the baseline a new head needs), ``bias-only`` (every
bias), ``last-k:4`` (weights and biases of the last 4 layers); each with QAS and with ``--no-qas`` (plain int8
SGD on the int8 gradient). lr: searched per (model, data, plan, mode) — a coarse grid, then the ladder
neighbours of its best (QAS: half decades from 1e-4; no QAS: decades 0.1 .. 1e7, because without QAS the lr
acts as lr·s² on the real weight, s the per-channel scale) — plus no QAS at the lr QAS found best. The best
lr is chosen on the held-out set, for both modes alike. Epochs: 3 on lfw, 2 on VWW; seed 0. About 15 minutes
on 2 cores (one job per core; BLAS threads pinned to 1, which is several times faster for batch-1 steps on a
busy machine). ``--render`` rewrites the .md from the .json.

Engine: ``auto`` uses ``--engine c`` for bias-only (the whole network runs backward at every step; the
compiled C step is ~4x faster than the simulator) when it works, and the simulator elsewhere (its cached
frozen prefix makes a head-only or last-k step cheaper than the C step, which re-runs the whole forward).
Writes benchmarks/results/finetune.json and finetune.md. Needs ../shared for the ImageNet model and VWW;
without it, runs the zoo model on lfw only.

**rounding**: Transfer learning as on the device: the ImageNet MobileNetV1-0.25 (128x128, uint8 TF1 model from
../shared) gets a new 2-class head and learns Visual Wake Words (../shared/data/vww96, 600 train /
200 held-out images, stratified) with batch-1 SGD + QAS under the plan last-k:4 (weights and biases of
the last 4 layers), once per rounding mode. The frozen prefix of the network is computed once per image
(bit-identical to running it every step). Reports held-out accuracy, mean training loss of the last
epoch, and where the fp32 weight steps v = lr G / s_w fall: the share with |v| < 0.5 LSB (which
nearest rounding turns into no update at all). Writes benchmarks/results/rounding.json.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # batch-1 steps: threaded BLAS only fights the other process / users

import argparse
import contextlib
import io
import json
import platform
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from common import ROOT, SHARED  # noqa: E402  (puts the checkout on sys.path)

from tinytrain.cli import main as cli  # noqa: E402
from tinytrain.data import load_dataset, model_inputs  # noqa: E402
from tinytrain.splits import stratified_split  # noqa: E402
from tinytrain.frontends import load_model  # noqa: E402
from tinytrain.ir import Graph, Role  # noqa: E402
from tinytrain.names import LOSS  # noqa: E402
from tinytrain.ops.sgd_update import Rounding  # noqa: E402
from tinytrain.simulator import execute, forward, init_state, train_step, with_state  # noqa: E402
from tinytrain.training.head import new_head  # noqa: E402
from tinytrain.training.qas import UpdateConfig  # noqa: E402
from tinytrain.training.sparse import layers, preset  # noqa: E402
from tinytrain.training.train_graph import build_training_graph  # noqa: E402

HELD_OUT, SPLIT_SEED, K = 0.25, 0, 4
PLANS = (("head-only", "last-k:1"), ("bias-only", "bias-only"), (f"last-{K}", f"last-k:{K}"))
# lr search per (model, data, plan, mode): the coarse grid, then the ladder neighbours of its best
QAS_LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)  # half decades
QAS_COARSE = (1e-3, 1e-2, 1e-1)
NO_QAS_LADDER = tuple(10.0 ** k for k in range(-1, 8))  # decades: lr·s² spans decades per tensor
NO_QAS_COARSE = (1.0, 1e2, 1e4, 1e6)
EPOCHS = {"lfw": 3, "vww": 2}
IMAGENET = os.path.relpath(SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite", ROOT)  # as typed: ../shared/...
VWW = os.path.relpath(SHARED / "data" / "vww96" / "vww96_dev800.npz", ROOT)
OUT = ROOT / "benchmarks" / "results"


def zoo_model() -> str | None:
    for name in ("models/mbv1-0.25-vww.onnx", "models/mbv2-w0.35.onnx"):
        if (ROOT / name).exists():
            return name
    return None


def run_cli(argv: list[str]) -> dict:
    """``tinytrain ARGV --json`` in this process: its JSON line, or RuntimeError with its message."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(argv)
    if rc != 0:
        raise RuntimeError(f"tinytrain {shlex.join(argv)}: exit {rc}: {err.getvalue().strip()}")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def c_engine_works(model: str) -> str:
    """'' when ``train --engine c`` runs the options this study uses, else why not."""
    try:
        run_cli(["train", model, "--data", "lfw", "--new-head", "2", "--held-out", str(HELD_OUT), "--update",
                 "bias-only", "--no-qas", "--steps", "2", "--engine", "c", "--json"])
    except Exception as e:  # noqa: BLE001 - any failure means: use the simulator
        return str(e).splitlines()[0][:300]
    return ""


def study(task: dict) -> list[dict]:
    """All runs of one (model, data, plan), in one process (so the plan's frozen prefix is computed once).

    A run the C engine fails (e.g. while its templates are being edited) is re-run with the simulator and
    the row says so; both engines implement the same arithmetic (docs/design.md §4)."""
    os.chdir(ROOT)
    rows: list[dict] = []

    def search(qas: bool, coarse, ladder) -> dict:
        done = {r["lr"] for r in rows if r["qas"] == qas}
        for lr in coarse:
            if lr not in done:
                run(qas, lr, "coarse")
        top = best([r for r in rows if r["qas"] == qas and r["search"] == "coarse"])
        if top["lr"] in ladder:
            k = ladder.index(top["lr"])
            for lr in ladder[max(k - 1, 0): k + 2]:
                if lr not in {r["lr"] for r in rows if r["qas"] == qas}:
                    run(qas, lr, "refine")
        return best([r for r in rows if r["qas"] == qas])

    def run(qas: bool, lr: float, stage: str) -> None:
        engine, c_failure = task["engine"], None
        while True:
            argv = ["train", task["model"], "--data", task["data"], "--new-head", "2", "--held-out", str(HELD_OUT),
                    "--split-seed", str(SPLIT_SEED), "--update", task["update"], "--lr", f"{lr:g}",
                    *task["length"], *([] if qas else ["--no-qas"]), "--engine", engine, "--json"]
            t0 = time.time()
            try:
                r = run_cli(argv)
                break
            except RuntimeError as e:
                if engine != "c":
                    raise
                engine, c_failure = "sim", str(e).split(": exit ", 1)[-1][:300]
                print(f"  --engine c failed ({c_failure}); re-running with --engine sim", flush=True)
        rows.append({"model": task["model_name"], "data": task["data_name"], "plan": task["plan"],
                     "update": task["update"], "qas": qas, "lr": lr, "search": stage, "engine": engine,
                     "c_failure": c_failure,
                     "command": "tinytrain " + shlex.join(argv), "wall_seconds": round(time.time() - t0, 2),
                     **{k: r.get(k) for k in ("accuracy_before", "accuracy_after", "train_accuracy", "final_loss",
                                              "steps", "seconds", "build_seconds", "n_train", "n_held_out")}})
        print(f"  {task['model_name']:>8} {task['data_name']:>3} {task['plan']:>9} {'QAS' if qas else 'no QAS':>6} "
              f"lr {lr:<7g} held-out {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f}  "
              f"loss {r['final_loss']:.3f}  {r['seconds']:.1f} s", flush=True)

    if task["quick"]:
        run(True, 0.03, "coarse")
        run(False, 0.03, "same-lr")
        run(False, 1e4, "coarse")
        return rows
    qas_best = search(True, QAS_COARSE, QAS_LADDER)
    run(False, qas_best["lr"], "same-lr")  # the lr tuned for QAS, QAS switched off
    search(False, NO_QAS_COARSE, NO_QAS_LADDER)
    return rows


def source_digest() -> str:
    """sha256 of the tinytrain package's files: recorded before and after the study (the code may change under a
    long run on a shared checkout; then the rows are not from one version)."""
    import hashlib

    import tinytrain

    h = hashlib.sha256()
    package = Path(tinytrain.__file__).parent
    for f in sorted(package.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(package)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def step_ratio_spread(model: str, update: str) -> dict:
    """Without QAS a step lands on an int8 tensor lr·s² times the QAS step (s: its per-channel real scale).
    The range of the median s² over the plan's weights and over its biases: what one lr must straddle."""
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head
    from tinytrain.training.qas import param_scales
    from tinytrain.training.sparse import preset, updated_params

    g = new_head(load_model(str(ROOT / model)), 2)
    kinds: dict[str, list[float]] = {"weights": [], "biases": []}
    for u in updated_params(preset(update, g), g):
        kinds["biases" if u.is_bias else "weights"].append(float(np.median(param_scales(g, u.param) ** 2)))
    return {k: [min(v), max(v)] for k, v in kinds.items() if v}


def best(rows: list[dict]) -> dict:
    """Highest held-out accuracy after training; ties: lower final loss, then the smaller lr."""
    return min(rows, key=lambda r: (-r["accuracy_after"], r["final_loss"], r["lr"]))


def summarize(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["data"], r["plan"]), []).append(r)
    summary = []
    for (model, data, plan), rs in groups.items():
        q, n = best([r for r in rs if r["qas"]]), best([r for r in rs if not r["qas"]])
        same = next((r for r in rs if not r["qas"] and r["lr"] == q["lr"]), None)
        summary.append({"model": model, "data": data, "plan": plan, "accuracy_start": q["accuracy_before"],
                        "qas": q, "no_qas": n, "no_qas_at_qas_lr": same,
                        "gap_best_points": round(100 * (q["accuracy_after"] - n["accuracy_after"]), 1),
                        "gap_same_lr_points": None if same is None else
                        round(100 * (q["accuracy_after"] - same["accuracy_after"]), 1)})
    return summary


def pct(a) -> str:
    return "–" if a is None else f"{100 * a:.1f}"


def table(summary: list[dict]) -> str:
    lines = ["| model | data | plan | start | QAS (best lr) | no QAS at QAS's lr | no QAS (its best lr) | QAS − no QAS: "
             "same lr / best lrs | final loss QAS / no QAS | steps | train s QAS / no QAS |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summary:
        q, n, same = s["qas"], s["no_qas"], s["no_qas_at_qas_lr"]
        lines.append(f"| {s['model']} | {s['data']} | {s['plan']} | {pct(s['accuracy_start'])} | "
                     f"{pct(q['accuracy_after'])} ({q['lr']:g}) | {pct(same and same['accuracy_after'])} | "
                     f"{pct(n['accuracy_after'])} ({n['lr']:g}) | {s['gap_same_lr_points']:+.1f} / "
                     f"{s['gap_best_points']:+.1f} | {q['final_loss']:.3f} / {n['final_loss']:.3f} | {q['steps']} | "
                     f"{q['seconds']:.1f} / {n['seconds']:.1f} |")
    return "\n".join(lines)


def full_table(rows: list[dict]) -> str:
    lines = ["| model | data | plan | QAS | lr | search | engine | held-out before → after | train acc | final loss | "
             "steps | train s |", "|---|---|---|---|---:|---|---|---:|---:|---:|---:|---:|"]
    group = {}
    for r in rows:
        group.setdefault((r["model"], r["data"], r["plan"]), len(group))
    for r in sorted(rows, key=lambda r: (group[r["model"], r["data"], r["plan"]], not r["qas"], r["lr"])):
        lines.append(f"| {r['model']} | {r['data']} | {r['plan']} | {'yes' if r['qas'] else 'no'} | {r['lr']:g} | "
                     f"{r['search']} | {r['engine']} | {pct(r['accuracy_before'])} → {pct(r['accuracy_after'])} | "
                     f"{pct(r['train_accuracy'])} | {r['final_loss']:.3f} | {r['steps']} | {r['seconds']:.1f} |")
    return "\n".join(lines)


PAPER_GAP = 86.9 - 75.4  # docs/design.md §7: int8 SGD with QAS vs without, mean of 10 transfer data sets


def noise_points(n: int) -> float:
    """Two standard errors of an accuracy near 50 % on n held-out images, in points."""
    return 200 * (0.25 / n) ** 0.5


def notes(summary: list[dict], rows: list[dict]) -> str:
    """The observations the numbers support, computed (the .md adds the explanations)."""
    n_held = {r["data"]: r["n_held_out"] for r in rows}
    out = []
    learned = []
    for model, data in dict.fromkeys((s["model"], s["data"]) for s in summary):
        ss = [s for s in summary if (s["model"], s["data"]) == (model, data)]
        start = 100 * ss[0]["accuracy_start"]
        top = max(ss, key=lambda s: s["qas"]["accuracy_after"])
        head = next(s for s in ss if s["plan"] == "head-only")
        gain = 100 * top["qas"]["accuracy_after"] - start
        noise = noise_points(n_held[data])
        verdict = "improves" if gain > noise else "does **not** improve beyond noise"
        others = ", ".join(f"{s['plan']} {pct(s['qas']['accuracy_after'])}" for s in ss if s["plan"] != "head-only")
        out.append(f"- **{model} on {data}**: fine-tuning {verdict}: start {start:.1f} → best {pct(top['qas']['accuracy_after'])} "
                   f"({top['plan']}, QAS, lr {top['qas']['lr']:g}; {gain:+.1f} points, noise ±{noise:.1f}); "
                   f"head-only {pct(head['qas']['accuracy_after'])}, {others}.")
        learned += [s for s in ss if 100 * s["qas"]["accuracy_after"] - start > noise]
    if learned:
        same = [s["gap_same_lr_points"] for s in learned if s["gap_same_lr_points"] is not None]
        best_gap = [s["gap_best_points"] for s in learned]
        out.append(f"- QAS vs no QAS over the {len(learned)} (model, data, plan) cells where QAS learned beyond noise: "
                   f"at the lr tuned for QAS, no QAS is {sum(same) / len(same):.1f} points worse on average (min "
                   f"{min(same):+.1f}, max {max(same):+.1f}); each at its own best lr, {sum(best_gap) / len(best_gap):.1f} "
                   f"points (min {min(best_gap):+.1f}, max {max(best_gap):+.1f}). The paper: {PAPER_GAP:.1f} points.")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="(model, data) pairs run in parallel processes")
    ap.add_argument("--engine", choices=("auto", "sim", "c"), default="auto")
    ap.add_argument("--quick", action="store_true", help="smoke test: lfw only, one lr per mode, 40 steps")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the existing .json")
    args = ap.parse_args()
    os.chdir(ROOT)
    if args.render:
        name = "finetune_quick" if args.quick else "finetune"
        (OUT / f"{name}.md").write_text(render_md(json.loads((OUT / f"{name}.json").read_text())))
        print(f"wrote {OUT / name}.md")
        return
    zoo = zoo_model()
    if zoo is None:
        raise SystemExit("no zoo model (models/mbv1-0.25-vww.onnx or models/mbv2-w0.35.onnx): python -m models.build")
    models = [("zoo " + os.path.basename(zoo).removesuffix(".onnx"), zoo)]
    datas = [("lfw", "lfw")]
    skipped = []
    if (ROOT / IMAGENET).exists():
        models.append(("ImageNet", IMAGENET))
    else:
        skipped.append(f"{IMAGENET} is absent: ImageNet rows skipped")
    if (ROOT / VWW).exists() and not args.quick:
        datas.append(("vww", VWW))
    elif not args.quick:
        skipped.append(f"{VWW} is absent: VWW rows skipped")
    c_problem = c_engine_works(zoo) if args.engine in ("auto", "c") else "not asked for"
    if args.engine == "c" and c_problem:
        raise SystemExit(f"--engine c does not work here: {c_problem}")
    engine_of = {name: ("c" if args.engine == "c" or (args.engine == "auto" and not c_problem and update == "bias-only")
                        else "sim") for name, update in PLANS}
    print(f"engines: {engine_of}" + (f" (--engine c unavailable: {c_problem})" if c_problem else ""), flush=True)
    tasks = []
    for model_name, model in models:
        for data_name, data in datas:
            for plan, update in PLANS:
                tasks.append({"model_name": model_name, "model": model, "data_name": data_name, "data": data,
                              "plan": plan, "update": update, "engine": engine_of[plan],
                              "quick": args.quick,
                              "length": ["--steps", "40"] if args.quick else ["--epochs", str(EPOCHS[data_name])]})
    longest_first = sorted(range(len(tasks)), key=lambda i: (tasks[i]["data_name"] != "vww", tasks[i]["plan"] != "bias-only",
                                                             tasks[i]["model_name"] != "ImageNet"))
    digest = source_digest()
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = dict(zip(longest_first, pool.map(study, [tasks[i] for i in longest_first])))
    rows = [r for i in range(len(tasks)) for r in done[i]]
    wall = time.time() - t0
    if source_digest() != digest:
        skipped.append("the tinytrain sources changed during the study: rows may come from different versions; "
                       "re-run it")
        print(f"warning: {skipped[-1]}", flush=True)
    summary = summarize(rows)
    spreads = {f"{m} {p}": step_ratio_spread(path, u) for m, path in models for p, u in PLANS}
    result = {"benchmark": "finetune", "command": "python benchmarks/finetune.py" + (" --quick" if args.quick else ""),
              "held_out": HELD_OUT, "split_seed": SPLIT_SEED, "seed": 0, "epochs": EPOCHS,
              "lr_search": {"qas": {"coarse": QAS_COARSE, "ladder": QAS_LADDER},
                            "no_qas": {"coarse": NO_QAS_COARSE, "ladder": NO_QAS_LADDER}}, "engines": engine_of, "c_engine_problem": c_problem or None,
              "skipped": skipped, "tinytrain_sources_sha256": digest, "wall_seconds": round(wall, 1), "jobs": args.jobs,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()},
              "no_qas_step_ratio_s2": spreads, "summary": summary, "runs": rows}
    suffix = "_quick" if args.quick else ""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"finetune{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = render_md(result)
    (OUT / f"finetune{suffix}.md").write_text(md)
    print()
    print(table(summary))
    print(f"\n{len(rows)} runs in {wall:.0f} s wall ({args.jobs} jobs); wrote {OUT / f'finetune{suffix}.json'} and .md")


def explanation(result: dict) -> str:
    """Why the QAS gap looks the way it does: the computed facts behind each claim, then the claim."""
    summary, spreads = result["summary"], result["no_qas_step_ratio_s2"]
    n_held = {r["data"]: r["n_held_out"] for r in result["runs"]}
    learned = [s for s in summary if 100 * (s["qas"]["accuracy_after"] - s["accuracy_start"]) > noise_points(n_held[s["data"]])]
    if not learned:
        return "Nothing learned beyond noise, so nothing to compare."
    stuck = [s for s in learned if s["no_qas_at_qas_lr"] is not None
             and abs(s["no_qas_at_qas_lr"]["accuracy_after"] - s["accuracy_start"]) <= 0.025]
    max_s2 = max(v for sp in spreads.values() for pair in sp.values() for v in pair)
    ratio = [s["no_qas"]["lr"] / s["qas"]["lr"] for s in learned]
    worst = max(learned, key=lambda s: s["gap_best_points"])
    close = [s for s in learned if s["gap_best_points"] <= 6]
    span = spreads.get(f"{worst['model']} {worst['plan']}", {})
    span_txt = "; ".join(f"its {k}' s² span {v[1] / v[0]:.0f}x ({v[0]:.1e} … {v[1]:.1e})" for k, v in span.items() if v[0] > 0)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    same_gap = mean([s["gap_same_lr_points"] for s in learned])
    qas_lrs = sorted({s["qas"]["lr"] for s in learned})
    w_ratio = max((sp["weights"][1] / sp["weights"][0] for k, sp in spreads.items() if "weights" in sp), default=1.0)
    head_ratio = [sp["weights"][0] / sp["biases"][0] for k, sp in spreads.items()
                  if k.endswith("head-only") and "weights" in sp and "biases" in sp] or [1.0]
    saturated = [f"{s['model']} on {s['data']} {s['plan']}" for s in learned
                 if min(s["qas"]["accuracy_after"], s["no_qas"]["accuracy_after"]) >= 0.98]
    return f"""**Same lr.** With the lr tuned for QAS, plain int8 SGD leaves the model where it started in {len(stuck)} of the
{len(learned)} cells where QAS learned (held-out accuracy within 2.5 points of the start): its step on an int8
tensor is lr·s² times the QAS step, at most {max_s2:.0e} here (table below), so nearly every step is far below
half an LSB; stochastic rounding keeps it unbiased but it is tiny. That gap, {same_gap:.1f} points on average,
is {same_gap / PAPER_GAP:.1f}x the paper's {PAPER_GAP:.1f}.

**Each mode at its own best lr.** No QAS needs an lr {min(ratio):.0e} to {max(ratio):.0e} times larger than QAS (its
best lrs: {', '.join(sorted({f"{s['no_qas']['lr']:g}" for s in learned}, key=float))}); given it, it comes within 6 points of QAS in
{len(close)} of {len(learned)} cells (mean gap {mean([s['gap_best_points'] for s in learned]):.1f} points). Where
weight tensors carry the update (head-only: one tensor, one scale; last-{K}: weights whose s² lie within
{w_ratio:.0f}x of each other), lr·s² is just a rescaled lr and a grid finds it; their biases, whose s² is
{min(head_ratio):.0e}–{max(head_ratio):.0e} times smaller (the heads'), hardly move without QAS, which costs little while the weights learn. The gap stays where
the update is carried by tensors whose scales differ by decades:
{worst['model']} on {worst['data']}, {worst['plan']}: {worst['gap_best_points']:+.1f} points ({span_txt}): no single lr
suits them — the lr that moves the small-scale tensors makes the large-scale ones jump by many LSBs, and vice
versa. QAS removes the scale (every tensor steps by lr·G/s LSBs, i.e. the fp32 SGD step): its best lrs all lie
in {qas_lrs[0]:g} … {qas_lrs[-1]:g}, whatever the plan.

**Against the paper.** The paper's {PAPER_GAP:.1f} points (10 transfer data sets; sparse updates of weights and biases
through the network) lies between our same-lr gap and our best-lr gap. Most of our cells are weight-carried
(head-only, last-{K}) and {len(saturated)} are saturated (both modes ≥ 98 %: {', '.join(saturated) or 'none'}), which cannot separate the
modes; once its lr is tuned, no QAS does about as well there. The plan that updates many tensors of very
different scales on the mid-size data set ({worst['model']} on {worst['data']}, {worst['plan']}) shows
{worst['gap_best_points']:.1f} points, the paper's order. So: the ~10-point gap is reproduced (and exceeded) when the lr
is tuned for QAS only, and with tuned lrs in the mixed-scale plan; it is not reproduced with tuned lrs when
weights of similar scale carry the update.

**Caveats.** One seed and one split; held-out sets of 50 (lfw) and 200 (VWW) images (two standard errors:
±{noise_points(50):.0f} and ±{noise_points(200):.0f} points); the best lr is chosen on the held-out set (both modes
alike). The C engine (bias-only rows) and the simulator agree bit for bit on integer work but only within a
tolerance on fp32 gradients (docs/design.md §4); under stochastic rounding a 1-LSB difference can appear after a
hundred steps (seen with `--no-qas --lr 1e6`), so a row reproduces exactly with its own `--engine`.
"""


def _lrs(values) -> str:
    return "{" + ", ".join(f"{v:g}" for v in values) + "}"


def render_md(result: dict) -> str:
    summary, rows = result["summary"], result["runs"]
    spread = "\n".join(f"| {k} | " + " | ".join(
        f"{v[k2][0]:.1e} … {v[k2][1]:.1e}" if k2 in v else "–" for k2 in ("weights", "biases")) + " |"
        for k, v in result["no_qas_step_ratio_s2"].items())
    commands = "\n".join(r["command"] for r in rows)
    skipped = "".join(f"\n- note: {s}" for s in result["skipped"])
    return f"""# Fine-tuning on held-out data, with and without QAS

Generated by `{result['command']}` ({len(rows)} runs, {result['wall_seconds']:.0f} s wall with
{result['jobs']} parallel jobs on {result['machine']['cpus']} CPUs shared with other work; "train s" is the
training loop alone). Engines: {', '.join(f'{k}: `{v}`' for k, v in result['engines'].items())}{
' (`--engine c` unavailable: ' + result['c_engine_problem'] + ')' if result['c_engine_problem'] else ''}.{skipped}

Setup: new untrained 2-class head (`--new-head 2`, seed 0) on a pretrained backbone; 25 % stratified
held-out split (`--held-out 0.25 --split-seed 0`: lfw 150 train / 50 held out, VWW 600 / 200);
batch-1 SGD, stochastic rounding, no momentum; epochs: {', '.join(f'{v} on {k}' for k, v in result['epochs'].items())}. lr search per (model, data, plan,
mode): a coarse grid (QAS {_lrs(result['lr_search']['qas']['coarse'])}; no QAS
{_lrs(result['lr_search']['no_qas']['coarse'])}), then the neighbours of its best on a ladder (QAS half decades
{_lrs(result['lr_search']['qas']['ladder'])}; no QAS decades {_lrs(result['lr_search']['no_qas']['ladder'])}), plus no
QAS at the lr QAS found best ("same lr": the lr tuned for QAS, QAS switched off). "start" = held-out accuracy of
the starting model (head untrained); "head-only" = `last-k:1` (classifier weights + bias alone), the baseline
any new head needs. Accuracies in %; the best lr of each mode is chosen on the held-out set itself (both modes
equally optimistic). One seed: on lfw one held-out image is 2 points, on VWW 0.5 points.

{table(summary)}

## Notes

{notes(summary, rows)}

{explanation(result)}

### Why no QAS needs a different lr, per tensor

Without QAS a step lands on the int8 tensor as lr·s²·G in its LSBs instead of lr·G/s (s: the per-channel
real scale; biases: s_x·s_w), i.e. lr·s² times the QAS step. The median s² of the tensors each plan updates:

| model, plan | weights | biases |
|---|---:|---:|
{spread}

## All runs

{full_table(rows)}

## Commands (each reproduces its row; run from the project root)

```
{commands}
```

Held-out accuracy of a trained state can be re-checked separately with
`tinytrain eval MODEL --data DATA --new-head 2 --held-out 0.25 --split-seed 0 [--state STATE.npz]`
(add `--state-out STATE.npz` to the train command).
"""


# ---- rounding: round-to-nearest vs stochastic rounding of the int8 update (docs/design.md §3) -------------------

def suffix(graph: Graph, start: str) -> Graph:
    """The nodes computing from ``start`` on, with ``start`` as the input (chain-shaped prefixes only)."""
    producer = next(k for k, n in enumerate(graph.nodes) if start in n.outputs)
    nodes = graph.nodes[producer + 1:]
    available = {start} | {n for n, t in graph.tensors.items() if t.has_data}
    for n in nodes:
        assert all(i in available for i in n.inputs if i), f"{n.name} reads across the cut"
        available.update(n.outputs)
    tensors = dict(graph.tensors)
    tensors[start] = replace(tensors[start], role=Role.INPUT)
    used = {start} | {i for n in nodes for i in (*n.inputs, *n.outputs) if i}
    return replace(graph, tensors={k: v for k, v in tensors.items() if k in used}, nodes=nodes, inputs=(start,))


def rounding_run(head: Graph, cut: str, feats, y, test_feats, y_test, lr: float, rounding: Rounding, epochs: int, seed: int):
    g = suffix(head, cut)
    t = build_training_graph(g, preset("last-k:4", g, lr=lr), UpdateConfig(rounding=rounding, seed=seed))
    updates = [n for n in t.nodes if n.op == "sgd_update" and t.tensors[n.inputs[0]].role is Role.WEIGHT]
    state = init_state(t)
    rng = np.random.default_rng(seed)
    small = total = moved = 0
    losses = []
    for _ in range(epochs):
        losses = []
        for k in rng.permutation(len(y)):
            before = {u.inputs[0]: state.tensors[u.inputs[0]].copy() for u in updates}
            out = train_step(t, state, feats[k : k + 1], int(y[k]), keep_all=True)
            losses.append(float(out[LOSS][0]))
            for u in updates:
                v = out[u.inputs[1]] * t.tensors[u.inputs[2]].data.reshape((-1,) + (1,) * (out[u.inputs[1]].ndim - 1))
                small += int((np.abs(v) < 0.5).sum())
                total += v.size
                moved += int((state.tensors[u.inputs[0]] != before[u.inputs[0]]).sum())
    trained = with_state(g, state)
    probs = forward(trained, {cut: test_feats})[g.outputs[0]]
    acc = float((probs.argmax(axis=1) == y_test).mean())
    return {"lr": lr, "rounding": rounding.value, "seed": seed, "held_out_accuracy": acc,
            "last_epoch_loss": float(np.mean(losses)), "steps_below_half_lsb": small / total,
            "weight_elements_changed_per_step": moved / (total or 1)}


def rounding_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="round-to-nearest vs stochastic rounding of the int8 update "
                                 "(finetune.py rounding)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lrs", default="0.003,0.01,0.03")
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args(argv)
    model_path = SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite"
    data_path = SHARED / "data" / "vww96" / "vww96_dev800.npz"
    if not model_path.exists() or not data_path.exists():
        raise SystemExit(f"needs {model_path} and {data_path} (../shared)")
    head = new_head(load_model(str(model_path)), 2)
    ls = layers(head)
    cut = ls[-4].inputs[0]  # input of the lowest updated layer: everything before it is frozen
    ds = load_dataset(data_path)
    train_idx, test_idx = stratified_split(ds.y, 0.25)
    x = model_inputs(head, ds.x)
    t0 = time.time()
    prefix_out = execute(replace(head, outputs=(cut,)), {head.inputs[0]: x})[cut]
    print(f"frozen prefix of {len(ds.y)} images: {time.time() - t0:.0f} s")
    rows = []
    for lr in map(float, args.lrs.split(",")):
        for rounding in (Rounding.NEAREST, Rounding.STOCHASTIC):
            for seed in range(args.seeds):
                r = rounding_run(head, cut, prefix_out[train_idx], ds.y[train_idx], prefix_out[test_idx], ds.y[test_idx],
                        lr, rounding, args.epochs, seed)
                rows.append(r)
                print(f"lr {lr:<6} {rounding.value:<10} seed {seed}: held-out acc {r['held_out_accuracy']:.3f}  "
                      f"last-epoch loss {r['last_epoch_loss']:.3f}  |v|<0.5 LSB {100 * r['steps_below_half_lsb']:.1f} %  "
                      f"weights changed/step {100 * r['weight_elements_changed_per_step']:.2f} %", flush=True)
    out = ROOT / "benchmarks" / "results" / "rounding.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": shlex.join(["python", "benchmarks/finetune.py", "rounding", *argv]),
                               "model": model_path.name, "data": data_path.name, "plan": "last-k:4",
                               "train": len(train_idx), "held_out": len(test_idx), "epochs": args.epochs,
                               "runs": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["rounding"]:
        rounding_main(sys.argv[2:])
    else:
        main()
