"""Time per training step (batch 1) of the emitted C, the numpy simulator and PyTorch eager fp32, in one run.

    .venv/bin/python benchmarks/step_time.py [--threads 1] [--steps-c 200] [--steps-sim 20] [--steps-torch 100]

Same model (MobileNetV2-w0.35 at 128x128, models/mbv2-w0.35.onnx and its float twin models/mbv2.py with BatchNorm
folded), same sparse-update plan (PLAN: biases of the last 16 layers, weights of 4 layers at ratios 1 .. 1/8),
same Fashion-MNIST images, one sample per step, every engine on ``--threads`` threads (default 1: the C is
single-threaded like the device); each time is the process's CPU time per step, the best of 3 runs (the machine may
be shared: CPU time leaves out the time other processes hold the cores). Engines:

- c: ``engine_c.CTrainer`` (the emitted tt_train_step, built for the host: gcc -O3 -march=native -ffp-contract=off,
  ``engine_c.TRAIN_CFLAGS``): int8 forward, fp32 backward of the planned layers only, QAS SGD with stochastic
  rounding — what ``train --engine c`` runs;
- sim, whole step: ``simulator.train_step`` on the whole training graph (the spec, one node at a time);
- sim, --engine sim: what ``train --engine sim`` does per step: the frozen layers run once per image, batched
  (their time is spread over the steps), then the trainable suffix per step;
- torch: the float model in eager mode: forward, loss, ``backward()`` with ``requires_grad`` on the planned
  parameters only (autograd computes whole weight gradients; the update touches the planned rows), SGD.

Writes benchmarks/results/step_time.json and step_time.md (ratios to the C).
"""

from __future__ import annotations

import argparse
import os
import sys


def _threads_from_argv() -> int:
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return 1


# BLAS / OpenMP thread counts must be fixed before numpy and torch load.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_threads_from_argv())

import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAN = {"version": 1, "bias_last_k": 16, "lr": 0.01,
        "weights": [{"conv": 52, "ratio": 1.0}, {"conv": 51, "ratio": 0.5}, {"conv": 50, "ratio": 0.25},
                    {"conv": 47, "ratio": 0.125}]}
MODEL = "mbv2-w0.35"


REPEATS = 3  # the machine may be shared: each engine's time is the best of REPEATS runs of ``steps`` steps


def _timed(fn, steps: int, warmup: int) -> float:
    """CPU seconds per step of ``fn(steps)``, the best of REPEATS runs."""
    fn(warmup)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.process_time()
        fn(steps)
        best = min(best, (time.process_time() - t0) / steps)
    return best


def bench_c(tg, x, y, steps: int) -> tuple[float, float]:
    from tinytrain.engine_c import CTrainer

    t0 = time.perf_counter()
    trainer = CTrainer(tg)
    build = time.perf_counter() - t0
    n = len(x)
    order = np.arange(steps + 10) % n
    per_step = _timed(lambda k: trainer.train(x, y, order[:k]), steps, 10)
    return per_step, build


def bench_sim_whole(tg, x, y, steps: int) -> float:
    from tinytrain.simulator import init_state, train_step

    state = init_state(tg)
    n = len(x)

    def run(k):
        for j in range(k):
            train_step(tg, state, x[j % n : j % n + 1], int(y[j % n]))

    return _timed(run, steps, 2)


def bench_sim_cli(tg, x, y, steps: int) -> float:
    """simulator.train as ``train --engine sim`` calls it: the frozen prefix batched over the images, then
    the suffix per step; the prefix time is spread over ``steps`` steps on ``steps`` distinct images."""
    from tinytrain.simulator import init_state, train

    state = init_state(tg)
    train(tg, state, x[:2], y[:2])  # warm-up
    k = min(steps, len(x))
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.process_time()
        train(tg, state, x[:k], y[:k])
        best = min(best, (time.process_time() - t0) / k)
    return best


def torch_model():
    import torch

    from models import build_model, fold_bn

    torch.manual_seed(0)
    model = fold_bn(build_model(MODEL, num_classes=10)).train()
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    return model, layers


