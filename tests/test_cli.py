"""The command line as a user meets it: inspect, run, compile, and their errors."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tinytrain.cli import main
from tinytrain.frontends import load_model
from tinytrain.simulator import forward

sys.path.insert(0, str(Path(__file__).parent / "bad_models"))
from make_corpus import qdq_conv  # noqa: E402


@pytest.fixture
def tiny_onnx(tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(qdq_conv().SerializeToString())
    return path


def test_inspect_prints_ops_params_macs_and_memory(tiny_onnx, capsys):
    assert main(["inspect", str(tiny_onnx)]) == 0
    out = capsys.readouterr().out
    assert "conv2d" in out and "params 112" in out and f"MACs {8 * 8 * 4 * 27:,}" in out
    assert "inference peak memory" in out


def test_run_writes_the_simulator_output(tiny_onnx, tmp_path):
    x = np.random.default_rng(0).integers(-128, 128, (5, 8, 8, 3)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(tiny_onnx), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    y = np.load(tmp_path / "y.npy")
    graph = load_model(tiny_onnx)
    assert y.dtype == np.int8 and y.shape == (5, 8, 8, 4)
    np.testing.assert_array_equal(y, forward(graph, {graph.inputs[0]: x})[graph.outputs[0]])


def test_run_rejects_wrong_input_without_partial_output(tiny_onnx, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((2, 8, 8, 3), np.float32))
    assert main(["run", str(tiny_onnx), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 2
    err = capsys.readouterr().err
    assert "int8" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.npy").exists()


def test_compile_writes_report(tiny_onnx, tmp_path, capsys):
    out = tmp_path / "build"
    assert main(["compile", str(tiny_onnx), "--sram", "256KB", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    for key in ("peak_sram_bytes", "arena_bytes", "flash_bytes", "sram_budget_bytes", "fits", "buffers"):
        assert key in report
    assert report["sram_budget_bytes"] == 262144 and report["fits"] is True
    # input (1,8,8,3) int8 = 192 B and output (1,8,8,4) = 256 B are both alive at the conv
    assert report["arena_bytes"] == 192 + 256


def test_compile_over_budget_names_the_peak(tiny_onnx, tmp_path, capsys):
    out = tmp_path / "build"
    assert main(["compile", str(tiny_onnx), "--sram", "300", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "over the" in err and "alive" in err and "conv2d" in err
    assert not out.exists()


@pytest.mark.parametrize("argv,words", [
    (["compile", "m.onnx", "--sram", "lots", "-o", "x"], "cannot read size"),
    (["compile", "m.onnx"], "required"),
    (["frobnicate"], "invalid choice"),
    (["inspect", "does-not-exist.onnx"], "no such file"),
])
def test_bad_arguments(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
