"""Can the plan search's short measurements be trusted? ``tinytrain plan`` on the Fashion-MNIST setup at a reduced budget.

    .venv/bin/python benchmarks/search_trust.py [--train-images 2000] [--epochs 6] [--ft-steps 500] [--workers 2]
                                                [--time-limit S] [--proposals 4] [--other-remainder-bits 0,8]

The transfer study's setup (ImageNet MobileNetV1-0.25 128x128 from ../shared/models, a new 10-class head, seed 0,
a stratified subset of Fashion-MNIST's training images, 30 % of it the validation split) and the 4-bit remainder
default recipe (lr 0.003, head lr 0.01, cosine, ``--epochs`` epochs; benchmarks/results/remainder_study.md), at
256 KB, with fewer images and shorter contribution fine-tunes than the study. The search's last phase trains every
finalist at full length on the validation split (the reference ranking); this script reports each rung's Spearman
correlation with it (target >= 0.8 for the first rung), the noise floor at full length (sd of the baseline run
with other seeds) beside the gains, and whether a plan that trains backbone weights beats classifier-only there
(paired over the validation images). No test image is used. Writes benchmarks/results/search_trust.{md,json};
work files in build/search_trust.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def paired(cache: dict, key_a: str, key_b: str, n: int) -> tuple[float, float] | None:
    """(mean of a - b, its standard error) over the validation rows, from the cached per-row results."""
    from tinytrain.search.measure import unpack_correct
    from tinytrain.search.noise import paired_se

    a, b = cache.get(key_a), cache.get(key_b)
    if not a or not b or "correct" not in a or "correct" not in b:
        return None
    ra, rb = unpack_correct(a["correct"], n), unpack_correct(b["correct"], n)
    return a["accuracy"] - b["accuracy"], paired_se(ra, rb)


def summarize(report: dict, argv: list[str], seconds: float) -> dict:
    """What search_trust.{md,json} show, from PLAN.search.json and the search's cache (per-row results)."""
    from tinytrain.search.space import Choice

    check, steps, n_val = report["rank_check"], report["measurement"]["finalist_steps"], report["measurement"]["n_val"]
    cache = json.loads(Path(report["measurement"]["cache"]).read_text())["results"]

    def key(f: dict) -> str:
        p = f["plan"]
        n_layers = max(w["conv"] for w in p["weights"])  # the classifier: every plan updates it
        weights = tuple((w["conv"], w["ratio"]) for w in p["weights"] if w["conv"] != n_layers)
        return Choice(p["bias_last_k"], weights, p["remainder_bits"]).key() + f"@{steps}"

    finalists = {f["name"]: f for f in report["finalists"]}
    base = finalists["classifier-only"]
    weight_plans = [f for f in report["finalists"] if len(f["plan"]["weights"]) > 1]
    best_weight = max(weight_plans, key=lambda f: f["full_length"]["accuracy"]) if weight_plans else None
    vs = paired(cache, key(best_weight), key(base), n_val) if best_weight else None
    return {"command": shlex.join(["tinytrain", *argv]), "seconds": round(seconds, 1),
            "finalist_steps": steps, "n_fit": report["measurement"]["n_fit"], "n_val": n_val,
            "rungs": check["rungs"], "noise_floor_full_length": check["noise_floor"],
            "noise_floor_finetunes": report["noise_floor"], "gains_above_noise": check["gains_above_noise"],
            "chosen": report["chosen"], "chosen_plan": report["plan"], "validation_accuracy": report["validation_accuracy"],
            "best_weight_plan": None if best_weight is None else best_weight["name"],
            "best_weight_plan_vs_classifier_only": None if vs is None else {"gain": vs[0], "paired_se": vs[1]},
            "finalists": [{"name": f["name"], "peak_sram_bytes": f["peak_sram_bytes"],
                           "remainder_bits": f["plan"]["remainder_bits"], "predicted_gain": f["predicted_gain"],
                           "rungs": f["measured"], "full_length": f["full_length"]} for f in report["finalists"]],
            "search_seconds": report["seconds"]}


