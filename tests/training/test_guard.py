"""The non-finite guard (docs/guide/field.md): a step whose loss is NaN or Inf is not applied —
weights, biases, momentum and the step counter stay as they were, the step is counted — identically in the
simulator, the host C and the firmware on QEMU; an lr whose float32 step factor overflows is refused. A finite loss
implies finite gradients by the compile-time bounds of training/finite.py: they hold on every gradient computed, and
a model whose scales would let a gradient overflow under a finite loss is refused by every engine.

Poisoned inputs: the classifier's logits are given the scale 2^121 (its forward requantization is unchanged, only
the loss reads the scale), so an image whose int8 logits spread over 128 LSB or more, or reach 128 LSB from the
zero point, has an infinite or NaN loss, and the others a finite one. All values are exact multiples of 2^121,
so every engine agrees on which steps are non-finite.
"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from tinytrain.cli import main
from tinytrain.codegen.state import pack
from tinytrain.engines.host_c import CTrainer
from tinytrain.errors import PlanError
from tinytrain.ir import QuantParams
from tinytrain.ops import written_tensors
from tinytrain.simulator import execute, init_state, train_step
from tinytrain.names import LABEL, LOSS
from tinytrain.training.device_step import device_schedule
from tinytrain.training.finite import LIMIT, gradient_bounds
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan, WeightUpdate
from tinytrain.training.train_graph import build_training_graph

PLAN = Plan(bias_last_k=4, weights=(WeightUpdate(0, 0.5), WeightUpdate(3, 0.25), WeightUpdate(5, 1.0)), lr=0.05)
POISON_SCALE = 2.0 ** 121
N = 24


def poisoned_model():
    g, _ = train_ops_model()
    logits = g.tensors[g.outputs[0]]
    quant = QuantParams.per_tensor(POISON_SCALE, logits.quant.zp)
    return dataclasses.replace(g, tensors={**g.tensors, logits.name: dataclasses.replace(logits, quant=quant)})


@pytest.fixture(scope="module")
def poisoned():
    g = poisoned_model()
    tg = fuse_updates(build_training_graph(g, PLAN, UpdateConfig(momentum=0.9)))
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (N, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    return tg, x, rng.integers(0, 5, N)


def sim_run(tg, x, y):
    """(per-step losses, per-step state bytes after the step, final state) of the simulator."""
    state, losses, states = init_state(tg), [], []
    for k in range(len(y)):
        losses.append(train_step(tg, state, x[k : k + 1], int(y[k]))[LOSS][0])
        states.append(pack(tg, state))
    return np.array(losses, np.float32), states, state


def test_simulator_skips_exactly_the_nonfinite_steps(poisoned):
    tg, x, y = poisoned
    losses, states, state = sim_run(tg, x, y)
    bad = ~np.isfinite(losses)
    assert 0 < bad.sum() < N, "the poisoned images must give some non-finite and some finite losses"
    assert state.nonfinite == bad.sum() and state.step == N - bad.sum()
    before = pack(tg, init_state(tg))
    for k in range(N):
        if bad[k]:
            assert states[k] == before, f"step {k}: a non-finite step changed the state"
        before = states[k]
    assert states[-1] != pack(tg, init_state(tg)), "the finite steps must have trained something"


def test_host_c_skips_the_same_steps_and_keeps_the_same_state(poisoned):
    tg, x, y = poisoned
    sim_losses, _, state = sim_run(tg, x, y)
    c = CTrainer(tg)
    for k in range(N):
        before = c.state_bytes()
        loss = c.step(x[k], int(y[k]))
        assert np.isfinite(loss) == np.isfinite(sim_losses[k]), f"step {k}: sim and C disagree on finiteness"
        if np.isfinite(loss):  # fp32 work: the simulator within a tolerance (docs/design.md §4)
            assert abs(loss - sim_losses[k]) <= 4e-6 * max(1.0, abs(loss))
        else:
            assert c.state_bytes() == before, f"step {k}: a non-finite step changed the C state"
    assert c.nonfinite == state.nonfinite and c.state().step == state.step


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_skips_the_same_steps_and_keeps_the_same_state(poisoned):
    from tinytrain.engines.qemu import QemuTrainer

    tg, x, y = poisoned
    c = CTrainer(tg)
    c_losses = c.train(x, y)
    q = QemuTrainer(tg, board="qemu-m7", sram_budget=96 * 1024)
    q_losses = q.train(x, y)
    assert np.array_equal(c_losses.view(np.uint32), q_losses.view(np.uint32))
    assert q.nonfinite == c.nonfinite == (~np.isfinite(c_losses)).sum() > 0
    assert q.state_bytes() == c.state_bytes()


def test_an_lr_whose_step_factor_overflows_is_refused():
    g, _ = train_ops_model()
    with pytest.raises(PlanError, match="step factor"):
        build_training_graph(g, dataclasses.replace(PLAN, lr=1e38))


def test_a_huge_finite_lr_saturates_and_stays_finite():
    """lr 1e20: every step overshoots (the rounding clamps it, weights saturate at +-127); the loss of int8 logits
    stays finite, so every step is applied, and the C and the simulator agree."""
    g, _ = train_ops_model()
    tg = fuse_updates(build_training_graph(g, dataclasses.replace(PLAN, lr=1e20)))
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (8, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, 5, 8)
    losses, states, state = sim_run(tg, x, y)
    assert np.isfinite(losses).all() and state.nonfinite == 0 and state.step == 8
    c = CTrainer(tg)
    assert np.isfinite(c.train(x, y)).all() and c.nonfinite == 0
    assert c.state_bytes() == states[-1]
    w = [v for k, v in state.tensors.items() if v.dtype == np.int8]
    assert max(np.abs(v).max() for v in w) == 127


def test_cli_refuses_an_overflowing_lr_in_one_line(tmp_path, capsys):
    model = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"
    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((2, 96, 96, 3), np.uint8), y=np.zeros(2, np.int64))
    code = main(["train", str(model), "--data", str(data), "--update", "bias-only", "--lr", "1e38", "--steps", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "step factor" in err


# ---- a finite loss proves every gradient finite (training/finite.py) ------------------------------------------------

def rescaled_model(factors: dict[int, float]):
    """The test model with the weight scales of conv ``k`` times ``factors[k]``: the forward is unchanged (its
    requantization is in the node), only the backward's real weights change."""
    g, _ = train_ops_model()
    convs = [n for n in g.nodes if n.op == "conv2d"]
    tensors = dict(g.tensors)
    for k, f in factors.items():
        w = g.tensors[convs[k].inputs[1]]
        tensors[w.name] = dataclasses.replace(w, quant=QuantParams(tuple(s * f for s in w.quant.scale),
                                                                   w.quant.zero_point, w.quant.axis))
    return dataclasses.replace(g, tensors=tensors)


