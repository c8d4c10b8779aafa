"""Time per training step (batch 1) of the emitted C, the numpy simulator and PyTorch eager fp32, in one run.

    python benchmarks/speed.py --only host [--threads 1] [--steps-c 200] [--steps-sim 20] [--steps-torch 100]
                                           [--model NAME ...]

(the host half of benchmarks/speed.py).

For each 128x128 zoo model with its shipped sparse plan (``qemu_instructions.shipped_plans()``: models/NAME.onnx and
models/plans/NAME-sparse.json; default: all three), the same Fashion-MNIST images (train[:64], resized to the input),
one sample per step, every engine on ``--threads`` threads (default 1: the C is single-threaded like the device);
each time is the process's CPU time per step, the best of 3 runs (the machine may be shared: CPU time leaves out the
time other processes hold the cores). Engines:

- c: ``engine_c.CTrainer`` (the emitted tt_train_step, built for the host: gcc -O3 -march=native -ffp-contract=off,
  ``engine_c.TRAIN_CFLAGS``): int8 forward, fp32 backward of the planned layers only, QAS SGD with stochastic
  rounding — what ``train --engine c`` runs;
- sim, whole step: ``simulator.train_step`` on the whole training graph (the spec, one node at a time);
- sim, --engine sim: what ``train --engine sim`` does per step: the frozen layers run once per image, batched
  (their time is spread over the steps), then the trainable suffix per step;
- torch: the model's float twin (models/NAME.py, BatchNorm folded, seed-0 weights) in eager mode: forward, loss,
  ``backward()`` with ``requires_grad`` on the planned parameters only (autograd computes whole weight gradients;
  the update touches the planned rows), SGD. The twin must match the ONNX layer by layer (the same convolutions and
  fully connected layer in order, the same weight shapes and MACs); where it does not, the cell is left blank and
  the reason written beside the table.

Writes benchmarks/results/step_time.json and step_time.md (ratios to the C). ``benchmarks/speed.py`` takes the same
measurement (``measure``) beside the instructions on qemu-m7 and writes these files too.
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


# BLAS / OpenMP thread counts must be fixed before numpy and torch load (benchmarks/speed.py imports this module
# first for the same reason).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_threads_from_argv())

import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)

from common.qemu_instructions import ModelPlan, node_macs, shipped_plans  # noqa: E402


@dataclass(frozen=True)
class Timing:
    """How much is timed: steps per run of each engine, the best of ``repeats`` runs, on ``images`` images."""
    c: int = 200
    sim: int = 20
    torch: int = 100
    repeats: int = 3
    images: int = 64

    @property
    def sim_cli(self) -> int:
        """Steps of the --engine sim run: distinct images, so the batched prefix is spread over real steps."""
        return min(self.images, max(self.sim, 32))


@dataclass(frozen=True)
class StepTime:
    """One model's CPU seconds per training step on each engine (torch None: no matching float twin)."""
    model: str
    plan: str
    input: str
    c: float
    sim_cli: float
    sim_whole: float
    torch: float | None
    torch_note: str
    c_build_seconds: float

    def engines(self) -> dict[str, float | None]:
        return {"c": self.c, "sim_cli": self.sim_cli, "sim_whole": self.sim_whole, "torch": self.torch}

    def ratio_to_c(self, engine: str) -> float | None:
        t = self.engines()[engine]
        return None if t is None else t / self.c

    def to_json(self) -> dict:
        return {**asdict(self), "ms_per_step": {k: None if t is None else t * 1e3 for k, t in self.engines().items()},
                "ratio_to_c": {k: self.ratio_to_c(k) for k in self.engines() if k != "c"}}


def _timed(fn, steps: int, warmup: int, repeats: int) -> float:
    """CPU seconds per step of ``fn(steps)``, the best of ``repeats`` runs."""
    fn(warmup)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn(steps)
        best = min(best, (time.process_time() - t0) / steps)
    return best


