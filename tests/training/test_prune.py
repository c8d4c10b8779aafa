"""Pruning, checked by inspecting the training graph (no execution needed)."""

import pytest

from ir_builders import tiny_mobilenet
from tinytrain.ir import Role
from tinytrain.training.autodiff import is_forward
from tinytrain.training.prune import prune
from tinytrain.training.sparse import Plan, WeightUpdate, layers, preset
from tinytrain.training.train_graph import build_training_graph
from tinytrain.verify import verify

WEIGHT_GRAD_OPS = {"conv2d_grad_weight", "fully_connected_grad_weight"}
INPUT_GRAD_OPS = {"conv2d_grad_input", "fully_connected_grad_input"}


@pytest.fixture(scope="module")
def graph():
    return tiny_mobilenet(seed=4)[0]


def _backward(t):
    return [n for n in t.nodes if not is_forward(t, n) and n.op != "sgd_update"]


def _differentiated_forward_nodes(g, t):
    """Forward node positions whose backward the training graph computes (backward nodes are named <fwd>.<what>)."""
    pos = {n.name: k for k, n in enumerate(g.nodes)}
    return {pos[n.name.rsplit(".", 1)[0]] for n in _backward(t) if n.name.rsplit(".", 1)[0] in pos}


@pytest.mark.parametrize("k", [1, 3, 11])
def test_bias_only_has_no_weight_gradient_and_stops_at_the_lowest_updated_layer(graph, k):
    t = build_training_graph(graph, Plan(bias_last_k=k))
    verify(t)
    ops = {n.op for n in t.nodes}
    assert not ops & WEIGHT_GRAD_OPS
    lowest = layers(graph)[-k]
    lowest_pos = graph.nodes.index(lowest)
    assert min(_differentiated_forward_nodes(graph, t)) == lowest_pos
    assert not [n for n in t.nodes if n.op in INPUT_GRAD_OPS and n.name.startswith(lowest.name + ".")]
    updates = [n.inputs[0] for n in t.nodes if n.op == "sgd_update"]
    assert updates == [n.inputs[2] for n in layers(graph)[-k:]]


def test_quarter_ratio_computes_exactly_a_quarter_weight_gradient(graph):
    layer = layers(graph)[5]  # conv3: 16 output channels
    w = graph.tensors[layer.inputs[1]]
    t = build_training_graph(graph, Plan(0, (WeightUpdate(5, 0.25),)))
    verify(t)
    (gw,) = [n for n in t.nodes if n.op in WEIGHT_GRAD_OPS]
    gt = t.tensors[gw.outputs[0]]
    assert gt.shape == (w.shape[0] // 4,) + w.shape[1:] and gt.size * 4 == w.size
    assert gw.attrs.channels == tuple(range(w.shape[0] // 4))
    assert not [n for n in t.nodes if n.op == "bias_grad"]
    assert min(_differentiated_forward_nodes(graph, t)) == graph.nodes.index(layer)


def test_full_update_differentiates_everything_but_the_image(graph):
    t = build_training_graph(graph, preset("full", graph))
    verify(t)
    ls = layers(graph)
    assert len([n for n in t.nodes if n.op in WEIGHT_GRAD_OPS]) == len(ls)
    assert len([n for n in t.nodes if n.op in INPUT_GRAD_OPS]) == len(ls) - 1
    assert len([n for n in t.nodes if n.op == "sgd_update"]) == 2 * len(ls)


def test_saved_activations_follow_the_plan(graph):
    """A bias-only update of the last layer saves only the logits; weights of a layer need its input."""
    t = build_training_graph(graph, Plan(bias_last_k=1))
    saved = {n for n, x in t.tensors.items() if x.role is Role.SAVED}
    fc = layers(graph)[-1]
    assert saved == {fc.outputs[0]}
    t = build_training_graph(graph, Plan(0, (WeightUpdate(10, 1.0),)))
    assert {n for n, x in t.tensors.items() if x.role is Role.SAVED} == {fc.outputs[0], fc.inputs[0]}


def test_no_dead_nodes_and_prune_is_idempotent(graph):
    t = build_training_graph(graph, Plan(2, (WeightUpdate(9, 0.5),)))
    assert prune(t) == t
    assert "softmax" not in {n.op for n in t.nodes}  # the model's probability output is not needed to train
    readers = {i for n in t.nodes for i in n.inputs}
    for n in t.nodes:
        assert n.op == "sgd_update" or any(o in readers or o in t.outputs for o in n.outputs), n.name