def overflowing_model():
    """The pointwise conv's (conv 2, frozen, between two updated layers) real weights beyond float32's range."""
    return rescaled_model({2: 2.0 ** 130})


def run_unguarded(tg, seed=5):
    """One step's values, run below the engines' entry points (which refuse a graph the proof rejects)."""
    state = {name: tg.tensors[name].data.copy() for name in written_tensors(tg)}
    x = np.random.default_rng(seed).integers(-128, 128, (1, *tg.tensors[tg.inputs[0]].shape[1:])).astype(np.int8)
    with np.errstate(all="ignore"):
        return execute(tg, {tg.inputs[0]: x, LABEL: np.array([1], np.int32), "step": np.array([0], np.int32)},
                       state, keep_all=True)


@pytest.mark.parametrize("device", [False, True], ids=["training-graph", "device-schedule"])
def test_the_bounds_hold_on_every_gradient_and_momentum(device):
    """Over 16 steps with momentum 0.9: every fp32 tensor the step computes, and every momentum buffer after the
    step, within its bound, on the training graph and on the device's schedule (masks in bits, fused updates)."""
    g, _ = train_ops_model()
    tg = build_training_graph(g, PLAN, UpdateConfig(momentum=0.9))
    tg = device_schedule(tg) if device else tg
    proof = gradient_bounds(tg)
    assert proof.largest_bound < LIMIT
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (16, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, 5, 16)
    state, checked = init_state(tg), set()
    for k in range(16):
        values = train_step(tg, state, x[k : k + 1], int(y[k]), keep_all=True)
        assert np.isfinite(values[LOSS]).all()
        for name, v in list(values.items()) + list(state.tensors.items()):
            if name in proof.bounds:
                assert np.abs(v).max() <= proof.bounds[name], f"{name}: {np.abs(v).max()} > {proof.bounds[name]}"
                checked.add(name)
    computed = {n for n in proof.bounds if n in tg.tensors}  # a fused update's gradient exists only in its kernel
    assert checked == computed and len(computed) > 10


