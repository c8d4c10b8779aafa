"""The integer-only training step (plan "backward": "int", training/integer_step.py): the plan field, the integer
ops' arithmetic against the float step they replace, the overflow proof, no float operation from the loss to the
update, and the C bit-identical to the simulator on the host and on QEMU cores (M0+ code, M3, M4, rv32imac): the
state bit for bit everywhere, the reported float32 loss bit for bit between C builds and the simulator."""

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from tinytrain.errors import PlanError
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.sgd_update import Rounding, SgdUpdateAttrs
from tinytrain.ops.sgd_update import fixed_point
from tinytrain.ops.softmax_xent import SoftmaxXentAttrs, SoftmaxXentGradIntAttrs, exp_table
from tinytrain.simulator import init_state, train
from tinytrain.training.finite import INT32_LIMIT, gradient_bounds
from tinytrain.training.qas import UpdateConfig
from tinytrain.lr_schedule import Schedule
from tinytrain.training.sparse import Plan, WeightUpdate, parse_plan, preset
from tinytrain.training.train_graph import build_training_graph

ROOT = Path(__file__).resolve().parents[2]
HEAD = 5  # train_ops_model's classifier: its layer index
CLASSIFIER = Plan(bias_last_k=1, weights=(WeightUpdate(HEAD, 1.0),), lr=0.05, backward="int")


def conv_head_model():
    """A classifier whose head is a 1x1 convolution on the pooled features, then a reshape (MobileNetV1 TFLite's)."""
    from ir_builders import ModelBuilder

    mb = ModelBuilder("conv_head", 0)
    h = mb.conv(mb.input((8, 8, 3)), 8, 3, 2)
    h = mb.conv(mb.mean(h), 5, 1, act=None)
    return mb.build(mb.reshape(h, (5,)))


def tail_model():
    """MobileNetV1's tail in small: a 3x3 convolution, a stride-2 depthwise, a pointwise, a global average pool and
    a pointwise head (per-channel weight scales: the input gradients' fold)."""
    from ir_builders import ModelBuilder

    mb = ModelBuilder("mbv1_tail", 0)
    h = mb.conv(mb.input((8, 8, 3)), 8, 3, 1)
    h = mb.conv(h, 8, 3, 2, depthwise=True)
    h = mb.conv(h, 16, 1)
    h = mb.conv(mb.avg_pool(h, 4, 4), 5, 1, act=None)
    return mb.build(mb.reshape(h, (5,)))


MOBILENET = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"


