"""The pass fusing each weight gradient with its SGD update (training/fuse.py, ops/grad_weight_sgd_update.py):
which pairs it fuses, the fused graph's shape, and the simulator's state, identical to the unfused graph's."""

from dataclasses import replace

import numpy as np
import pytest

from ir_builders import ModelBuilder, tiny_mobilenet
from tinytrain.ir import Role
from tinytrain.memory.lifetimes import scratch_requests
from tinytrain.ops import get_op
from tinytrain.ops.grad_weight_sgd_update import SCRATCH_BYTES, block_rows
from tinytrain.ops.sgd_update import Rounding
from tinytrain.simulator import init_state, train_step
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan, WeightUpdate, preset
from tinytrain.training.train_graph import build_training_graph
from tinytrain.verify import verify

FUSED_OPS = ("conv2d_grad_weight_sgd_update", "fully_connected_grad_weight_sgd_update")


@pytest.fixture(scope="module")
def model():
    return tiny_mobilenet()


def shared_weight_model():
    """conv1's weight is read by conv1 and conv2, so autodiff sums its two gradients with grad_accumulate."""
    mb = ModelBuilder("shared", 0)
    h = mb.conv(mb.input((8, 8, 3)), 4, 3)
    h = mb.conv(h, 4, 3)
    h = mb.conv(h, 4, 3)
    g = mb.build(mb.classifier(h, 3, softmax=False))
    nodes = tuple(replace(n, inputs=(n.inputs[0], "conv1.weight", *n.inputs[2:])) if n.name == "conv2" else n
                  for n in g.nodes)
    g = replace(g, nodes=nodes, tensors={k: t for k, t in g.tensors.items() if k != "conv2.weight"})
    verify(g)
    return g, mb


CONFIGS = {
    "full, momentum, stochastic": lambda g: (preset("full", g, lr=0.05), UpdateConfig(momentum=0.9, seed=2)),
    "channels, nearest": lambda g: (Plan(bias_last_k=3, weights=(WeightUpdate(1, 0.5), WeightUpdate(3, 0.25),
                                                                  WeightUpdate(9, 0.125), WeightUpdate(10, 1.0)),
                                         lr=0.05), UpdateConfig(rounding=Rounding.NEAREST)),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_weight_update_is_fused_and_nothing_else(model, config):
    g, _ = model
    plan, update_config = CONFIGS[config](g)
    tg = build_training_graph(g, plan, update_config)
    f = fuse_updates(tg)
    verify(f)
    producers = tg.producers()
    weight_updates = {n.name: n for n in tg.nodes if n.op == "sgd_update"
                      and tg.tensors[n.inputs[0]].role is Role.WEIGHT}
    fused = [n for n in f.nodes if n.op in FUSED_OPS]
    assert weight_updates and {n.name for n in fused} == set(weight_updates)
    assert not any(n.op.endswith("_grad_weight") for n in f.nodes)
    assert [n.name for n in f.nodes if n.op == "sgd_update"] == \
        [n.name for n in tg.nodes if n.op == "sgd_update" and n.name not in weight_updates]  # the biases'
    for node in fused:
        update = weight_updates[node.name]
        grad = producers[update.inputs[1]]
        assert node.op == f"{grad.op}_sgd_update" and update.inputs[1] not in f.tensors
        assert node.inputs == (update.inputs[0], *grad.inputs, *update.inputs[2:]) and node.outputs == ()
        assert node.attrs.grad == grad.attrs and node.attrs.update == update.attrs
        rows = tg.tensors[update.inputs[1]].shape[0]
        assert node.attrs.block == block_rows(tg.tensors[update.inputs[0]], rows)
    # the rest is kept, in order, at the place of the updates
    kept = [n.name for n in tg.nodes if not n.op.endswith("_grad_weight")]
    assert [n.name for n in f.nodes] == kept
    assert f.inputs == tg.inputs and f.outputs == tg.outputs
    assert fuse_updates(f) == f  # idempotent
    # the memory planner reserves each fused node's scratch: one block of gradient rows, at most 2 KB here
    scratch = {u.tensor: u.size for u in scratch_requests(f)}
    assert set(scratch) == {f"{n.name}:scratch" for n in fused}
    for n in fused:
        row = f.tensors[n.inputs[0]].size // f.tensors[n.inputs[0]].shape[0]
        assert scratch[f"{n.name}:scratch"] == n.attrs.block * row * 4 <= max(SCRATCH_BYTES, row * 4)


def test_a_gradient_read_by_anything_else_is_not_fused():
    """A shared weight's gradients are summed by grad_accumulate before the update: that update stays as it is
    (and so does a gradient that is also a graph output); the other weights' updates are fused."""
    g, _ = shared_weight_model()
    tg = build_training_graph(g, Plan(bias_last_k=1, weights=(WeightUpdate(0, 1.0), WeightUpdate(1, 1.0),
                                                              WeightUpdate(3, 1.0))))
    producers = tg.producers()
    shared = next(n for n in tg.nodes if n.op == "sgd_update" and n.inputs[0] == "conv1.weight")
    assert producers[shared.inputs[1]].op == "grad_accumulate"
    f = fuse_updates(tg)
    verify(f)
    assert shared in f.nodes and producers[shared.inputs[1]] in f.nodes
    assert sum(1 for n in f.nodes if n.op == "conv2d_grad_weight") == 2  # the two summed ones
    assert {n.inputs[0] for n in f.nodes if n.op in FUSED_OPS} == {"conv0.weight", "fc0.weight"}
    conv0 = next(n for n in tg.nodes if n.op == "sgd_update" and n.inputs[0] == "conv0.weight")
    also_output = replace(tg, outputs=tg.outputs + (conv0.inputs[1],))
    assert {n.inputs[0] for n in fuse_updates(also_output).nodes if n.op in FUSED_OPS} == {"fc0.weight"}
    assert _run(tg, g) == _run(f, g)


def _run(graph, g, steps: int = 5):
    """(losses, state) of ``steps`` simulator steps on fixed random images, as bytes (exact comparison)."""
    state = init_state(graph)
    rng = np.random.default_rng(4)
    n_classes = graph.tensors[next(n for n in graph.nodes if n.op == "softmax_xent").inputs[0]].shape[-1]
    losses = []
    for _ in range(steps):
        x = rng.integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
        losses.append(train_step(graph, state, x, int(rng.integers(0, n_classes)))["loss"].tobytes())
    return losses, {k: v.tobytes() for k, v in sorted(state.tensors.items())}, state.step


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_fused_simulator_state_is_the_unfused_one_exactly(model, config):
    g, _ = model
    plan, update_config = CONFIGS[config](g)
    tg = build_training_graph(g, plan, update_config)
    for graph in (fuse_updates(tg), fuse_updates(tg, scratch_bytes=1)):
        assert any(get_op(n.op).scratch for n in graph.nodes)
        assert _run(graph, g) == _run(tg, g)
