"""The generic reverse walk: structure of the training graph it builds (values: test_gradcheck_torch.py)."""

import numpy as np
import pytest

from ir_builders import ModelBuilder, tiny_mobilenet
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Role
from tinytrain.names import LABEL, LOSS, grad_name
from tinytrain.ops import get_op
from tinytrain.simulator import execute
from tinytrain.training.autodiff import differentiate, is_forward, logits_of, param_gradients, trainable_params
from tinytrain.verify import verify


@pytest.fixture(scope="module")
def model():
    return tiny_mobilenet(seed=1)


def test_forward_is_kept_and_backward_appended(model):
    g, _ = model
    t = differentiate(g)
    verify(t)
    assert t.nodes[: len(g.nodes)] == g.nodes
    assert all(not is_forward(t, n) for n in t.nodes[len(g.nodes):])
    assert t.inputs == g.inputs + (LABEL,)
    assert t.tensors[LABEL].dtype is DType.INT32
    params = trainable_params(g)
    assert t.outputs == (LOSS,) + tuple(grad_name(p) for p in params)
    assert set(param_gradients(t)) == set(params)
    for p in params:
        assert t.tensors[grad_name(p)].shape == g.tensors[p].shape
        assert t.tensors[grad_name(p)].role is Role.GRADIENT and t.tensors[grad_name(p)].dtype is DType.FLOAT32


def test_every_backward_node_is_a_registered_fp32_op(model):
    t = differentiate(model[0])
    for n in t.nodes[len(model[0].nodes):]:
        op = get_op(n.op)
        for o in n.outputs:
            assert t.tensors[o].dtype is DType.FLOAT32
        assert op.backward is None or n.op == "reshape"  # backward kernels are not differentiated again


def test_residual_gradients_are_accumulated(model):
    g, _ = model
    t = differentiate(g)
    adds = [n for n in g.nodes if n.op == "add"]
    accs = [n for n in t.nodes if n.op == "grad_accumulate"]
    assert len(accs) == len(adds) == 2  # each block input feeds the add and the expand conv


def test_saved_tensors_are_exactly_what_backward_reads(model):
    g, _ = model
    t = differentiate(g)
    backward_reads = {i for n in t.nodes[len(g.nodes):] for i in n.inputs}
    saved = {name for name, x in t.tensors.items() if x.role is Role.SAVED}
    activations = {name for name, x in g.tensors.items() if x.role is Role.ACTIVATION}
    assert saved == backward_reads & activations
    assert all(t.tensors[s].dtype is DType.INT8 for s in saved)


def test_no_gradient_of_the_image_or_of_non_parameters(model):
    g, _ = model
    t = differentiate(g)
    first = g.nodes[0]
    assert not [n for n in t.nodes if n.op == "conv2d_grad_input" and n.name.startswith(first.name + ".")]


def test_wrt_subset_only_walks_what_depends_on_it(model):
    g, _ = model
    fc = [n for n in g.nodes if n.op == "fully_connected"][0]
    t = differentiate(g, wrt=[fc.inputs[2]])
    verify(t)
    assert [n.op for n in t.nodes[len(g.nodes):]] == ["softmax_xent", "softmax_xent_grad", "clamp_mask", "bias_grad"]


def test_logits_found_through_softmax(model):
    g, _ = model
    assert logits_of(g) == [n for n in g.nodes if n.op == "fully_connected"][0].outputs[0]


def test_op_without_backward_rule_on_the_path_is_a_clear_error():
    mb = ModelBuilder()
    x = mb.input((4, 4, 3))
    h = mb.reshape(mb.mean(mb.conv(x, 4, 3)), (4,))
    g = mb.build(mb.fc(mb.softmax(mb.fc(h, 4)), 3))
    with pytest.raises(UnsupportedModelError, match="softmax node .* no backward rule"):
        differentiate(g)
    last_fc = [n for n in g.nodes if n.op == "fully_connected"][-1]
    verify(differentiate(g, wrt=list(last_fc.inputs[1:])))  # layers after it still train


def test_bad_wrt_is_rejected(model):
    with pytest.raises(ValueError, match="not a weight or bias"):
        differentiate(model[0], wrt=["input"])


def test_batch_gradients_are_sums_of_per_sample_gradients(model):
    g, mb = model
    t = differentiate(g)
    xs = mb.calibration_input()[:3]
    labels = np.array([0, 1, 2], np.int32)
    together = execute(t, {g.inputs[0]: xs, LABEL: labels})
    apart = [execute(t, {g.inputs[0]: xs[k : k + 1], LABEL: labels[k : k + 1]}) for k in range(3)]
    for name in t.outputs[1:]:
        np.testing.assert_allclose(together[name], sum(a[name] for a in apart), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(together[LOSS], np.concatenate([a[LOSS] for a in apart]), rtol=1e-6)