def test_without_the_proof_a_finite_loss_can_carry_infinite_gradients():
    """Why the proof is needed: the overflowing model's loss is finite, yet its gradients are not (run below the
    engines' entry points, which refuse it)."""
    values = run_unguarded(build_training_graph(overflowing_model(), PLAN))
    assert np.isfinite(values[LOSS]).all()
    assert any(not np.isfinite(v).all() for k, v in values.items() if v.dtype == np.float32)


def test_an_overflowing_operand_is_refused_even_where_the_gradient_bounds_are_small():
    """Conv 4's weights 2^-100 smaller shrink every gradient below it, so conv 1's (the depthwise) 2^130 larger
    weights give small gradient bounds; but its input gradient's kernel computes the real tap s_w (w - zw) first (its
    dequantized table, docs/design.md §3b), and that overflows — in the simulator as in the C."""
    tg = build_training_graph(rescaled_model({4: 2.0 ** -100, 1: 2.0 ** 130}), PLAN)
    with pytest.raises(PlanError, match=r"the backward.s real dw\d\.weight may reach 1\.\d+e\+39"):
        gradient_bounds(tg)
    values = run_unguarded(tg)
    assert np.isfinite(values[LOSS]).all()
    assert any(not np.isfinite(v).all() for k, v in values.items() if v.dtype == np.float32)


def test_every_engine_refuses_a_step_whose_gradients_can_overflow():
    tg = fuse_updates(build_training_graph(overflowing_model(), PLAN))
    with pytest.raises(PlanError, match="may reach .* with a finite loss"):
        init_state(tg)
    with pytest.raises(PlanError, match="may reach .* with a finite loss"):
        CTrainer(tg)


@pytest.mark.cross
def test_qemu_refuses_a_step_whose_gradients_can_overflow():
    from tinytrain.engines.qemu import QemuTrainer

    with pytest.raises(PlanError, match="may reach .* with a finite loss"):
        QemuTrainer(build_training_graph(overflowing_model(), PLAN), board="qemu-m7", sram_budget=96 * 1024)


def test_cli_compile_reports_the_proof_and_refuses_an_overflowing_plan(tmp_path, capsys):
    model = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"
    assert main(["compile", str(model), "--sram", "256k", "--update", "last-k:2", "-o", str(tmp_path / "ok")]) == 0
    import json

    guard = json.loads((tmp_path / "ok" / "report.json").read_text())["nonfinite_guard"]
    assert guard["runtime_check"] == "loss" and 0 < guard["largest_gradient_bound"] < guard["limit"] == LIMIT
    capsys.readouterr()
    code = main(["compile", str(model), "--sram", "64m", "--flash", "64m", "--update", "full",
                 "-o", str(tmp_path / "no")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "with a finite loss" in err


def test_the_plan_search_treats_a_step_whose_gradients_can_overflow_as_never_fitting():
    from tinytrain.search.memory import UNTRAINABLE, peak_sram

    assert peak_sram(overflowing_model(), PLAN) == UNTRAINABLE
    assert peak_sram(train_ops_model()[0], PLAN) < 96 * 1024


ZOO = ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps", "mbv1-0.25-vww")


@pytest.mark.parametrize("model", ZOO + ("vww_96_int8.tflite", "person_detect.tflite"))
def test_plans_deeper_than_256_kb_allows_are_proven(model):
    """The presets that fit 256 KB update at most the last 9 layers or the biases of the last 22 (memory.md,
    transfer_study.md); the proof reaches deeper: last-k:12 and the biases of all but the first 10 layers."""
    from conftest import shared_file
    from tinytrain.frontends import load_model
    from tinytrain.training.sparse import layers, preset

    root = Path(__file__).resolve().parents[2]
    g = load_model(root / "models" / f"{model}.onnx" if model in ZOO else shared_file(f"models/{model}"))
    for plan in (preset("last-k:12", g), Plan(bias_last_k=len(layers(g)) - 10, weights=())):
        assert gradient_bounds(build_training_graph(g, plan)).largest_bound < LIMIT
