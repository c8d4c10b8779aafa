"""The step spec (training/spec.py): one object for what the user asked of the step, resolved once, read by train and
compile alike; a plan file is its JSON and knows its model (issue 40 items 3-5, issue 42 item 2)."""

import json

import numpy as np
import pytest

import tinytrain
from onnx_models import write_tiny_task
from tinytrain.api import model_data, sample_order
from tinytrain.cli import main
from tinytrain.engines.host_c import CTrainer
from tinytrain.errors import PlanError, UsageError
from tinytrain.simulator import init_state, train as sim_train
from tinytrain.training.resolve import read_step, resolve_step
from tinytrain.training.sparse import preset
from tinytrain.training.spec import KNOBS, StepSpec, parse_spec
from tinytrain.training.train_graph import build_training_graph

RECIPE = dict(lr=0.03, head_lr=0.05, momentum=0.5, rounding="nearest", qas=False, seed=3, remainder_bits=8,
              lr_schedule="cosine", warmup=0.25, lr_floor=0.2, schedule_steps=12)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = write_tiny_task(tmp_path_factory.mktemp("spec"))
    return str(d / "tiny.onnx"), str(d / "tiny.npz")


def test_every_knob_is_an_option_of_train_and_compile_and_a_keyword_of_both():
    from tinytrain.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command in ("train", "compile"):
        dests = {a.dest for a in sub[command]._actions}
        assert {k.name for k in KNOBS} <= dests, command


def test_old_plan_files_load_unchanged(tiny):
    graph = tinytrain.load_model(tiny[0], new_head=2)
    old = {"version": 1, "bias_last_k": 2, "weights": [{"conv": 6, "ratio": 1.0}], "channels": "first", "lr": 0.02,
           "remainder_bits": 4}
    spec = read_step(old)
    assert spec == StepSpec(spec.plan) and spec.to_json() == old
    bound = resolve_step(graph, spec)
    assert bound.model and [n.conv for n in bound.layers] == [6, 9, 10] and parse_spec(bound.to_json()) == bound


def test_compile_takes_the_recipe_of_train_and_the_plan_file_keeps_it(tiny, tmp_path):
    """The knobs reach the compiled step (its graph is the one train's engines build from the same spec), and
    the written plan, given back to compile, compiles the same step."""
    model, _ = tiny
    c = tinytrain.compile(model, sram="64k", update="last-k:2", new_head=2, **RECIPE)
    s = c.spec
    assert (s.momentum, s.rounding, s.qas, s.seed, s.plan.remainder_bits, s.plan.lr, s.plan.head_lr) == \
        (0.5, "nearest", False, 3, 8, 0.03, 0.05)
    assert s.plan.lr_schedule.to_json() == {"kind": "cosine", "warmup": 3, "steps": 12, "floor": 0.2}
    assert "momentum 0.5" in c.text() and "no QAS" in c.text() and c.files and c.note is None
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(c.to_json()["plan"]))
    again = tinytrain.compile(model, sram="64k", plan=str(plan), new_head=2)
    assert again.spec == c.spec and again.files == c.files


def test_train_plan_p_and_the_step_compiled_from_p_compute_the_same_states(tiny, tmp_path):
    model, data = tiny
    c = tinytrain.compile(model, sram="64k", update="last-k:2", new_head=2, **RECIPE)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(c.to_json()["plan"]))
    runs = [tinytrain.train(model, data, plan=str(plan), new_head=2, steps=3, engine=e) for e in ("sim", "c")]
    assert runs[0].spec == c.spec
    # the compiled spec's training graph, run by the host C of the device schedule, on train's samples and order
    x, y = model_data(c.graph, data)
    order = sample_order(np.arange(len(y)), 3, c.spec.seed)
    device = CTrainer(build_training_graph(c.graph, c.spec.plan, c.spec.config))
    for i in order:
        device.step(x[i : i + 1], int(y[i]))
    for r in runs:
        for k, v in device.state().tensors.items():
            np.testing.assert_array_equal(r.state.tensors[k], v, err_msg=k)


def test_momentum_reaches_the_state_and_is_kept_by_the_plan(tiny):
    model, data = tiny
    a = tinytrain.train(model, data, update="last-k:1", new_head=2, steps=3, engine="sim")
    b = tinytrain.train(model, data, update="last-k:1", new_head=2, steps=3, engine="sim", momentum=0.9)
    assert b.plan == a.plan and b.spec.momentum == 0.9 and b.to_json()["plan"]["momentum"] == 0.9
    assert any(k.endswith(".momentum") for k in b.state.tensors)


def test_the_search_finalist_names_are_presets(tiny):
    from tinytrain.search.candidates import presets, sparse_presets
    from tinytrain.search.space import Space

    graph = tinytrain.load_model(tiny[0], new_head=2)
    space = Space.of(graph)
    for c in presets(space, lambda _: True) + presets(space, lambda _: True, 8) + sparse_presets(
            space, lambda ch: len(ch.weights) <= 1):
        assert preset(c.name, graph) == space.plan(c.choice, 0.01), c.name


