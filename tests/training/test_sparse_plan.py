"""The version-1 plan file, the presets and channel selection (docs/design.md §5b)."""

import json

import pytest

from ir_builders import tiny_mobilenet
from tinytrain.errors import PlanError, UsageError
from tinytrain.training.sparse import (Plan, WeightUpdate, check_plan, layers, load_plan, parse_plan, preset,
                                       select_channels, updated_params)
from tinytrain.lr_schedule import Schedule
from tinytrain.training.train_graph import build_training_graph

EXAMPLE = {"version": 1, "bias_last_k": 20, "weights": [{"conv": 36, "ratio": 0.25}, {"conv": 39, "ratio": 1.0}],
           "channels": "first", "lr": 0.0008, "bias_lr": 0.0004}


@pytest.fixture(scope="module")
def graph():
    return tiny_mobilenet(seed=2)[0]  # 11 layers: conv0 dw0 conv1 conv2 dw1 conv3 conv4 dw2 conv5 conv6 fc0


def test_design_example_parses_and_round_trips(tmp_path):
    plan = parse_plan(EXAMPLE)
    assert plan == Plan(20, (WeightUpdate(36, 0.25), WeightUpdate(39, 1.0)), "first", 0.0008, 0.0004)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_json()))
    assert load_plan(path) == plan


def test_defaults():
    plan = parse_plan({"version": 1})
    assert plan.bias_last_k == 0 and plan.weights == () and plan.channels == "first"
    assert plan.effective_bias_lr == plan.lr


@pytest.mark.parametrize("change,message", [
    ({"extra": 1}, "unknown field 'extra'.*version-1 plan has"),
    ({"version": 2}, "version 2 is not supported.*reads version 1"),
    ({"version": True}, "version true is not supported"),
    ({"bias_last_k": -1}, "bias_last_k.*non-negative integer"),
    ({"bias_last_k": 2.5}, "bias_last_k.*non-negative integer"),
    ({"weights": {"conv": 1}}, '"weights" must be a list'),
    ({"weights": [{"conv": 1}]}, r'weights\[0\] must be \{"conv"'),
    ({"weights": [{"conv": 1, "ratio": 0.3}]}, r"weights\[0\].ratio must be one of 1, 0.5, 0.25, 0.125"),
    ({"weights": [{"conv": "1", "ratio": 1}]}, r"weights\[0\].conv must be a non-negative integer"),
    ({"weights": [{"conv": 1, "ratio": 1}, {"conv": 1, "ratio": 0.5}]}, "conv 1 appears twice"),
    ({"weights": [{"conv": 1, "ratio": 1, "remainder_bits": 2}]},
     r"weights\[0\].remainder_bits must be one of 0, 4, 8"),
    ({"weights": [{"conv": 1, "ratio": 1, "bits": 4}]}, r'weights\[0\] must be \{"conv".*optionally "remainder_bits"'),
    ({"channels": "random"}, '"channels" must be one of first'),
    ({"lr": 0}, '"lr" must be a positive number'),
    ({"bias_lr": "fast"}, '"bias_lr" must be a positive number'),
    ({"head_lr": -0.1}, '"head_lr" must be a positive number'),
    ({"head_lr": True}, '"head_lr" must be a positive number'),
    ({"head_lrs": 0.1}, "unknown field 'head_lrs'"),
    ({"lr_schedule": "cosine"}, '"lr_schedule" must be'),
    ({"lr_schedule": {"kind": "step", "warmup": 0, "steps": 10}}, '"lr_schedule" must be'),
    ({"lr_schedule": {"kind": "cosine", "warmup": 0}}, '"lr_schedule" must be'),
    ({"lr_schedule": {"kind": "cosine", "warmup": 1.5, "steps": 10}}, "warmup and steps are integers"),
    ({"lr_schedule": {"kind": "cosine", "warmup": 10, "steps": 10}}, r"warmup \(10\) < steps \(10\)"),
    ({"lr_schedule": {"kind": "cosine", "warmup": 0, "steps": 10, "floor": 2}}, "floor 2.0 is not a fraction"),
])
def test_bad_plans_are_rejected_naming_the_field(change, message):
    obj = dict(EXAMPLE, **change)
    with pytest.raises(PlanError, match=message):
        parse_plan(obj, "p.json")


