"""The mean squared error loss (ops/mse.py, issue 29): its reference against a float64 formula, its gradient against
finite differences, the finite-gradient proof, and the training step bit-identical between the simulator and the
host C (an FC and a convolutional autoencoder; ad01, the MLPerf Tiny autoencoder; qemu-m7, slow)."""

from dataclasses import replace

import numpy as np
import pytest

from codegen_graphs import GraphBuilder
from conftest import shared_file
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops.mse import MseAttrs, grad_bound, grad_reference, loss_reference
from tinytrain.training.sparse import preset
from tinytrain.training.train_graph import build_training_graph

RNG = np.random.default_rng(0)
QO, QT = QuantParams.per_tensor(0.07, -5), QuantParams.per_tensor(0.11, 12)


def _tensors(shape, target=DType.INT8, out=DType.INT8):
    return [Tensor("o", shape, out, Role.ACTIVATION, QO if out is DType.INT8 else None),
            Tensor("t", shape, target, Role.INPUT, QT if target is DType.INT8 else None)]


def test_reference_is_the_mean_of_squares_summed_in_order():
    q = RNG.integers(-128, 128, (3, 4, 5, 2)).astype(np.int8)
    t = RNG.integers(-128, 128, (3, 4, 5, 2)).astype(np.int8)
    ins = _tensors((1, 4, 5, 2))
    loss = loss_reference(MseAttrs(), [q, t], ins, [])[0]
    o64 = (q.reshape(3, -1).astype(np.float64) + 5) * 0.07
    t64 = (t.reshape(3, -1).astype(np.float64) - 12) * 0.11
    assert loss.dtype == np.float32 and loss.shape == (3,)
    assert np.allclose(loss, ((o64 - t64) ** 2).mean(axis=1), rtol=1e-5)
    for n in range(3):  # the spec's order: a running float32 sum, element by element, then / D
        d = (q[n].reshape(-1).astype(np.int32) + 5).astype(np.float32) * np.float32(0.07) \
            - (t[n].reshape(-1).astype(np.int32) - 12).astype(np.float32) * np.float32(0.11)
        s = np.float32(0)
        for v in d:
            s = np.float32(s + np.float32(v * v))
        assert loss[n].view(np.uint32) == np.float32(s / np.float32(d.size)).view(np.uint32)


def test_float_targets_and_the_gradient_against_finite_differences():
    o = RNG.normal(0, 2, (1, 12)).astype(np.float32)
    t = RNG.normal(0, 2, (1, 12)).astype(np.float32)
    ins = _tensors((1, 12), DType.FLOAT32, DType.FLOAT32)
    grad = grad_reference(MseAttrs(), [o, t], ins, [])[0]
    assert np.allclose(grad, 2 * (o - t) / 12, rtol=1e-6)
    eps = 1e-2
    for i in range(12):
        up, down = o.copy(), o.copy()
        up[0, i] += eps
        down[0, i] -= eps
        fd = (loss_reference(MseAttrs(), [up, t], ins, [])[0][0].astype(np.float64)
              - loss_reference(MseAttrs(), [down, t], ins, [])[0][0]) / (2 * eps)
        assert fd == pytest.approx(float(grad[0, i]), rel=2e-3, abs=1e-4)


def test_the_finite_proof_bounds_the_gradient():
    ins = _tensors((1, 10))
    (b,) = grad_bound(MseAttrs(), ins, [None, None])
    q = np.array([[-128] * 5 + [127] * 5], np.int8)
    t = np.array([[127] * 5 + [-128] * 5], np.int8)
    worst = np.abs(grad_reference(MseAttrs(), [q, t], ins, [])[0]).max()
    assert worst <= b < 1.01 * 2 / 10 * (133 * 0.07 + 140 * 0.11)


def _fc_autoencoder():
    b = GraphBuilder(3, "fc_ae")
    x = b.input((1, 16))
    return b, b.build(b.fully_connected(b.fully_connected(x, 8, weight_zp=True), 16))


def _conv_autoencoder():
    b = GraphBuilder(5, "conv_ae")
    x = b.input((1, 8, 8, 3))
    h = b.conv(x, 8, 3, stride=(2, 2), padding=(1, 1, 1, 1), act=(-128 + 10, 127))
    h = b.conv(h, 8, 3, padding=(1, 1, 1, 1), depthwise=True)
    return b, b.build(b.conv(b.reshape(b.fully_connected(b.reshape(h, (128,)), 192), (8, 8, 3)), 3, 1))


@pytest.mark.parametrize("make, update", [(_fc_autoencoder, "full"),
                                          pytest.param(_conv_autoencoder, "last-k:2", marks=pytest.mark.slow),
                                          pytest.param(_conv_autoencoder, "full", marks=pytest.mark.slow)])
def test_mse_training_step_sim_and_c_bit_identical(make, update, tmp_path):
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.simulator import init_state, train

    b, g = make()
    # the simulator's fp32 gradients are the C's bit for bit (design.md §3b): the default 4-bit remainders too
    tg = build_training_graph(g, replace(preset(update, g, lr=0.02), loss="mse"))
    assert [n.op for n in tg.nodes if n.op.startswith("mse")] == ["mse", "mse_grad"]
    xs, order = b.inputs_batch(g, 5), np.arange(12) % 5
    state = init_state(tg)
    losses = train(tg, state, xs, np.zeros(5, int), order)
    c = CTrainer(tg, tmp_path)
    c_losses = c.train(xs, np.zeros(5, int), order)
    assert np.array_equal(losses.view(np.uint32), c_losses.view(np.uint32))
    assert losses[-5:].mean() < losses[:5].mean()  # it learns to reconstruct
    got = c.state()
    assert got.step == state.step == 12
    assert all(np.array_equal(got.tensors[k], v) for k, v in state.tensors.items())


