"""Host and device meet: eval and train read a board's saved state (tt_state.bin) as well as train's .npz, told
apart by content; `tinytrain samples` writes the QEMU harness's sample files from any DATA and reads its outputs
back; a training build's compile output carries the flash persistence (persist/); `stream --port qemu:PROJECT`
stops the QEMU it starts."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onnx_models import write_tiny_task
from tinytrain.api import load_model, model_data, sample_order
from tinytrain.cli import main
from tinytrain.codegen.state import pack
from tinytrain.firmware import samples
from tinytrain.simulator import TrainState
from tinytrain.state_file import load_state
from tinytrain.training.sparse import preset
from tinytrain.training.train_graph import build_training_graph

QEMU_TOOLS = shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    d = write_tiny_task(tmp_path_factory.mktemp("host_device"))
    assert main(["train", str(d / "tiny.onnx"), "--data", str(d / "tiny.npz"), "--new-head", "2", "--update",
                 "last-k:2", "--steps", "30", "--state-out", str(d / "state.npz")]) == 0
    graph = load_model(d / "tiny.onnx", new_head=2)
    step = build_training_graph(graph, preset("last-k:2", graph))
    with np.load(d / "state.npz") as f:  # every tensor the step writes, remainders included
        state = TrainState({k: f[k] for k in f.files if k != "step"}, int(f["step"]))
    (d / "tt_state.bin").write_bytes(pack(step, state))  # what the board saves
    return d


def _last(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_eval_reads_a_boards_state_as_the_npz_it_equals(task, capsys):
    common = ["eval", str(task / "tiny.onnx"), "--data", str(task / "tiny.npz"), "--new-head", "2"]
    assert main([*common, "--state", str(task / "state.npz")]) == 0
    from_npz = _last(capsys)
    assert main([*common, "--state", str(task / "tt_state.bin"), "--update", "last-k:2"]) == 0
    assert _last(capsys) == from_npz
    graph = load_model(task / "tiny.onnx", new_head=2)
    npz, board = load_state(task / "state.npz", graph), load_state(task / "tt_state.bin", graph,
                                                                   preset("last-k:2", graph))
    assert set(npz.tensors) <= set(board.tensors) and board.step == 30
    assert all(np.array_equal(v, board.tensors[k]) for k, v in npz.tensors.items())
    for extra, words in [([], "is a board's state (tt_state_save bytes): give the plan it was trained with"),
                         (["--update", "last-k:1"], "not a tinytrain state of this model"),
                         (["--update", "last-k:2", "--remainder-bits", "8"], "(1016 bytes, expected 1304)")]:
        assert main([*common, "--state", str(task / "tt_state.bin"), *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and words in err, err


def test_train_starts_from_a_state_of_either_kind(task, capsys):
    common = [str(task / "tiny.onnx"), "--data", str(task / "tiny.npz"), "--new-head", "2", "--held-out", "0.25"]
    assert main(["eval", *common, "--state", str(task / "state.npz"), "--json"]) == 0
    trained = json.loads(_last(capsys))["accuracy"]
    for state in (["--state", str(task / "state.npz")], ["--state", str(task / "tt_state.bin")]):
        assert main(["train", *common, "--update", "last-k:2", "--steps", "2", *state, "--json"]) == 0
        assert json.loads(_last(capsys))["accuracy_before"] == trained


def test_samples_writes_trains_order_and_the_held_out_rows(task, tmp_path, capsys):
    assert main(["samples", str(task / "tiny.onnx"), "--data", str(task / "tiny.npz"), "--new-head", "2",
                 "--held-out", "0.25", "--steps", "7", "--seed", "3", "-o", str(tmp_path)]) == 0
    x, y = model_data(load_model(task / "tiny.onnx", new_head=2), str(task / "tiny.npz"))
    from tinytrain.splits import held_out_split

    rows, test = held_out_split(y, 0.25, 0)
    order = sample_order(rows, 7, 3)
    got_x, got_y = samples.decode((tmp_path / "tt_train.bin").read_bytes())
    assert np.array_equal(got_x, x[order].reshape(7, -1)) and np.array_equal(got_y, y[order])
    got_x, got_y = samples.decode((tmp_path / "tt_test.bin").read_bytes())
    assert np.array_equal(got_x, x[test].reshape(len(test), -1)) and np.array_equal(got_y, y[test])
    capsys.readouterr()
    (tmp_path / "tt_logits.bin").write_bytes(np.tile(np.int8([0, 9]), len(test)).tobytes())  # "class 1" each
    assert main(["samples", str(task / "tiny.onnx"), "--new-head", "2", "--read", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"accuracy {np.mean(y[test] == 1):.4f} on {len(test)} samples")
    assert main(["samples", str(task / "tiny.onnx"), "-o", str(tmp_path)]) == 2  # -o needs --data
    assert "give --data" in capsys.readouterr().err


def test_a_training_build_carries_the_flash_persistence(task, tmp_path):
    assert main(["compile", str(task / "tiny.onnx"), "--update", "last-k:1", "--new-head", "2",
                 "-o", str(tmp_path / "t")]) == 0
    assert sorted(p.name for p in (tmp_path / "t" / "persist").iterdir()) == [
        "tt_flash.h", "tt_flash_port.h", "tt_persist.c", "tt_persist.h"]
    assert main(["compile", str(task / "tiny.onnx"), "-o", str(tmp_path / "i")]) == 0
    assert not (tmp_path / "i" / "persist").exists()


def _processes_in(folder: Path) -> list[int]:
    """The processes whose working folder is ``folder`` (QEMU's, under make run)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cwd").resolve() == folder.resolve():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not QEMU_TOOLS, reason="arm-none-eabi-gcc or qemu-system-arm is not installed")
def test_stream_on_qemu_stops_the_qemu_it_started(task, tmp_path, capsys):
    pytest.importorskip("serial")
    assert main(["compile", str(task / "tiny.onnx"), "--sram", "64k", "--update", "last-k:1", "--new-head", "2",
                 "--target", "cortex-m4", "-o", str(tmp_path / "b")]) == 0
    assert main(["firmware", str(tmp_path / "b"), "--board", "netduinoplus2", "-o", str(tmp_path / "fw")]) == 0
    assert subprocess.run(["make", "-s", "-C", str(tmp_path / "fw")], capture_output=True).returncode == 0
    argv = ["stream", str(task / "tiny.onnx"), "--port", f"qemu:{tmp_path / 'fw'}", "--data", str(task / "tiny.npz")]
    assert main([*argv, "--steps", "3", "--json"]) == 0
    assert json.loads(_last(capsys))["board"] == "netduinoplus2" and _processes_in(tmp_path / "fw") == []
    assert main([*argv, "--steps", "3", "--loss", "mse"]) == 2  # an error mid-command: QEMU stopped all the same
    assert _processes_in(tmp_path / "fw") == []
