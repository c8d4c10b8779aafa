"""SRAM / flash accounting, the compile command on training plans, and the planner on the shipped models."""

import json
from pathlib import Path

import pytest

from tinytrain.cli import main
from tinytrain.cores import STACK_BYTES
from tinytrain.memory.footprint import RUNTIME_BYTES, trainable_copies
from tinytrain.memory.report import memory_report
from tinytrain.training.reorder import reorder
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.sparse import Plan, WeightUpdate, load_plan, preset
from tinytrain.training.train_graph import build_training_graph

from conftest import shared_file
from ir_builders import tiny_mobilenet

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps")


def test_sram_is_arena_plus_trainable_copies_plus_runtime():
    g, _ = tiny_mobilenet()
    # the last layer (fully connected) fully, the one before it on a quarter of its channels
    plan = Plan(bias_last_k=2, weights=(WeightUpdate(9, 0.25), WeightUpdate(10, 1.0)))
    step = reorder(build_training_graph(g, plan))
    r = memory_report(step, 1 << 30, 1 << 30)
    copies = dict(trainable_copies(step))
    fc_w = next(n for n in g.nodes if n.op == "fully_connected").inputs[1]
    conv_w = [n for n in g.nodes if n.op == "conv2d"][-1].inputs[1]
    w = g.tensors[conv_w]
    assert copies[fc_w] == g.tensors[fc_w].nbytes
    assert copies[conv_w] == max(1, w.shape[0] // 4) * w.nbytes // w.shape[0]  # only the selected rows
    assert r.trainable_sram_bytes == sum(copies.values())
    assert r.peak_sram_bytes == (r.arena_bytes + r.trainable_sram_bytes + r.optimizer_state_bytes + RUNTIME_BYTES
                                 + STACK_BYTES)
    assert r.optimizer_state_bytes == r.remainder_bytes > 0  # the trained weights' 4-bit remainders, half a byte each
    assert r.flash_bytes == sum(t.nbytes for t in step.constants()) + r.code_bytes
    assert r.arena_bytes >= r.max_live_bytes


def test_momentum_counts_as_optimizer_state():
    from tinytrain.training.qas import UpdateConfig

    g, _ = tiny_mobilenet()
    plain = memory_report(build_training_graph(g, preset("last-k:2", g, remainder_bits=0)), 1 << 30, 1 << 30)
    heavy = memory_report(build_training_graph(g, preset("last-k:2", g, remainder_bits=0), UpdateConfig(momentum=0.9)),
                        1 << 30, 1 << 30)
    assert heavy.optimizer_state_bytes > 0 and plain.optimizer_state_bytes == 0
    assert heavy.peak_sram_bytes >= plain.peak_sram_bytes + heavy.optimizer_state_bytes


def test_compile_sparse_plan_writes_report_table_and_timeline(tmp_path, capsys):
    out = tmp_path / "demo"
    model = ROOT / "models" / "mbv2-w0.35.onnx"
    plan = ROOT / "models" / "plans" / "mbv2-w0.35-sparse.json"
    assert main(["compile", str(model), "--sram", "256k", "--plan", str(plan), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    for key in ("peak_sram_bytes", "arena_bytes", "flash_bytes", "sram_budget_bytes", "fits", "buffers"):
        assert key in report
    assert report["fits"] is True and report["mode"] == "training" and report["sram_budget_bytes"] == 262144
    # The frozen forward streams (memory/stream.py): its peak (247304 B layer by layer) moves to the backward pass;
    # with the trained weights' 4-bit remainders (16.0 KB, int8 only: 115320 B) below the published engine's 141 KB.
    assert report["peak_sram_bytes"] == 131672 <= 141 * 1024 and report["remainder_bytes"] == 16352
    assert report["streamed"]["steps"] > 0 and report["streamed"]["line_buffers"]
    roles = {b["role"] for b in report["buffers"]}
    assert {"saved", "gradient", "activation", "ring"} <= roles
    assert any(s.startswith("pack_clamp_mask ") for s in report["schedule"])  # the device step (training.device_step)
    assert all(b["first_use"] <= b["last_use"] for b in report["buffers"])
    assert len(report["schedule"]) == max(b["last_use"] for b in report["buffers"]) + 1
    text = (out / "report.txt").read_text()
    assert "largest buffers" in text and "alive at the peak" in text
    assert (out / "memory_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "fits" in capsys.readouterr().out


@pytest.mark.parametrize("model", MODELS)
def test_full_update_is_refused_with_one_clear_line(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", str(ROOT / "models" / f"{model}.onnx"), "--sram", "256k", "--update", "full",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for words in ("does not fit", "over the 256.0 KB budget", "at step", "largest:",
                  "presets that fit: --update last-k:"):  # measured: the deepest that fit, not a fixed string
        assert words in err, words
    assert not out.exists() and not list(tmp_path.iterdir())


def _compile_fused(model, argv, tmp_path) -> tuple[dict, list[int]]:
    """(compile's report.json, the sizes of its scratch buffers); asserts that no whole weight gradient exists:
    each fused node computes it a block of rows at a time into its own scratch, alive at its step only."""
    out = tmp_path / "out"
    assert main(["compile", str(model), "--sram", "256k", *argv, "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert not any(s.split()[0].endswith("_grad_weight") for s in report["schedule"])
    scratch = [b for b in report["buffers"] if b["role"] == "scratch"]
    assert all(b["first_use"] == b["last_use"] for b in scratch)
    assert len(scratch) == sum(1 for s in report["schedule"] if s.split()[0].endswith("_grad_weight_sgd_update"))
    return report, sorted(b["size"] for b in scratch)


def test_fusing_weight_gradients_with_updates_fits_mobilenet_v1_last_k2(tmp_path):
    """ImageNet MobileNetV1-0.25 with a new 2-class head, last two layers updated: the 256x256 pointwise conv's
    fp32 weight gradient alone was 256 KB (peak 351784 B, in its update); fused, the peak is the forward pass's."""
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    model = shared_file("models/mobilenet_v1_0.25_128_quant.tflite")
    report, scratch = _compile_fused(model, ["--update", "last-k:2", "--new-head", "2", "--remainder-bits", "0"],
                                     tmp_path)
    assert scratch == [2048, 2048]  # blocks of 2 rows of 256 floats: the 256x256 conv and the 2x256 head
    assert report["fits"] and report["peak_sram_bytes"] == 101928
    assert report["schedule"][report["peak_step"]].startswith("conv2d ")  # the first convolution
    g = new_head(load_model(model), 2)
    unfused = reorder(build_training_graph(g, preset("last-k:2", g, remainder_bits=0)))
    assert memory_report(unfused, 1 << 30, 1 << 30).peak_sram_bytes == 351784


def test_fusing_weight_gradients_with_updates_fits_mcunet_last_k2(tmp_path):
    """MCUNet-5fps, last two layers updated (the 576 -> 160 pointwise conv and the classifier): the conv's 360 KB
    fp32 weight gradient made the peak 484616 B; fused, the peak is the forward pass's."""
    from tinytrain.frontends import load_model

    model = ROOT / "models" / "mcunet-5fps.onnx"
    report, scratch = _compile_fused(model, ["--update", "last-k:2", "--remainder-bits", "0"], tmp_path)
    assert scratch == [1920, 2304]  # 3 of the 10 classifier rows of 160 floats; one conv row of 576 floats (> 2 KB)
    assert report["fits"] and report["peak_sram_bytes"] == 144136
    g = load_model(model)
    unfused = reorder(build_training_graph(g, preset("last-k:2", g, remainder_bits=0)))
    assert memory_report(unfused, 1 << 30, 1 << 30).peak_sram_bytes == 484616


def test_compile_rejects_plan_and_update_together(tmp_path, capsys):
    plan = ROOT / "models" / "plans" / "mbv2-w0.35-sparse.json"
    assert main(["compile", str(ROOT / "models" / "mbv2-w0.35.onnx"), "--plan", str(plan), "--update", "full",
                 "-o", str(tmp_path / "o")]) == 2
    assert "either --plan or --update" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_arena_within_five_percent_of_the_largest_live_set(model):
    """On every shipped model and plan, with and without reordering and in-place outputs: within 5 %, except that
    rigid in-place chains may cost up to 10 % (ProxylessNAS-w0.3's sparse plan, reordered but unfused: 8.6 %; what
    compile plans, the device schedule, is at the largest live set)."""
    from tinytrain.frontends import load_model
    from tinytrain.training.device_step import device_schedule

    g = load_model(ROOT / "models" / f"{model}.onnx")
    graphs = [g]
    for plan in (preset("full", g), preset("bias-only", g), preset("last-k:6", g),
                 load_plan(ROOT / "models" / "plans" / f"{model}-sparse.json")):
        step = build_training_graph(g, plan)
        graphs += [step, reorder(step), reorder(fuse_updates(step)), device_schedule(step)]
    for graph in graphs:
        for inplace in (False, True):
            r = memory_report(graph, 1 << 30, 1 << 30, inplace=inplace)
            slack = 1.10 if inplace else 1.05
            assert r.max_live_bytes <= r.arena_bytes <= slack * r.max_live_bytes, (graph.name, len(graph.nodes), inplace)


def backward_max_live(step) -> tuple[int, int]:
    """(bytes, step) of the backward's largest live set: the most arena bytes alive at one step after the forward
    prefix, an in-place output and the input it overwrites (``memory.inplace.choose``) counting their shared bytes
    once, kernel scratch included. Independent of how the forward pass is executed and of the planner (the arena
    cannot be smaller once the forward's peak is below it)."""
    from tinytrain.memory.inplace import choose
    from tinytrain.memory.lifetimes import buffer_lifetimes, scratch_requests
    from tinytrain.memory.planner import ALIGNMENT, align
    from tinytrain.training.autodiff import is_forward

    uses = buffer_lifetimes(step)
    pairs = {p.step: p for p in choose(step, uses, ALIGNMENT)}
    sizes = {u.tensor: align(u.size) for u in uses}
    buffers = uses + scratch_requests(step)
    first = next(k for k, n in enumerate(step.nodes) if not is_forward(step, n))
    live = []
    for k in range(first, len(step.nodes)):
        alive = sum(align(u.size) for u in buffers if u.first_use <= k <= u.last_use)
        if k in pairs:
            p = pairs[k]
            alive -= max(0, min(sizes[p.input], sizes[p.output] - p.delta) - max(0, -p.delta))
        live.append((alive, k))
    return max(live)


@pytest.mark.parametrize("model", MODELS)
def test_shipped_sparse_plans_backward_working_set(model):
    """The backward of the shipped plans' device steps (training.device_step), measured so that it stays meaningful
    whatever runs the forward: largest live set after the forward, plus what is outside the arena (trainable copies,
    runtime, stack). With int8 saved outputs and separate gradient buffers it was 148896 / 118816 / 192800 B (+ the
    same statics: 195.1 / 172.3 / 240.4 KB); 1-bit clamp masks took it to 111648 / 65056 / 123680 B, depthwise and
    pointwise input gradients written over their g_z to 64544 / 56608 / 100640 B. The ProxylessNAS and MCUNet plans
    were then re-chosen for the streamed step (models/plans/README.md: at least as many trainable bytes, fewer
    8x8-stage layers in the backward), giving the figures below."""
    from tinytrain.frontends import load_model
    from tinytrain.training.device_step import device_step

    g = load_model(ROOT / "models" / f"{model}.onnx")
    step = device_step(g, load_plan(ROOT / "models" / "plans" / f"{model}-sparse.json"))
    live, at = backward_max_live(step)
    static = sum(n for _, n in trainable_copies(step)) + RUNTIME_BYTES + STACK_BYTES
    want = {"mbv2-w0.35": (64544, 50632, "conv2d_grad_input"),
            "proxyless-w0.3": (40480, 58792, "conv2d_grad_weight_sgd_update"),
            "mcunet-5fps": (75488, 62888, "conv2d_grad_input")}[model]
    assert (live, static, step.nodes[at].op) == want
    saved = {name for name, t in step.tensors.items() if t.role.value == "saved"}
    assert any(step.tensors[name].dtype.value == "uint8" for name in saved)  # clamp masks


def test_the_stack_reservation_is_the_measured_high_water_mark_plus_the_margin():
    """memory/report.py STACK_BYTES rests on benchmarks/results/stack.json (benchmarks/stack.py): every zoo plan and
    VWW TFLite model on qemu-m4, qemu-m7 and qemu-m55."""
    from tinytrain.cores import STACK_MARGIN_BYTES, STACK_MEASURED_BYTES

    measured = json.loads((ROOT / "benchmarks" / "results" / "stack.json").read_text())
    marks = [r["stack_used_bytes"] for r in measured["rows"] if r["stack_used_bytes"] is not None]
    assert {r["board"] for r in measured["rows"]} == {"qemu-m4", "qemu-m7", "qemu-m55"}
    assert max(marks) == STACK_MEASURED_BYTES and measured["meta"]["reservation_bytes"] == STACK_BYTES
    assert STACK_BYTES % 64 == 0 and 0 <= STACK_BYTES - (STACK_MEASURED_BYTES + STACK_MARGIN_BYTES) < 64


def test_the_cores_without_dsp_reserve_their_measured_stack_plus_the_margin():
    """The Cortex-M3, M0+ and RISC-V reserve rests on benchmarks/results/cores.json (benchmarks/cores.py); the DSP
    cores and hosts keep the reserve of stack.json; the report counts the target's reserve."""
    from tinytrain.codegen.context import arm_dsp
    from tinytrain.cores import (CORE_TARGETS, CORES, PORTABLE_STACK_BYTES, PORTABLE_STACK_MEASURED_BYTES,
                                 STACK_MARGIN_BYTES, stack_reserve)

    portable_stack_targets = {c.name for c in CORES.values() if c.stack_bytes == PORTABLE_STACK_BYTES}
    assert portable_stack_targets == {t for t in CORE_TARGETS if not arm_dsp(t)}

    rows = json.loads((ROOT / "benchmarks" / "results" / "cores.json").read_text())["rows"]
    portable = [r["stack_used_bytes"] for r in rows if not r["dsp"] and r.get("stack_used_bytes")]
    dsp = [r["stack_used_bytes"] for r in rows if r["dsp"] and r.get("stack_used_bytes")]
    assert max(portable) == PORTABLE_STACK_MEASURED_BYTES and max(dsp) + STACK_MARGIN_BYTES <= STACK_BYTES
    assert PORTABLE_STACK_BYTES == 2304 and PORTABLE_STACK_BYTES - STACK_BYTES == 512
    assert [stack_reserve(t) for t in ("cortex-m0plus", "cortex-m3", "riscv32")] == [PORTABLE_STACK_BYTES] * 3
    assert [stack_reserve(t) for t in ("cortex-m4", "cortex-m7", "cortex-m55", "cortex-m33", "")] == [STACK_BYTES] * 5
    g, _ = tiny_mobilenet()
    assert memory_report(g, 1 << 20, 1 << 20, target="cortex-m0plus").stack_bytes == PORTABLE_STACK_BYTES


def test_each_layers_remainder_bits_are_counted_and_the_command_line_replaces_them(tmp_path):
    """compile's report counts each layer's own remainder bytes (a byte per element at 8 bits, none at 0);
    ``--remainder-bits`` replaces every layer's, and the search's memory key tells the plans apart."""
    from tinytrain.frontends import load_model
    from tinytrain.search.memory import plan_key
    from tinytrain.training.sparse import layers

    model = ROOT / "models" / "mbv1-0.25-vww.onnx"
    graph = load_model(model)
    ls = layers(graph)
    n = len(ls)
    conv, fc = (graph.tensors[node.inputs[1]].nbytes for node in ls[-2:])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "bias_last_k": 2, "remainder_bits": 4, "weights": [
        {"conv": n - 2, "ratio": 1, "remainder_bits": 8}, {"conv": n - 1, "ratio": 1, "remainder_bits": 0}]}))
    got = {}
    for name, extra in (("mixed", []), ("all0", ["--remainder-bits", "0"]), ("all8", ["--remainder-bits", "8"])):
        assert main(["compile", str(model), "--sram", "4m", "--plan", str(path), *extra, "-o",
                     str(tmp_path / name)]) == 0
        got[name] = json.loads((tmp_path / name / "report.json").read_text())["remainder_bytes"]
    assert got == {"mixed": conv, "all0": 0, "all8": conv + fc}
    mixed = load_plan(path)
    assert plan_key(mixed) != plan_key(Plan(2, tuple(WeightUpdate(w.conv, w.ratio) for w in mixed.weights)))
