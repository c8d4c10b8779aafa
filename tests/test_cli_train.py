"""`tinytrain train` / `tinytrain eval` on a real int8 model (../shared) and a tiny .npz dataset."""

import contextlib
import io
import json
from pathlib import Path


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


needs_qemu = pytest.mark.qemu


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


def test_preset_learning_rates_per_group_and_not_with_a_plan_file(model, data, tmp_path, capsys):
    assert main(["train", model, "--data", data, "--update", "last-k:2", "--lr", "0.01", "--bias-lr", "0.02",
                 "--head-lr", "0.05", "--steps", "2", "--json"]) == 0
    out = _last_json(capsys)
    assert (out["plan"]["lr"], out["plan"]["bias_lr"], out["plan"]["head_lr"]) == (0.01, 0.02, 0.05)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "bias_last_k": 1, "weights": [{"conv": 27, "ratio": 1}]}))
    assert main(["train", model, "--data", data, "--plan", str(plan), "--head-lr", "0.05", "--steps", "2"]) == 2
    assert "a plan file carries its own" in capsys.readouterr().err


@pytest.mark.parametrize("engines", [("sim", "c"), pytest.param(("c", "qemu"), marks=[pytest.mark.slow, needs_qemu])],
                         ids=["sim-c", "c-qemu"])
def test_cosine_schedule_spans_the_run_and_engines_agree(model, data, tmp_path, capsys, engines):
    """--lr-schedule cosine: the plan's schedule spans this run's steps; the device computes the factor from its
    step count, identically in every engine (byte-identical states)."""
    states = []
    for engine in engines:
        state = tmp_path / f"{engine}.npz"
        assert main(["train", model, "--data", data, "--update", "last-k:2", "--lr", "0.05", "--steps", "8",
                     "--lr-schedule", "cosine", "--warmup", "0.25", "--engine", engine, "--state-out", str(state),
                     "--json"]) == 0
        assert _last_json(capsys)["plan"]["lr_schedule"] == {"kind": "cosine", "warmup": 2, "steps": 8, "floor": 0.1}
        states.append(np.load(state))
    for k in states[0].files:
        np.testing.assert_array_equal(states[0][k], states[1][k], err_msg=k)
    # constant lrs train differently (the schedule really reaches the update)
    assert main(["train", model, "--data", data, "--update", "last-k:2", "--lr", "0.05", "--steps", "8",
                 "--engine", engines[0], "--state-out", str(tmp_path / "constant.npz"), "--json"]) == 0
    constant = np.load(tmp_path / "constant.npz")
    assert any(not np.array_equal(constant[k], states[0][k]) for k in constant.files if k != "step")


def test_eval_json(model, data, capsys):
    assert main(["eval", model, "--data", data, "--json"]) == 0
    out = _last_json(capsys)
    assert out["n"] == 6 and 0 <= out["accuracy"] <= 1


@pytest.mark.parametrize("args,message", [
    (["--plan", "absent.json"], "cannot read plan"),
    (["--update", "sideways"], "expected full, bias-only, last-k:N, classifier-only"),
    (["--engine", "qemu", "--sram", "8k"], "does not fit"),  # refused by the compile, before any linker
    (["--new-head", "1"], "at least 2 classes"),
    (["--held-out", "1.5"], "between 0 and 1"),
    (["--held-out", "0.1"], "both must be non-empty"),  # 6 samples: nothing would be held out
    (["--warmup", "0.1"], "--warmup applies to --lr-schedule cosine"),
    (["--lr-schedule", "cosine", "--warmup", "1"], "in [0, 1)"),
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


ZOO_MODEL = str(Path(__file__).resolve().parents[1] / "models" / "mbv1-0.25-vww.onnx")
LFW_RUN = ["--data", "lfw", "--new-head", "2", "--held-out", "0.25"]


@pytest.fixture(scope="module")
def lfw_runs(tmp_path_factory):
    """A shipped Fashion-MNIST model fine-tuned on lfw (150 train / 50 held out), with and without QAS."""
    if not Path(ZOO_MODEL).exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    tmp = tmp_path_factory.mktemp("lfw")
    runs = {}
    for name, extra in (("qas", []), ("no_qas", ["--no-qas"])):
        state = tmp / f"{name}.npz"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["train", ZOO_MODEL, *LFW_RUN, "--update", "last-k:2", "--lr", "0.03", "--epochs", "2",
                         "--json", "--state-out", str(state), *extra]) == 0
        runs[name] = (json.loads(out.getvalue().strip().splitlines()[-1]), state)
    return runs


def test_held_out_accuracy_improves_with_qas_and_not_without(lfw_runs):
    qas, _ = lfw_runs["qas"]
    no_qas, _ = lfw_runs["no_qas"]
    for r in (qas, no_qas):
        assert (r["n_train"], r["n_held_out"], r["steps"], r["held_out"], r["split_seed"]) == (150, 50, 300, 0.25, 0)
    assert qas["qas"] is True and no_qas["qas"] is False
    assert qas["accuracy_before"] == no_qas["accuracy_before"] <= 0.6  # the same untrained new head
    assert qas["accuracy_after"] >= qas["accuracy_before"] + 0.15
    # plain int8 SGD at the same lr: steps of lr s^2 G in the weights' LSBs, far below one LSB
    assert no_qas["accuracy_after"] < qas["accuracy_after"] and no_qas["final_loss"] > qas["final_loss"]


def test_eval_reproduces_held_out_accuracy_before_and_after(lfw_runs, capsys):
    qas, state = lfw_runs["qas"]
    assert main(["eval", ZOO_MODEL, *LFW_RUN, "--json"]) == 0
    before = _last_json(capsys)
    assert (before["accuracy"], before["n"]) == (qas["accuracy_before"], 50)
    assert main(["eval", ZOO_MODEL, *LFW_RUN, "--state", str(state), "--json"]) == 0
    after = _last_json(capsys)
    assert (after["accuracy"], after["n"]) == (qas["accuracy_after"], 50)


def test_train_progress_output_names_both_held_out_accuracies(capsys):
    if not Path(ZOO_MODEL).exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    assert main(["train", ZOO_MODEL, *LFW_RUN, "--update", "last-k:1", "--steps", "20"]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy before training" in out and "on 50 samples (training on 150)" in out
    assert "held-out accuracy after training" in out and "points)" in out


def test_eval_state_of_another_model_is_refused(lfw_runs, capsys):
    _, state = lfw_runs["qas"]
    assert main(["eval", ZOO_MODEL, "--data", "lfw", "--state", str(state)]) == 2  # no --new-head: other head
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--new-head" in err[0]
