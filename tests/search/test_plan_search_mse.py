"""The plan search of an autoencoder (issue 29): ``tinytrain plan`` on DATA without y scores each fine-tune by minus
its validation reconstruction error (the mse loss), never cuts the model below the plan (its loss reads the input),
and writes an mse plan; on ad01, the MLPerf Tiny autoencoder, with small synthetic windows (slow)."""

import json
import shutil

import numpy as np
import pytest

from codegen_graphs import GraphBuilder
from conftest import shared_file
from tinytrain.cli import main
from tinytrain.search.noise import paired_se

needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no host C compiler (gcc)")


def test_paired_se_of_per_row_scores():
    a, b = [-1.0, -2.0, -3.5, -0.5], [-1.5, -2.0, -3.0, -1.5]
    d = np.array(a) - np.array(b)
    assert paired_se(a, b) == pytest.approx(d.std(ddof=1) / 2)
    assert paired_se([True, False, True], [True, True, False]) == pytest.approx(np.array([0, -1, 1]).std(ddof=1)
                                                                                 / np.sqrt(3))


@needs_cc
@pytest.mark.slow
def test_an_autoencoders_search_scores_minus_the_reconstruction_error():
    import tinytrain
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.metrics import reconstruction_errors
    from tinytrain.training.train_graph import build_training_graph

    b = GraphBuilder(3, "fc_ae")
    g = b.build(b.fully_connected(b.fully_connected(b.fully_connected(b.input((1, 16)), 8), 8), 16))
    x = b.inputs_batch(g, 16)
    result = tinytrain.plan(g, (x, None), sram="64k", ft_steps=6, epochs=1, repeats=2, max_rungs=1, proposals=1,
                            population=8, generations=2, bias_k=(2,), use_cache=False,
                            lr_schedule="constant")  # (the default, cosine, would need the schedule below too)
    r = result.report
    assert r["score"] == "-reconstruction_error" and r["validation_se"] is None
    assert result.plan.loss == "mse" and all(f["plan"]["loss"] == "mse" for f in r["finalists"])
    last = {f["name"]: f["measured"][-1]["accuracy"] for f in r["finalists"] if f["last_rung"]}
    presets = [f["name"] for f in r["finalists"] if f["preset"] and f["last_rung"]]
    assert all(v < 0 for v in last.values()) and r["validation_accuracy"] == last[r["chosen"]]
    assert last[r["chosen"]] >= max(last[n] for n in presets)  # a searched plan only if it leads the best preset
    # the chosen score is minus the mean error of the plan trained on the fit rows, on the validation rows
    val, fit = r["measurement"]["n_val"], r["measurement"]["n_fit"]
    assert val + fit == 16 and val == 4
    from tinytrain.engines.order import sample_order
    from tinytrain.training.sparse import parse_plan

    rows = np.arange(16)
    rng = np.random.default_rng(0)  # stratified_split of one stratum: a permutation of the rows
    val_rows = np.sort(rng.permutation(rows)[:val])
    fit_rows = np.setdiff1d(rows, val_rows)
    chosen = next(f for f in r["finalists"] if f["name"] == r["chosen"])
    trainer = CTrainer(build_training_graph(g, parse_plan(chosen["plan"])))
    trainer.train(x[fit_rows], np.zeros(fit, np.int64), sample_order(np.arange(fit), fit, 0))
    errors = reconstruction_errors(g, x[val_rows], trainer.predict(x[val_rows]))
    assert -float(errors.astype(np.float64).mean()) == pytest.approx(r["validation_accuracy"], abs=1e-9)


@needs_cc
@pytest.mark.slow
def test_with_anomaly_labels_the_search_fits_the_normal_rows_and_scores_the_roc_auc():
    import tinytrain

    b = GraphBuilder(4, "fc_ae")
    g = b.build(b.fully_connected(b.fully_connected(b.input((1, 16)), 8), 16))
    x = b.inputs_batch(g, 16)
    anomaly = (np.arange(16) % 4 == 0).astype(np.int64)
    x[anomaly == 1] = np.clip(x[anomaly == 1].astype(int) * 3, -128, 127)
    result = tinytrain.plan(g, (x, None, anomaly), sram="64k", ft_steps=4, epochs=1, repeats=2, max_rungs=1,
                            proposals=1, population=8, generations=2, bias_k=(2,), use_cache=False)
    r = result.report
    assert r["score"] == "roc_auc" and result.plan.loss == "mse"
    assert r["measurement"]["n_val"] == 4 and r["measurement"]["n_fit"] == 9  # the 12 fit rows' 9 normal ones
    assert all(0 <= f["measured"][-1]["accuracy"] <= 1 for f in r["finalists"])


@needs_cc
@pytest.mark.slow
def test_ad01_plan_search_on_synthetic_windows_writes_an_mse_plan_that_trains(tmp_path, capsys):
    model = str(shared_file("models/ad01_int8.tflite"))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "ad.npz", x=(rng.uniform(-30, 10, 640) + rng.normal(0, 2, (16, 640))).astype(np.float32))
    out = tmp_path / "ad.json"
    argv = ["plan", model, "--data", str(tmp_path / "ad.npz"), "--ft-steps", "4", "--epochs", "1", "--repeats", "2",
            "--bias-k", "2", "--proposals", "1", "--max-rungs", "1", "--population", "8", "--generations", "2",
            "--time-limit", "30", "--search-seconds-min", "2", "--no-progress", "--no-cache", "-o", str(out)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "score (minus the reconstruction error)" in shown and "<- chosen" in shown
    plan = json.loads(out.read_text())
    assert plan["loss"] == "mse"
    report = json.loads((tmp_path / "ad.search.json").read_text())
    assert report["peak_sram_bytes"] <= 256 * 1024 and report["score"] == "-reconstruction_error"
    assert main(["train", model, "--data", str(tmp_path / "ad.npz"), "--plan", str(out), "--steps", "2",
                 "--engine", "c", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 2


def test_float_targets_are_not_searched_one_line(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.uniform(-30, 10, (8, 640)).astype(np.float32)
    np.savez(tmp_path / "reg.npz", x=x, y=x + 1)
    out = tmp_path / "plan.json"
    argv = ["plan", str(shared_file("models/ad01_int8.tflite")), "--data", str(tmp_path / "reg.npz"), "--loss", "mse",
            "--no-cache", "--no-progress", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "float targets y are not searched" in err[0]
    assert not out.exists()
