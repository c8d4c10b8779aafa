"""The backward ops' magnitude rules (``OpDef.bound``, composed by training/finite.py): each one bounds its op's
reference output, and where inputs can reach it (non-negative weights, a constant gradient, stride 1) the bound is
attained within float32 rounding — so a rule is neither wrong nor looser than its formula says."""

import numpy as np
import pytest

from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.avg_pool2d import AvgPool2dGradAttrs
from tinytrain.ops.conv2d import Conv2dGradInputAttrs, Conv2dGradWeightAttrs
from tinytrain.ops.fully_connected import FullyConnectedGradInputAttrs, FullyConnectedGradWeightAttrs
from tinytrain.ops.bias_grad import BiasGradAttrs
from tinytrain.ops.sgd_update import Rounding, SgdUpdateAttrs

B = 0.37  # the bound of the incoming gradient
RTOL = 1e-5


def weight(shape, rng, positive: bool) -> Tensor:
    w = rng.integers(-128, 128, shape).astype(np.int8)
    w = np.abs(w.astype(np.int16)).clip(0, 127).astype(np.int8) if positive else w
    scales = tuple(float(np.float32(s)) for s in rng.uniform(0.001, 0.05, shape[0]))
    return Tensor("w", shape, DType.INT8, Role.WEIGHT, QuantParams(scales, (0,) * shape[0], 0), w)


def activation(shape, zp=-3, s=0.02) -> Tensor:
    return Tensor("x", shape, DType.INT8, Role.SAVED, QuantParams((s,), (zp,)))


def grad(shape) -> Tensor:
    return Tensor("g", shape, DType.FLOAT32, Role.GRADIENT)


def run(op_name, attrs, ins, arrays, bounds):
    op = get_op(op_name)
    outs = [grad(s) for s in op.infer_shapes(attrs, ins)]
    (value,) = op.reference(attrs, arrays, ins, outs)
    (bound,) = op.bound(attrs, ins, bounds)
    return float(np.abs(value).max()), bound


@pytest.mark.parametrize("groups,stride", [(1, 1), (8, 1), (1, 2), (8, 2)], ids=["conv", "depthwise", "conv-s2",
                                                                                "depthwise-s2"])
def test_conv_input_gradient_bound(groups, stride):
    rng = np.random.default_rng(groups + stride)
    cout, cin = 16, 8
    w = weight((cout, 3, 3, cin // groups), rng, positive=True)
    ho = 6 // stride
    attrs = Conv2dGradInputAttrs((stride, stride), (1, 1, 1, 1), (6, 6), (1, 1), groups)
    got, bound = run("conv2d_grad_input", attrs, [grad((1, ho, ho, cout)), w],
                     [np.full((1, ho, ho, cout), B, np.float32), w.data], [B, None])
    assert got <= bound * (1 + RTOL)
    if stride == 1:  # an interior pixel receives every tap of every output channel
        assert got >= bound * (1 - RTOL)


def test_conv_weight_gradient_bound():
    x = activation((1, 5, 5, 4))
    attrs = Conv2dGradWeightAttrs((1, 1), (0, 0, 0, 0), (3, 3))
    got, bound = run("conv2d_grad_weight", attrs, [grad((1, 3, 3, 6)), x],
                     [np.full((1, 3, 3, 6), B, np.float32), np.full((1, 5, 5, 4), 127, np.int8)], [B, None])
    assert bound * (1 - RTOL) <= got <= bound * (1 + RTOL)  # x = 127 is the farthest from zp -3


def test_fully_connected_bounds():
    rng = np.random.default_rng(1)
    w = weight((10, 32), rng, positive=True)
    got, bound = run("fully_connected_grad_input", FullyConnectedGradInputAttrs(), [grad((1, 10)), w],
                     [np.full((1, 10), B, np.float32), w.data], [B, None])
    assert bound * (1 - RTOL) <= got <= bound * (1 + RTOL)
    x = activation((1, 32), zp=5)
    got, bound = run("fully_connected_grad_weight", FullyConnectedGradWeightAttrs(), [grad((1, 10)), x],
                     [np.full((1, 10), -B, np.float32), np.full((1, 32), -128, np.int8)], [B, None])
    assert bound * (1 - RTOL) <= got <= bound * (1 + RTOL)


def test_bias_and_pool_gradient_bounds():
    got, bound = run("bias_grad", BiasGradAttrs(), [grad((1, 4, 4, 3))], [np.full((1, 4, 4, 3), B, np.float32)], [B])
    assert bound * (1 - RTOL) <= got <= bound * (1 + RTOL)
    attrs = AvgPool2dGradAttrs((3, 3), (1, 1), (1, 1, 1, 1), (5, 5))
    got, bound = run("avg_pool2d_grad", attrs, [grad((1, 5, 5, 2))], [np.full((1, 5, 5, 2), B, np.float32)], [B])
    assert got <= bound


def test_softmax_gradient_and_momentum_bounds():
    op = get_op("softmax_xent_grad")
    assert op.bound(None, [], [None, None]) == [1.0]
    sgd = get_op("sgd_update")
    with_momentum = SgdUpdateAttrs(None, Rounding.NEAREST, 0.9)
    assert sgd.bound(with_momentum, [], [None, B, None, None]) == pytest.approx([B, 10 * B])
    assert sgd.bound(SgdUpdateAttrs(None, Rounding.NEAREST), [], [None, B, None]) == [B, 0.0]
    assert sgd.bound(SgdUpdateAttrs(None, Rounding.NEAREST, 1.0), [], [None, B, None, None])[1] == np.inf