def test_missing_version_and_non_object():
    with pytest.raises(PlanError, match='missing "version"'):
        parse_plan({"bias_last_k": 1})
    with pytest.raises(PlanError, match="a plan is a JSON object"):
        parse_plan([1, 2])


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(PlanError, match="cannot read plan"):
        load_plan(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{version: 1}")
    with pytest.raises(PlanError, match="not valid JSON"):
        load_plan(bad)
    assert issubclass(PlanError, UsageError)  # the CLI turns it into one line and exit code 2


def test_plan_must_fit_the_model(graph):
    n = len(layers(graph))
    assert n == 11
    with pytest.raises(PlanError, match="weights conv 11 does not exist; the model's layers are 0..10"):
        check_plan(parse_plan({"version": 1, "weights": [{"conv": 11, "ratio": 1}]}), graph)
    with pytest.raises(PlanError, match="bias_last_k = 12 but the model has 11"):
        check_plan(parse_plan({"version": 1, "bias_last_k": 12}), graph)


def test_presets(graph):
    n = len(layers(graph))
    full = preset("full", graph)
    assert full.bias_last_k == n and [w.conv for w in full.weights] == list(range(n))
    assert all(w.ratio == 1.0 for w in full.weights)
    bias = preset("bias-only", graph)
    assert bias.bias_last_k == n and bias.weights == ()
    last = preset("last-k:3", graph, lr=0.1)
    assert last.bias_last_k == 3 and [w.conv for w in last.weights] == [8, 9, 10] and last.lr == 0.1
    for bad in ("last-k:0", "last-k:12", "last-k:x", "some"):
        with pytest.raises(PlanError, match="--update"):
            preset(bad, graph)


@pytest.mark.parametrize("c_out,ratio,want", [(16, 1.0, None), (16, 0.5, 8), (16, 0.25, 4), (16, 0.125, 2),
                                             (12, 0.125, 1), (4, 0.125, 1), (10, 0.25, 2)])
def test_select_channels_first(c_out, ratio, want):
    got = select_channels(c_out, ratio, "first")
    assert got is None if want is None else got == tuple(range(want))


def test_one_channel_selection_everywhere(graph):
    """The gradient node, the update node and select_channels agree on the channels."""
    plan = parse_plan({"version": 1, "weights": [{"conv": 3, "ratio": 0.25}, {"conv": 10, "ratio": 0.5}]})
    t = build_training_graph(graph, plan)
    ls = layers(graph)
    for u in updated_params(plan, graph):
        want = select_channels(graph.tensors[u.param].shape[0], {3: 0.25, 10: 0.5}[u.layer])
        update = [n for n in t.nodes if n.op == "sgd_update" and n.inputs[0] == u.param][0]
        grad_node = [n for n in t.nodes if n.outputs and n.outputs[0] == update.inputs[1]][0]
        assert update.attrs.channels == grad_node.attrs.channels == u.channels == want
        assert grad_node.name.startswith(ls[u.layer].name + ".")


def test_updated_params_order_and_learning_rates(graph):
    plan = Plan(2, (WeightUpdate(10, 1.0),), lr=0.1, bias_lr=0.05)
    ups = updated_params(plan, graph)
    assert [(u.param, u.lr) for u in ups] == [("conv6.bias", 0.05), ("fc0.weight", 0.1), ("fc0.bias", 0.05)]


def test_head_lr_applies_to_the_last_layer_only(graph):
    plan = Plan(2, (WeightUpdate(9, 1.0), WeightUpdate(10, 1.0)), lr=0.1, bias_lr=0.05, head_lr=0.3)
    ups = updated_params(plan, graph)
    assert [(u.param, u.lr) for u in ups] == [("conv6.weight", 0.1), ("conv6.bias", 0.05), ("fc0.weight", 0.3),
                                              ("fc0.bias", 0.3)]


def test_plan_files_without_head_lr_still_load_and_round_trip(tmp_path):
    old = parse_plan(EXAMPLE)  # a file written before head_lr existed
    assert old.head_lr is None and "head_lr" not in old.to_json()
    new = parse_plan(dict(EXAMPLE, head_lr=0.02))
    assert new.head_lr == 0.02 and parse_plan(json.loads(json.dumps(new.to_json()))) == new


def test_a_plan_that_updates_nothing_is_an_error(graph):
    with pytest.raises(PlanError, match="updates nothing"):
        build_training_graph(graph, parse_plan({"version": 1}))


def test_lr_schedule_round_trips_and_old_files_have_none(tmp_path):
    plan = parse_plan(dict(EXAMPLE, lr_schedule={"kind": "cosine", "warmup": 100, "steps": 7000, "floor": 0.1}))
    assert plan.lr_schedule == Schedule(100, 7000, 0.1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_json()))
    assert load_plan(path) == plan
    assert parse_plan(EXAMPLE).lr_schedule is None and "lr_schedule" not in parse_plan(EXAMPLE).to_json()


def test_a_layer_keeps_its_own_remainder_bits(graph, tmp_path):
    """A weight entry's remainder_bits overrides the plan's for that layer: its update node and its remainder
    buffer (none for 0 bits, packed nibbles for 4, a byte per element for 8); the file round-trips and a plan
    without any loads as before."""
    obj = {"version": 1, "bias_last_k": 2, "remainder_bits": 4,
           "weights": [{"conv": 8, "ratio": 0.5, "remainder_bits": 8}, {"conv": 9, "ratio": 1, "remainder_bits": 0},
                       {"conv": 10, "ratio": 1}]}
    plan = parse_plan(obj)
    assert [w.remainder_bits for w in plan.weights] == [8, 0, None]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_json()))
    assert load_plan(path) == plan and "remainder_bits" not in plan.to_json()["weights"][2]
    bits = {u.layer: u.remainder_bits for u in updated_params(plan, graph) if not u.is_bias}
    assert bits == {8: 8, 9: 0, 10: 4}
    tg = build_training_graph(graph, plan)
    ls = layers(graph)
    for k, want in bits.items():
        node = next(n for n in tg.nodes if n.op == "sgd_update" and n.inputs[0] == ls[k].inputs[1])
        assert node.attrs.remainder_bits == want
        rem = tg.tensors.get(ls[k].inputs[1] + ".remainder")
        assert (rem is None) == (want == 0)
        if rem is not None:
            w = graph.tensors[ls[k].inputs[1]]
            rows = len(node.attrs.channels) if node.attrs.channels else w.shape[0]
            per_row = w.size // w.shape[0]
            assert rem.nbytes == rows * (per_row if want == 8 else (per_row + 1) // 2)
