"""Generated C == numpy simulator, bit for bit, op by op (design.md §4), on graphs built in the IR.

Hypothesis draws shapes, strides, paddings and variants (derandomized), including the rounding of every
requantization (TFLite's double rounding or single rounding, as ONNX imports use); every example is
compiled by the host engine into a per-session cache and run on a small batch including the int8 extremes.
"""

import shutil
import subprocess
from importlib import resources

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
       per_tensor=st.booleans(), single=st.booleans(), seed=st.integers(0, 2**16))
def test_conv2d(cache, variant, hw, cin, cout, mult, k, kw, stride, dilation, padded, pads, bias, weight_zp, relu,
                per_tensor, single, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *hw, cin))
    kernel = (k, k if kw is None else kw)
    if variant == "pointwise":
        kernel, stride, dilation, pads = (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)
    padding = pads if padded else (0, 0, 0, 0)
    try:
        b.conv(x, cin * mult if variant == "depthwise" else cout, kernel, stride, padding, dilation,
               depthwise=variant == "depthwise", bias=bias, weight_zp=weight_zp, per_tensor=per_tensor,
               act=(-128 + 30, 100) if relu else (-128, 127), single=single)
    except ValueError:
        assume(False)  # kernel larger than the padded input
    g = b.build(b.nodes[-1].outputs[0])
    assert_c_matches_simulator(b, g, cache)


@settings(max_examples=25, **SETTINGS)
@given(hw=st.tuples(st.integers(1, 8), st.integers(1, 8)), c=st.integers(1, 6), kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), pads=st.tuples(*[st.integers(0, 2)] * 4),
       pool=st.sampled_from(["away", "half_up", "half_even", "requant", "requant_single"]), same_quant=st.booleans(),
       keepdims=st.booleans(), single=st.booleans(), count_folded=st.booleans(), seed=st.integers(0, 2**16))
def test_pooling_and_mean(cache, hw, c, kernel, stride, pads, pool, same_quant, keepdims, single, count_folded, seed):
    pads = tuple(min(p, kernel[i % 2] - 1) for i, p in enumerate(pads))  # a window always holds a valid cell
    b = GraphBuilder(seed)
    x = b.input((1, *hw, c))
    try:
        p = b.avg_pool(x, kernel, stride, pads, half_up=pool == "half_up", half_even=pool == "half_even",
                       requant=pool.startswith("requant"), single=pool == "requant_single", act=(-100, 90))
    except ValueError:
        assume(False)
    m1 = b.mean(p, same_quant=same_quant, keepdims=keepdims, single=single, count_folded=count_folded)
    m2 = b.mean(x, same_quant=not same_quant, keepdims=keepdims, single=not single, count_folded=not count_folded)
    g = b.build(b.add(m1, m2, single=single))
    assert_c_matches_simulator(b, g, cache, n=4)


@settings(max_examples=15, **SETTINGS)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), pads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3),
       classes=st.integers(1, 12), beta=st.sampled_from([0.5, 1.0, 3.0]), fc_bias=st.booleans(), weight_zp=st.booleans(),
       single=st.booleans(), seed=st.integers(0, 2**16))
def test_elementwise_pad_reshape_fc_softmax(cache, shape, pads, classes, beta, fc_bias, weight_zp, single, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *shape))
    padded = b.pad(x, pads[: len(shape)])
    r = b.requantize(padded, single=single)
    s = b.add(r, padded, act=(-120, 120), single=single)
    flat = b.reshape(s, (int(np.prod(b.tensors[s].shape[1:])),))
    y = b.fully_connected(flat, classes, bias=fc_bias, weight_zp=weight_zp, single=single)
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


REQUANT_MAIN = r"""
#include <stdio.h>
#include "tt_fixedpoint.h"

int main(void) {
    long long acc, multiplier, shift, left_ok;
    while (scanf("%lld %lld %lld %lld", &acc, &multiplier, &shift, &left_ok) == 4) {
        /* tt_requantize shifts acc left in int32: only called where that cannot overflow, as in the kernels */
        printf("%ld %ld\n", left_ok ? (long)tt_requantize((int32_t)acc, (int32_t)multiplier, (int32_t)shift) : 0L,
               (long)tt_requantize_single((int32_t)acc, (int32_t)multiplier, (int32_t)shift));
    }
    return 0;
}
"""


def test_requantize_helpers_match_quant_py(tmp_path):
    """tt_requantize / tt_requantize_single == quant.multiply_by_quantized_multiplier (double / single rounding)
    over the whole int32 accumulator range, every shift -31..30 and the extreme multipliers."""
    from tinytrain.quant import INT32_MAX, INT32_MIN, multiply_by_quantized_multiplier

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    header = resources.files("tinytrain.codegen.runtime").joinpath("tt_fixedpoint.h").read_text(encoding="utf-8")
    (tmp_path / "tt_fixedpoint.h").write_text(header)
    (tmp_path / "main.c").write_text(REQUANT_MAIN)
    exe = tmp_path / "requant"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-fsanitize=undefined",
                        "-fno-sanitize-recover=all", str(tmp_path / "main.c"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(0)
    n = 20000
    shift = rng.integers(-31, 31, n)
    multiplier = rng.integers(1 << 30, 1 << 31, n)
    multiplier[:8] = [1 << 30, INT32_MAX, 0, 1 << 30, INT32_MAX, 1 << 30, INT32_MAX, 1 << 30]
    bits = rng.integers(0, 32, n)
    acc = rng.integers(-(1 << 31), 1 << 31, n) >> bits  # all magnitudes
    acc[:8] = [INT32_MIN, INT32_MAX, 12345, -1, 1, 0, -(1 << 20), 7]
    # the double-rounding helper shifts acc left in int32: compare it where that product is in range
    left_ok = np.abs(acc) < (1 << (31 - np.maximum(shift, 0))) - 1
    lines = "".join(f"{a} {m} {s} {int(ok)}\n" for a, m, s, ok in zip(acc, multiplier, shift, left_ok))
    r = subprocess.run([str(exe)], input=lines, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.array([[int(v) for v in line.split()] for line in r.stdout.splitlines()])
    double = multiply_by_quantized_multiplier(acc, multiplier, shift)
    single = multiply_by_quantized_multiplier(acc, multiplier, shift, single_rounding=True)
    fits = np.abs(single) <= INT32_MAX  # TFLite DCHECKs that the result fits int32
    assert left_ok.mean() > 0.4 and fits.mean() > 0.4
    np.testing.assert_array_equal(got[left_ok, 0], double[left_ok])
    np.testing.assert_array_equal(got[fits, 1], single[fits])
