"""Keyword-spotting demo (MLPerf Tiny KWS): the DS-CNN adapts to new (synthetic) speakers and learns a new keyword.

    .venv/bin/python benchmarks/kws_demo.py [--reps 4] [--new-word lights]

The MLPerf Tiny DS-CNN (``../shared/models/kws_ref_model.tflite``: 49x10 int8 MFCCs, 12 classes) meets speakers it
never heard: espeak-ng voices (benchmarks/common/kws_data.py: every clip synthetic, with drawn pitch, speed, placement and
noise), features from tinytrain.audio (the MLPerf MFCC front end in numpy) quantized with the model's input scale and
zero point. 12 adaptation speakers and 12 test speakers share no voice variant. The last 3 adaptation speakers are a
validation split: each plan's lr is chosen on them, then the plan trains on all 12 adaptation speakers (the emitted
C, ``--engine c``: batch-1 SGD, QAS, stochastic rounding) and is scored once on the test speakers.

1. Adaptation: the 12-class model before and after (bias-only, last-k:2, last-k:4, last-k:10 = every layer: all
   fit 256 KB; the best on validation is the headline), accuracy on the test speakers with 95 % intervals, paired
   differences.
2. A new keyword (``--new-word``, default "lights") as a 13th class: a new 13-class head (the pretrained head
   replaced, ``--new-head 13`` semantics; the 12 old classes relearned from the adaptation clips), last-k:2.

Writes benchmarks/results/kws_demo.{json,md,png}; the datasets (int8 .npz, with the audio) in build/kws_demo.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)

from common import kws_data  # noqa: E402
from common import accuracy_ci as ci, paired  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "kws_ref_model.tflite"
LRS = (0.003, 0.01, 0.03, 0.1)
PLANS = ("bias-only", "last-k:2", "last-k:4", "last-k:10")  # last-k:10: every layer
EPOCHS = 4
NEW_EPOCHS = 5
VAL_SPEAKERS = 3


def datasets(graph, reps: int, new_word: str, build: Path) -> dict[str, dict]:
    """The adaptation and test sets (cached in ``build`` by their settings)."""
    q = graph.tensors[graph.inputs[0]].quant
    out = {}
    for name, variants, seed in (("adapt", kws_data.ADAPT_VARIANTS, 1), ("test", kws_data.TEST_VARIANTS, 2)):
        path = build / f"{name}_reps{reps}_{new_word}.npz"
        if not path.exists():
            clips = kws_data.plan_clips(kws_data.speakers(variants), reps, new_word, seed)
            arrays = kws_data.build(clips, q.s, q.zp)
            np.savez_compressed(path, **arrays)
        with np.load(path) as f:
            out[name] = {k: f[k] for k in f.files}
    return out


def train_predict(graph, plan_json: dict, x: np.ndarray, y: np.ndarray, x_eval: np.ndarray, epochs: int) -> np.ndarray:
    """``epochs`` of batch-1 training in the emitted C (seed 0); predicted classes of ``x_eval``."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.engines.order import sample_order
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan
    from tinytrain.training.train_graph import build_training_graph

    trainer = CTrainer(build_training_graph(graph, parse_plan(plan_json), UpdateConfig(seed=0)))
    trainer.train(x, y, sample_order(np.arange(len(y)), epochs * len(y), 0))
    return trainer.predict(x_eval).argmax(axis=1)


def choose(graph, data: dict, rows: np.ndarray, epochs: int) -> tuple[str, float, dict]:
    """(plan, lr) of PLANS x LRS with the best accuracy on the validation speakers, trained on the other ones."""
    from tinytrain.training.sparse import preset

    speakers = list(dict.fromkeys(data["speaker"]))
    val = np.isin(data["speaker"], speakers[-VAL_SPEAKERS:]) & rows
    fit = ~np.isin(data["speaker"], speakers[-VAL_SPEAKERS:]) & rows
    scores = {}
    for spec in PLANS:
        for lr in LRS:
            pred = train_predict(graph, preset(spec, graph, lr=lr).to_json(), data["x"][fit], data["y"][fit],
                                 data["x"][val], epochs)
            scores[f"{spec}, lr {lr:g}"] = float((pred == data["y"][val]).mean())
    best = max(scores, key=scores.get)
    spec, lr = best.split(", lr ")
    return spec, float(lr), scores


