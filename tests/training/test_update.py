"""The SGD update (QAS, rounding, momentum), the training simulator and the new classifier head."""

import numpy as np
import pytest

from ir_builders import tiny_mobilenet
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.names import LOSS
from tinytrain.ops import get_op
from tinytrain.ops.sgd_update import (Rounding, SgdUpdateAttrs, mix32, pack_nibbles, remainder_shape, uniform,
                                      unpack_nibbles)
from tinytrain.simulator import forward, init_state, train, train_step, with_state
from tinytrain.training.head import new_head
from tinytrain.training.qas import UpdateConfig, optimizer_state_bytes, param_scales, step_scale
from tinytrain.training.sparse import Plan, WeightUpdate, layers, preset
from tinytrain.training.train_graph import build_training_graph
from tinytrain.verify import verify

UPDATE = get_op("sgd_update")


def _update(p, g, k, attrs, m=None, step=0, rem=None):
    """(new param, new momentum or None[, new remainder]): the reference on one update's inputs."""
    pt = Tensor("p", p.shape, DType.INT8 if p.dtype == np.int8 else DType.INT32, Role.WEIGHT)
    gt = Tensor("g", g.shape, DType.FLOAT32, Role.GRADIENT)
    kt = Tensor("k", k.shape, DType.FLOAT32, Role.CONSTANT)
    ins = [pt, gt, kt, None if m is None else Tensor("m", m.shape, DType.FLOAT32, Role.OPTIMIZER_STATE),
           Tensor("step", (1,), DType.INT32, Role.INPUT) if attrs.rounding is Rounding.STOCHASTIC else None,
           None if rem is None else Tensor("rem", rem.shape, DType.INT8, Role.OPTIMIZER_STATE)]
    arrays = [p, g, k, m, np.array([step], np.int32), rem]
    while ins[-1] is None:
        ins.pop(), arrays.pop()
    assert UPDATE.infer_shapes(attrs, ins) == []
    out = UPDATE.reference(attrs, arrays, ins, [])
    return out if rem is not None else out[:2]


def test_prng_golden_values():
    """Fixed outputs of the documented hash; the C runtime's unit test uses the same numbers."""
    assert [int(v) for v in mix32(np.array([0, 1, 2, 0xDEADBEEF], np.uint32))] == [0, 0x688990C0, 0xD1132181, 0xE628C683]
    np.testing.assert_array_equal(uniform(0, 0, 0, 4), np.array([0.257623553276062, 0.8557174801826477,
                                                                 0.7062505483627319, 0.014475584030151367], np.float32))
    np.testing.assert_array_equal(uniform(7, 3, 2, 3), np.array([0.8437871336936951, 0.1517190933227539,
                                                                 0.23763245344161987], np.float32))
    u = uniform(1, 2, 3, 1 << 16)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_nearest_rounds_ties_to_even_and_clamps_to_symmetric_int8():
    p = np.array([0, 0, 0, 0, 120, -120], np.int8)
    g = np.array([0.5, 1.5, -0.5, -2.5, -30.0, 30.0], np.float32)
    new, m = _update(p, g, np.ones(6, np.float32), SgdUpdateAttrs(rounding=Rounding.NEAREST))
    assert new.tolist() == [0, -2, 0, 2, 127, -127] and m is None


