"""Forward-pass throughput of the numpy simulator against the TFLite Micro reference interpreter.

    .venv/bin/python benchmarks/bench_forward.py [--images N]

Prints a table and writes benchmarks/results/forward.json. Needs ../shared (the VWW model and images).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from tinytrain.data import load_dataset, model_inputs
from tinytrain.frontends import load_model
from tinytrain.simulator import forward

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def tflm_forward(model_path: Path, x: np.ndarray) -> np.ndarray:
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(str(model_path), arena_size=2 * 1024 * 1024)
    outs = []
    for img in x:
        interp.set_input(img[None], 0)
        interp.invoke()
        outs.append(interp.get_output(0)[0].copy())
    return np.stack(outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=800)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "forward.json"))
    args = ap.parse_args()
    model_path = SHARED / "models" / "vww_96_int8.tflite"
    data = load_dataset(SHARED / "data" / "vww96" / "vww96_dev800.npz")
    graph = load_model(model_path)
    x = model_inputs(graph, data.x[: args.images])

    t0 = time.perf_counter()
    sim = forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    t_sim = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = tflm_forward(model_path, x)
    t_ref = time.perf_counter() - t0
    accuracy = float((sim.argmax(1) == data.y[: args.images]).mean())
    rows = [("numpy simulator", t_sim), ("tflite-micro (reference kernels)", t_ref)]
    print(f"VWW MobileNetV1-0.25 96x96 int8, {len(x)} images, {platform.machine()}")
    print(f"{'engine':<34}{'seconds':>10}{'images/s':>10}")
    for name, t in rows:
        print(f"{name:<34}{t:>10.2f}{len(x) / t:>10.1f}")
    print(f"outputs identical: {bool(np.array_equal(sim, ref))}   top-1 accuracy: {accuracy:.4f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "model": "vww_96_int8.tflite", "images": len(x), "simulator_seconds": t_sim, "tflm_seconds": t_ref,
        "identical": bool(np.array_equal(sim, ref)), "accuracy": accuracy,
        "command": "python benchmarks/bench_forward.py"}, indent=1) + "\n")


if __name__ == "__main__":
    main()
