"""SRAM / flash accounting, the compile command on training plans, and the planner on the shipped models."""

import json
from pathlib import Path

import pytest

from tinytrain.cli import main
from tinytrain.memory.report import RUNTIME_BYTES, STACK_BYTES, plan_memory, trainable_copies
from tinytrain.memory.schedule import reorder
from tinytrain.training.sparse import Plan, WeightUpdate, load_plan, preset
from tinytrain.training.train_graph import build_training_graph

from ir_builders import tiny_mobilenet

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps")


def test_sram_is_arena_plus_trainable_copies_plus_runtime():
    g, _ = tiny_mobilenet()
    # the last layer (fully connected) fully, the one before it on a quarter of its channels
    plan = Plan(bias_last_k=2, weights=(WeightUpdate(9, 0.25), WeightUpdate(10, 1.0)))
    step = reorder(build_training_graph(g, plan))
    r = plan_memory(step, 1 << 30, 1 << 30)
    copies = dict(trainable_copies(step))
    fc_w = next(n for n in g.nodes if n.op == "fully_connected").inputs[1]
    conv_w = [n for n in g.nodes if n.op == "conv2d"][-1].inputs[1]
    w = g.tensors[conv_w]
    assert copies[fc_w] == g.tensors[fc_w].nbytes
    assert copies[conv_w] == max(1, w.shape[0] // 4) * w.nbytes // w.shape[0]  # only the selected rows
    assert r.trainable_sram_bytes == sum(copies.values())
    assert r.peak_sram_bytes == r.arena_bytes + r.trainable_sram_bytes + RUNTIME_BYTES + STACK_BYTES
    assert r.flash_bytes == sum(t.nbytes for t in step.constants()) + r.code_bytes
    assert r.arena_bytes >= r.max_live_bytes


def test_momentum_counts_as_optimizer_state():
    from tinytrain.training.qas import UpdateConfig

    g, _ = tiny_mobilenet()
    plain = plan_memory(build_training_graph(g, preset("last-k:2", g)), 1 << 30, 1 << 30)
    heavy = plan_memory(build_training_graph(g, preset("last-k:2", g), UpdateConfig(momentum=0.9)), 1 << 30, 1 << 30)
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
    assert report["peak_sram_bytes"] == 247560 <= 262144
    roles = {b["role"] for b in report["buffers"]}
    assert {"saved", "gradient", "activation"} <= roles
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
    for words in ("does not fit", "over the 256.0 KB budget", "at step", "largest:", "--update bias-only"):
        assert words in err, words
    assert not out.exists() and not list(tmp_path.iterdir())


def test_compile_rejects_plan_and_update_together(tmp_path, capsys):
    plan = ROOT / "models" / "plans" / "mbv2-w0.35-sparse.json"
    assert main(["compile", str(ROOT / "models" / "mbv2-w0.35.onnx"), "--plan", str(plan), "--update", "full",
                 "-o", str(tmp_path / "o")]) == 2
    assert "either --plan or --update" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_arena_within_five_percent_of_the_largest_live_set(model):
    """On every shipped model and plan, with and without reordering and in-place outputs."""
    from tinytrain.frontends import load_model

    g = load_model(ROOT / "models" / f"{model}.onnx")
    graphs = [g]
    for plan in (preset("full", g), preset("bias-only", g), preset("last-k:6", g),
                 load_plan(ROOT / "models" / "plans" / f"{model}-sparse.json")):
        step = build_training_graph(g, plan)
        graphs += [step, reorder(step)]
    for graph in graphs:
        for inplace in (False, True):
            r = plan_memory(graph, 1 << 30, 1 << 30, inplace=inplace)
            assert r.max_live_bytes <= r.arena_bytes <= 1.05 * r.max_live_bytes, (graph.name, len(graph.nodes), inplace)
