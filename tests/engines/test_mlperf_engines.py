"""The four MLPerf Tiny reference models (issue 29) train bit-identically on the three engines: the training steps
of ``last-k:2``, of the searched plan shipped in models/plans/mlperf/ (scripts/mlperf_plans.py: the best measured
finalist, a preset for these small searches) and of the search's own proposal (its exact branch and bound's plan,
in the .search.json) give the same losses, state and logits on the simulator, the host C and qemu-m7 (slow: one
firmware run of 2 steps + 2 predictions per model and plan; ad01's last-k:2 is tests/ops/test_mse.py's)."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from tinytrain.training.sparse import load_plan, parse_plan, preset
from tinytrain.training.train_graph import build_training_graph

ROOT = Path(__file__).resolve().parents[2]
PLANS = ROOT / "models" / "plans" / "mlperf"
MODELS = ("pretrainedResnet_quant", "kws_ref_model", "ad01_int8", "vww_96_int8")
CASES = [(m, w) for m in MODELS for w in ("searched", "proposal")] + [(m, "last-k:2") for m in MODELS
                                                                   if m != "ad01_int8"]

needs_qemu = pytest.mark.qemu


def _training_graph(name: str, which: str):
    from tinytrain.frontends import load_model

    g = load_model(shared_file(f"models/{name}.tflite"))
    if which == "searched":
        plan = load_plan(PLANS / f"{name}-searched.json")
    elif which == "proposal":
        report = json.loads((PLANS / f"{name}-searched.search.json").read_text())
        plan = parse_plan(report["exact"]["plan"])
    else:
        plan = replace(preset(which, g, lr=0.005), loss="mse" if name == "ad01_int8" else "xent")
    return g, plan, build_training_graph(g, plan)


def _samples(g, n: int, mse: bool):
    """Random int8 inputs; random labels (an autoencoder's: zeros, the mse loss reads none)."""
    rng = np.random.default_rng(0)
    x = rng.integers(-60, 60, (n,) + g.tensors[g.inputs[0]].shape[1:]).astype(np.int8)
    return x, rng.integers(0, 1 if mse else g.tensors[g.outputs[0]].shape[-1], n)


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("name, which", CASES, ids=[f"{m}-{w}" for m, w in CASES])
def test_sim_c_and_qemu_m7_are_bit_identical(name, which, tmp_path):
    from tinytrain.engines import qemu as engine_qemu
    from tinytrain.codegen.state import pack
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.engines.qemu import QemuTrainer
    from tinytrain.simulator import forward, init_state, train, with_state
    from tinytrain.training.autodiff import logits_of

    g, plan, tg = _training_graph(name, which)
    assert (plan.loss == "mse") == (name == "ad01_int8")
    x, y = _samples(g, 4, plan.loss == "mse")
    state = init_state(tg)
    losses = train(tg, state, x[:2], y[:2])
    logits = forward(replace(with_state(g, state), outputs=(logits_of(g),)), {g.inputs[0]: x[2:]})[logits_of(g)]
    c = CTrainer(tg, tmp_path / "c")
    assert np.array_equal(losses.view(np.uint32), c.train(x[:2], y[:2]).view(np.uint32))
    assert c.state_bytes() == pack(tg, state)
    assert np.array_equal(c.predict(x[2:]), logits.reshape(len(logits), -1))
    q = QemuTrainer(tg, board="qemu-m7")  # linked in a 256 KB RAM region, the harness beside the training step
    r = engine_qemu.run(q.firmware, "qemu-m7", train=(x[:2], y[:2]), test=(x[2:], np.zeros(2, np.int32)))
    assert np.array_equal(r.losses.view(np.uint32), losses.view(np.uint32))
    assert r.state == pack(tg, state)
    assert np.array_equal(r.logits.reshape(len(logits), -1), logits.reshape(len(logits), -1))
    before = init_state(tg).tensors
    assert np.isfinite(losses).all() and any(not np.array_equal(v, before[k]) for k, v in state.tensors.items())


def test_the_shipped_plans_record_how_they_were_made():
    prov = json.loads((PLANS / "provenance.json").read_text())
    for name in MODELS:
        assert prov[name]["command"].startswith(f"tinytrain plan ../shared/models/{name}.tflite")
        assert prov[name]["peak_sram_bytes"] <= 256 * 1024
        assert load_plan(PLANS / f"{name}-searched.json").to_json() == json.loads(
            (PLANS / f"{name}-searched.search.json").read_text())["plan"]