@pytest.mark.parametrize("bits", [4, 8])
def test_remainder_keeps_sub_lsb_steps(bits):
    """q = p * 2^F + rem takes every step in 2^-F LSBs: 1000 steps of 0.003 LSB move the weight 3 LSB (without a
    remainder, nearest rounding would never move it); p is q rounded to nearest, rem in [-2^(F-1), 2^(F-1))."""
    one = 1 << bits
    attrs = SgdUpdateAttrs(rounding=Rounding.NEAREST, remainder_bits=bits)
    p, rem = np.zeros(3, np.int8), np.zeros(remainder_shape((3,), bits), np.int8)
    step = np.array([1 / one, -1 / one, 0.5 / one], np.float32) * one  # the scale holds 2^F (training/qas.py)
    for _ in range(1000):
        p, _, rem = _update(p, step, np.ones(3, np.float32), attrs, rem=rem)
    rem = unpack_nibbles(rem, p.shape) if bits <= 4 else rem
    q = p.astype(np.int64) * one + rem
    assert q.tolist() == [-1000, 1000, 0]  # ties to even: 0.5 of a 2^-F LSB rounds to 0
    assert np.all(rem >= -one // 2) and np.all(rem < one // 2)
    assert np.array_equal(p, np.floor((q + one // 2) / one).astype(np.int8))


def test_packed_nibbles_round_trip_every_value_and_odd_rows():
    parts = np.arange(-8, 8, dtype=np.int8)[np.random.default_rng(0).integers(0, 16, (5, 3, 3))]
    packed = pack_nibbles(parts)
    assert packed.shape == (5, 5) and packed.dtype == np.int8
    np.testing.assert_array_equal(unpack_nibbles(packed, parts.shape), parts)


def test_remainder_clamps_to_the_symmetric_int8_range():
    attrs = SgdUpdateAttrs(rounding=Rounding.NEAREST, remainder_bits=8)
    p, rem = np.array([127, -127, 126, 0], np.int8), np.array([0, 0, 127, -128], np.int8)
    g = np.array([-1e4, 1e4, -1.0, 0.0], np.float32) * 256
    new, _, new_rem = _update(p, g, np.ones(4, np.float32), attrs, rem=rem)
    assert new.tolist() == [127, -127, 127, 0] and new_rem.tolist() == [0, 0, 0, -128]


def test_remainder_is_refused_on_biases_and_without_bits():
    p = np.zeros(3, np.int32)
    with pytest.raises(ValueError, match="int8 weight"):
        _update(p, np.ones(3, np.float32), np.ones(3, np.float32), SgdUpdateAttrs(rounding=Rounding.NEAREST, remainder_bits=8),
                rem=np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="exactly when"):
        _update(np.zeros(3, np.int8), np.ones(3, np.float32), np.ones(3, np.float32),
                SgdUpdateAttrs(rounding=Rounding.NEAREST), rem=np.zeros(3, np.int8))


def test_stochastic_rounding_is_unbiased_and_deterministic():
    attrs = SgdUpdateAttrs(rounding=Rounding.STOCHASTIC, stream=3, seed=11)
    p = np.zeros(64, np.int8)
    g = np.full(64, 0.3, np.float32)
    steps = np.array([_update(p, g, np.ones(64, np.float32), attrs, step=s)[0] for s in range(200)])
    assert set(np.unique(steps)) <= {-1, 0}
    assert abs(-steps.mean() - 0.3) < 0.02
    again = _update(p, g, np.ones(64, np.float32), attrs, step=5)[0]
    np.testing.assert_array_equal(again, steps[5])
    other = _update(p, g, np.ones(64, np.float32), SgdUpdateAttrs(stream=4, seed=11), step=5)[0]
    assert not np.array_equal(other, steps[5])


def test_int32_bias_update_is_exact_for_large_values():
    b = np.array([(1 << 28) + 1, (1 << 28) + 1, 2**31 - 2, -(2**31) + 1], np.int32)
    g = np.array([0.4, 1.0, -5.0, 5.0], np.float32)
    new, _ = _update(b, g, np.ones(4, np.float32), SgdUpdateAttrs(rounding=Rounding.NEAREST))
    assert new.tolist() == [(1 << 28) + 1, 1 << 28, 2**31 - 1, -(2**31)]


def test_only_selected_channels_change_and_scale_is_per_channel():
    p = np.zeros((4, 3), np.int8)
    g = np.ones((2, 3), np.float32)
    new, _ = _update(p, g, np.array([2.0, 5.0], np.float32), SgdUpdateAttrs((1, 3), Rounding.NEAREST))
    assert new.tolist() == [[0] * 3, [-2] * 3, [0] * 3, [-5] * 3]


def test_momentum_order_of_operations():
    attrs = SgdUpdateAttrs(rounding=Rounding.NEAREST, momentum=0.9)
    p, g, k = np.zeros(2, np.int8), np.array([1.0, -3.0], np.float32), np.full(2, 2.0, np.float32)
    p1, m1 = _update(p, g, k, attrs, m=np.zeros(2, np.float32))
    np.testing.assert_array_equal(m1, g)
    p2, m2 = _update(p1, g, k, attrs, m=m1)
    np.testing.assert_array_equal(m2, np.float32(0.9) * g + g)
    assert p2.tolist() == [-2 - 4, 6 + 11]  # rint(2 * 1.9) = 4, rint(2 * -5.7) = -11


@pytest.fixture(scope="module")
def model():
    return tiny_mobilenet(seed=5)


def test_qas_step_scales(model):
    g, _ = model
    fc = layers(g)[-1]
    s_w = np.asarray(g.tensors[fc.inputs[1]].quant.scale)
    np.testing.assert_array_equal(step_scale(g, fc.inputs[1], 0.01, None, True), (0.01 / s_w).astype(np.float32))
    np.testing.assert_array_equal(step_scale(g, fc.inputs[1], 0.01, (1, 2), False), (0.01 * s_w[[1, 2]]).astype(np.float32))
    s_x = g.tensors[fc.inputs[0]].quant.s
    np.testing.assert_allclose(param_scales(g, fc.inputs[2]), s_x * s_w, rtol=1e-7)


def test_training_changes_only_planned_state(model):
    g, mb = model
    plan = Plan(2, (WeightUpdate(10, 1.0), WeightUpdate(5, 0.25)), lr=0.05)
    t = build_training_graph(g, plan)
    state = init_state(t)
    assert sorted(state.tensors) == sorted(["conv3.weight", "conv6.bias", "fc0.weight", "fc0.bias",
                                            "conv3.weight.remainder", "fc0.weight.remainder"])
    assert state.tensors["conv3.weight.remainder"].shape == remainder_shape((4,) + g.tensors["conv3.weight"].shape[1:], 4)
    before = state.copy()
    train(t, state, mb.calibration_input(), np.array([0, 1, 2, 3]))
    assert state.step == 4
    w0, w1 = before.tensors["conv3.weight"], state.tensors["conv3.weight"]
    assert not np.array_equal(w0[:4], w1[:4]) and np.array_equal(w0[4:], w1[4:])
    assert not np.array_equal(before.tensors["fc0.weight"], state.tensors["fc0.weight"])
    for name, t0 in g.tensors.items():  # the graph itself is never modified
        if t0.data is not None:
            assert t0.data is g.tensors[name].data


def test_training_is_deterministic_and_reduces_the_loss(model):
    g, mb = model
    t = build_training_graph(g, preset("last-k:3", g, lr=0.05))
    xs = np.concatenate([mb.calibration_input()] * 6)
    ys = np.tile([0, 1, 2, 3], 6)
    runs = []
    for _ in range(2):
        state = init_state(t)
        losses = train(t, state, xs, ys)
        runs.append((losses, state))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    for name in runs[0][1].tensors:
        np.testing.assert_array_equal(runs[0][1].tensors[name], runs[1][1].tensors[name])
    losses = runs[0][0]
    assert losses[-4:].mean() < 0.5 * losses[:4].mean()


def test_qas_is_what_makes_int8_sgd_move(model):
    """Without QAS the int8 step lr * s_w * G is far below one LSB: nearest rounding never moves a weight."""
    g, mb = model
    plan = preset("last-k:2", g, lr=0.05)
    xs, ys = mb.calibration_input(), np.array([0, 1, 2, 3])
    moved = {}
    for qas in (False, True):
        t = build_training_graph(g, plan, UpdateConfig(rounding=Rounding.NEAREST, qas=qas))
        state = init_state(t)
        before = state.copy()
        train(t, state, xs, ys)
        moved[qas] = sum(int((state.tensors[n] != before.tensors[n]).sum()) for n in state.tensors if "weight" in n)
    assert moved[False] == 0 and moved[True] > 0


def test_momentum_state_is_visible(model):
    g, mb = model
    plan = Plan(1, (WeightUpdate(10, 0.5),))
    t = build_training_graph(g, plan, UpdateConfig(momentum=0.9))
    verify(t)
    state_tensors = [x for x in t.tensors.values() if x.role is Role.OPTIMIZER_STATE]
    w = g.tensors[layers(g)[10].inputs[1]]
    assert w.shape == (5, 32)  # ratio 0.5 of 5 channels: floor -> 2 channels
    assert optimizer_state_bytes(t) == 4 * (2 * 32 + 5) + 2 * 32 // 2  # momentum (fp32), the rows' 4-bit remainders
    assert sorted(x.dtype.value for x in state_tensors) == ["float32", "float32", "int8"]
    state = init_state(t)
    train(t, state, mb.calibration_input()[:2], np.array([0, 1]))
    assert any(np.abs(state.tensors[x.name]).max() > 0 for x in state_tensors)


def test_train_step_takes_one_sample(model):
    g, mb = model
    t = build_training_graph(g, preset("bias-only", g))
    with pytest.raises(ValueError, match="one sample"):
        train_step(t, init_state(t), mb.calibration_input()[:2], 0)
    out = train_step(t, init_state(t), mb.calibration_input()[:1], 0)
    assert out[LOSS].shape == (1,) and out[LOSS].dtype == np.float32


def test_trained_state_goes_back_into_the_forward_graph(model):
    g, mb = model
    t = build_training_graph(g, preset("last-k:2", g, lr=0.05))
    state = init_state(t)
    train(t, state, mb.calibration_input(), np.array([0, 1, 2, 3]))
    trained = with_state(g, state)
    verify(trained)
    x = mb.calibration_input()[:1]
    probs_before = forward(g, {g.inputs[0]: x})[g.outputs[0]]
    probs_after = forward(trained, {g.inputs[0]: x})[g.outputs[0]]
    assert not np.array_equal(probs_before, probs_after)


# ---- new head ---------------------------------------------------------------------------------------------

def test_new_head_is_deterministic_and_well_formed(model):
    g, _ = model
    h1, h2 = new_head(g, 3, seed=1), new_head(g, 3, seed=1)
    verify(h1)
    fc = layers(h1)[-1]
    w = h1.tensors[fc.inputs[1]]
    np.testing.assert_array_equal(w.data, h2.tensors[fc.inputs[1]].data)
    assert w.shape == (3, 32) and h1.tensors[g.outputs[0]].shape == (1, 3)
    assert 20 <= np.abs(w.data).max() <= 32  # a quarter of the int8 range: room to grow
    assert not np.array_equal(w.data, new_head(g, 3, seed=2).tensors[fc.inputs[1]].data)
    assert h1.tensors[fc.outputs[0]].quant == QuantParams.per_tensor(0.125, 0)
    assert (h1.tensors[fc.inputs[2]].data == 0).all()


def test_new_head_rounds_like_the_base_graph(model):
    """The head's requantization keeps the replaced layer's rounding: TFLite-style graphs double rounding,
    ONNX imports onnxruntime's float32 rounding (a float32 scale; the head then computes exactly as onnxruntime's
    QGemm would), a single-rounding layer single rounding."""
    from dataclasses import replace
    from pathlib import Path

    from tinytrain.frontends import load_model
    from tinytrain.ops.fully_connected import accumulate as fc_accumulate
    from tinytrain.quant import Requant

    g, _ = model
    assert layers(g)[-1].attrs.requant.rounding == "double"
    assert layers(new_head(g, 3))[-1].attrs.requant.rounding == "double"
    last = layers(g)[-1]
    r = last.attrs.requant
    single = replace(g, nodes=tuple(replace(n, attrs=replace(n.attrs, requant=Requant(r.multiplier, r.shift, True)))
                                    if n is last else n for n in g.nodes))
    assert layers(new_head(single, 3))[-1].attrs.requant.rounding == "single"

    path = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"
    if not path.exists():
        pytest.skip("no models/mbv1-0.25-vww.onnx")
    base = load_model(path)
    assert layers(base)[-1].attrs.requant.rounding == "fp32"
    h = new_head(base, 5, seed=3)
    fc = layers(h)[-1]
    assert fc.attrs.requant.fp32 and len(fc.attrs.requant.multiplier) == 5
    x_t, w_t, y_t = h.tensors[fc.inputs[0]], h.tensors[fc.inputs[1]], h.tensors[fc.outputs[0]]
    x = np.random.default_rng(0).integers(-128, 128, (64,) + x_t.shape[1:]).astype(np.int8)
    bias = np.arange(5, dtype=np.int32) * 1000 - 2000
    (y,) = get_op("fully_connected").reference(fc.attrs, [x, w_t.data, bias], [x_t, w_t, h.tensors[fc.inputs[2]]],
                                               [y_t])
    acc = fc_accumulate(x, x_t.quant.zp, w_t.data, w_t.quant.zero_point, bias)
    f = np.float32
    scale = (f(x_t.quant.s) * f(w_t.quant.scale[0])) / f(y_t.quant.s)  # onnxruntime's QGemm output scale
    want = np.clip(np.rint((acc.astype(np.float32) * scale).astype(np.float32)) + y_t.quant.zp, -128, 127)
    np.testing.assert_array_equal(y, want)


def test_new_head_learns_even_with_nearest_rounding(model):
    """The head's scale makes early steps >= 1 LSB: most weights move, the loss falls."""
    g, mb = model
    h = new_head(g, 2)
    t = build_training_graph(h, preset("last-k:1", h, lr=0.01), UpdateConfig(rounding=Rounding.NEAREST))
    state = init_state(t)
    w0 = state.tensors[layers(h)[-1].inputs[1]].copy()
    x = mb.calibration_input()[:1]
    losses = train(t, state, np.repeat(x, 10, axis=0), np.ones(10, int))
    changed = (state.tensors[layers(h)[-1].inputs[1]] != w0).mean()
    assert changed > 0.5 and losses[-1] < 0.5 * losses[0]


def test_frozen_prefix_cache_is_bit_identical(model):
    g, mb = model
    plan = Plan(4, (WeightUpdate(6, 0.5),), lr=0.05)  # a layer inside the residual stage
    t = build_training_graph(g, plan)
    from tinytrain.simulator import split_frozen

    prefix, suffix = split_frozen(t)
    assert prefix.nodes and len(prefix.nodes) + len(suffix.nodes) == len(t.nodes)
    assert suffix.inputs[-2:] == ("label", "step") and len(suffix.inputs) >= 3  # frontier tensors first
    xs, ys = np.concatenate([mb.calibration_input()] * 2), np.tile([0, 1, 2, 3], 2)
    cached, plain = init_state(t), init_state(t)
    l1 = train(t, cached, xs, ys, order=[3, 1, 0, 2, 7, 5, 4, 6])
    l2 = train(t, plain, xs, ys, order=[3, 1, 0, 2, 7, 5, 4, 6], frozen_cache=False)
    np.testing.assert_array_equal(l1, l2)
    for name in cached.tensors:
        np.testing.assert_array_equal(cached.tensors[name], plain.tensors[name])


def test_verify_rejects_reads_after_an_update_and_writes_to_activations(model):
    from dataclasses import replace

    from tinytrain.ops.reshape import ReshapeAttrs
    from tinytrain.builder import GraphBuilder

    g, _ = model
    t = build_training_graph(g, preset("last-k:1", g))
    update = [n for n in t.nodes if n.op == "sgd_update"][0]
    b = GraphBuilder(t)
    w = t.tensors[update.inputs[0]]
    b.emit("reshape", [w.name], ReshapeAttrs((w.size // w.shape[0],)), "late_reader", dtype=w.dtype)
    with pytest.raises(ValueError, match="reads .* after .* updated it"):
        verify(b.build())
    activation = [n for n in t.nodes if n.op == "fully_connected"][0].inputs[0]
    bad = replace(update, inputs=(activation,) + update.inputs[1:])
    with pytest.raises(ValueError, match="writes .* a saved tensor"):
        verify(replace(t, nodes=tuple(bad if n is update else n for n in t.nodes)))
