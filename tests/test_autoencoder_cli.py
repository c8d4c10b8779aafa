"""An autoencoder on the command line (issue 29): eval's reconstruction error and ROC AUC, train --loss mse, and
the bad data that must end in one line on stderr, exit code 2, nothing written."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from tinytrain.cli import main
from tinytrain.metrics import roc_auc

CLASSIFIER = Path(__file__).resolve().parents[1] / "models" / "mbv1-0.25-vww.onnx"  # (1,96,96,3) -> 2 classes
S, ZP = 0.3910152316093445, 89  # ad01's input quantization


def test_roc_auc_known_cases():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert roc_auc([1.0, 1.0], [0, 1]) == 0.5  # a tie counts one half
    rng = np.random.default_rng(0)
    s, a = rng.integers(0, 5, 40).astype(float), np.r_[np.zeros(25, int), np.ones(15, int)]
    pairs = [(p > n) + 0.5 * (p == n) for p in s[a == 1] for n in s[a == 0]]
    assert roc_auc(s, a) == pytest.approx(np.mean(pairs), abs=1e-12)


@pytest.fixture(scope="module")
def ad01():
    return str(shared_file("models/ad01_int8.tflite"))


def _features(n=24, seed=0):
    """Windows around one profile (normal) and every 4th one perturbed (anomalous), inside ad01's input range."""
    rng = np.random.default_rng(seed)
    lo, hi = (-128 - ZP) * S, (127 - ZP) * S
    base = rng.uniform(-30, 10, 640)
    x = base + rng.normal(0, 2, (n, 640))
    anomaly = (np.arange(n) % 4 == 0).astype(np.int64)
    x[anomaly == 1] += rng.normal(0, 8, (anomaly.sum(), 640))
    return np.clip(x, lo, hi).astype(np.float32), anomaly


def _one_line(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinytrain: error: "), err
    return err[0]


@pytest.mark.slow
def test_eval_reports_errors_and_auc_and_train_lowers_them(ad01, tmp_path, capsys):
    x, anomaly = _features()
    np.savez(tmp_path / "ad.npz", x=x, anomaly=anomaly)
    np.save(tmp_path / "labels.npy", anomaly)
    assert main(["eval", ad01, "--data", str(tmp_path / "ad.npz"), "--json"]) == 0
    before = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert before["loss"] == "mse" and before["n"] == 24 and len(before["errors"]) == 24
    assert before["reconstruction_error"] == pytest.approx(np.mean(before["errors"]), rel=1e-6)
    assert before["roc_auc"] == roc_auc(before["errors"], anomaly) and before["n_anomalous"] == 6
    state = tmp_path / "state.npz"
    assert main(["train", ad01, "--data", str(tmp_path / "ad.npz"), "--loss", "mse", "--update", "last-k:2",
                 "--lr", "0.001", "--epochs", "2", "--state-out", str(state), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["loss"] == "mse" and trained["plan"]["loss"] == "mse"
    assert main(["eval", ad01, "--data", str(tmp_path / "ad.npz"), "--state", str(state),
                 "--anomaly-labels", str(tmp_path / "labels.npy"), "--json"]) == 0
    after = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert after["reconstruction_error"] < before["reconstruction_error"]


BAD = {
    "wrong_shape": (lambda x, a: dict(x=x[:, :600]), "ad01", "train", r"features x are float32\(8, 600\)"),
    "wrong_dtype": (lambda x, a: dict(x=x.astype(np.int16)), "ad01", "eval", "x must be uint8 images"),
    "out_of_range": (lambda x, a: dict(x=x + 60), "ad01", "train", "lie outside the model input's range"),
    "labels_on_an_autoencoder": (lambda x, a: dict(x=x, y=a), "ad01", "train", "labels on an autoencoder"),
    "plain_npy": (None, "ad01", "train", r"plain \.npy array is not a dataset"),
    "mse_without_targets": (lambda x, a: dict(x=np.zeros((4, 96, 96, 3), np.float32)), "classifier", "train",
                            "not its input's shape"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_data_is_one_line_and_writes_nothing(name, ad01, tmp_path, capsys):
    make, model, command, words = BAD[name]
    x, anomaly = _features(8)
    data = tmp_path / ("d.npy" if make is None else "d.npz")
    if make is None:
        np.save(data, x)
    else:
        np.savez(data, **make(x, anomaly))
    state, onnx = tmp_path / "state.npz", tmp_path / "trained.onnx"
    argv = [command, ad01 if model == "ad01" else str(CLASSIFIER), "--data", str(data), "--loss", "mse"]
    if command == "train":
        argv += ["--update", "last-k:2", "--state-out", str(state), "-o", str(onnx)]
    assert re.search(words, _one_line(argv, capsys))
    assert not state.exists() and not onnx.exists()


def test_field_refuses_a_classifier_stream_on_an_autoencoder_in_one_line(ad01, tmp_path, capsys):
    x, _ = _features(8)  # labels 0 / 1: an autoencoder's stream is 0 (normal) or -1 (field_runtime/anomaly.py)
    np.savez(tmp_path / "stream.npz", x=x, y=np.arange(8) % 2)
    line = _one_line(["field", ad01, "--stream", str(tmp_path / "stream.npz"), "--json", str(tmp_path / "o.json")],
                     capsys)
    assert "autoencoder" in line and "0 (a normal sample" in line and not (tmp_path / "o.json").exists()
