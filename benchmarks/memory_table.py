"""Peak SRAM of one training step (batch 1, 128x128) per model and update plan, beside the published
figures and PyTorch's measured memory for the same model and plan.

    .venv/bin/python benchmarks/memory_table.py [--no-torch]      (or: make memory-table)

Writes benchmarks/results/memory.json and memory.md. For each model (MobileNetV2-w0.35, ProxylessNAS-w0.3,
MCUNet-5fps) and plan (full update, last-k:6, bias-only, the shipped sparse plan models/plans/*.json) the
training graph is planned three ways:

- naive: the graph as autodiff builds it (every update after the whole backward pass), one buffer per tensor;
- reorder: the device step (training/device_step.py): 1-bit clamp masks where the backward reads an int8 output
  only through its clamp (training/masks.py), each weight gradient fused with its update, computed and applied a
  block of output-channel rows at a time (training/fuse.py), updates applied as soon as their gradient exists,
  backward list-scheduled (training/reorder.py);
- reorder + in-place: and outputs overwriting dead inputs where ops allow it (memory/inplace.py) — the
  default of ``tinytrain compile``.

Peak SRAM = arena + SRAM copies of the updated parameters + optimizer state (none: plain SGD) + runtime +
stack (measured: benchmarks/stack.py). PyTorch figures come from benchmarks/torch_memory.py (one fresh process per model and plan;
its docstring gives the method). The compile command's answer at --sram 256k is recorded for the sparse
and the full plan.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps")
PLANS = ("full", "last-k:6", "bias-only", "sparse")
BUDGET = 256 * 1024
# docs/design.md §7: peak SRAM of the training step, sparse update + reordering, and full update (STM32F746).
PUBLISHED = {"mbv2-w0.35": {"sparse": 141 * 1024, "full": 2.9 * 1024 * 1024},
             "proxyless-w0.3": {"sparse": 135 * 1024, "full": 2.7 * 1024 * 1024},
             "mcunet-5fps": {"sparse": 173 * 1024, "full": 3.6 * 1024 * 1024}}
VARIANTS = (("naive", False, False), ("reorder", True, False), ("reorder+inplace", True, True))


def plan_path(model: str) -> Path:
    return ROOT / "models" / "plans" / f"{model}-sparse.json"


def ours(model: str, spec: str) -> dict:
    from tinytrain.frontends import load_model
    from tinytrain.memory.report import plan_memory
    from tinytrain.training.device_step import device_schedule
    from tinytrain.training.sparse import load_plan, preset
    from tinytrain.training.train_graph import build_training_graph

    graph = load_model(ROOT / "models" / f"{model}.onnx")
    plan = load_plan(plan_path(model)) if spec == "sparse" else preset(spec, graph)
    step = build_training_graph(graph, plan)
    reordered = device_schedule(step)
    result = {}
    for name, do_reorder, inplace in VARIANTS:
        g = reordered if do_reorder else step
        r = plan_memory(g, BUDGET, 1 << 30, inplace=inplace)
        node = g.nodes[r.peak_step]
        result[name] = {"peak_sram_bytes": r.peak_sram_bytes, "arena_bytes": r.arena_bytes,
                        "max_live_bytes": r.max_live_bytes, "trainable_sram_bytes": r.trainable_sram_bytes,
                        "static_sram_bytes": r.static_sram_bytes, "fits_256k": r.fits,
                        "peak_step": r.peak_step, "peak_node": f"{node.op} {node.name}", "steps": len(g.nodes)}
    return result


def torch_figures(model: str, spec: str) -> dict:
    arg = str(plan_path(model)) if spec == "sparse" else spec
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "torch_memory.py"), model, arg],
                       capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(r.stdout.strip().splitlines()[-1])


def compile_answer(model: str, spec: str) -> dict:
    """What ``tinytrain compile MODEL --sram 256k`` says for the plan: exit code and its one-line error."""
    from tinytrain.cli import main

    args = ["--plan", str(plan_path(model))] if spec == "sparse" else ["--update", spec]
    err, out = io.StringIO(), io.StringIO()
    with TemporaryDirectory() as tmp, redirect_stderr(err), redirect_stdout(out):
        code = main(["compile", str(ROOT / "models" / f"{model}.onnx"), "--sram", "256k", *args,
                     "-o", str(Path(tmp) / "out")])
    return {"exit_code": code, "message": err.getvalue().strip()}


def kb(n: float | None) -> str:
    if n is None:
        return "–"
    return f"{n / 1024 / 1024:.2f} MB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KB"


def markdown(results: dict, with_torch: bool) -> str:
    from tinytrain.memory.report import RUNTIME_BYTES, STACK_BYTES

    lines = [
        "# Peak SRAM of one training step (batch 1, 128×128)",
        "",
        "Generated by `benchmarks/memory_table.py` (`make memory-table`) — do not edit by hand.",
        "",
        "tinytrain: int8 forward, fp32 backward, SGD without momentum; peak SRAM = planned arena + SRAM copies of",
        "the updated parameters (a partially updated weight: only its selected output-channel rows) + runtime",
        f"({RUNTIME_BYTES} B, an estimate) + stack ({STACK_BYTES} B: the largest high-water mark measured on the QEMU",
        "boards + a margin, benchmarks/results/stack.md). In every column the frozen forward prefix runs row-streamed in",
        "line buffers when that lowers the peak (memory/stream.py; the input a 3-row buffer fed by a row source).",
        "*naive*: updates after the whole backward, one buffer per tensor;",
        "*reorder*: the device step (training/device_step.py): 1-bit clamp masks saved instead of int8 outputs",
        "the backward reads only through a clamp, each weight gradient fused with its update (computed and applied",
        "a block of output-channel rows at a time, in a scratch of at most 2 KB or one row), each update as early",
        "as it can run, backward list-scheduled to free buffers early;",
        "*+in-place*: outputs overwrite dead inputs where the op's access pattern allows (depthwise, 1×1,",
        "elementwise; depthwise and 1×1 input gradients over their output gradient). Published: docs/design.md §7",
        "(sparse update + reordering; full update). PyTorch: the same architecture in fp32 (BatchNorm folded),",
        "`requires_grad` only on the plan's tensors (whole tensors),",
        "one SGD step measured in a fresh process — *tensors*: peak bytes of live tensors (parameters + the step's",
        "allocations, from the profiler's memory timeline), *RSS*: the process's peak resident set (Δ: its growth",
        "over the step). See `benchmarks/torch_memory.py` for the method.",
        "",
        "| model | plan | naive | reorder | reorder + in-place | fits 256 KB | published | PyTorch tensors | "
        "PyTorch RSS (Δ step) |",
        "|---|---|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    for model, per_plan in results["models"].items():
        for spec, r in per_plan.items():
            o = r["tinytrain"]
            pub = PUBLISHED[model].get(spec)
            t = r.get("torch")
            lines.append(
                f"| {model} | {spec} | {kb(o['naive']['peak_sram_bytes'])} | {kb(o['reorder']['peak_sram_bytes'])} | "
                f"**{kb(o['reorder+inplace']['peak_sram_bytes'])}** | "
                f"{'yes' if o['reorder+inplace']['fits_256k'] else 'no'} | {kb(pub)} | "
                f"{kb(t['tensor_peak_bytes']) if t else '–'} | "
                f"{(kb(t['rss_peak_bytes']) + ' (' + kb(t['rss_step_delta_bytes']) + ')') if t else '–'} |")
    lines += ["", "## Where the peak is (reorder + in-place)", "",
              "| model | plan | peak step | arena | largest live set | arena / live | trainable copies |",
              "|---|---|---|---:|---:|---:|---:|"]
    for model, per_plan in results["models"].items():
        for spec, r in per_plan.items():
            o = r["tinytrain"]["reorder+inplace"]
            lines.append(f"| {model} | {spec} | {o['peak_step']}/{o['steps']} `{o['peak_node'][:60]}` | "
                         f"{kb(o['arena_bytes'])} | {kb(o['max_live_bytes'])} | "
                         f"{o['arena_bytes'] / o['max_live_bytes']:.3f} | {kb(o['trainable_sram_bytes'])} |")
    lines += ["", "## `tinytrain compile MODEL --sram 256k` on the sparse and the full plan", ""]
    for model, per_plan in results["models"].items():
        for spec in ("sparse", "full"):
            c = per_plan[spec]["compile"]
            lines.append(f"- {model} {spec}: exit {c['exit_code']}" + (f" — `{c['message']}`" if c["message"] else
                                                                         " (fits; project written)"))
    lines += ["", "## Notes", "",
              "- Layer by layer, every sparse plan peaked in the forward pass (MobileNetV2-w0.35: block 2's 64×64×48",
              "  expand output, 192 KB). Streamed, the frozen prefix holds a few rows of each tensor (the input a",
              "  3-row buffer filled by a row source), and the backward sets the peak: with the clamp masks saved as",
              "  bits and the input gradients written over the output gradients they read, all three sparse plans are",
              "  below 0.8x the published engine (tests/test_memory_schedule.py asserts the peaks).",
              "- The ProxylessNAS and MCUNet sparse plans were re-chosen for the streamed step, with at least as many",
              "  trainable bytes as before (models/plans/README.md).",
              "- The published full-update figures are for the paper's own setup; ours keep int8 activations and",
              "  frozen weights in flash, so even the full update needs less than theirs — but never 256 KB.",
              "- PyTorch's process RSS is dominated by the runtime itself (~300 MB of libraries).",
              ""]
    if not with_torch:
        lines.append("(PyTorch columns skipped: --no-torch.)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch measurements")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    results = {"budget_bytes": BUDGET, "machine": platform.machine(), "models": {}}
    for model in MODELS:
        per_plan = {}
        for spec in PLANS:
            entry = {"tinytrain": ours(model, spec), "published_bytes": PUBLISHED[model].get(spec)}
            if spec in ("sparse", "full"):
                entry["compile"] = compile_answer(model, spec)
            if not args.no_torch:
                entry["torch"] = torch_figures(model, spec)
            per_plan[spec] = entry
            o = entry["tinytrain"]
            print(f"{model:15} {spec:10} naive {kb(o['naive']['peak_sram_bytes']):>10}  reorder "
                  f"{kb(o['reorder']['peak_sram_bytes']):>10}  +in-place {kb(o['reorder+inplace']['peak_sram_bytes']):>10}"
                  + (f"  torch {kb(entry['torch']['tensor_peak_bytes']):>10}" if "torch" in entry else ""), flush=True)
        results["models"][model] = per_plan
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "memory.md").write_text(markdown(results, not args.no_torch))
    print(f"wrote {out / 'memory.json'} and {out / 'memory.md'}")


if __name__ == "__main__":
    main()