def bench_c(tg, x, y, timing: Timing) -> tuple[float, float]:
    from tinytrain.engines.host_c import CTrainer

    t0 = time.perf_counter()
    trainer = CTrainer(tg)
    build = time.perf_counter() - t0
    order = np.arange(timing.c + 10) % len(x)
    per_step = _timed(lambda k: trainer.train(x, y, order[:k]), timing.c, 10, timing.repeats)
    return per_step, build


def bench_sim_whole(tg, x, y, timing: Timing) -> float:
    from tinytrain.simulator import init_state, train_step

    state = init_state(tg)
    n = len(x)

    def run(k):
        for j in range(k):
            train_step(tg, state, x[j % n : j % n + 1], int(y[j % n]))

    return _timed(run, timing.sim, 2, timing.repeats)


def bench_sim_cli(tg, x, y, timing: Timing) -> float:
    """simulator.train as ``train --engine sim`` calls it: the frozen prefix batched over the images, then
    the suffix per step; the prefix time is spread over ``timing.sim_cli`` steps on as many distinct images."""
    from tinytrain.simulator import init_state, train

    state = init_state(tg)
    train(tg, state, x[:2], y[:2])  # warm-up
    k = timing.sim_cli
    best = float("inf")
    for _ in range(timing.repeats):
        t0 = time.process_time()
        train(tg, state, x[:k], y[:k])
        best = min(best, (time.process_time() - t0) / k)
    return best


def torch_twin(name: str, graph):
    """(the float twin of a zoo model, BatchNorm folded, seed-0 weights, and its convolution / fully connected layers
    in network order; "") or (None, why it does not match the ONNX graph layer by layer)."""
    import torch

    from models import ZOO, build_model, fold_bn, layer_macs
    from tinytrain.training.sparse import layers as graph_layers

    if name not in ZOO:
        return None, f"{name} has no float twin in models/"
    torch.manual_seed(0)
    model = fold_bn(build_model(name, num_classes=graph.tensors[graph.outputs[0]].shape[-1])).train()
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    glayers = graph_layers(graph)
    if len(layers) != len(glayers):
        return None, f"the twin of {name} has {len(layers)} layers, the ONNX {len(glayers)}"
    macs = [r["macs"] for r in layer_macs(model, graph.tensors[graph.inputs[0]].shape[1:3])]
    for i, (m, node) in enumerate(zip(layers, glayers)):
        w = graph.tensors[node.inputs[1]].shape
        if m.weight.shape[0] != w[0] or m.weight.numel() != int(np.prod(w)) or macs[i] != node_macs(graph, node):
            return None, f"layer {i} of the twin of {name} ({tuple(m.weight.shape)}, {macs[i]} MACs) is not the ONNX's"
    return (model, layers), ""


def bench_torch(twin, graph, plan, images: np.ndarray, y: np.ndarray, timing: Timing) -> float:
    import torch

    from tinytrain.training.sparse import updated_params

    model, layers = twin
    for p in model.parameters():
        p.requires_grad_(False)
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

    return _timed(run, timing.torch, 5, timing.repeats)


