"""Generated C == numpy simulator, bit for bit, op by op (design.md §4), on graphs built in the IR.

Hypothesis draws shapes, strides, paddings and variants (derandomized); every example is compiled by
the host engine into a per-session cache and run on a small batch including the int8 extremes.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from codegen_graphs import GraphBuilder
from tinytrain import engine_c, simulator

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("c_cache")


def assert_c_matches_simulator(b: GraphBuilder, g, cache, n: int = 3) -> None:
    x = b.inputs_batch(g, n)
    want = simulator.forward(g, {g.inputs[0]: x})[g.outputs[0]]
    got = engine_c.predict(g, x, cache_dir=cache)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i = tuple(bad[0])
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at {i}: C {got[i]} vs simulator "
                             f"{want[i]}; max |diff| {np.abs(got.astype(int) - want).max()}")


@settings(max_examples=30, **SETTINGS)
@given(variant=st.sampled_from(["regular", "depthwise", "pointwise"]), hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       cin=st.integers(1, 5), cout=st.integers(1, 6), mult=st.integers(1, 3), k=st.sampled_from([1, 2, 3, 5, 7]),
       kw=st.sampled_from([None, 1, 3]), stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       dilation=st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]), padded=st.booleans(),
       pads=st.tuples(*[st.integers(0, 3)] * 4), bias=st.booleans(), weight_zp=st.booleans(), relu=st.booleans(),
       per_tensor=st.booleans(), seed=st.integers(0, 2**16))
def test_conv2d(cache, variant, hw, cin, cout, mult, k, kw, stride, dilation, padded, pads, bias, weight_zp, relu,
                per_tensor, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *hw, cin))
    kernel = (k, k if kw is None else kw)
    if variant == "pointwise":
        kernel, stride, dilation, pads = (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)
    padding = pads if padded else (0, 0, 0, 0)
    try:
        b.conv(x, cin * mult if variant == "depthwise" else cout, kernel, stride, padding, dilation,
               depthwise=variant == "depthwise", bias=bias, weight_zp=weight_zp, per_tensor=per_tensor,
               act=(-128 + 30, 100) if relu else (-128, 127))
    except ValueError:
        assume(False)  # kernel larger than the padded input
    g = b.build(b.nodes[-1].outputs[0])
    assert_c_matches_simulator(b, g, cache)


@settings(max_examples=15, **SETTINGS)
@given(hw=st.tuples(st.integers(1, 8), st.integers(1, 8)), c=st.integers(1, 6), kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), pads=st.tuples(*[st.integers(0, 2)] * 4),
       half_up=st.booleans(), same_quant=st.booleans(), keepdims=st.booleans(), seed=st.integers(0, 2**16))
def test_pooling_and_mean(cache, hw, c, kernel, stride, pads, half_up, same_quant, keepdims, seed):
    pads = tuple(min(p, kernel[i % 2] - 1) for i, p in enumerate(pads))  # a window always holds a valid cell
    b = GraphBuilder(seed)
    x = b.input((1, *hw, c))
    try:
        p = b.avg_pool(x, kernel, stride, pads, half_up=half_up, act=(-100, 90))
    except ValueError:
        assume(False)
    m1 = b.mean(p, same_quant=same_quant, keepdims=keepdims)
    m2 = b.mean(x, same_quant=not same_quant, keepdims=keepdims)
    g = b.build(b.add(m1, m2))
    assert_c_matches_simulator(b, g, cache, n=4)


@settings(max_examples=15, **SETTINGS)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), pads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3),
       classes=st.integers(1, 12), beta=st.sampled_from([0.5, 1.0, 3.0]), fc_bias=st.booleans(), weight_zp=st.booleans(),
       seed=st.integers(0, 2**16))
def test_elementwise_pad_reshape_fc_softmax(cache, shape, pads, classes, beta, fc_bias, weight_zp, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *shape))
    padded = b.pad(x, pads[: len(shape)])
    r = b.requantize(padded)
    s = b.add(r, padded, act=(-120, 120))
    flat = b.reshape(s, (int(np.prod(b.tensors[s].shape[1:])),))
    y = b.fully_connected(flat, classes, bias=fc_bias, weight_zp=weight_zp)
    g = b.build(b.softmax(y, beta))
    assert_c_matches_simulator(b, g, cache, n=4)


@pytest.mark.parametrize("depth, spread", [(1001, 0), (1001, 40), (7, 255), (1, 10)])
def test_softmax_wide_rows(cache, depth, spread):
    """1001 equal logits push the final rounding shift past 31 bits; the C must still match."""
    b = GraphBuilder(depth + spread)
    x = b.input((1, 2, depth))
    g = b.build(b.softmax(x, 1.0))
    xs = b.rng.integers(-spread // 2 - 1, spread // 2 + 1, (3, 2, depth)).clip(-128, 127).astype(np.int8)
    np.testing.assert_array_equal(engine_c.predict(g, xs, cache_dir=cache), simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]])