def bench_torch(graph, images: np.ndarray, y: np.ndarray, steps: int) -> float:
    import torch

    from tinytrain.training.sparse import layers as graph_layers
    from tinytrain.training.sparse import parse_plan, updated_params

    model, layers = torch_model()
    glayers = graph_layers(graph)
    assert len(layers) == len(glayers), (len(layers), len(glayers))
    for m, node in zip(layers, glayers):  # the same architecture, layer by layer
        w = graph.tensors[node.inputs[1]].shape
        assert m.weight.shape[0] == w[0] and m.weight.numel() == int(np.prod(w)), (m, w)
    for p in model.parameters():
        p.requires_grad_(False)
    plan = parse_plan(PLAN)
    trainable = []
    for u in updated_params(plan, graph):
        m = layers[u.layer]
        p = m.bias if u.is_bias else m.weight
        p.requires_grad_(True)
        trainable.append((p, p.shape[0] if u.channels is None else len(u.channels), u.lr))
    x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)).astype(np.float32) / 255.0)
    t = torch.from_numpy(y.astype(np.int64))
    loss_fn = torch.nn.CrossEntropyLoss()
    n = len(x)

    def run(k):
        for j in range(k):
            loss = loss_fn(model(x[j % n : j % n + 1]), t[j % n : j % n + 1])
            loss.backward()
            with torch.no_grad():
                for p, rows, lr in trainable:
                    p[:rows] -= lr * p.grad[:rows]
                    p.grad = None

    return _timed(run, steps, 5)


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps-c", type=int, default=200)
    ap.add_argument("--steps-sim", type=int, default=20)
    ap.add_argument("--steps-torch", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "step_time"))
    args = ap.parse_args()

    import torch

    from models.build import load_fashion_mnist
    from tinytrain.data import model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.sparse import parse_plan
    from tinytrain.training.train_graph import build_training_graph

    torch.set_num_threads(args.threads)
    graph = load_model(ROOT / "models" / f"{MODEL}.onnx")
    tg = build_training_graph(graph, parse_plan(PLAN))
    d = load_fashion_mnist()
    n = 64
    from models.build import resize_u8

    images = np.repeat(resize_u8(d["train_x"][:n], 128)[..., None], 3, axis=3)
    y = d["train_y"][:n].astype(np.int64)
    x = model_inputs(graph, images)

    c, build = bench_c(tg, x, y, args.steps_c)
    sim_whole = bench_sim_whole(tg, x, y, args.steps_sim)
    sim_cli = bench_sim_cli(tg, x, y, min(n, max(args.steps_sim, 32)))
    tor = bench_torch(graph, images, y, args.steps_torch)
    from tinytrain.engine_c import TRAIN_CFLAGS

    flags = " ".join(f for f in TRAIN_CFLAGS if f.startswith(("-O", "-march")))
    rows = [(f"c (emitted C, gcc {flags})", c), ("sim, --engine sim (frozen prefix batched)", sim_cli),
            ("sim, whole step (simulator.train_step)", sim_whole), ("torch eager fp32", tor)]
    cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    result = {
        "model": f"models/{MODEL}.onnx", "input": "128x128x3", "batch": 1, "plan": PLAN, "threads": args.threads,
        "data": "Fashion-MNIST train[:64], resized to 128x128 (models.build.resize_u8)",
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
        "numpy": np.__version__, "torch": torch.__version__, "cc": cc, "cflags": list(TRAIN_CFLAGS),
        "cpu": _cpu_model(), "c_build_seconds": round(build, 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "steps": {"c": args.steps_c, "sim_whole": args.steps_sim, "sim_cli": min(n, max(args.steps_sim, 32)),
                  "torch": args.steps_torch},
        "ms_per_step": {"c": c * 1e3, "sim_cli": sim_cli * 1e3, "sim_whole": sim_whole * 1e3, "torch": tor * 1e3},
        "ratio_to_c": {"sim_cli": sim_cli / c, "sim_whole": sim_whole / c, "torch": tor / c},
        "command": "python benchmarks/step_time.py" + (f" --threads {args.threads}" if args.threads != 1 else ""),
    }
    lines = [f"# Training step time, batch 1 ({MODEL}, 128x128, sparse plan; {args.threads} thread(s))", "",
             f"Measured in one run by `{result['command']}` on {result['machine']}, {cc}, numpy {np.__version__}, "
             f"torch {torch.__version__}, {result['cpu']}. Plan: `{json.dumps(PLAN)}`. CPU time per step, best of "
             f"{REPEATS} runs per engine. "
             f"C build (once, cached): {build:.1f} s. Load average during the run: {os.getloadavg()[0]:.1f} "
             f"(on {os.cpu_count()} cores).", "",
             "| engine | ms / step | × the C |", "|---|---:|---:|"]
    for name, t in rows:
        lines.append(f"| {name} | {t * 1e3:.1f} | {t / c:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
