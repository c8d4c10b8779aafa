"""The anomaly field runtime of an autoencoder (field_runtime/anomaly.py, issue 41): the simulator == the host C
(scores, decisions, saved bytes) on a small FC autoencoder and on ad01, the integer score against the float MSE,
a bad label refused with nothing changed, and `tinytrain field` on an autoencoder (a wrong-kind stream: one line,
exit 2, nothing written)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from codegen_graphs import GraphBuilder
from conftest import shared_file
from tinytrain.cli import main
from tinytrain.field_runtime.anomaly import BAD_LABEL, NORMAL, AnomalyRuntime, anomaly_program
from tinytrain.field_runtime.anomaly_host import AnomalyHost
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.qemu import qemu_field
from tinytrain.field_runtime.step import SimStep
from tinytrain.metrics import reconstruction_errors
from tinytrain.ops.sgd_update import Rounding
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import preset

CFG = FieldConfig(replay=6, replay_k=2, drift_warmup=4, drift_rebase=6, drift_shift=1)


def _fc_autoencoder():
    b = GraphBuilder(3, "fc_ae")
    x = b.input((1, 16))
    return b.build(b.fully_connected(b.fully_connected(x, 8, weight_zp=True), 16))


def _program(graph, update: str, lr: float):
    plan = replace(preset(update, graph, lr=lr), loss="mse")
    return anomaly_program(graph, plan, CFG, UpdateConfig(rounding=Rounding.STOCHASTIC, seed=3))


def _stream_agrees(program, xs: np.ndarray) -> AnomalyRuntime:
    sim, c = AnomalyRuntime(program, SimStep(program.graph, program.tg)), AnomalyHost(program)
    for i, x in enumerate(xs):
        if i % 3 == 2:
            assert sim.observe(x) == c.observe(x)
        else:
            assert sim.learn(x, NORMAL) == c.learn(x, NORMAL)
        assert sim.status() == c.status()
    before = sim.state_bytes()
    assert sim.learn(xs[0], 1) == c.learn(xs[0], 1) == BAD_LABEL
    assert sim.state_bytes() == c.state_bytes() == before
    assert (sim.scores(xs) == c.scores(xs)).all()
    return sim


def test_fc_autoencoder_sim_equals_host_c_and_drift_on_the_score():
    program = _program(_fc_autoencoder(), "full", 0.05)
    rng = np.random.default_rng(0)
    quiet = rng.integers(-20, 20, (14, 16)).astype(np.int8)
    loud = rng.integers(-128, 128, (10, 16)).astype(np.int8)  # the score jumps: a drift alarm
    sim = _stream_agrees(program, np.concatenate([quiet, loud]))
    assert sim.status()["alarms"] >= 1 and sim.buffer.filled == CFG.replay


@pytest.mark.qemu
def test_fc_autoencoder_on_qemu_m7_equals_the_simulator():
    """The anomaly runtime's C cross-built for qemu-m7, the stream baked into the field harness: every learn code
    and score and the final tt_field_save bytes are the simulator's (about 2 s)."""
    program = _program(_fc_autoencoder(), "full", 0.05)
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.integers(-20, 20, (14, 16)), rng.integers(-128, 128, (10, 16))]).astype(np.int8)
    ys = np.where(np.arange(len(xs)) % 3 == 2, -1, NORMAL)
    sim = AnomalyRuntime(program, SimStep(program.graph, program.tg))
    results = [sim.learn(x, NORMAL) if y == NORMAL else sim.observe(x) for x, y in zip(xs, ys)]
    run = qemu_field(program, xs, ys, "qemu-m7")
    assert run.results.tolist() == results and run.state == sim.state_bytes()
    assert sim.status()["alarms"] >= 1 and run.insns[ys == NORMAL].min() > run.insns[ys != NORMAL].max() > 0


def test_score_is_the_float_mse_within_its_rounding():
    program = _program(_fc_autoencoder(), "full", 0.05)
    rt = AnomalyRuntime(program, SimStep(program.graph, program.tg))
    xs = np.random.default_rng(1).integers(-128, 128, (8, 16)).astype(np.int8)
    mse = reconstruction_errors(program.graph, xs, rt.step.predict(xs))
    o, x = (program.graph.tensors[n].quant for n in (program.graph.outputs[0], program.graph.inputs[0]))
    unit = (max(o.s, x.s) / 64) ** 2
    assert np.allclose(rt.scores(xs) * unit, mse, rtol=0.03)


