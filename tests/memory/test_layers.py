"""The per-layer table of `compile` and `inspect` (tinytrain/layers.py, issue 40 item 10): a row per layer of the model
with its arena, flash and MACs, what it trains and where the peak is; the columns add up to the report's totals;
long TFLite names are shortened in the text and whole in report.json."""

import json
from pathlib import Path

import pytest

from conftest import shared_file
from tinytrain.api import compile as tt_compile
from tinytrain.cli import main
from tinytrain.layers import layer_table
from tinytrain.memory.short import short_name

MODEL = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"


@pytest.fixture(scope="module")
def compiled():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is not built (python -m models.build)")
    return tt_compile(MODEL, sram="256k", update="last-k:2", new_head=2)


def test_layers_add_up_to_the_report(compiled):
    rows = layer_table(compiled.graph, compiled.step, compiled.report)
    r = compiled.report
    assert [x.index for x in rows] == list(range(len(compiled.graph.nodes)))  # every step belongs to a layer
    assert [x.peak for x in rows].count(True) == 1
    peak = next(x for x in rows if x.peak)
    assert peak.arena_bytes == max(x.arena_bytes for x in rows) == r.max_live_bytes
    assert sum(x.trains_bytes for x in rows) == r.trainable_sram_bytes + r.optimizer_state_bytes
    assert sum(x.flash_bytes for x in rows) == sum(t.nbytes for t in compiled.step.constants())
    trained = [x.index for x in rows if x.trains_bytes]
    assert trained == [len(rows) - 4, len(rows) - 1]  # last-k:2: the last conv and the new head
    assert sum(x.macs for x in rows) > 0 and all(x.train_macs for x in rows if x.trains_bytes)


def test_compile_prints_the_table_and_report_json_has_it(compiled, tmp_path):
    text = compiled.text()
    table = text[text.index("  per layer"):].splitlines()
    assert len(table) == 2 + len(compiled.graph.nodes) and sum("<- peak" in line for line in table) == 1
    assert "trains" in table[1] and "arena" in table[1] and "MACs" in table[1]
    data = compiled.to_json()
    assert [x["name"] for x in data["layers"]] == [n.name for n in compiled.graph.nodes]
    assert json.dumps(data)


def test_inspect_prints_arena_weights_and_the_peak(capsys):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is not built")
    assert main(["inspect", str(MODEL)]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.lstrip().startswith("#"))
    assert "arena" in head and "weights" in head and "MACs" in head and out.count("<- peak") == 1


def test_long_tflite_names_are_shortened_in_the_text_and_whole_in_the_json(tmp_path, capsys):
    model = shared_file("models/vww_96_int8.tflite")
    out = tmp_path / "build"
    assert main(["compile", str(model), "--sram", "256k", "--update", "last-k:2", "-o", str(out)]) == 0
    text = (out / "report.txt").read_text()
    report = json.loads((out / "report.json").read_text())
    long = [b["tensor"] for b in report["buffers"] if ";" in b["tensor"]]
    assert long and all(name not in text for name in long)
    assert max(len(line) for line in text.splitlines()) < 200


def test_short_name():
    assert short_name("conv_2d_3", 20) == "conv_2d_3"
    assert short_name("model/activation_8/Relu;model/bn_8/FusedBatchNormV3", 40) == "model/activation_8/Relu…"
    assert short_name("a" * 50, 10) == "…" + "a" * 9
