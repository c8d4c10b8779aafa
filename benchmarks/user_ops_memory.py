"""Peak SRAM of the training steps of the MLPerf Tiny reference models and of the MobileNetV3-Small-like zoo model
(issue 29) at a 256 KB budget: ``tinytrain.compile`` per model and plan (last-k:2, and each MLPerf Tiny model's
searched plan, models/plans/mlperf/, benchmarks/mlperf_plans.py), written to
benchmarks/results/user_ops_memory.{md,json}.

    python benchmarks/user_ops_memory.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
PLANS = ROOT / "models" / "plans" / "mlperf"
COMMAND = "python benchmarks/user_ops_memory.py"


def _sparse(n: int) -> dict:
    """tests/test_user_ops_model.py's sparse plan for an n-layer model."""
    return {"version": 1, "bias_last_k": 12, "lr": 0.01,
            "weights": [{"conv": n - 1, "ratio": 1.0}, {"conv": n - 2, "ratio": 0.5}, {"conv": n - 4, "ratio": 0.25},
                        {"conv": n - 7, "ratio": 0.125}]}


def _plan(name: str, which: str, graph):
    from tinytrain.training.sparse import layers, load_plan, parse_plan

    if which == "searched":
        return load_plan(PLANS / f"{name}-searched.json")
    return parse_plan(_sparse(len(layers(graph))))


def _cases():
    for name in ("pretrainedResnet_quant", "kws_ref_model", "ad01_int8", "vww_96_int8"):
        yield name, SHARED / f"{name}.tflite", "last-k:2"
        yield name, SHARED / f"{name}.tflite", "searched"
    yield "mbv3s-w0.5", ROOT / "models" / "mbv3s-w0.5.onnx", "last-k:2"
    yield "mbv3s-w0.5", ROOT / "models" / "mbv3s-w0.5.onnx", "sparse"


def _updates(plan) -> str:
    """A plan in a few words: its bias depth and its weight layers (index x ratio)."""
    weights = ", ".join(f"{w.conv}" + (f"x{w.ratio:g}" if w.ratio != 1 else "") for w in plan.weights)
    return f"biases of the last {plan.bias_last_k}, weights {weights}"


def main() -> int:
    import tinytrain
    from tinytrain.frontends import load_model

    rows = []
    for name, path, which in _cases():
        if not path.exists():
            print(f"skip {name}: {path} is absent", file=sys.stderr)
            continue
        graph = load_model(path)
        kwargs = {"update": which} if which == "last-k:2" else {"plan": _plan(name, which, graph)}
        loss = "mse" if name == "ad01_int8" else None  # the autoencoder's loss (a plan file carries its own)
        c = tinytrain.compile(graph, sram="256k", flash="1m", loss=None if "plan" in kwargs else loss, **kwargs)
        plan = kwargs.get("plan")
        rows.append({"model": name, "plan": which, "loss": loss or "xent",
                     "updates": _updates(plan) if plan else None, "peak_sram_bytes": c.report.peak_sram_bytes,
                     "flash_bytes": c.report.flash_bytes, "fits": c.report.fits,
                     "ops": sorted({n.op for n in graph.nodes}), "nonfinite_guard": c.nonfinite_guard})
        print(rows[-1], flush=True)
    out = ROOT / "benchmarks" / "results"
    (out / "user_ops_memory.json").write_text(json.dumps({"command": COMMAND, "sram_budget": "256k",
                                                          "rows": rows}, indent=2) + "\n")
    lines = [f"Training-step peak SRAM at a 256 KB budget (`{COMMAND}`).", "",
             "Searched: `tinytrain plan --sram 256k` on small data (models/plans/mlperf/provenance.json); "
             "ad01 trains with the mse loss. Trained weights keep 4-bit remainders (the default plan field "
             "remainder_bits 4, docs/design.md §3), hence more than int8-only plans.", "",
             "| model | plan | peak SRAM | flash | fits | ops |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['plan']}{' (' + r['updates'] + ')' if r['updates'] else ''} "
              f"| {r['peak_sram_bytes'] / 1024:.1f} KB | {r['flash_bytes'] / 1024:.1f} KB "
              f"| {'yes' if r['fits'] else 'no'} | {', '.join(r['ops'])} |" for r in rows]
    (out / "user_ops_memory.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
