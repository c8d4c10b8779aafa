"""`tinytrain train` / `tinytrain eval` on a real int8 model (../shared) and a tiny .npz dataset."""

import json

import numpy as np
import pytest

from conftest import shared_file
from tinytrain.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("data") / "d.npz"
    np.savez(path, x=rng.integers(0, 256, (6, 96, 96, 3)).astype(np.uint8), y=np.array([0, 1, 0, 1, 0, 1]))
    return str(path)


@pytest.fixture(scope="module")
def model():
    return str(shared_file("models/vww_96_int8.tflite"))


def _last_json(capsys):
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_train_json_and_state_out(model, data, tmp_path, capsys):
    state = tmp_path / "state.npz"
    assert main(["train", model, "--data", data, "--update", "last-k:2", "--steps", "8", "--json",
                 "--state-out", str(state)]) == 0
    out = _last_json(capsys)
    assert out["steps"] == 8 and out["final_loss"] > 0 and out["seconds"] >= 0
    saved = np.load(state)
    assert int(saved["step"]) == 8 and any(saved[k].dtype == np.int8 for k in saved.files)
    assert main(["train", model, "--data", data, "--update", "last-k:2", "--steps", "8", "--json",
                 "--state-out", str(tmp_path / "again.npz")]) == 0
    again = np.load(tmp_path / "again.npz")
    for k in saved.files:  # deterministic: byte-identical state
        np.testing.assert_array_equal(saved[k], again[k])


def test_train_with_plan_file_and_new_head(model, data, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "bias_last_k": 3, "weights": [{"conv": 27, "ratio": 0.5}], "lr": 0.02}))
    assert main(["train", model, "--data", data, "--plan", str(plan), "--new-head", "2", "--epochs", "1",
                 "--json"]) == 0
    out = _last_json(capsys)
    assert out["steps"] == 6 and out["plan"]["weights"] == [{"conv": 27, "ratio": 0.5}]


def test_eval_json(model, data, capsys):
    assert main(["eval", model, "--data", data, "--json"]) == 0
    out = _last_json(capsys)
    assert out["n"] == 6 and 0 <= out["accuracy"] <= 1


@pytest.mark.parametrize("args,message", [
    (["--plan", "absent.json"], "cannot read plan"),
    (["--update", "sideways"], "expected full, bias-only or last-k:N"),
    (["--engine", "qemu"], "not available yet"),
    (["--new-head", "1"], "at least 2 classes"),
])
def test_train_errors_are_one_line(model, data, args, message, capsys):
    assert main(["train", model, "--data", data, "--steps", "1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_labels_beyond_the_model_suggest_a_new_head(model, tmp_path, capsys):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.zeros((2, 96, 96, 3), np.uint8), y=np.array([0, 4]))
    assert main(["eval", model, "--data", str(path)]) == 2
    assert "--new-head 5" in capsys.readouterr().err
