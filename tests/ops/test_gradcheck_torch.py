"""Gradient check: the training graph's fp32 gradients (before QAS and rounding) against PyTorch autograd.

The reference is the dequantized graph in float64 PyTorch, teacher-forced on the int8 forward: each layer
computes its real-valued pre-clamp output z from the (dequantized) int8 inputs and weights, and passes on
y = m*z + stop_grad(ŷ - m*z), where ŷ is the dequantized int8 output of the simulator and m the
straight-through clamp mask (1 where act_min < y_int8 < act_max). Forward values thus equal the device's,
and gradients are autograd's through the real-valued ops.

Tolerance: per parameter, max |g_sim - g_torch| <= 2e-6 * max |g_torch| (+1e-12). The simulator sums
in float32 in the C kernels' order (docs/design.md §3b), so errors are a few float32 ulps per sum, compounded
over the layers (worst seen: 2.2e-7 on the whole network); 2e-6 leaves 10x margin and catches any
wrong index, missing term or scale (those give errors of order 1).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from ir_builders import ModelBuilder, tiny_mobilenet
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.names import LABEL, grad_name
from tinytrain.ops import get_op
from tinytrain.ops.conv2d import Conv2dAttrs, Conv2dGradInputAttrs, Conv2dGradWeightAttrs, output_hw
from tinytrain.quant import Requant
from tinytrain.simulator import execute
from tinytrain.training.autodiff import differentiate, logits_of, trainable_params
from tinytrain.verify import verify

RTOL = 2e-6
MASKED = {"conv2d", "fully_connected", "add", "mean", "requantize", "mul", "hard_swish", "logistic", "hard_sigmoid"}


def _deq(arr, t):
    return torch.tensor((arr.astype(np.float64) - t.quant.zp) * t.quant.s)


def _param(t):
    shape = (-1,) + (1,) * (t.data.ndim - 1)
    s = np.asarray(t.quant.scale, np.float64).reshape(shape)
    zp = np.asarray(t.quant.zero_point, np.float64).reshape(shape)
    return torch.tensor((t.data.astype(np.float64) - zp) * s, requires_grad=True)


def _nchw(x):
    return x.permute(0, 3, 1, 2)


def _nhwc(x):
    return x.permute(0, 2, 3, 1)


def _real_op(node, graph, x, params):
    """The real-valued, unclamped output z of one forward node (NHWC torch tensors)."""
    a, op = node.attrs, node.op
    if op == "conv2d":
        w = params[node.inputs[1]]
        b = params[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        pt, pl, pb, pr = a.padding
        xin = F.pad(_nchw(x[0]), (pl, pr, pt, pb))
        return _nhwc(F.conv2d(xin, w.permute(0, 3, 1, 2), b, a.stride, 0, a.dilation, a.groups))
    if op == "fully_connected":
        b = params[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        return F.linear(x[0], params[node.inputs[1]], b)
    if op == "add":
        return x[0] + x[1]
    if op == "mean":
        y = x[0].mean(dim=(1, 2), keepdim=True)
        return y if a.keepdims else y.reshape(y.shape[0], -1)
    if op == "avg_pool2d":
        pt, pl, pb, pr = a.padding
        xin = F.pad(_nchw(x[0]), (pl, pr, pt, pb))
        ones = F.pad(torch.ones_like(_nchw(x[0])[:1, :1]), (pl, pr, pt, pb))
        sums = F.avg_pool2d(xin, a.kernel, a.stride, divisor_override=1)
        return _nhwc(sums / F.avg_pool2d(ones, a.kernel, a.stride, divisor_override=1))
    if op == "max_pool2d":
        pt, pl, pb, pr = a.padding
        xin = F.pad(_nchw(x[0]), (pl, pr, pt, pb), value=-float("inf"))
        return _nhwc(F.max_pool2d(xin, a.kernel, a.stride))
    if op == "mul":
        return x[0] * x[1]
    if op == "concat":
        return torch.cat(x, dim=a.axis)
    if op == "hard_swish":
        return F.hardswish(x[0])
    if op == "logistic":
        return torch.sigmoid(x[0])
    if op == "hard_sigmoid":
        return torch.clamp(a.alpha * x[0] + a.beta, 0, 1)
    if op == "pad":
        pads = [p for pair in reversed(a.pads) for p in pair]
        return F.pad(x[0], pads)
    if op == "reshape":
        return x[0].reshape((x[0].shape[0],) + a.shape)
    if op == "requantize":
        return x[0]
    raise NotImplementedError(op)


def torch_gradients(graph, x_int8, label):
    values = execute(graph, {graph.inputs[0]: x_int8}, keep_all=True)
    params = {p: _param(graph.tensors[p]) for p in trainable_params(graph)}
    logits = logits_of(graph)
    act = {graph.inputs[0]: _deq(x_int8, graph.tensors[graph.inputs[0]])}
    for node in graph.nodes:
        if node.op == "softmax":
            continue
        z = _real_op(node, graph, [act[i] for i in node.inputs if i and i not in params], params)
        out = node.outputs[0]
        q = values[out]
        y_hat = _deq(q, graph.tensors[out])
        lo, hi = getattr(node.attrs, "act_min", -128), getattr(node.attrs, "act_max", 127)
        masked = node.op in MASKED or (node.op in ("avg_pool2d", "max_pool2d") and (lo, hi) != (-128, 127))
        m = torch.tensor(((q > lo) & (q < hi)).astype(np.float64)) if masked else torch.ones_like(y_hat)
        act[out] = m * z + (y_hat - m * z).detach()
        assert torch.allclose(act[out], y_hat)
    loss = F.cross_entropy(act[logits].reshape(1, -1), torch.tensor([label]), reduction="sum")
    loss.backward()
    return float(loss.detach()), {p: t.grad.numpy() for p, t in params.items()}


def check_graph(graph, x_int8, label):
    tg = differentiate(graph)
    verify(tg)
    out = execute(tg, {graph.inputs[0]: x_int8, LABEL: np.array([label], np.int32)})
    ref_loss, ref = torch_gradients(graph, x_int8, label)
    assert abs(out["loss"][0] - ref_loss) <= 1e-5 * max(1.0, ref_loss)
    worst = 0.0
    for p, g_ref in ref.items():
        g = out[grad_name(p)]
        assert g.dtype == np.float32 and g.shape == g_ref.shape, p
        scale = np.abs(g_ref).max()
        err = np.abs(g.astype(np.float64) - g_ref).max()
        assert err <= RTOL * scale + 1e-12, f"{p}: max error {err:.3g} vs max |grad| {scale:.3g}"
        worst = max(worst, err / (scale + 1e-30))
    return worst


def _head(mb, h, n=4):
    t = mb.tensors[h]
    if len(t.shape) == 4:
        h = mb.reshape(mb.mean(h), (t.shape[3],))
    return mb.fc(h, n)


def _sample(mb, k=0):
    return mb.calibration_input()[k : k + 1]


OP_CASES = {
    "conv3x3_s2_pad": lambda mb, x: mb.conv(x, 6, 3, 2),
    "conv3x3_asym_pad_relu": lambda mb, x: mb.conv(x, 5, 3, 2, act="relu", padding=(0, 0, 1, 1)),
    "conv5x5_dilated": lambda mb, x: mb.conv(x, 4, 3, 1, act=None, dilation=2),
    "pointwise": lambda mb, x: mb.conv(x, 7, 1, act=None),
    "pointwise_no_bias": lambda mb, x: mb.conv(x, 7, 1, bias=False),
    "depthwise3x3_s2": lambda mb, x: mb.conv(x, 0, 3, 2, depthwise=True),
    "depthwise5x5": lambda mb, x: mb.conv(x, 0, 5, 1, depthwise=True),
    "depthwise_multiplier2": lambda mb, x: mb.conv(x, 2 * mb.tensors[x].shape[3], 3, 1, depthwise=True),
    "residual_add": lambda mb, x: mb.add(x, mb.conv(x, mb.tensors[x].shape[3], 1, act=None)),
    "add_relu": lambda mb, x: mb.add(mb.conv(x, 4, 1), mb.conv(x, 4, 3, act=None), act="relu"),
    "avg_pool": lambda mb, x: mb.avg_pool(x, 3, 2, (1, 1, 1, 1)),
    "max_pool_overlapping": lambda mb, x: mb.max_pool(x, 3, 2, (1, 1, 1, 1)),
    "hard_swish": lambda mb, x: mb.activation(mb.conv(x, 6, 1, act=None), "hard_swish"),
    "logistic": lambda mb, x: mb.activation(mb.conv(x, 6, 1, act=None), "logistic"),
    "hard_sigmoid": lambda mb, x: mb.activation(mb.conv(x, 6, 1, act=None), "hard_sigmoid", 0.2, 0.5),
    "squeeze_excite": lambda mb, x: mb.mul(x, mb.activation(mb.conv(mb.mean(x), 6, 1, act=None), "hard_sigmoid")),
    "mul_same_shape_relu": lambda mb, x: mb.mul(mb.conv(x, 6, 1, act=None), x, act="relu"),
    "concat_channels": lambda mb, x: mb.concat([mb.conv(x, 4, 1), x, mb.conv(x, 3, 3, act=None)]),
    "max_pool_2x2_clamped": lambda mb, x: mb.max_pool(x, 2, 2, act=(-100, 90)),
    "mean_rescaled": lambda mb, x: mb.reshape(mb.mean(x, rescale=0.5), (mb.tensors[x].shape[3],)),
    "mean_no_keepdims": lambda mb, x: mb.mean(x, keepdims=False),
    "pad": lambda mb, x: mb.conv(mb.pad(x, ((1, 0), (0, 2), (0, 0))), 4, 3, padding=0),
    "requantize": lambda mb, x: mb.requantize(x, 0.7),
    "fc_relu": lambda mb, x: mb.fc(mb.reshape(mb.mean(x), (mb.tensors[x].shape[3],)), 6, act="relu"),
}


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_gradients_match_torch(case):
    mb = ModelBuilder(case, seed=sorted(OP_CASES).index(case))
    x = mb.input((7, 8, 3))
    h = mb.conv(x, 6, 3, 1)  # a trainable layer below, so the op's input gradient is checked too
    h = OP_CASES[case](mb, h)
    g = mb.build(mb.softmax(_head(mb, h)))
    for k in range(2):
        check_graph(g, _sample(mb, k), label=k)


@pytest.mark.parametrize("expand,k,stride,cout", [(6, 3, 1, 8), (6, 3, 2, 12), (3, 5, 1, 8), (4, 7, 2, 16), (1, 3, 1, 8)])
def test_inverted_residual_blocks_match_torch(expand, k, stride, cout):
    """MobileNetV2 (3x3, t=6) and MCUNet-style (5x5 / 7x7, t=3..4) blocks, with and without the residual."""
    mb = ModelBuilder("block", seed=expand * 10 + k)
    x = mb.input((10, 10, 8))
    h = mb.conv(x, 8, 1)
    h = mb.inverted_residual(h, cout, expand, k, stride)
    g = mb.build(_head(mb, h, n=3))
    check_graph(g, _sample(mb), label=2)


def test_whole_network_matches_torch():
    g, mb = tiny_mobilenet(seed=3)
    worst = max(check_graph(g, _sample(mb, k), label=k) for k in range(2))
    assert worst < RTOL


# ---- the conv / fc backward kernels on their own, over random geometries and channel subsets ----------

@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.integers(1, 2), st.integers(3, 8), st.integers(1, 4), st.sampled_from([1, 2, 3, 5]), st.integers(1, 3),
       st.integers(1, 2), st.integers(0, 2), st.booleans(), st.integers(1, 2), st.integers(0, 2**31))
def test_conv_kernels_match_torch(n, hw, cin, k, stride, dil, pad, depthwise, mult, seed):
    rng = np.random.default_rng(seed)
    cout = cin * mult if depthwise else int(rng.integers(1, 6))
    groups = cin if depthwise else 1
    pads = (pad, pad + 1, pad, max(pad - 1, 0))
    geo = Conv2dAttrs((stride, stride), pads, Requant((1 << 30,), (0,)), (dil, dil), groups)
    ho, wo = output_hw(hw, hw + 1, k, k, geo)
    if ho <= 0 or wo <= 0:
        return
    x = rng.integers(-128, 128, (n, hw, hw + 1, cin)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, k, k, cin // groups)).astype(np.int8)
    g = rng.normal(size=(n, ho, wo, cout)).astype(np.float32)
    xq, wq = QuantParams.per_tensor(0.05, 7), QuantParams(tuple(rng.uniform(0.001, 0.01, cout)), (0,) * cout, 0)
    xt = Tensor("x", (1,) + x.shape[1:], DType.INT8, Role.SAVED, xq)
    wt = Tensor("w", w.shape, DType.INT8, Role.WEIGHT, wq, w)
    gt = Tensor("g", (1, ho, wo, cout), DType.FLOAT32, Role.GRADIENT)
    channels = tuple(sorted(rng.choice(cout, size=int(rng.integers(1, cout + 1)), replace=False).tolist()))

    gi_attrs = Conv2dGradInputAttrs((stride, stride), pads, (hw, hw + 1), (dil, dil), groups)
    gw_attrs = Conv2dGradWeightAttrs((stride, stride), pads, (k, k), (dil, dil), groups, channels)
    (gi_shape,) = get_op("conv2d_grad_input").infer_shapes(gi_attrs, [gt, wt])
    (gw_shape,) = get_op("conv2d_grad_weight").infer_shapes(gw_attrs, [gt, xt])
    gi = get_op("conv2d_grad_input").reference(gi_attrs, [g, w], [gt, wt], [None])[0]
    gw = get_op("conv2d_grad_weight").reference(gw_attrs, [g, x], [gt, xt], [None])[0]
    assert gi.shape == (n,) + gi_shape[1:] and gw.shape == gw_shape

    xr = torch.tensor((x.astype(np.float64) - 7) * np.float64(np.float32(0.05)), requires_grad=True)
    wr = torch.tensor(w.astype(np.float64) * np.asarray(wq.scale, np.float32).astype(np.float64)[:, None, None, None],
                      requires_grad=True)
    z = F.conv2d(F.pad(_nchw(xr), (pads[1], pads[3], pads[0], pads[2])), wr.permute(0, 3, 1, 2), None,
                 (stride, stride), 0, (dil, dil), groups)
    z.backward(_nchw(torch.tensor(g.astype(np.float64))))
    for got, want in ((gi, xr.grad.numpy()), (gw, wr.grad.numpy()[list(channels)])):
        np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * max(np.abs(want).max(), 1e-30))


def test_fc_weight_gradient_channel_subset():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (3, 10)).astype(np.int8)
    g = rng.normal(size=(3, 6)).astype(np.float32)
    xt = Tensor("x", (1, 10), DType.INT8, Role.SAVED, QuantParams.per_tensor(0.1, -5))
    gt = Tensor("g", (1, 6), DType.FLOAT32, Role.GRADIENT)
    op = get_op("fully_connected_grad_weight")
    attrs = op.attrs_type(channels=(1, 4))
    assert op.infer_shapes(attrs, [gt, xt]) == [(2, 10)]
    got = op.reference(attrs, [g, x], [gt, xt], [None])[0]
    want = g[:, [1, 4]].astype(np.float64).T @ ((x.astype(np.float64) + 5) * np.float32(0.1))
    np.testing.assert_allclose(got, want, rtol=1e-6)