def test_ad01_sim_equals_host_c():
    graph_path = shared_file("models/ad01_int8.tflite")
    from tinytrain.api import load_model

    program = _program(load_model(graph_path), "last-k:2", 0.002)
    xs = np.random.default_rng(2).integers(-128, 128, (9, 640)).astype(np.int8)
    _stream_agrees(program, xs)


@pytest.mark.slow
@pytest.mark.qemu
def test_ad01_on_qemu_m7_equals_the_simulator():
    """ad01 (the MLPerf Tiny anomaly autoencoder, last-k:2): learn codes, scores and tt_field_save bytes on qemu-m7
    = the simulator's (about 4 s; a learn is 20.7 M instructions, a score 0.61 M)."""
    from tinytrain.api import load_model

    program = _program(load_model(shared_file("models/ad01_int8.tflite")), "last-k:2", 0.002)
    xs = np.random.default_rng(2).integers(-128, 128, (9, 640)).astype(np.int8)
    ys = np.where(np.arange(9) % 3 == 2, -1, NORMAL)
    sim = AnomalyRuntime(program, SimStep(program.graph, program.tg))
    results = [sim.learn(x, NORMAL) if y == NORMAL else sim.observe(x) for x, y in zip(xs, ys)]
    run = qemu_field(program, xs, ys, "qemu-m7")
    assert run.results.tolist() == results and run.state == sim.state_bytes()


@pytest.fixture(scope="module")
def ae_files(tmp_path_factory):
    from tinytrain.export_onnx import graph_to_onnx, save_onnx

    d = tmp_path_factory.mktemp("ae")
    save_onnx(graph_to_onnx(_fc_autoencoder()), d / "ae.onnx")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (12, 16)).astype(np.float32)
    np.savez(d / "stream.npz", x=x, y=np.array([0, -1] * 6))
    np.savez(d / "test.npz", x=x[:6], anomaly=np.array([0, 1] * 3))
    np.savez(d / "classes.npz", x=x[:4], y=np.array([0, 1, 2, 0]))
    np.savez(d / "kind.npz", x=rng.normal(size=(4, 7)).astype(np.float32), y=np.zeros(4, np.int64))
    return d


def test_field_command_on_an_autoencoder(ae_files, tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["field", str(ae_files / "ae.onnx"), "--stream", str(ae_files / "stream.npz"), "--test",
                 str(ae_files / "test.npz"), "--update", "full", "--replay", "4", "--engine", "c",
                 "--json", str(out)]) == 0
    assert "learned as normal" in capsys.readouterr().out and out.exists()


@pytest.mark.qemu
def test_field_command_on_an_autoencoder_on_qemu_m7_equals_sim(ae_files, tmp_path):
    """`tinytrain field AE --engine qemu --board qemu-m7`: the checkpoints' ROC AUC and mean scores, the alarms,
    status and buffer of `--engine sim` (the board scores the test inputs with tt_field_score)."""
    out = {}
    for engine, board in (("sim", []), ("qemu", ["--board", "qemu-m7"])):
        out[engine] = tmp_path / f"{engine}.json"
        assert main(["field", str(ae_files / "ae.onnx"), "--stream", str(ae_files / "stream.npz"), "--test",
                     str(ae_files / "test.npz"), "--update", "full", "--replay", "4", "--checkpoints", "3",
                     "--engine", engine, *board, "--json", str(out[engine])]) == 0
    sim, qemu = (json.loads(out[e].read_text()) for e in ("sim", "qemu"))
    assert len(sim["checkpoints"]) == 3 and sim["labelled"] == 6
    assert {k: v for k, v in sim.items() if k not in ("engine", "seconds")} == \
        {k: v for k, v in qemu.items() if k not in ("engine", "seconds")}


@pytest.mark.parametrize("stream, says", [("classes.npz", "autoencoder"), ("kind.npz", "model's input takes")])
def test_wrong_kind_stream(ae_files, tmp_path, capsys, stream, says):
    out = tmp_path / "out.json"
    assert main(["field", str(ae_files / "ae.onnx"), "--stream", str(ae_files / stream), "--json", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note:")]
    assert len(err) == 1 and says in err[0] and not out.exists()
