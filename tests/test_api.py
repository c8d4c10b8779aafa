"""The Python API (tinytrain/api.py): each function returns what the command line prints and writes, and raises
typed errors. The guide's examples (docs/guide/api.md) run in tests/test_docs.py."""

import json

import numpy as np
import pytest

import tinytrain
from onnx_models import write_tiny_task
from tinytrain.cli import main


def test_the_api_is_the_package():
    assert {"load_model", "compile", "plan", "train", "evaluate"} <= set(dir(tinytrain)) | set(tinytrain.API)
    assert issubclass(tinytrain.BudgetError, tinytrain.TinyTrainError)
    with pytest.raises(AttributeError):
        tinytrain.no_such_function


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    return write_tiny_task(tmp_path_factory.mktemp("api"))


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_compile_returns_the_report_the_cli_writes(tiny_files, tmp_path, capsys):
    model = str(tiny_files / "tiny.onnx")
    compiled = tinytrain.compile(model, sram="64k", update="last-k:2", new_head=2)
    assert compiled.mode == "training" and compiled.report.fits and "tinytrain_model.c" in compiled.files
    assert main(["compile", model, "--sram", "64k", "--update", "last-k:2", "--new-head", "2", "-o",
                 str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "report.json").read_text()) == compiled.to_json()
    assert (tmp_path / "b" / "tinytrain_model.c").read_text() == compiled.files["tinytrain_model.c"]
    inference = tinytrain.compile(model, sram="64k")
    assert inference.mode == "inference" and inference.plan is None


def test_train_and_evaluate_return_what_the_cli_prints(tiny_files, capsys):
    model, data = str(tiny_files / "tiny.onnx"), str(tiny_files / "tiny.npz")
    common = dict(new_head=2, held_out=0.25)
    r = tinytrain.train(model, data, update="last-k:2", lr=0.05, steps=20, engine="c", **common)
    assert r.steps == 20 and r.losses.dtype == np.float32 and r.held_out["n_held_out"] == 10
    assert main(["train", model, "--data", data, "--new-head", "2", "--held-out", "0.25", "--update", "last-k:2",
                 "--lr", "0.05", "--steps", "20", "--engine", "c", "--json"]) == 0
    cli = _last_json(capsys)
    want = r.to_json()
    for k in ("seconds", "build_seconds"):
        cli.pop(k), want.pop(k)
    assert cli == want
    # arrays instead of a DATA spec, the trained model evaluated: the held-out accuracy after training
    with np.load(data) as f:
        arrays = (f["x"], f["y"])
    again = tinytrain.train(tinytrain.load_model(model, new_head=2), arrays, update="last-k:2", lr=0.05, steps=20,
                            held_out=0.25)
    e = tinytrain.evaluate(again.trained_model(), arrays, held_out=0.25)
    assert e.accuracy == again.accuracy_after and e.n == 10 and e.held_out == 0.25


def test_typed_errors(tiny_files):
    model, data = str(tiny_files / "tiny.onnx"), str(tiny_files / "tiny.npz")
    with pytest.raises(tinytrain.BudgetError):
        tinytrain.compile(model, sram="4k", update="full", new_head=2)
    assert tinytrain.train(model, (np.zeros((4, 16, 16, 3), np.uint8), np.array([0, 1, 0, 1])), new_head=2,
                           steps=1).steps == 1
    with pytest.raises(tinytrain.UsageError, match="new_head=100"):
        tinytrain.train(model, (np.zeros((4, 16, 16, 3), np.uint8), np.array([0, 1, 2, 99])))
    with pytest.raises(tinytrain.UsageError, match=r"features x are float32\(4, 8, 8, 3\)"):
        tinytrain.evaluate(model, (np.zeros((4, 8, 8, 3), np.float32), np.zeros(4, int)))
    with pytest.raises(tinytrain.UsageError, match="either plan= or update="):
        tinytrain.train(model, data, plan={"version": 1}, update="bias-only", new_head=2)
    with pytest.raises(tinytrain.PlanError):
        tinytrain.train(model, data, plan={"version": 7}, new_head=2)
    with pytest.raises(tinytrain.ModelError):
        tinytrain.load_model(tiny_files / "tiny.npz")
    with pytest.raises(tinytrain.UsageError, match="engine"):
        tinytrain.train(model, data, engine="gpu", new_head=2)
    with pytest.raises(tinytrain.UsageError, match="no_such_option"):
        tinytrain.plan(model, data, new_head=2, no_such_option=1)


def test_plan_returns_the_plan_and_writes_the_files(tiny_files, tmp_path):
    result = tinytrain.plan(str(tiny_files / "tiny.onnx"), str(tiny_files / "tiny.npz"), sram="8k", new_head=2,
                            held_out=0.25, ft_steps=12, bias_k=(1, 2, 4), generations=5, population=12,
                            cache=str(tmp_path / "cache"), output=tmp_path / "plan.json")
    assert isinstance(result.plan, tinytrain.api.Plan) and result.report["peak_sram_bytes"] <= 8 * 1024
    written = json.loads((tmp_path / "plan.json").read_text())  # the step spec: the plan, its recipe and its model
    assert written == result.spec.to_json() and result.spec.plan.to_json() == result.plan.to_json() == \
        result.report["plan"] and written["new_head"] == 2 and written["model"]
    assert json.loads((tmp_path / "plan.search.json").read_text()) == result.report
