"""Instructions per training step and per inference on the emulated Cortex-M7 (qemu-m7), beside the published
latencies and a lower bound from MAC counts; RAM and flash of each firmware.

    python benchmarks/speed.py --only qemu [--steps 3] [--inferences 2] [--board qemu-m7] [--model NAME ...]

(the QEMU half of benchmarks/speed.py).

For each shipped model (models/*.onnx) with its shipped sparse plan (models/plans/NAME-sparse.json; the
MobileNetV1-0.25 VWW models have none shipped and use VWW_PLAN below), and the MLPerf VWW model from ../shared
when it is there: `emit_compile_dir` (the compile, --sram 256k --flash 1m) -> firmware for the board, linked with
RAM = 256 KB -> QEMU (-icount shift=0) trains --steps steps and runs --inferences inferences, counting
instructions with SysTick (firmware/c/tt_ticks.h). When the firmware does not link at 256 KB the
overflow is recorded and the instructions are measured with a RAM region of the board's 4 MB instead
(instruction counts do not depend on where memory is).

Columns: the published training latency per image (STM32F746 at 216 MHz, sparse update, docs/design.md §7) as
cycles; a lower bound in cycles from the MAC counts of the training step — int8 MACs (the int8 forward) at 2
per cycle (SMLAD), fp32 MACs (backward and everything float) at 1 per cycle (VFMA-free fp32 multiply-add is at
best one per cycle); the instructions QEMU counted. Instructions are not cycles: a Cortex-M7 issues up to two
instructions per cycle and stalls on memory, so this compares orders of magnitude, not exact timing.
Images are synthetic (uniform random pixels, seed 0): the counts vary by well under 1 % across images.
Where the instructions go, per op family and per kernel, and what the requantization costs: benchmarks/common/qemu_profile.py
(two more firmwares per model, instrumented copies of the same C).

Writes benchmarks/results/qemu_instructions.json and .md. ``benchmarks/speed.py`` takes the same measurement
(``measure_row``) beside the host time per step and writes these files too.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from common import ROOT, SHARED  # (puts the checkout on sys.path)
from common.qemu_profile import FAMILIES, profile
from tinytrain.engines import qemu as engine_qemu
from tinytrain.data import model_inputs
from tinytrain.cores import STACK_BYTES
from tinytrain.frontends import load_model
from tinytrain.ir import DType
from tinytrain.ops import get_op
from tinytrain.training.sparse import load_plan, parse_plan
from tinytrain.training.train_graph import build_training_graph

KB, MB = 1024, 1024 * 1024
CLOCK_HZ = 216e6
PUBLISHED_MS = {"mbv2-w0.35": 373, "proxyless-w0.3": 443, "mcunet-5fps": 546}
VWW_PLAN = {"version": 1, "bias_last_k": 12, "weights": [{"conv": 24, "ratio": 0.25}, {"conv": 26, "ratio": 0.5},
                                                         {"conv": 27, "ratio": 1.0}], "channels": "first", "lr": 0.01}


class ModelPlan(NamedTuple):
    """A model to measure, with its plan and where the plan comes from (a path under the checkout or VWW_PLAN)."""
    name: str
    path: Path
    plan: object
    source: str


def shipped_plans() -> list[ModelPlan]:
    """The three 128x128 zoo models, each with its shipped sparse plan (models/plans/NAME-sparse.json)."""
    out = []
    for name in ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps"):
        plan_path = ROOT / "models" / "plans" / f"{name}-sparse.json"
        out.append(ModelPlan(name, ROOT / "models" / f"{name}.onnx", load_plan(plan_path),
                             str(plan_path.relative_to(ROOT))))
    return out


def models() -> list[ModelPlan]:
    """``shipped_plans()``, then the MobileNetV1-0.25 VWW zoo model and the MLPerf VWW model from ../shared (when it
    is there) with VWW_PLAN."""
    out = shipped_plans() + [ModelPlan("mbv1-0.25-vww", ROOT / "models" / "mbv1-0.25-vww.onnx", parse_plan(VWW_PLAN),
                                       "VWW_PLAN")]
    vww = SHARED / "models" / "vww_96_int8.tflite"
    if vww.exists():
        out.append(ModelPlan("vww_96_int8 (MLPerf)", vww, parse_plan(VWW_PLAN), "VWW_PLAN"))
    return out


def mac_counts(tg) -> tuple[int, int]:
    """(int8 MACs, fp32 MACs) of a training graph: a node counts as fp32 when any input or output is float32."""
    int8 = fp32 = 0
    for node in tg.nodes:
        n = node_macs(tg, node)
        if any(tg.tensors[t].dtype == DType.FLOAT32 for t in (*node.inputs, *node.outputs) if t):
            fp32 += n
        else:
            int8 += n
    return int8, fp32


def node_macs(graph, node) -> int:
    ins = [graph.tensors[i] if i else None for i in node.inputs]
    return get_op(node.op).macs(node.attrs, ins, [graph.tensors[o] for o in node.outputs])


def forward_macs(graph) -> int:
    return sum(node_macs(graph, node) for node in graph.nodes)


def requantized_outputs(graph) -> int:
    """Outputs of the int8 nodes requantized through a tt_fixedpoint.h _s8 helper (convolutions, mean, fully
    connected) in one inference."""
    return sum(int(np.prod(graph.tensors[n.outputs[0]].shape)) for n in graph.nodes
               if getattr(n.attrs, "requant", None) is not None)


def random_step(path, plan, n: int):
    """(the model at ``path``, the plan's training graph of it, its input shape, ``n`` random int8 inputs and labels):
    the samples the QEMU measurements run (seed 0)."""
    graph = load_model(path)
    rng = np.random.default_rng(0)
    shape = graph.tensors[graph.inputs[0]].shape[1:]
    n_classes = graph.tensors[graph.outputs[0]].shape[-1]
    x = model_inputs(graph, rng.integers(0, 256, (n, *shape), dtype=np.uint8))
    return graph, build_training_graph(graph, plan), shape, x, rng.integers(0, n_classes, len(x))


def measure(name, path, plan, plan_source, args, work: Path) -> dict:
    graph, tg, shape, x, y = random_step(path, plan, args.steps + args.inferences)
    compile_dir = work / "compile"
    report = engine_qemu.emit_compile_dir(tg, compile_dir, 256 * KB, 1 * MB)
    row = {"model": name, "plan": plan_source, "input": "x".join(map(str, shape)),
           "report_peak_sram_bytes": report["peak_sram_bytes"], "report_fits": report["fits"]}
    try:
        fw = engine_qemu.build(compile_dir, args.board, work / "project")
        row.update(links_at_256k=True, ram_overflow_bytes=0)
    except engine_qemu.QemuError as e:
        m = re.search(r"region `RAM' overflowed by (\d+) bytes", str(e))
        row.update(links_at_256k=False, ram_overflow_bytes=int(m.group(1)) if m else None)
        compile_dir = work / "compile_4m"
        engine_qemu.emit_compile_dir(tg, compile_dir, 4 * MB - 64 * KB, 1 * MB)  # same C and plan, other budget
        fw = engine_qemu.build(compile_dir, args.board, work / "project_4m")
    t0 = time.time()
    train, test = (x[:args.steps], y[:args.steps]), (x[args.steps:], y[args.steps:])
    r = engine_qemu.run(fw, args.board, train=train, test=test)
    int8, fp32 = mac_counts(tg)
    fwd = forward_macs(graph)
    row.update(
        firmware_flash_bytes=fw.flash_bytes, firmware_ram_bytes=fw.ram_bytes, flash_ok=fw.flash_bytes <= 1 * MB,
        stack_used_bytes=r.stack_bytes,
        insns_per_step=int(np.mean(r.step_insns)), insns_per_step_min=int(r.step_insns.min()),
        insns_per_step_max=int(r.step_insns.max()), insns_per_inference=int(np.mean(r.predict_insns)),
        step_int8_macs=int8, step_fp32_macs=fp32, lower_bound_cycles_per_step=int(int8 / 2 + fp32),
        inference_macs=fwd, lower_bound_cycles_per_inference=int(fwd / 2),
        qemu_seconds=round(time.time() - t0, 2))
    row.update(profile(compile_dir, args.board, work, train, test, row["insns_per_step"], row["insns_per_inference"]),
               requantized_outputs=requantized_outputs(graph))
    for stream in (True, False):  # the inference-only compile (no plan), streamed and layer by layer
        key = "inference_only_insns" + ("" if stream else "_layer_by_layer")
        engine_qemu.emit_compile_dir(graph, work / f"inference_{stream}", 4 * MB - 64 * KB, 1 * MB, stream=stream)
        fw_inf = engine_qemu.build(work / f"inference_{stream}", args.board, work / f"project_inference_{stream}")
        r_inf = engine_qemu.run(fw_inf, args.board, test=(x[args.steps:], y[args.steps:]))
        row[key] = int(np.mean(r_inf.predict_insns))
        if stream:
            row["inference_only_ram_bytes"] = fw_inf.ram_bytes
    if name in PUBLISHED_MS:
        row.update(published_ms=PUBLISHED_MS[name], published_cycles=int(PUBLISHED_MS[name] * 1e-3 * CLOCK_HZ))
    return row


def markdown(rows, meta) -> str:
    def m(v):
        return f"{v / 1e6:.1f}M" if isinstance(v, (int, float)) else "—"

    lines = [f"# Instructions per training step and per inference on {meta['board']} (QEMU -icount shift=0)", "",
             f"Measured by `{meta['command']}` on {meta['host']}, {meta['qemu']}, {meta['gcc']}; "
             f"{meta['steps']} training steps and {meta['inferences']} inferences per model, synthetic images. "
             "Published: STM32F746 @ 216 MHz, sparse update (docs/design.md §7), as cycles. Lower bound: int8 MACs at 2 "
             "per cycle + fp32 MACs at 1 per cycle. Instructions are not cycles (an M7 dual-issues and stalls on "
             "memory).", "",
             "| model | plan | input | links at 256 KB | RAM | stack used | flash | step: instructions | "
             "step: lower bound | step: published | inference: instructions | inference: lower bound |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        link = "yes" if r["links_at_256k"] else f"no ({r['ram_overflow_bytes'] / 1024:.1f} KB over)"
        lines.append(f"| {r['model']} | {r['plan']} | {r['input']} | {link} | {r['firmware_ram_bytes'] / 1024:.1f} KB | "
                     f"{r['stack_used_bytes']} B | "
                     f"{r['firmware_flash_bytes'] / 1024:.1f} KB | {m(r['insns_per_step'])} | "
                     f"{m(r['lower_bound_cycles_per_step'])} | {m(r.get('published_cycles'))} | "
                     f"{m(r['insns_per_inference'])} | {m(r['lower_bound_cycles_per_inference'])} |")
    per_mac = [r["insns_per_inference"] / r["inference_macs"] for r in rows]
    share = [r["insns_per_inference"] / r["insns_per_step"] for r in rows]
    vs_pub = [r["insns_per_step"] / r["published_cycles"] for r in rows if "published_cycles" in r]
    vs_lb = [r["insns_per_step"] / r["lower_bound_cycles_per_step"] for r in rows]
    extra = [r["insns_per_step"] / r["insns_per_inference"] - 1 for r in rows]
    pub = f"{min(vs_pub):.1f}x to {max(vs_pub):.1f}x the published cycles, " if vs_pub else ""
    lines += ["", f"Reading: the int8 forward pass is most of a training step ({min(share):.0%} to {max(share):.0%} of "
              f"its instructions) and costs {min(per_mac):.1f} to {max(per_mac):.1f} instructions per MAC. On a core "
              "with the DSP extension (tt_simd.h) pointwise convolutions of up to 128 input channels (the count a "
              "constant) and regular ones of windows of up to 128 elements (im2col, a window row one copy of constant "
              "length, rows padded to whole words) widen two pixels' inputs at once and take 2 output channels x 2 "
              "pixels per inner product (8 SMLAD per 2 weight loads; a constant weight's rows packed as halfwords in "
              "flash, no SXTB16, where the layer has 32 pixels or more; with packed rows, float32 requantization and "
              "the full int8 range the whole loop over channel pairs is one asm block, pointers walking in registers, "
              "USAT + EOR stores for out_zp = -128); 129 to 256 input channels take each output pixel's input widened "
              "once, four output channels at a time (packed rows: two LDM of four words per four channels); longer "
              "inputs, and those beside a split weight, take two pixels widened on the way in an asm loop (beside a "
              "constant weight the input zero point moved into the sums' start, a table of row sums), the second "
              "pixel's outputs held on the stack where the planner's placement needs it; depthwise convolutions on "
              "small maps go one channel at a time, every window clipped at compile time and unrolled "
              "(depthwise_map.c.j2), other odd windows one channel at a time where that is cheaper (the window's rows "
              "gathered once per channel as int16, two inputs a word, two outputs per pass over a row, SMLAD over "
              "pairs of taps; not 3-wide windows at stride 2), the others four channels per input load on SXTAB16 / "
              "SMLABB (3x3: the weights packed as halfword pairs, SMLATT); residual adds read their inputs' rescaled "
              "terms from 256-entry tables and requantize once (SMMUL). "
              "The fp32 backward adds each term with one "
              "fused multiply-add (VFMA), several terms at a time in each sum's own order (docs/design.md §3b): a "
              "pointwise input gradient in register tiles of 4, 3 or 2 pixels x 3 or 4 rows x 4 channels, in assembly "
              "(a pixel's four sums one VLDM / VSTM); depthwise input gradients of gz's shape on small maps one channel "
              "at a time, unrolled for the map, each sum in a register, the strided ones four channels per pass over a "
              "pixel's taps; a pointwise weight gradient fused with its update 4 rows x 4 inputs held in registers over "
              "the pixels where any of them is nonzero, each step's floor on FPv5 (M7 / M55) VMINNM / VMAXNM / VCVTM. "
              "On an FPU "
              "(M4F / M7 / M55) onnxruntime's float32 requantization is that float32 arithmetic (VCVT / VMUL / VCVTR, "
              "two values per VMOV, bit for bit the spec: docs/design.md §3a), TFLite's double rounding a 32-bit "
              "integer fast path; convolutions start their sums at the bias and clamp their outputs (SSUB8 + SEL) "
              "only where the activation range is narrower than int8's (SSAT alone otherwise). A "
              f"training step takes {pub}{min(vs_lb):.0f}x to {max(vs_lb):.0f}x the MAC lower bound; the backward "
              f"pass (fp32, planned layers only) adds {min(extra):.0%} to {max(extra):.0%} to the forward pass. RAM is "
              "the whole RAM region the linker placed (stack + data + arena + trainable copies + heap), within the "
              f"256 KB budget; stack used is the measured high-water mark ({STACK_BYTES:,} B reserved)."]
    keys = [k for k, _, _ in FAMILIES] + ["outside_kernels"]
    lines += ["", "Per op family (`benchmarks/common/qemu_profile.py`: SysTick read around every kernel call of a training "
              "step; requantization, which runs inside the int8 kernels, by difference with a firmware whose int8 "
              "requantization helpers are a shift): instructions per training step, share of the step. "
              + "; ".join(f"{k}: {what}" for k, what, _ in FAMILIES) + ".", "",
              "| model | " + " | ".join(keys) + " | of which requantization (per output) |",
              "|---|" + "---:|" * (len(keys) + 1)]
    for r in rows:
        cells = [f"{m(r['per_step'][k])} ({r['per_step'][k] / r['insns_per_step']:.0%})" for k in keys]
        rq = r["requantization_per_inference"]
        lines.append(f"| {r['model']} | " + " | ".join(cells) +
                     f" | {m(rq)} ({rq / r['insns_per_step']:.0%}; {rq / r['requantized_outputs']:.1f}) |")
    lines += ["", "Inference-only compiles (no plan: `tinytrain compile MODEL`), the frozen prefix row-streamed "
              "(memory/stream.py) against every tensor whole:", "",
              "| model | streamed: instructions | layer by layer: instructions | streaming overhead |",
              "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {m(r['inference_only_insns'])} | {m(r['inference_only_insns_layer_by_layer'])} | "
                     f"{r['inference_only_insns'] / r['inference_only_insns_layer_by_layer'] - 1:+.2%} |")
    return "\n".join(lines) + "\n"


def measure_row(target: ModelPlan, args: argparse.Namespace) -> dict:
    """``measure`` in a temporary directory; the row is printed as JSON as soon as it is measured."""
    with tempfile.TemporaryDirectory(prefix="tinytrain-bench-") as tmp:
        row = measure(*target, args, Path(tmp))
    print(json.dumps(row), flush=True)
    return row


def meta(args: argparse.Namespace, command: str) -> dict:
    def first_line(cmd):
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
    return {"command": command, "board": args.board, "steps": args.steps, "inferences": args.inferences,
            "host": platform.machine(), "qemu": first_line(["qemu-system-arm", "--version"]),
            "gcc": first_line(["arm-none-eabi-gcc", "--version"]), "clock_hz_of_published": CLOCK_HZ}


def write(rows: list[dict], meta: dict, out: str) -> str:
    """qemu_instructions.json and .md at ``out`` (a path without suffix); returns the markdown."""
    text = markdown(rows, meta)
    Path(out + ".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    Path(out + ".md").write_text(text)
    return text


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """What runs on QEMU (shared with benchmarks/speed.py)."""
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--inferences", type=int, default=2)
    ap.add_argument("--board", default="qemu-m7")
