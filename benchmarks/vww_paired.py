"""The VWW study's searched plan against the presets, paired per held-out image (run after vww_study.py).

    .venv/bin/python benchmarks/vww_paired.py

vww_study.py reports each row's held-out accuracy; whether the searched plan is as accurate as the best preset
that fits 256 KB needs the difference with its confidence interval. This trains the searched plan
(benchmarks/results/vww_study_plan.json) and the study's preset rows (build/vww_study/plans: classifier-only,
bias-only, last-k:9) with the study's command plus ``--state-out``, predicts the 200 held-out images with the
emitted C forward and each trained state, and reports searched minus each preset: the mean of d_i in {-1, 0, 1}
+- 1.96 standard errors. Writes benchmarks/results/vww_paired.json and .md (a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = "../shared/models/mobilenet_v1_0.25_128_quant.tflite"
DATA = "../shared/data/vww96/vww96_dev800.npz"
PLANS = {"searched": "benchmarks/results/vww_study_plan.json",
         "classifier-only": "build/vww_study/plans/classifier-only.json",
         "bias-only (last 25)": "build/vww_study/plans/bias-only.json",
         "last-k:9": "build/vww_study/plans/last-k-9.json"}


def main() -> None:
    import numpy as np

    from tinytrain.data import held_out_split, load_dataset, model_inputs
    from tinytrain.engine_c import predict
    from tinytrain.frontends import load_model
    from tinytrain.simulator import with_state
    from tinytrain.state_file import load_state
    from tinytrain.training.head import new_head

    missing = [p for p in (MODEL, DATA, *PLANS.values()) if not (ROOT / p).exists()]
    if missing:
        raise SystemExit(f"needs {', '.join(missing)}: run benchmarks/vww_study.py first (and ../shared beside)")
    graph = new_head(load_model(ROOT / MODEL), 2, seed=0)
    ds = load_dataset(ROOT / DATA)
    _, held = held_out_split(ds.y, 0.25, 0)
    x, y = model_inputs(graph, ds.x[held]), ds.y[held]
    states = ROOT / "build" / "vww_paired"
    states.mkdir(parents=True, exist_ok=True)
    correct, commands = {}, []
    for name, plan in PLANS.items():
        state = states / f"{name.split()[0].replace(':', '-')}.npz"
        argv = ["train", MODEL, "--data", DATA, "--new-head", "2", "--held-out", "0.25", "--split-seed", "0",
                "--seed", "0", "--plan", plan, "--epochs", "4", "--engine", "c", "--state-out",
                str(state.relative_to(ROOT))]
        subprocess.run([sys.executable, "-m", "tinytrain.cli", *argv], cwd=ROOT, check=True, capture_output=True)
        commands.append("tinytrain " + " ".join(argv))
        correct[name] = predict(with_state(graph, load_state(str(state), graph)), x).argmax(axis=1) == y
    rows = {}
    for name in PLANS:
        d = correct["searched"].astype(np.float64) - correct[name].astype(np.float64)
        rows[name] = {"accuracy": float(correct[name].mean()), "searched_minus": float(d.mean()),
                      "ci95": 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else 0.0}
    lines = ["# VWW study: the searched plan against the presets, paired per held-out image", "",
             f"`python benchmarks/vww_paired.py` after `benchmarks/vww_study.py`; {len(y)} held-out images, the "
             "study's split, commands and plans (each trained again with `--state-out`, predicted by the emitted C).",
             "", "| row | held-out accuracy | searched minus row (paired, 95 % CI) |", "|---|---|---|"]
    lines += [f"| {n} | {100 * r['accuracy']:.1f} % | {100 * r['searched_minus']:+.1f} ± {100 * r['ci95']:.1f} |"
              for n, r in rows.items()]
    lines += ["", "Commands:", "", "```", *commands, "```", ""]
    out = ROOT / "benchmarks" / "results"
    (out / "vww_paired.json").write_text(json.dumps({"n": int(len(y)), "rows": rows, "commands": commands},
                                                    indent=1) + "\n")
    (out / "vww_paired.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
