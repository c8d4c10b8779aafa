"""The command line as a user meets it: inspect, run, compile, and their errors."""

import json
import os
import subprocess
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
    assert main(["compile", str(tiny_onnx), "--sram", "300b", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "over the" in err and "alive" in err and "conv2d" in err
    assert not out.exists()


@pytest.mark.parametrize("argv,words", [
    (["compile", "m.onnx", "--sram", "lots", "-o", "x"], "cannot read --sram lots"),
    (["compile", "m.onnx", "--sram", "32", "-o", "x"], "--sram 32 is 32 bytes: did you mean 32k?"),
    (["firmware", "b", "--board", "qemu-m7", "--stack", "8", "-o", "fw"], "--stack 8 is 8 bytes: did you mean 8k?"),
    (["compile", "m.onnx"], "required"),
    (["frobnicate"], "invalid choice"),
    (["inspect", "does-not-exist.onnx"], "no such file"),
])
def test_bad_arguments(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


@pytest.mark.parametrize("argv,line", [
    (["compil", "m.onnx"], "invalid choice: 'compil' (choose from 'inspect', 'run', 'compile', 'convert'"),
    (["compil", "m.onnx"], "; did you mean 'compile'? (see 'tinytrain --help')"),
    (["compile", "m.onnx", "-o", "b", "--sarm", "256k"],
     "unrecognized arguments: --sarm 256k; --sarm: did you mean --sram? (see 'tinytrain compile --help')"),
    (["compile", "m.onnx", "--outptu", "b"], "required: -o/--output; --outptu: did you mean --output?"),
    (["compile", "m.onnx", "-o", "b", "--target", "cortex-m77"], "; did you mean 'cortex-m7'?"),
    (["train", "m.onnx", "--data", "lfw", "--engine", "qemm"], "; did you mean 'qemu'? (see 'tinytrain train --help')"),
    (["firmware", "b", "--board", "qemu_m7", "-o", "fw"], "; did you mean 'qemu-m7'?"),
    (["--verison"], "; --verison: did you mean --version?"),
    (["--sram", "256k", "compile", "m.onnx"], "; the command comes first, its options after it: tinytrain compile"),
    (["m.onnx", "compile"], "; the command comes first, its options after it: tinytrain compile MODEL [options]"),
    (["train", "m.onnx", "--data", "lfw", "--lr", "-1"], "argument --lr: -1 is not a positive number"),
    (["train", "m.onnx", "--data", "lfw", "--lr", "nan"], "argument --lr: nan is not a positive number"),
    (["train", "m.onnx", "--data", "lfw", "--seed", "-1"], "argument --seed: -1 is not a non-negative integer"),
    (["compile", "m.onnx", "--new-head", "0", "-o", "b"], "argument --new-head: 0 is not a positive integer"),
    (["firmware", "b", "--board", "qemu-m7", "--baud", "0", "-o", "fw"], "argument --baud: 0 is not a positive"),
    (["plan", "m.onnx", "--data", "lfw", "--workers", "0", "-o", "p.json"], "argument --workers: 0 is not a positive"),
    (["plan", "m.onnx", "--data", "lfw", "--time-limit", "-5", "-o", "p.json"], "argument --time-limit: -5 is not"),
    (["plan", "m.onnx", "--data", "lfw", "--noise-floor", "-1", "-o", "p.json"], "-1 is not a non-negative number"),
    (["fleet", "m.onnx", "--data", "lfw", "--devices", "0"], "argument --devices: 0 is not a positive integer"),
    (["stream", "m.onnx", "--port", "x", "--data", "lfw", "--timeout", "0"], "argument --timeout: 0 is not"),
])
def test_a_typo_or_a_value_out_of_range_is_one_line_naming_the_fix(argv, line, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("tinytrain: error: ") and line in err, err


def test_a_mistyped_dataset_names_the_built_in_one(tiny_onnx, capsys):
    assert main(["eval", str(tiny_onnx), "--data", "fashion-mnst:100"]) == 2
    assert capsys.readouterr().err.strip().endswith("did you mean 'fashion-mnist'?")


def test_input_files_of_the_wrong_kind_are_one_line(tiny_onnx, tmp_path, capsys):
    np.savez(tmp_path / "x.npz", x=np.zeros((1, 8, 8, 3), np.int8))
    (tmp_path / "plan.bin").write_bytes(bytes(range(256)))
    (tmp_path / "cache").write_text("a file")
    for argv, words in [
        (["run", str(tiny_onnx), "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "y.npy")],
         "is an .npz archive; give one .npy array"),
        (["compile", str(tiny_onnx), "--plan", str(tmp_path / "plan.bin"), "-o", str(tmp_path / "b")],
         "not a plan file (not text)"),
        (["plan", str(tiny_onnx), "--data", str(tmp_path / "x.npz"), "--cache", str(tmp_path / "cache"), "-o",
          str(tmp_path / "p.json")], "is a file; give a folder for the caches"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and words in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "plan.bin", "tiny.onnx", "x.npz"]


def _closed_pipe(argv, cwd) -> tuple[int, str]:
    """Run the tinytrain command with its stdout a pipe nobody reads (`| head -0`): every print meets a closed pipe."""
    read, write = os.pipe()
    os.close(read)
    p = subprocess.Popen([sys.executable, "-m", "tinytrain.cli", *argv], cwd=cwd, stdout=write,
                         stderr=subprocess.PIPE, text=True)
    os.close(write)
    err = p.stderr.read()
    return p.wait(timeout=120), err


def test_a_closed_pipe_is_quiet_and_the_command_still_writes_its_files(tiny_onnx, tmp_path):
    assert _closed_pipe(["compile", str(tiny_onnx), "-o", "build"], tmp_path) == (0, "")
    assert (tmp_path / "build" / "report.json").is_file() and (tmp_path / "build" / "tinytrain_model.c").is_file()


def test_a_plan_of_another_model_says_so(tmp_path, capsys):
    """mbv2-w0.35's shipped plan given to a 1-conv model: 'bias_last_k = 20 but the model has 1 ...' did not say
    the plan was made for another model, nor how to get one for this one."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "tiny.onnx").write_bytes(qdq_conv().SerializeToString())
    argv = ["compile", str(tmp_path / "tiny.onnx"), "--plan", str(root / "models/plans/mbv2-w0.35-sparse.json"),
            "-o", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another model" in err and "tinytrain plan MODEL" in err
    assert not (tmp_path / "out").exists()


def test_a_mistyped_preset_gets_did_you_mean(tiny_onnx, tmp_path, capsys):
    assert main(["compile", str(tiny_onnx), "--update", "lastk:1", "-o", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.strip().endswith("last-k:N at 1/R; did you mean last-k:1?")


def test_a_folder_or_a_pytorch_checkpoint_given_as_the_model_says_what_it_is(tmp_path, capsys):
    """`inspect imgs` (a folder) said 'no such file'; `train m.pt` (torch.save's zip) 'not an ONNX model, or the
    file is truncated'."""
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(2)}, tmp_path / "m.pt")
    (tmp_path / "imgs").mkdir()
    for model, words in (("imgs", "a folder; give the path"), ("m.pt", "torch.onnx.export")):
        assert main(["inspect", str(tmp_path / model)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


def test_an_npz_given_as_the_model_is_called_data_not_a_pytorch_checkpoint(tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 4, 4), np.uint8), y=np.zeros(2, np.int64))
    assert main(["inspect", str(tmp_path / "d.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an .npz of numpy arrays" in err and "--data" in err and "PyTorch" not in err
