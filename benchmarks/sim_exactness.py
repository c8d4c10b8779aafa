"""The simulator (the spec) against the host C on every shipped plan: losses, state and logits, bit for bit.

    .venv/bin/python benchmarks/sim_exactness.py [--steps 4] [--plan NAME ...]

For each plan of models/plans (with its model models/<model>.onnx): the training graph, STEPS synthetic samples
(seed 0), both engines free-running from the initial state — the simulator (simulator.train) and the host C
(engine_c.CTrainer, what `train --engine c` runs) — then one more image through the trained weights. Compared: the
losses' float32 bits, the packed state (tt_state.bin) and the int8 logits; beside them each engine's time per step
(the simulator's is the fp32 backward in the kernels' float32 order, docs/design.md §3b). A few minutes on 2 cores.
The QEMU cores equal the host C (benchmarks/shipped_plans_exactness.py).

Writes benchmarks/results/sim_exactness.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tinytrain import simulator
from tinytrain.codegen.state import pack, unpack
from tinytrain.data import model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.frontends import load_model
from tinytrain.training.sparse import load_plan
from tinytrain.training.train_graph import build_training_graph

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)


def measure(plan_path: Path, steps: int, cache: Path) -> dict:
    """One plan: both engines trained on the same samples, compared byte for byte."""
    g = load_model(ROOT / "models" / (plan_path.stem.rsplit("-", 1)[0] + ".onnx"))
    tg = build_training_graph(g, load_plan(plan_path))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (steps + 1, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, g.tensors[g.outputs[0]].shape[-1], steps + 1)
    c = CTrainer(tg, cache)
    t0 = time.process_time()
    losses = np.asarray(c.train(x[:steps], y[:steps]), np.float32)
    c_ms = (time.process_time() - t0) / steps * 1000
    state = simulator.init_state(tg)
    t0 = time.process_time()
    sim_losses = np.asarray(simulator.train(tg, state, x[:steps], y[:steps]), np.float32)
    sim_ms = (time.process_time() - t0) / steps * 1000
    host = unpack(tg, c.state_bytes()).tensors
    equal = sum(int(np.sum(np.asarray(state.tensors[k]) == v)) for k, v in host.items())
    logits = simulator.forward(simulator.with_state(g, state), {g.inputs[0]: x[steps:]})[g.outputs[0]]
    return {"model": plan_path.stem.rsplit("-", 1)[0], "plan": str(plan_path.relative_to(ROOT)), "steps": steps,
            "same_losses": bool(np.array_equal(sim_losses.view(np.uint32), losses.view(np.uint32))),
            "same_state": pack(tg, state) == c.state_bytes(),
            "state_equal_fraction": equal / sum(v.size for v in host.values()),
            "same_logits": bool(np.array_equal(logits.reshape(len(logits), -1), c.predict(x[steps:]))),
            "losses": [float(v) for v in losses], "sim_ms_per_step": round(sim_ms, 1),
            "c_ms_per_step": round(c_ms, 2)}


def markdown(rows: list[dict], meta: dict) -> str:
    yes = lambda v: "identical" if v else "DIFFERENT"  # noqa: E731
    lines = ["# The simulator against the host C on every shipped plan: bit for bit", "",
             f"`{meta['command']}` — {meta['date']}. {rows[0]['steps'] if rows else 0} synthetic samples (seed 0), "
             "both engines free-running from the initial state (4-bit weight remainders, the default), then one "
             "more image through the trained weights. The simulator's fp32 backward sums in the kernels' float32 "
             "order with their fused multiply-adds (docs/design.md §3b, tinytrain/f32.py); the QEMU cores equal the "
             "host C (shipped_plans_exactness.md). Times: CPU time per training step on a shared 2-core host "
             "(indicative).", "",
             "| plan | losses (float32 bits) | state (tt_state.bin) | logits after training | simulator ms / step "
             "| host C ms / step |",
             "|---|---|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {Path(r['plan']).stem} | {yes(r['same_losses'])} | {yes(r['same_state'])} "
                     f"| {yes(r['same_logits'])} | {r['sim_ms_per_step']:.0f} | {r['c_ms_per_step']:.1f} |")
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--plan", nargs="+", help="plan names (models/plans/NAME.json); default: every shipped plan")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sim_exactness"))
    args = ap.parse_args()
    meta = {"command": " ".join(["python benchmarks/sim_exactness.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d")}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tt-sim-exact-") as cache:
        for plan_path in sorted((ROOT / "models" / "plans").glob("*.json")):
            if args.plan and plan_path.stem not in args.plan:
                continue
            rows.append(measure(plan_path, args.steps, Path(cache)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    Path(args.out + ".md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))
    if not all(r["same_losses"] and r["same_state"] and r["same_logits"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
