"""``tinytrain train --engine c`` / ``tinytrain eval --engine c`` against ``--engine sim`` on a shipped model."""

import json
from pathlib import Path

import numpy as np
import pytest

from tinytrain.cli import main

MODEL = str(Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("data") / "d.npz"
    np.savez(path, x=rng.integers(0, 256, (8, 96, 96, 3)).astype(np.uint8), y=np.array([0, 1] * 4))
    return str(path)


def _run(capsys, *args) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_train_engines_write_byte_identical_state_files(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TINYTRAIN_CACHE", str(tmp_path / "cache"))
    common = ["train", MODEL, "--data", data, "--update", "last-k:2", "--steps", "12", "--json"]
    sim = _run(capsys, *common, "--engine", "sim", "--state-out", str(tmp_path / "sim.npz"))
    c = _run(capsys, *common, "--engine", "c", "--state-out", str(tmp_path / "c.npz"))
    assert c["engine"] == "c" and c["steps"] == sim["steps"] == 12 and c["build_seconds"] >= 0
    assert abs(c["final_loss"] - sim["final_loss"]) <= 1e-4 * max(1.0, abs(sim["final_loss"]))
    assert (tmp_path / "c.npz").read_bytes() == (tmp_path / "sim.npz").read_bytes()
    saved = np.load(tmp_path / "c.npz")
    assert int(saved["step"]) == 12 and any(saved[k].dtype == np.int8 for k in saved.files)


def test_eval_engine_c_equals_sim(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TINYTRAIN_CACHE", str(tmp_path / "cache"))
    sim = _run(capsys, "eval", MODEL, "--data", data, "--json")
    c = _run(capsys, "eval", MODEL, "--data", data, "--json", "--engine", "c")
    assert c == sim and c["n"] == 8