def fashion_images(graph, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST train[:n] as uint8 RGB images of the model's input size (models.build.resize_u8), labels."""
    from models.build import load_fashion_mnist, resize_u8

    d = load_fashion_mnist()
    size = graph.tensors[graph.inputs[0]].shape[1]
    return np.repeat(resize_u8(d["train_x"][:n], size)[..., None], 3, axis=3), d["train_y"][:n].astype(np.int64)


def measure(target: ModelPlan, timing: Timing) -> StepTime:
    """One model with its plan on every engine, on the threads fixed by ``pin_threads``."""
    from tinytrain.data import model_inputs
    from tinytrain.frontends import load_model
    from tinytrain.training.train_graph import build_training_graph

    graph = load_model(target.path)
    tg = build_training_graph(graph, target.plan)
    images, y = fashion_images(graph, timing.images)
    x = model_inputs(graph, images)
    c, build = bench_c(tg, x, y, timing)
    twin, note = torch_twin(target.name, graph)
    return StepTime(model=target.name, plan=target.source, input="x".join(map(str, x.shape[1:])), c=c,
                    sim_cli=bench_sim_cli(tg, x, y, timing), sim_whole=bench_sim_whole(tg, x, y, timing),
                    torch=None if twin is None else bench_torch(twin, graph, target.plan, images, y, timing),
                    torch_note=note, c_build_seconds=round(build, 2))


def pin_threads(threads: int) -> None:
    """PyTorch's intra-op threads (BLAS / OpenMP are fixed from --threads when this module loads)."""
    import torch

    torch.set_num_threads(threads)


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown CPU")


def meta(timing: Timing, threads: int, command: str) -> dict:
    """The run's settings and machine, with the load average at the time of the call."""
    import torch

    from tinytrain.engines.host_c import TRAIN_CFLAGS

    return {"command": command, "threads": threads, "batch": 1, "repeats": timing.repeats,
            "steps": {"c": timing.c, "sim_whole": timing.sim, "sim_cli": timing.sim_cli, "torch": timing.torch},
            "data": f"Fashion-MNIST train[:{timing.images}], resized to the model input (models.build.resize_u8)",
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cpu": _cpu_model(),
            "cores": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "cflags": list(TRAIN_CFLAGS),
            "cc": subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
            "load_average_1min": round(os.getloadavg()[0], 2)}


def markdown(rows: list[StepTime], meta: dict) -> str:
    flags = " ".join(f for f in meta["cflags"] if f.startswith(("-O", "-march")))
    engines = [("c", f"c (emitted C, gcc {flags})"), ("sim_cli", "sim, --engine sim (frozen prefix batched)"),
               ("sim_whole", "sim, whole step (simulator.train_step)"), ("torch", "torch eager fp32")]
    lines = [f"# Training step time, batch 1 (zoo models, shipped sparse plans; {meta['threads']} thread(s))", "",
             f"Measured in one run by `{meta['command']}` on {meta['machine']}, {meta['cc']}, numpy {meta['numpy']}, "
             f"torch {meta['torch']}, {meta['cpu']}. CPU time per step in ms (× the C), best of {meta['repeats']} "
             f"runs per engine. C builds (once, cached): {', '.join(f'{r.c_build_seconds:.1f} s' for r in rows)}. "
             f"Load average during the run: {meta['load_average_1min']:.1f} (on {meta['cores']} cores).", "",
             "| model | plan | input | " + " | ".join(label for _, label in engines) + " |",
             "|---|---|---|" + "---:|" * len(engines)]
    for r in rows:
        cells = ["—" if t is None else f"{t * 1e3:.1f} ({r.ratio_to_c(k):.2f}×)" for k, t in r.engines().items()]
        lines.append(f"| {r.model} | {r.plan} | {r.input} | " + " | ".join(cells) + " |")
    lines += ["", twin_note(rows)]
    return "\n".join(lines) + "\n"


def twin_note(rows: list[StepTime]) -> str:
    """Which float twins matched their ONNX (timed by PyTorch) and why the others did not (blank cells)."""
    notes = [f"{r.model}: {r.torch_note}" for r in rows if r.torch_note]
    except_ = f", except — {'; '.join(notes)} (left blank)." if notes else "."
    return ("PyTorch: each model's float twin (models/NAME.py, BatchNorm folded, seed-0 weights) matches its ONNX "
            "layer by layer (weight shapes and MACs)" + except_)


def write(rows: list[StepTime], meta: dict, out: Path) -> str:
    """step_time.json and .md at ``out`` (a path without suffix); returns the markdown."""
    text = markdown(rows, meta)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": [r.to_json() for r in rows]}, indent=1) + "\n")
    out.with_suffix(".md").write_text(text)
    return text


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The steps timed per engine (shared with benchmarks/speed.py)."""
    ap.add_argument("--steps-c", type=int, default=Timing.c)
    ap.add_argument("--steps-sim", type=int, default=Timing.sim)
    ap.add_argument("--steps-torch", type=int, default=Timing.torch)


def timing_of(args: argparse.Namespace) -> Timing:
    return Timing(c=args.steps_c, sim=args.steps_sim, torch=args.steps_torch)