def adaptation(graph, data: dict) -> dict:
    """The 12-class model on the test speakers before and after training on the adaptation speakers."""
    from tinytrain.engines.host_c import predict
    from tinytrain.training.sparse import preset

    a, t = data["adapt"], data["test"]
    a_rows, t_rows = a["y"] < 12, t["y"] < 12  # the new word is not one of the model's classes
    before = predict(graph, t["x"][t_rows]).argmax(axis=1)
    spec, lr, scores = choose(graph, a, a_rows, EPOCHS)
    after = {}
    for s in PLANS:
        lr_s = max(LRS, key=lambda v: scores[f"{s}, lr {v:g}"])
        after[s] = train_predict(graph, preset(s, graph, lr=lr_s).to_json(), a["x"][a_rows], a["y"][a_rows],
                                 t["x"][t_rows], EPOCHS)
    y = t["y"][t_rows]
    out = {"n_adapt": int(a_rows.sum()), "n_test": int(t_rows.sum()), "validation": scores, "chosen": spec,
           "chosen_lr": lr, "before": row(before == y), "before_pred": before, "y": y}
    for s, p in after.items():
        out[s] = {**row(p == y), "vs_before": paired(p == y, before == y), "peak_sram_bytes": peak_sram(graph, s)}
    out["after_pred"] = after[spec]
    return out


def new_keyword(graph, data: dict, new_word: str) -> dict:
    """A new 13-class head (seed 0) trained on the adaptation speakers' 13 classes; scored on the test speakers."""
    from tinytrain.training.head import new_head

    g13 = new_head(graph, 13, seed=0)
    a, t = data["adapt"], data["test"]
    every = np.ones(len(a["y"]), bool)
    spec, lr, scores = choose(g13, a, every, NEW_EPOCHS)
    from tinytrain.training.sparse import preset

    pred = train_predict(g13, preset(spec, g13, lr=lr).to_json(), a["x"], a["y"], t["x"], NEW_EPOCHS)
    y, new = t["y"], t["y"] == 12
    return {"word": new_word, "validation": scores, "chosen": spec, "chosen_lr": lr, "all_13": row(pred == y),
            "old_12": row(pred[~new] == y[~new]), "new_word_recall": row(pred[new] == 12),
            "new_word_precision": float((y[pred == 12] == 12).mean()) if (pred == 12).any() else 0.0,
            "false_alarms_on_old_classes": int((pred[~new] == 12).sum()), "pred": pred, "y": y}


def peak_sram(graph, spec: str) -> int:
    """Peak SRAM of the preset's training step (tinytrain compile's planner)."""
    from tinytrain.api import compile as compile_step
    from tinytrain.training.sparse import preset

    return int(compile_step(graph, sram="64m", flash="64m", plan=preset(spec, graph).to_json()).report.peak_sram_bytes)


def row(correct: np.ndarray) -> dict:
    acc, half = ci(correct)
    return {"accuracy": acc, "ci95": half, "n": int(len(correct))}


def per_class_recall(pred: np.ndarray, y: np.ndarray, n: int) -> list[float]:
    return [float((pred[y == c] == c).mean()) if (y == c).any() else float("nan") for c in range(n)]


