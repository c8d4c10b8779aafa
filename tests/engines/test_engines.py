"""The engines behind one interface (tinytrain/engines/): every loss on every host engine, on a plan with a frozen
prefix (the host C engine cuts the model there), gives the same losses and states bit for bit; the MLPerf Tiny
autoencoder of issue 43 trains on the host C engine again."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

import tinytrain
from codegen_graphs import GraphBuilder
from conftest import shared_file
from tinytrain.cli import main
from tinytrain.engines import default_engine
from tinytrain.engines.cut import suffix_model
from tinytrain.engines.samples import Samples
from tinytrain.engines.trainer import build_trainer
from tinytrain.training.spec import StepSpec
from tinytrain.training.sparse import preset

needs_qemu = pytest.mark.qemu


def _model(loss: str):
    """Three fully-connected layers: a classifier (3 classes), an autoencoder (its input's shape out) or a
    regression (4 float targets); with its samples (arrays as train takes them)."""
    b = GraphBuilder(7, f"fc3_{loss}")
    width = {"xent": 3, "mse": 16, "targets": 4}[loss]
    g = b.build(b.fully_connected(b.fully_connected(b.fully_connected(b.input((1, 16)), 12), 8), width))
    x = b.inputs_batch(g, 8)
    rng = np.random.default_rng(3)
    y = {"xent": rng.integers(0, 3, 8), "mse": None, "targets": rng.normal(0, 1, (8, 4)).astype(np.float32)}[loss]
    return g, (x, y)


LOSSES = ("xent", "mse", "targets")  # cross-entropy, mse reconstruction, mse against float targets


@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_trains_bit_identically_on_every_host_engine_through_the_cut(loss):
    g, data = _model(loss)
    spec = preset("last-k:2", g, lr=0.05)
    assert suffix_model(g, spec)[2] is not None  # layer 0 is frozen: the host C engine trains the cut model
    runs = [tinytrain.train(g, data, update="last-k:2", lr=0.05, loss="xent" if loss == "xent" else "mse",
                            steps=12, engine=engine, seed=1) for engine in ("sim", "c")]
    sim, c = runs
    assert np.array_equal(sim.losses.view(np.uint32), c.losses.view(np.uint32))
    assert sim.state.step == c.state.step == 12
    assert sim.state.tensors.keys() == c.state.tensors.keys()
    assert all(np.array_equal(v, c.state.tensors[k]) for k, v in sim.state.tensors.items())
    assert sim.train_accuracy == c.train_accuracy  # the same outputs, scored the same way
    assert any(not np.array_equal(v, g.tensors[k].data) for k, v in sim.state.tensors.items() if k in g.tensors)  # it learns


def test_the_host_c_engine_trains_the_cut_model_of_a_reconstruction():
    """The cut keeps the model's input as the mse target: the real values of the images, as float targets."""
    g, (x, _) = _model("mse")
    trainer = build_trainer("c", g, StepSpec(replace(preset("last-k:2", g, lr=0.05), loss="mse")),
                            Samples(x, np.zeros(len(x), np.int64)))
    assert trainer.device.graph.inputs[0] != g.inputs[0] and trainer.samples.targets.shape == x.shape
    q = g.tensors[g.inputs[0]].quant
    np.testing.assert_array_equal(trainer.samples.targets,
                                  (x.astype(np.int32) - q.zp).astype(np.float32) * np.float32(q.s))


@needs_qemu
def test_qemu_trains_the_same_whole_step_as_the_cut_host_c():
    g, data = _model("mse")
    c, q = (tinytrain.train(g, data, update="last-k:2", lr=0.05, loss="mse", steps=6, engine=e, seed=1)
            for e in ("c", "qemu"))
    assert np.array_equal(c.losses.view(np.uint32), q.losses.view(np.uint32))
    assert all(np.array_equal(v, q.state.tensors[k]) for k, v in c.state.tensors.items())


@pytest.mark.parametrize("engine", ["c", pytest.param("qemu", marks=needs_qemu)])
def test_the_mlperf_autoencoder_trains_last_k2_on_the_host_c_engine(engine, tmp_path, capsys):
    """Issue 43: `train ad01 --update last-k:2 --loss mse --engine c` was refused ("the output (1, 640) must have
    the input's shape (1, 128)"): the cut compared the reconstruction with the cut's activation. QEMU (qemu-m7, the
    default board) computes the same state."""
    model = str(shared_file("models/ad01_int8.tflite"))
    rng = np.random.default_rng(0)
    s, zp = 0.3910152316093445, 89  # its input's quantization: windows inside the range
    x = np.clip(rng.uniform(-30, 10, 640) + rng.normal(0, 2, (6, 640)), (-128 - zp) * s, (127 - zp) * s)
    np.savez(tmp_path / "ad.npz", x=x.astype(np.float32))
    states = {}
    for name in ("sim", engine):
        out = tmp_path / f"{name}.npz"
        assert main(["train", model, "--data", str(tmp_path / "ad.npz"), "--update", "last-k:2", "--loss", "mse",
                     "--lr", "0.001", "--engine", name, "--state-out", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 6
        states[name] = np.load(out)
    assert states["sim"].files == states[engine].files
    assert all(np.array_equal(states["sim"][k], states[engine][k]) for k in states["sim"].files)


def test_the_default_engine_is_the_host_c_one_when_gcc_is_there(monkeypatch):
    assert default_engine() == ("c" if shutil.which("gcc") else "sim")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert default_engine() == "sim"