def _ad01():
    from tinytrain.frontends import load_model

    g = load_model(shared_file("models/ad01_int8.tflite"))
    rng = np.random.default_rng(1)
    return g, rng.integers(-60, 60, (4, 640)).astype(np.int8)


@pytest.mark.slow
def test_ad01_last_k2_sim_and_c_bit_identical(tmp_path):
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.simulator import init_state, train

    g, xs = _ad01()
    tg = build_training_graph(g, replace(preset("last-k:2", g, lr=0.001), loss="mse"))
    order = np.array([0, 1, 2, 3, 0, 1])
    state = init_state(tg)
    losses = train(tg, state, xs, np.zeros(4, int), order)
    c = CTrainer(tg, tmp_path)
    assert np.array_equal(losses.view(np.uint32), c.train(xs, np.zeros(4, int), order).view(np.uint32))
    assert all(np.array_equal(c.state().tensors[k], v) for k, v in state.tensors.items())


@pytest.mark.slow
@pytest.mark.qemu
def test_ad01_last_k2_on_qemu_m7_is_bit_identical_to_the_simulator():
    from tinytrain.engines.qemu import QemuTrainer
    from tinytrain.simulator import init_state, train

    g, xs = _ad01()
    tg = build_training_graph(g, replace(preset("last-k:2", g, lr=0.001), loss="mse"))
    order = np.array([0, 1, 2, 3])
    state = init_state(tg)
    losses = train(tg, state, xs, np.zeros(4, int), order)
    q = QemuTrainer(tg, board="qemu-m7", sram_budget=512 * 1024)  # room for the harness's copy of the 101 KB state
    assert np.array_equal(losses.view(np.uint32), q.train(xs, np.zeros(4, int), order).view(np.uint32))
    assert all(np.array_equal(q.state().tensors[k], v) for k, v in state.tensors.items())


def _regression(n: int = 6):
    b = GraphBuilder(3, "regression")
    g = b.build(b.fully_connected(b.fully_connected(b.input((1, 16)), 8), 4))
    return g, b.inputs_batch(g, n), np.random.default_rng(0).normal(0, 1, (n, 4)).astype(np.float32)


def test_float_targets_train_bit_identically_in_the_simulator_and_the_c():
    import tinytrain
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.metrics import reconstruction_errors
    from tinytrain.simulator import forward, init_state, train

    g, xs, t = _regression()
    # int8-only state, as in test_mse_training_step_sim_and_c_bit_identical
    tg = build_training_graph(g, replace(preset("full", g, lr=0.01, remainder_bits=0), loss="mse"), targets=True)
    state = init_state(tg)
    order = np.arange(24) % 6
    losses = train(tg, state, xs, np.zeros(6, int), order, targets=t)
    first = reconstruction_errors(g, xs[:1], forward(g, {g.inputs[0]: xs[:1]})[g.outputs[0]], t[:1])
    assert losses[0].view(np.uint32) == first[0].view(np.uint32)  # the step's loss is the eval's error
    assert losses[-6:].mean() < losses[:6].mean()
    c = CTrainer(tg)
    assert np.array_equal(c.train(xs, np.zeros(6, int), order, targets=t).view(np.uint32), losses.view(np.uint32))
    assert all(np.array_equal(c.state().tensors[k], v) for k, v in state.tensors.items())
    assert "tt_set_target" in c.files["tinytrain_model.h"] and "TT_TARGET_FLOATS 4" in c.files["tinytrain_model.h"]
    with pytest.raises(ValueError, match="give float targets exactly when"):
        c.train(xs, np.zeros(6, int), order)
    r = tinytrain.train(g, (xs, t), update="full", loss="mse", engine="c", epochs=2)
    assert r.steps == 12 and np.isfinite(r.losses).all()


@pytest.mark.slow
def test_float_targets_on_qemu_m7_are_bit_identical_to_the_simulator():
    import shutil

    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("qemu-system-arm / arm-none-eabi-gcc not installed")
    from tinytrain.engines.qemu import QemuTrainer
    from tinytrain.simulator import init_state, train

    g, xs, t = _regression(4)
    tg = build_training_graph(g, replace(preset("full", g, lr=0.01, remainder_bits=0), loss="mse"), targets=True)
    order = np.array([0, 1, 2, 3, 1, 0])
    state = init_state(tg)
    losses = train(tg, state, xs, np.zeros(4, int), order, targets=t)
    q = QemuTrainer(tg, board="qemu-m7")
    assert np.array_equal(q.train(xs, np.zeros(4, int), order, targets=t).view(np.uint32), losses.view(np.uint32))
    assert all(np.array_equal(q.state().tensors[k], v) for k, v in state.tensors.items())


def test_the_plan_file_carries_the_loss():
    from tinytrain.errors import PlanError
    from tinytrain.training.sparse import parse_plan

    plan = parse_plan({"version": 1, "bias_last_k": 1, "loss": "mse"})
    assert plan.loss == "mse" and parse_plan(plan.to_json()) == plan
    assert "loss" not in parse_plan({"version": 1, "bias_last_k": 1}).to_json()  # the default, xent, is not written
    with pytest.raises(PlanError, match='"loss" must be one of xent, mse'):
        parse_plan({"version": 1, "loss": "l1"})