def markdown(r: dict) -> str:
    nf, nf_ft = r["noise_floor_full_length"], r["noise_floor_finetunes"]
    rho = ", ".join(f"rung of {g['steps']} steps ({g['finalists']} finalists): "
                    + ("n/a" if g["spearman"] is None else f"**{g['spearman']:.2f}**") for g in r["rungs"])
    vs = r["best_weight_plan_vs_classifier_only"]
    lines = [
        "# Can the plan search's short measurements be trusted? (Fashion-MNIST, 256 KB, reduced budget)", "",
        f"`python benchmarks/search_trust.py` ({r['seconds'] / 60:.0f} min on a 2-core machine shared with other "
        f"jobs), which runs:", "", "```text", r["command"], "```", "",
        f"{r['n_fit']} fit / {r['n_val']} validation images (no test image); every finalist trained at full length "
        f"({r['finalist_steps']} steps) on the validation split is the reference ranking.", "",
        f"- Spearman of each rung with the full-length ranking: {rho}.",
        f"- Noise floor at full length: the classifier-only baseline over {nf['repeats']} seeds, sd "
        f"{100 * nf['run_sd']:.2f} points per run (a gain's sd {100 * nf['gain_sd']:.2f}; binomial SE of the "
        f"validation accuracy {100 * nf['binomial_se']:.2f}); {r['gains_above_noise']} finalists' gains above "
        f"{nf['z']:g} x that. At the contribution fine-tunes' length: sd {100 * nf_ft['run_sd']:.2f} points.",
        f"- Best plan that trains backbone weights: {r['best_weight_plan']}"
        + ("" if vs is None else f", {100 * vs['gain']:+.1f} ± {196 * vs['paired_se']:.1f} points (paired 95 % CI) "
           "over classifier-only on the validation split") + ".",
        f"- Chosen: {r['chosen']} ({100 * r['validation_accuracy']:.1f} % on the validation split).", "",
        "| finalist | peak SRAM | remainder bits | predicted gain | " + " | ".join(
            f"{g['steps']} steps" for g in r["rungs"]) + " | full length | gain at full length |",
        "|---|---|---|---|" + "---|" * len(r["rungs"]) + "---|---|",
    ]
    for f in r["finalists"]:
        at = {m["steps"]: m["accuracy"] for m in f["rungs"]}
        pred = "n/a" if f["predicted_gain"] is None else f"{100 * f['predicted_gain']:+.1f}"
        cells = " | ".join(f"{100 * at[g['steps']]:.1f}" if g["steps"] in at else "—" for g in r["rungs"])
        lines.append(f"| {f['name']}{' (chosen)' if f['name'] == r['chosen'] else ''} | "
                     f"{f['peak_sram_bytes'] / 1024:.1f} KB | {f['remainder_bits']} | {pred} | {cells} | "
                     f"{100 * f['full_length']['accuracy']:.1f} | {100 * f['full_length']['gain']:+.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--ft-steps", type=int, default=500)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sram", default="256k")
    ap.add_argument("--time-limit", type=float, help="tinytrain plan --time-limit: caps the contribution phase")
    ap.add_argument("--proposals", type=int, default=4)
    ap.add_argument("--other-remainder-bits", default="0,8")
    args = ap.parse_args()
    model = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
    if not model.exists():
        raise SystemExit(f"needs {model}")
    build = ROOT / "build" / "search_trust"
    build.mkdir(parents=True, exist_ok=True)
    argv = ["plan", os.path.relpath(model, ROOT), "--data", f"fashion-mnist:{args.train_images}", "--new-head", "10",
            "--seed", "0", "--sram", args.sram, "--val", "0.3", "--lr", "0.003", "--head-lr", "0.01",
            "--lr-schedule", "cosine", "--epochs", str(args.epochs), "--ft-steps", str(args.ft_steps),
            "--proposals", str(args.proposals), "--other-remainder-bits", args.other_remainder_bits,
            *(["--time-limit", f"{args.time_limit:g}"] if args.time_limit else []),
            "--workers", str(args.workers), "--cache", "build/search_trust/cache", "--no-progress", "--json",
            "-o", "build/search_trust/plan.json"]
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "tinytrain.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        raise SystemExit(f"tinytrain plan failed: {r.stderr.strip()[-2000:]}")
    report = json.loads((build / "plan.search.json").read_text())
    result = summarize(report, argv, time.time() - t0)
    out = ROOT / "benchmarks" / "results"
    (out / "search_trust.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "search_trust.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