def figure(adapt: dict, new: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(kws_data.LABELS) + [f"NEW: {new['word']}"]
    before = per_class_recall(adapt["before_pred"], adapt["y"], 12) + [0.0]
    after = per_class_recall(adapt["after_pred"], adapt["y"], 12) + [float("nan")]
    new13 = per_class_recall(new["pred"], new["y"], 13)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    xs = np.arange(13)
    for i, (vals, name) in enumerate([(before, "before (pretrained)"), (after, f"adapted ({adapt['chosen']})"),
                                      (new13, f"13-class head ({new['chosen']})")]):
        ax.bar(xs + (i - 1) * 0.27, 100 * np.nan_to_num(vals), 0.27, label=name)
    ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("recall on the test speakers, %")
    ax.set_title("DS-CNN keyword spotting on unseen synthetic (espeak-ng) speakers: before and after")
    ax.legend(fontsize=8)
    ax.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(r: dict) -> str:
    return f"{100 * r['accuracy']:.1f} ± {100 * r['ci95']:.1f} % (n = {r['n']})"


def markdown(r: dict) -> str:
    a, n = r["adaptation"], r["new_keyword"]
    lines = [
        "# KWS demo: the MLPerf Tiny DS-CNN adapts to new speakers and learns a new keyword on the device",
        "",
        f"`{r['command']}` ({r['seconds'] / 60:.1f} min, one core). Model `{r['model']}`. **Every clip is "
        "synthetic**: espeak-ng voices (an English accent + a voice variant per speaker), drawn pitch (25-75), speed "
        "(120-200 wpm), placement in the 1 s window and noise (none, 20 dB or 10 dB SNR, white or brown); silence is "
        "noise alone; 'unknown' is 3 words of Speech Commands' unknown set per speaker. Features: `tinytrain.audio` "
        f"(the MLPerf MFCC front end), quantized with the model's input scale and zero point. {r['speakers_adapt']} "
        f"adaptation speakers, {r['speakers_test']} test speakers, no voice variant shared; {r['reps']} clips per "
        "word and speaker. lrs and plans chosen on the last 3 adaptation speakers; int8 training in the emitted C "
        "(batch-1 SGD, QAS, stochastic rounding).",
        "",
        "![before and after](kws_demo.png)",
        "",
        "## Speaker adaptation (12 classes, test speakers)",
        "",
        "| model | accuracy (95 % CI) | vs before (paired, 95 % CI) | peak SRAM of the step |",
        "|---|---|---|---|",
        f"| before: pretrained, as shipped | {_pct(a['before'])} | | |",
    ]
    for s in PLANS:
        d, h = a[s]["vs_before"]
        lines.append(f"| after: {s}, {EPOCHS} epochs{' (chosen on validation)' if s == a['chosen'] else ''} | "
                     f"{_pct(a[s])} | {100 * d:+.1f} ± {100 * h:.1f} points | "
                     f"{a[s]['peak_sram_bytes'] / 1024:.1f} KB |")
    lines += ["", f"Adaptation set: {a['n_adapt']} clips; validation accuracy by plan and lr: "
              + ", ".join(f"{k} {100 * v:.0f} %" for k, v in a["validation"].items()) + ".", "",
              f"## A new keyword, '{n['word']}', as a 13th class", "",
              f"A new 13-class head (the pretrained 12-class head replaced, init seed 0), {n['chosen']} at lr "
              f"{n['chosen_lr']:g}, {NEW_EPOCHS} epochs on the adaptation speakers' clips of all 13 classes:", "",
              f"- all 13 classes: {_pct(n['all_13'])}",
              f"- the 12 old classes: {_pct(n['old_12'])}",
              f"- '{n['word']}' recall: {_pct(n['new_word_recall'])}; precision {100 * n['new_word_precision']:.1f} %;"
              f" old-class clips taken for it: {n['false_alarms_on_old_classes']}", "",
              "Validation accuracy by plan and lr: "
              + ", ".join(f"{k} {100 * v:.0f} %" for k, v in n["validation"].items()) + ".", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4, help="clips per word and speaker")
    ap.add_argument("--new-word", default="lights")
    args = ap.parse_args()
    if not MODEL.exists() or not kws_data.espeak_available():
        raise SystemExit(f"needs {MODEL} and espeak-ng (apt-get install espeak-ng)")
    from tinytrain.api import load_model

    t_start = time.time()
    build = ROOT / "build" / "kws_demo"
    build.mkdir(parents=True, exist_ok=True)
    graph = load_model(MODEL)
    data = datasets(graph, args.reps, args.new_word, build)
    print(f"data: {len(data['adapt']['y'])} adaptation / {len(data['test']['y'])} test clips "
          f"({time.time() - t_start:.0f} s)", flush=True)
    adapt = adaptation(graph, data)
    print(f"adaptation: before {100 * adapt['before']['accuracy']:.1f} %, after ({adapt['chosen']}) "
          f"{100 * adapt[adapt['chosen']]['accuracy']:.1f} % ({time.time() - t_start:.0f} s)", flush=True)
    new = new_keyword(graph, data, args.new_word)
    print(f"new keyword: 13 classes {100 * new['all_13']['accuracy']:.1f} %, recall "
          f"{100 * new['new_word_recall']['accuracy']:.1f} %", flush=True)
    out = ROOT / "benchmarks" / "results"
    figure(adapt, new, out / "kws_demo.png")
    command = "python benchmarks/kws_demo.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v != ap.get_default(k))
    drop = ("before_pred", "after_pred", "pred", "y")
    result = {"command": command, "model": os.path.relpath(MODEL, ROOT), "reps": args.reps,
              "speakers_adapt": len(set(data["adapt"]["speaker"])), "speakers_test": len(set(data["test"]["speaker"])),
              "adaptation": {k: v for k, v in adapt.items() if k not in drop},
              "new_keyword": {k: v for k, v in new.items() if k not in drop},
              "per_class_recall": {"labels": list(kws_data.LABELS) + [args.new_word],
                                   "before": per_class_recall(adapt["before_pred"], adapt["y"], 12),
                                   "adapted": per_class_recall(adapt["after_pred"], adapt["y"], 12),
                                   "new_head_13": per_class_recall(new["pred"], new["y"], 13)},
              "seconds": round(time.time() - t_start, 1)}
    (out / "kws_demo.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "kws_demo.md").write_text(markdown(result))
    print(f"wrote benchmarks/results/kws_demo.md ({result['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