def test_a_plan_knows_its_model_and_head(tiny, tmp_path, capsys):
    model, data = tiny
    c = tinytrain.compile(model, sram="64k", update="last-k:2", new_head=2)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(c.to_json()["plan"]))
    assert json.loads(plan.read_text())["new_head"] == 2
    with pytest.raises(PlanError, match="new 2-class head; give new_head=2"):
        tinytrain.compile(model, plan=str(plan))
    assert main(["train", model, "--data", data, "--plan", str(plan), "--steps", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("give --new-head 2")
    other = dict(json.loads(plan.read_text()), model="0123456789abcdef")
    with pytest.raises(PlanError, match="made for another model"):
        tinytrain.compile(model, plan=other, new_head=2)


def test_knob_errors_are_one_line(tiny, tmp_path, capsys):
    model, _ = tiny
    with pytest.raises(UsageError, match="schedule_steps"):
        tinytrain.compile(model, update="last-k:1", new_head=2, lr_schedule="cosine")
    with pytest.raises(UsageError, match="unknown parameter"):
        tinytrain.compile(model, update="last-k:1", new_head=2, learning_rate=0.1)
    assert main(["compile", model, "--update", "last-k:1", "--new-head", "2", "--lr-floor", "0.1", "-o",
                 str(tmp_path / "o")]) == 2
    assert "--lr-floor applies to --lr-schedule cosine" in capsys.readouterr().err


@pytest.mark.slow
def test_a_plan_of_tinytrain_plan_keeps_learning_after_its_schedule(tiny, tmp_path, capsys):
    """Trained for twice its schedule's steps, the written plan's step still changes the state in the second half,
    in the simulator and in the compiled C (bit for bit the same), and the schedule is printed."""
    model, data = tiny
    plan = tmp_path / "plan.json"
    assert main(["plan", model, "--data", data, "--new-head", "2", "--sram", "8k", "--ft-steps", "8", "--bias-k",
                 "1,2", "--repeats", "2", "--no-rank-check", "--max-rungs", "1", "--other-remainder-bits", "",
                 "--cache", str(tmp_path / "cache"), "--no-progress", "--generations", "2", "--population", "6",
                 "--json", "-o", str(plan)]) == 0
    spec = read_step(str(plan))
    sched = spec.plan.lr_schedule
    assert sched is not None and sched.floor == 0.1 and spec.new_head == 2 and spec.model
    steps = sched.steps
    states = {}
    for engine, n in (("sim", steps), ("sim", 2 * steps), ("c", 2 * steps)):
        states[engine, n] = tinytrain.train(model, data, plan=str(plan), new_head=2, steps=n, engine=engine).state
    trained = [k for k in states["sim", steps].tensors if k != "step"]
    assert any(not np.array_equal(states["sim", steps].tensors[k], states["sim", 2 * steps].tensors[k])
               for k in trained)
    for k in trained:
        np.testing.assert_array_equal(states["sim", 2 * steps].tensors[k], states["c", 2 * steps].tensors[k])
    assert main(["train", model, "--data", data, "--plan", str(plan), "--new-head", "2", "--steps", "2"]) == 0
    assert f"decay over {steps} steps, then 0.1 x the lrs for good" in capsys.readouterr().out
    compiled = tinytrain.compile(model, sram="8k", plan=str(plan), new_head=2)
    assert "then 0.1 x the lrs for good" in compiled.text()


def test_the_over_budget_hint_names_the_deepest_presets_that_fit(tiny):
    model, _ = tiny
    with pytest.raises(tinytrain.BudgetError) as e:
        tinytrain.compile(model, new_head=2, update="full", sram="8k")
    hint = str(e.value).split("; presets that fit: ")[1]
    assert hint.startswith("--update last-k:2 (") and "bias-only (last " in hint  # last-k:3 needs 10.2 KB
    deepest_bias = hint.split("'bias-only (last ")[1].split(")")[0]
    tinytrain.compile(model, new_head=2, update=f"bias-only (last {deepest_bias})", sram="8k")  # it does fit


@pytest.mark.parametrize("args,words", [
    (["--epochs", "1", "--steps", "3"], "not allowed with argument"),
    (["--sram", "32k"], "the host engines have no budget"),
    (["--momentum", "1.5"], "not a fraction in [0, 1)"),
])
def test_contradictory_train_options_are_one_line(tiny, args, words, capsys):
    model, data = tiny
    assert main(["train", model, "--data", data, "--new-head", "2", "--engine", "sim", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_progress_on_a_terminal_only(tiny, capsys, monkeypatch):
    model, data = tiny
    argv = ["train", model, "--data", data, "--new-head", "2", "--engine", "sim", "--steps", "3"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # not a terminal: quiet
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert main(argv) == 0
    assert "train: 3/3 steps" in capsys.readouterr().err
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_the_lr_floor_knob_reaches_the_device_schedule(tiny):
    """A knob end to end: --lr-floor (spec.KNOBS) sets the floor of the schedule compile emits."""
    model, _ = tiny
    c = tinytrain.compile(model, update="last-k:1", new_head=2, lr_schedule="cosine", schedule_steps=50, lr_floor=0.0)
    assert c.spec.plan.lr_schedule.floor == 0.0 and "then 0 (the device stops learning)" in c.text()
    with pytest.raises(UsageError, match=r"lr_floor=1\.5"):
        tinytrain.compile(model, update="last-k:1", new_head=2, lr_schedule="cosine", schedule_steps=50, lr_floor=1.5)


def test_a_boards_state_of_a_momentum_step_reads_with_its_plan(tiny, tmp_path):
    """tt_state.bin holds the momentum buffers of a step compiled with momentum: eval reads it with the plan file."""
    from tinytrain.codegen.state import pack

    model, data = tiny
    c = tinytrain.compile(model, update="last-k:2", new_head=2, momentum=0.9)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(c.to_json()["plan"]))
    r = tinytrain.train(model, data, plan=str(plan), new_head=2, steps=3, engine="sim")
    board = tmp_path / "tt_state.bin"
    board.write_bytes(pack(build_training_graph(c.graph, c.spec.plan, c.spec.config), r.state))
    e = tinytrain.evaluate(model, data, new_head=2, state=str(board), plan=str(plan))
    assert e.accuracy == tinytrain.evaluate(r.trained_model(), data).accuracy
