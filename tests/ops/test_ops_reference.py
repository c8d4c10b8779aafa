"""Vectorized op references against naive loops written straight from the definitions."""

import numpy as np
from hypothesis import given, settings, strategies as st

from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.avg_pool2d import AvgPool2dAttrs
from tinytrain.ops.conv2d import Conv2dAttrs, accumulate
from tinytrain.quant import Requant


def _t(name, shape, dtype=DType.INT8, role=Role.ACTIVATION, quant=None, data=None):
    return Tensor(name, tuple(shape), dtype, role, quant, data)


def naive_conv_acc(x, zx, w, zw, bias, stride, pad, dil, depthwise):
    n, h, wd, cin = x.shape
    cout, kh, kw, cg = w.shape
    pt, pl, pb, pr = pad
    ho = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    acc = np.zeros((n, ho, wo, cout), np.int64)
    mult = cout // cin
    for b in range(n):
        for oy in range(ho):
            for ox in range(wo):
                for o in range(cout):
                    s = int(bias[o])
                    for i in range(kh):
                        for j in range(kw):
                            iy, ix = oy * stride[0] - pt + i * dil[0], ox * stride[1] - pl + j * dil[1]
                            if not (0 <= iy < h and 0 <= ix < wd):
                                continue
                            chans = [o // mult] if depthwise else range(cin)
                            for ci, c in enumerate(chans):
                                s += (int(x[b, iy, ix, c]) - zx) * (int(w[o, i, j, 0 if depthwise else c]) - zw)
                    acc[b, oy, ox, o] = s
    return acc


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(3, 7), st.integers(1, 4), st.sampled_from([1, 3, 5]), st.integers(1, 2),
       st.integers(1, 2), st.integers(0, 2), st.booleans(), st.integers(1, 2), st.integers(-5, 5), st.integers(0, 2**31))
def test_conv_accumulator_matches_naive(n, hw, cin, k, stride, dil, pad, depthwise, mult, zw, seed):
    rng = np.random.default_rng(seed)
    cout = cin * mult if depthwise else rng.integers(1, 5)
    cg = 1 if depthwise else cin
    x = rng.integers(-128, 128, (n, hw, hw + 1, cin)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, k, k, cg)).astype(np.int8)
    bias = rng.integers(-1000, 1000, cout).astype(np.int32)
    a = Conv2dAttrs((stride, stride), (pad, pad, pad + 1, pad), Requant((1 << 30,), (0,)), (dil, dil),
                    cin if depthwise else 1)
    xt = _t("x", (1,) + x.shape[1:], quant=QuantParams.per_tensor(0.1, 3))
    wt = _t("w", w.shape, role=Role.WEIGHT, quant=QuantParams((0.1,) * cout, (zw,) * cout, 0), data=w)
    try:
        (shape,) = get_op("conv2d").infer_shapes(a, [xt, wt])
    except ValueError:
        return  # kernel larger than the padded input
    got = accumulate(a, x, xt, w, wt, bias, (n,) + shape[1:])
    want = naive_conv_acc(x, 3, w, zw, bias, (stride, stride), a.padding, (dil, dil), depthwise)
    np.testing.assert_array_equal(got, want)


def test_avg_pool_rounding_modes():
    x = np.array([-3, -2, 1, 1, 5, 5, -1, -2], np.int8).reshape(2, 2, 2, 1)  # sums -3 and 7 over 4 cells
    t = _t("x", (1, 2, 2, 1), quant=QuantParams.per_tensor(0.1, 0))
    o = _t("y", (1, 1, 1, 1), quant=QuantParams.per_tensor(0.1, 0))
    away = get_op("avg_pool2d").reference(AvgPool2dAttrs((2, 2), (2, 2)), [x], [t], [o])[0]
    up = get_op("avg_pool2d").reference(AvgPool2dAttrs((2, 2), (2, 2), round_half_up=True), [x], [t], [o])[0]
    assert away.ravel().tolist() == [-1, 2]  # -0.75 -> -1, 1.75 -> 2
    assert up.ravel().tolist() == [-1, 2]
    x2 = np.array([-1, -1, 0, 0], np.int8).reshape(1, 2, 2, 1)  # -0.5: away -> -1, half up -> 0
    assert get_op("avg_pool2d").reference(AvgPool2dAttrs((2, 2), (2, 2)), [x2], [t], [o])[0].item() == -1
    assert get_op("avg_pool2d").reference(AvgPool2dAttrs((2, 2), (2, 2), round_half_up=True), [x2], [t], [o])[0].item() == 0