@pytest.fixture(scope="module")
def model():
    g, _ = train_ops_model()
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (10, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    return g, x, rng.integers(0, 5, 10)


def test_the_plan_field_is_optional_and_checked():
    assert parse_plan({"version": 1, "bias_last_k": 1}).backward == "fp32"
    plan = parse_plan({"version": 1, "bias_last_k": 1, "backward": "int"})
    assert plan.backward == "int" and plan.to_json()["backward"] == "int"
    assert "backward" not in Plan(bias_last_k=1).to_json()  # old plans are written as before
    with pytest.raises(PlanError, match='"backward" must be one of fp32, int'):
        parse_plan({"version": 1, "bias_last_k": 1, "backward": "int8"})


def test_compile_and_train_select_it_by_argument(model, tmp_path):
    from tinytrain.api import compile, train
    from tinytrain.errors import UsageError

    g, x, y = model
    compiled = compile(g, update="last-k:1", backward="int")
    assert compiled.plan.backward == "int" and compiled.to_json()["plan"]["backward"] == "int"
    assert "sgd_update_int" in {n.op for n in compiled.step.nodes} and compiled.files
    given = compile(g, plan=CLASSIFIER, backward="fp32")  # the argument overrides the plan's own
    assert given.plan.backward == "fp32" and "sgd_update" in {n.op for n in given.step.nodes}
    assert compile(g, plan=CLASSIFIER).plan.backward == "int"
    np.savez(tmp_path / "d.npz", x=x, y=y)
    result = train(g, tmp_path / "d.npz", update="last-k:1", backward="int", steps=4)
    assert result.plan.backward == "int" and np.all(np.isfinite(result.losses))
    with pytest.raises(UsageError, match="backward= sets the training step"):
        compile(g, backward="int")
    with pytest.raises(UsageError, match="choose one of fp32, int"):
        compile(g, update="last-k:1", backward="int16")


@pytest.mark.slow
def test_the_command_line_carries_it_into_the_plan(tmp_path, capsys):
    from tinytrain.cli import main

    model = ROOT / "models" / "mbv1-0.25-vww.onnx"
    out = tmp_path / "build"
    assert main(["compile", str(model), "--new-head", "10", "--update", "last-k:1", "--backward", "int",
                 "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["plan"]["backward"] == "int" and any("sgd_update_int" in s for s in report["schedule"])
    residual = ROOT / "models" / "mbv2-w0.35.onnx"  # a residual add's gradient has no integer form
    assert main(["compile", str(residual), "--update", "last-k:14", "--backward", "int", "--sram", "4m",
                 "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and '"backward": "fp32"' in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("k", [3e-9, 1.7e-5, 0.37, 1.0, 5.5, 123456.7])
def test_the_fixed_point_step_factor_keeps_31_bits(k):
    m, n = fixed_point(k, "w")
    assert 1 << 30 <= m < 1 << 31 and 0 <= n <= 62
    assert abs(m * 2.0 ** -n - k) <= k * 2.0 ** -31


def test_a_step_factor_without_an_integer_form_is_refused():
    with pytest.raises(PlanError, match="too large for the integer step"):
        fixed_point(2.0 ** 32, "w")


def test_the_integer_loss_gradient_is_the_float_one_to_its_resolution():
    rng = np.random.default_rng(0)
    q = Tensor("q", (1, 10), DType.INT8, Role.ACTIVATION, QuantParams((0.17,), (-3,)))
    label = Tensor("y", (1,), DType.INT32, Role.INPUT)
    table = Tensor("t", (256,), DType.INT32, Role.CONSTANT)
    for _ in range(20):
        logits = rng.integers(-128, 128, (1, 10)).astype(np.int8)
        y = rng.integers(0, 10, (1,)).astype(np.int32)
        (g,) = get_op("softmax_xent_grad_int").reference(SoftmaxXentGradIntAttrs(), [logits, y, exp_table(0.17)],
                                                         [q, label, table], [])
        (f,) = get_op("softmax_xent_grad").reference(SoftmaxXentAttrs(), [logits, y], [q, label], [])
        assert g.dtype == np.int32 and np.abs(g).max() <= 1 << 14
        assert np.abs(g * 2.0 ** -14 - f).max() < 2.0 ** -12  # 2^-14 rounding + the Q15 table's


def test_the_integer_update_rounds_stochastically_without_bias():
    p = Tensor("w", (1, 4000), DType.INT32, Role.BIAS)
    g = Tensor("g", (1, 4000), DType.INT32, Role.GRADIENT)
    k = Tensor("k", (1, 2), DType.INT32, Role.CONSTANT)
    step = Tensor("step", (1,), DType.INT32, Role.INPUT)
    m, n = fixed_point(0.013, "w")
    grads = np.full((1, 4000), 77, np.int32)  # each step 77 * 0.013 = 1.001 LSB
    op = get_op("sgd_update_int")
    out, _, _ = op.reference(SgdUpdateAttrs(), [np.zeros((1, 4000), np.int32), grads, np.array([[m, n]], np.int32),
                                                None, np.array([5], np.int32)], [p, g, k, None, step], [])
    assert set(np.unique(-out)) == {1, 2} and abs(float(-out.mean()) - 77 * 0.013) < 0.02


def test_no_float_operation_from_the_loss_to_the_update(model):
    g, _, _ = model
    tg = build_training_graph(g, CLASSIFIER)
    loss_at = next(k for k, n in enumerate(tg.nodes) if n.op == "softmax_xent")
    after = tg.nodes[loss_at + 1:]
    assert {n.op for n in after} == {"softmax_xent_grad_int", "clamp_mask_int", "fully_connected_grad_weight_int",
                                     "bias_grad_int", "sgd_update_int"}
    for n in after:
        assert all(tg.tensors[t].dtype is not DType.FLOAT32 for t in (*n.inputs, *n.outputs) if t), n.name
    proof = gradient_bounds(tg)  # the overflow proof: every int32 gradient's exact bound fits int32
    assert proof.limit == INT32_LIMIT and proof.largest_bound <= INT32_LIMIT
    assert proof.bounds[f"{tg.nodes[-1].inputs[0]}.grad"] > 0 and "int32" in proof.to_json()["proof"]


def test_a_pointwise_convolution_head_trains_in_integers():
    g = conv_head_model()
    tg = build_training_graph(g, replace(CLASSIFIER, weights=(WeightUpdate(1, 1.0),)))
    assert "conv2d_grad_weight_int" in {n.op for n in tg.nodes}
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (6, 8, 8, 3)).astype(np.int8)
    state = init_state(tg)
    before = {k: v.copy() for k, v in state.tensors.items()}
    losses = train(tg, state, x, rng.integers(0, 5, 6))
    assert np.all(np.isfinite(losses)) and any(not np.array_equal(before[k], v) for k, v in state.tensors.items())


def test_what_the_integer_step_does_not_cover_is_refused(model):
    g, _, _ = model
    with pytest.raises(PlanError, match="an average pool that is not global"):
        build_training_graph(g, replace(preset("last-k:3", g), backward="int"))
    with pytest.raises(PlanError, match="no momentum"):
        build_training_graph(g, CLASSIFIER, UpdateConfig(momentum=0.9))


def test_an_lr_schedule_scales_the_integer_step_by_its_q15_factor(model):
    g, x, y = model
    tg = build_training_graph(g, replace(CLASSIFIER, lr_schedule=Schedule(1, 3)))
    assert all(n.attrs.schedule is not None for n in tg.nodes if n.op == "sgd_update_int")
    state = init_state(tg)
    before = {k: v.copy() for k, v in state.tensors.items()}
    train(tg, state, x[:3], y[:3])
    after = {k: v.copy() for k, v in state.tensors.items()}
    train(tg, state, x[3:6], y[3:6])  # steps 3..5: past the schedule, whose floor is 0: no parameter moves
    assert any(not np.array_equal(before[k], v) for k, v in after.items())
    assert all(np.array_equal(after[k], v) for k, v in state.tensors.items())


def test_the_integer_step_learns_like_the_float_step(model):
    g, x, y = model
    losses = {}
    for backward in ("fp32", "int"):
        tg = build_training_graph(g, replace(CLASSIFIER, backward=backward))
        state = init_state(tg)
        train(tg, state, np.repeat(x, 3, axis=0), np.tile(y, 3))
        losses[backward] = train(tg, state, x, y)
    assert np.abs(losses["int"] - losses["fp32"]).max() < 0.05


@pytest.mark.slow
@pytest.mark.parametrize("plan,config", [
    (CLASSIFIER, UpdateConfig()),
    (replace(CLASSIFIER, remainder_bits=8), UpdateConfig(rounding=Rounding.NEAREST)),
    (replace(CLASSIFIER, remainder_bits=0, weights=()), UpdateConfig(seed=7)),  # bias-only:1
    (replace(CLASSIFIER, weights=(WeightUpdate(1, 1.0),)), UpdateConfig()),  # conv_head_model's classifier
    (replace(CLASSIFIER, lr_schedule=Schedule(2, 7, 0.25)), UpdateConfig()),
    (replace(CLASSIFIER, lr_schedule=Schedule(3, 8)), UpdateConfig(rounding=Rounding.NEAREST)),
], ids=["classifier-rem4", "classifier-rem8-nearest", "bias-only-1", "pointwise-conv-head", "cosine",
        "cosine-nearest"])
def test_the_host_c_is_bit_identical_to_the_simulator(model, plan, config, tmp_path):
    from tinytrain.engines.host_c import CTrainer

    g, x, y = model
    if plan.weights and plan.weights[0].conv == 1:
        g, x = conv_head_model(), np.random.default_rng(4).integers(-128, 128, (10, 8, 8, 3)).astype(np.int8)
    tg = build_training_graph(g, plan, config)
    c, sim = CTrainer(tg, tmp_path), init_state(tg)
    # the state and the reported float32 loss (read by nothing in the step), bit for bit
    assert np.array_equal(c.train(x, y).view(np.uint32), np.asarray(train(tg, sim, x, y), np.float32).view(np.uint32))
    assert all(np.array_equal(c.state().tensors[k], v) for k, v in sim.tensors.items())


QEMU_BOARDS = ["qemu-m0plus", "qemu-m3", "qemu-m4", "qemu-riscv32"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-riscv32") is None,
                    reason="needs arm-none-eabi-gcc, qemu-system-arm and qemu-system-riscv32 (scripts/setup.sh)")
@pytest.mark.parametrize("board,plan", [(b, CLASSIFIER) for b in QEMU_BOARDS]
                         + [(b, replace(CLASSIFIER, lr_schedule=Schedule(1, 5, 0.25))) for b in QEMU_BOARDS[::3]],
                         ids=QEMU_BOARDS + [f"{b}-cosine" for b in QEMU_BOARDS[::3]])
def test_the_integer_step_is_bit_identical_on_the_cores(model, board, plan, tmp_path):
    from tinytrain.engines import qemu as engine_qemu
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.firmware import BOARDS

    g, x, y = model
    tg = build_training_graph(g, plan)
    engine_qemu.emit_compile_dir(tg, tmp_path / "compile", 96 * 1024, 256 * 1024, target=BOARDS[board].core)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    r = engine_qemu.run(fw, board, train=(x[:6], y[:6]), test=(x[6:], y[6:]))
    host, sim = CTrainer(tg, tmp_path / "host"), init_state(tg)
    losses = host.train(x[:6], y[:6])
    assert np.array_equal(r.losses.view(np.uint32), losses.view(np.uint32)) and r.state == host.state_bytes()
    assert np.array_equal(np.asarray(train(tg, sim, x[:6], y[:6]), np.float32).view(np.uint32), losses.view(np.uint32))
    assert all(np.array_equal(host.state().tensors[k], v) for k, v in sim.tensors.items())
    assert np.array_equal(r.logits, host.predict(x[6:]))


def test_the_input_gradient_shifts_keep_int32_and_int16():
    from tinytrain.ops.conv2d.integer import INT16_MAX, INT32_MAX, fits, shifts, stage_bounds

    for g, m, taps in [(1 << 14, 1 << 15, 10 * 255), (INT16_MAX, 1 << 15, 256 * 255), (INT16_MAX, 1 << 15, 9 * 255),
                       (1, 1, 1)]:
        r, t = shifts(g, m, taps)
        assert fits(g, m, taps, r, t) and stage_bounds(g, m, taps, r, t)[2] <= INT16_MAX
        assert r == 0 or not fits(g, m, taps, r - 1, 0) or stage_bounds(g, m, taps, r - 1, 0)[1] > INT32_MAX or \
            not any(fits(g, m, taps, r - 1, u) and stage_bounds(g, m, taps, r - 1, u)[2] <= INT16_MAX
                    for u in range(32))


def test_the_integer_input_gradient_is_the_float_one_to_its_shift():
    from tinytrain.ops.conv2d import Conv2dGradInputAttrs
    from tinytrain.ops.conv2d.integer import Conv2dGradInputIntAttrs, fold, shifts, tap_sums

    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (6, 1, 1, 12)).astype(np.int8)
    scale = tuple(float(v) for v in rng.uniform(0.01, 0.05, 6))
    wt = Tensor("w", w.shape, DType.INT8, Role.WEIGHT, QuantParams(scale, (0,) * 6, 0), data=w)
    gt = Tensor("g", (1, 3, 3, 6), DType.INT32, Role.GRADIENT)
    m = fold(scale, 6)
    r, t = shifts(1 << 14, int(m.max()), int(tap_sums(w, 0, 1).max()))
    g = rng.integers(-(1 << 14), (1 << 14) + 1, (1, 3, 3, 6)).astype(np.int32)
    attrs = Conv2dGradInputIntAttrs((1, 1), (0, 0, 0, 0), (3, 3), pre_shift=r, shift=t)
    ft = Tensor("m", m.shape, DType.INT32, Role.CONSTANT, data=m)
    gx = Tensor("gx", (1, 3, 3, 12), DType.INT32, Role.GRADIENT)
    for small in (1, 1 << 12):  # however small the incoming gradient, the run-time shift keeps int16's range in use
        gi, e = get_op("conv2d_grad_input_int").reference(attrs, [g // small, w, m], [gt, wt, ft], [gx, None])
        unit = max(scale) * 2.0 ** (r - 15 + t - int(e[0]))  # the integer's real scale (times g's)
        want = get_op("conv2d_grad_input").reference(Conv2dGradInputAttrs((1, 1), (0, 0, 0, 0), (3, 3)),
                                                     [(g // small).astype(np.float32), w], [gt, wt], [gt])[0]
        assert (1 << 14) <= np.abs(gi).max() <= (1 << 15) - 1
        # within one unit of the shift and half a unit of gs (the pre-shift r) per weight reading the channel
        tol = unit + 0.5 * int(tap_sums(w, 0, 1).max()) * max(scale) * 2.0 ** (r - 15)
        assert np.abs(gi * unit - want).max() <= tol < 0.01 * np.abs(want).max()


def test_deeper_plans_are_integer_through_pools_pointwise_and_depthwise():
    g = tail_model()
    tg = build_training_graph(g, replace(preset("last-k:4", g, lr=0.05), backward="int"))
    assert {"conv2d_grad_input_int", "avg_pool2d_grad_int"} <= {n.op for n in tg.nodes}
    loss_at = next(k for k, n in enumerate(tg.nodes) if n.op == "softmax_xent")
    for n in tg.nodes[loss_at + 1:]:
        assert n.op.endswith("_int") or n.op == "reshape", n.name
        assert all(tg.tensors[t].dtype is not DType.FLOAT32 for t in (*n.inputs, *n.outputs) if t), n.name
    proof = gradient_bounds(tg)
    assert proof.limit == INT32_LIMIT and proof.largest_bound <= INT32_LIMIT
    inputs = [k for k, b in proof.bounds.items() if k.endswith(".grad_input") and "conv" in k]
    assert inputs and all(proof.bounds[k] <= (1 << 15) - 1 for k in inputs)  # int16's range


@pytest.mark.skipif(not MOBILENET.exists(), reason=f"needs {MOBILENET} (../shared)")
def test_every_mobilenet_last_k_is_integer_only():
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    g = new_head(load_model(MOBILENET), 10)
    for k in ("last-k:2", "last-k:3"):
        tg = build_training_graph(g, replace(preset(k, g), backward="int"))
        assert gradient_bounds(tg).limit == INT32_LIMIT
        assert sum(n.op == "sgd_update_int" for n in tg.nodes) == 2 * int(k[-1])
    for k in ("last-k:14", "full"):  # the run-time exponent: no static rescale coarsens a deep gradient's scale
        tg = build_training_graph(g, replace(preset(k, g), backward="int"))
        assert gradient_bounds(tg).largest_bound <= INT32_LIMIT
        updates = [n for n in tg.nodes if n.op == "sgd_update_int"]
        assert sum(len(n.inputs) == 7 for n in updates) == len(updates) - 2  # all but the head's have an exponent


@pytest.mark.slow
@pytest.mark.parametrize("k,scratch", [("last-k:2", None), ("last-k:3", None), ("last-k:4", None), ("last-k:4", 64),
                                       ("fc-head-last-k:2", None)],
                         ids=["last-k:2", "last-k:3", "last-k:4", "last-k:4-blocks", "fc-head-last-k:2"])
def test_deeper_integer_steps_on_the_host_c_are_the_simulator(model, k, scratch, tmp_path):
    """The C (weight gradients fused with their updates, in blocks of rows: 64 B of scratch makes several) against
    the simulator's unfused graph; a fully-connected head's input gradient through a mean (train_ops_model)."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.training.fuse import fuse_updates

    g = tail_model()
    rng = np.random.default_rng(4)
    x, y = rng.integers(-128, 128, (10, 8, 8, 3)).astype(np.int8), rng.integers(0, 5, 10)
    if k.startswith("fc-head"):
        (g, x, y), k = model, k.removeprefix("fc-head-")
    tg = build_training_graph(g, replace(preset(k, g, lr=0.05), backward="int"))
    fused = fuse_updates(tg, scratch_bytes=scratch) if scratch else tg
    blocks = [(n.attrs.block, fused.tensors[n.inputs[0]].shape[0]) for n in fused.nodes
              if n.op == "conv2d_grad_weight_int_sgd_update_int"]
    assert not scratch or any(b < rows for b, rows in blocks)  # several blocks of rows
    c, sim = CTrainer(fused, tmp_path), init_state(tg)
    np.testing.assert_allclose(c.train(x, y), train(tg, sim, x, y), rtol=1e-6)
    assert all(np.array_equal(c.state().tensors[n], v) for n, v in sim.tensors.items())


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-m0plus", "qemu-m4"])
def test_a_deeper_integer_step_is_bit_identical_on_the_cores(board, tmp_path):
    from tinytrain.engines import qemu as engine_qemu
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.firmware import BOARDS

    g = tail_model()
    rng = np.random.default_rng(5)
    x, y = rng.integers(-128, 128, (8, 8, 8, 3)).astype(np.int8), rng.integers(0, 5, 8)
    tg = build_training_graph(g, replace(preset("last-k:4", g, lr=0.05), backward="int"))
    engine_qemu.emit_compile_dir(tg, tmp_path / "compile", 96 * 1024, 256 * 1024, target=BOARDS[board].core)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    r = engine_qemu.run(fw, board, train=(x[:5], y[:5]), test=(x[5:], y[5:]))
    host = CTrainer(tg, tmp_path / "host")
    losses = host.train(x[:5], y[:5])
    assert np.array_equal(r.losses.view(np.uint32), losses.view(np.uint32)) and r.state == host.state_bytes()
    assert np.array_equal(r.logits, host.predict(x[5:]))


@pytest.mark.parametrize("ptype,rounding", [("int32_t", Rounding.STOCHASTIC), ("int32_t", Rounding.NEAREST),
                                            ("int8_t", Rounding.STOCHASTIC)])
def test_the_update_kernel_follows_every_run_time_exponent_bit_for_bit(tmp_path, ptype, rounding):
    """kernels/sgd_update_int.c.j2 with a gradient exponent e == ops/sgd_update_int.py for shifts n + e above 62
    (the product pre-shifted), in range, and below 0 (a step of 2^-(n+e) >= 1 LSB per unit: exact, or clamped to
    +-2^30), which no measured plan reaches: built with the runtime headers, every element compared."""
    from tinytrain.codegen.context import environment

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    rng = np.random.default_rng(1)
    cs, e_n = 3, 40
    dtype = np.int32 if ptype == "int32_t" else np.int8
    param = (rng.integers(-1000, 1000, (cs, e_n)) if dtype == np.int32 else rng.integers(-127, 128, (cs, e_n)))
    grad = rng.integers(-(1 << 31), 1 << 31, (cs, e_n), dtype=np.int64)
    grad[:, :10] = rng.integers(-300, 300, (cs, 10))  # small gradients: the exact path below 0
    fixed = np.array([fixed_point(k, "w") for k in (0.013, 3.1e-6, 7.5e-12)], np.int32)
    a = SgdUpdateAttrs(rounding=rounding, seed=7, stream=3)
    exps = [-45, -31, -20, -1, 0, 5, 30, 60]
    signature = (f"static void tt_update({ptype} *param, const tt_i32a *grad, const int32_t *fixed, "
                 "const tt_i32a *gexp, int Cs, int E" + (", uint32_t seed, uint32_t stream, uint32_t step"
                                                          if a.reads_step else "") + ")")
    kernel = environment().get_template("kernels/sgd_update_int.c.j2").render(
        name="tt_update", signature=signature,
        k=dict(ptype=ptype, stochastic=rounding is Rounding.STOCHASTIC, scheduled=False, block=False,
               remainder_bits=0, has_exp=True))

    def c_array(name, ctype, values) -> str:
        return f"static {ctype} {name}[] = {{{', '.join(str(int(v)) for v in np.ravel(values))}}};\n"

    call_args = "p, grad, fixed, &e, 3, 40" + (", 7u, 3u, 11u" if a.reads_step else "")
    main = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n"
            "#include \"tt_fixedpoint.h\"\n#include \"tt_float.h\"\n"
            "typedef int32_t tt_i32a __attribute__((__may_alias__));\n" + kernel + "\n"
            + c_array("param0", ptype, param) + c_array("grad", "tt_i32a", grad.astype(np.int32))
            + c_array("fixed", "int32_t", fixed) + c_array("exps", "int32_t", exps)
            + "int main(void) {\n  for (int k = 0; k < (int)(sizeof exps / sizeof exps[0]); k++) {\n"
            + f"    static {ptype} p[120];\n    memcpy(p, param0, sizeof p);\n    const tt_i32a e = exps[k];\n"
            + f"    tt_update({call_args});\n"
            + "    for (int i = 0; i < 120; i++) printf(\"%ld\\n\", (long)p[i]);\n  }\n  return 0;\n}\n")
    (tmp_path / "main.c").write_text(main)
    runtime = Path(__file__).resolve().parents[2] / "codegen" / "runtime"
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-fsanitize=undefined",
                        "-fno-sanitize-recover=all", f"-I{runtime}", str(tmp_path / "main.c"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    got = np.array(out, np.int64).reshape(len(exps), cs, e_n)
    op = get_op("sgd_update_int")
    tensors = [Tensor("p", param.shape, DType.INT32 if dtype == np.int32 else DType.INT8, Role.BIAS),
               Tensor("g", grad.shape, DType.INT32, Role.GRADIENT), Tensor("k", (cs, 2), DType.INT32, Role.CONSTANT),
               None, Tensor("step", (1,), DType.INT32, Role.INPUT), None, Tensor("e", (1,), DType.INT32, Role.INPUT)]
    for j, e in enumerate(exps):
        want, _, _ = op.reference(a, [param.astype(dtype), grad.astype(np.int32), fixed, None,
                                      np.array([11], np.int32) if a.reads_step else None, None,
                                      np.array([e], np.int32)], tensors, [])
        np.testing.assert_array_equal(got[j], want, err_msg=f"exponent {e}")
    moved = [int((got[j] != param).sum()) for j in range(len(exps))]
    assert moved[0] > 0 and moved[-1] < moved[0]  # the large steps below 0 move the parameters; e = 60 barely
