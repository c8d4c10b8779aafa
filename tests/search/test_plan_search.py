"""`tinytrain plan`: contribution measurement (cut models, cache), the two searches, channel selection, the CLI."""

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from ir_builders import tiny_mobilenet
from onnx_models import write_tiny_task
from tinytrain.cli import main
from tinytrain.engines.host_c import CTrainer
from tinytrain.simulator import forward, init_state, train
from tinytrain.training.head import new_head
from tinytrain.training.sparse import Plan, WeightUpdate, layers, load_plan, select_channels, updated_params
from tinytrain.training.train_graph import build_training_graph

ROOT = Path(__file__).resolve().parents[2]
HAVE_CC = shutil.which("gcc") is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no host C compiler (gcc)")


@pytest.fixture(scope="module")
def tiny():
    g, mb = tiny_mobilenet(seed=0)
    return new_head(g, 2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The tiny MobileNetV2-shaped model as ONNX and a small learnable 2-class .npz."""
    return write_tiny_task(tmp_path_factory.mktemp("plan"))


def _images(g, n, seed=0):
    t = g.tensors[g.inputs[0]]
    return np.random.default_rng(seed).integers(-128, 128, (n,) + t.shape[1:]).astype(np.int8)


# ---- the cut model used by the fine-tunes --------------------------------------------------------------------

@needs_cc
def test_cut_model_trains_bit_identically_to_the_whole_model(tiny):
    from tinytrain.engines.cut import suffix_model

    n = len(layers(tiny))
    plan = Plan(2, (WeightUpdate(n - 2, 0.5), WeightUpdate(n - 1, 1.0)), lr=0.05)  # above the residual
    g, p, cut = suffix_model(tiny, plan)
    assert cut is not None and len(layers(g)) < n
    x, y = _images(tiny, 6), np.array([0, 1, 1, 0, 1, 0])
    whole = CTrainer(build_training_graph(tiny, plan))
    part = CTrainer(build_training_graph(g, p))
    from dataclasses import replace

    feats = forward(replace(tiny, outputs=(cut,)), {tiny.inputs[0]: x})[cut]
    assert np.array_equal(whole.train(x, y), part.train(feats, y))
    assert whole.state_bytes() == part.state_bytes()
    assert np.array_equal(whole.predict(x), part.predict(feats))


@needs_cc
def test_the_frozen_features_are_the_simulators_stretch_by_stretch(tiny):
    """add_features computes each cut from the deepest one below it the job already has, by the C forward of the
    layers between: every cut's values equal the simulator's forward of the whole prefix."""
    from dataclasses import replace

    from tinytrain.engines.cut import suffix_model
    from tinytrain.search.measure import FineTune, add_features, prepare_job

    n = len(layers(tiny))
    plans = [Plan(k, ()) for k in range(1, n)] + [Plan(1, (WeightUpdate(n - 2, 0.5),))]
    cuts = list(dict.fromkeys(c for p in plans for c in [suffix_model(tiny, p)[2]] if c is not None))
    assert len(cuts) >= 3
    x, y = _images(tiny, 10, seed=3), np.arange(10) % 2
    job = prepare_job(tiny, x, y, np.arange(7), np.arange(7, 10), FineTune(), plans[-2:])  # the deepest cuts first
    add_features(job, plans)
    assert set(job["features"]) == set(cuts)
    want = forward(replace(tiny, outputs=tuple(cuts)), {tiny.inputs[0]: job["x"]})
    for c in cuts:
        assert np.array_equal(job["features"][c], want[c]), c


def test_cut_model_is_refused_across_a_residual(tiny):
    from tinytrain.engines.cut import suffix_model

    # layer 2 is inside the tiny model's residual block (its input is read again by the add)
    adds = [nd for nd in tiny.nodes if nd.op == "add"]
    assert adds
    ls = layers(tiny)
    inside = next(k for k, nd in enumerate(ls) if k > 0 and tiny.nodes.index(nd) < tiny.nodes.index(adds[0])
                  and k >= 2)
    g, p, cut = suffix_model(tiny, Plan(1, (WeightUpdate(inside, 1.0), WeightUpdate(len(ls) - 1, 1.0))))
    assert cut is None and g is tiny


# ---- channel selection: plan == simulator == emitted C --------------------------------------------------------

@needs_cc
def test_the_plans_channels_are_the_rows_the_simulator_and_the_c_update(tiny):
    from tinytrain.search.space import Space

    space = Space.of(tiny)
    layer, ratio = space.n_layers - 3, 0.25
    plan = space.plan(space.weight_option(layer, ratio), lr=0.2)
    node = layers(tiny)[layer]
    w = node.inputs[1]
    c_out = tiny.tensors[w].shape[0]
    chosen = select_channels(c_out, ratio, plan.channels)
    assert chosen == tuple(range(c_out // 4))
    # the plan's parameter list
    assert next(u for u in updated_params(plan, tiny) if u.param == w).channels == chosen
    # the simulator's training graph
    tg = build_training_graph(tiny, plan)
    sgd = next(nd for nd in tg.nodes if nd.op == "sgd_update" and nd.inputs[0] == w)
    assert sgd.attrs.channels == chosen
    x, y = _images(tiny, 8, seed=1), np.array([0, 1] * 4)
    state = init_state(tg)
    train(tg, state, x, y)
    sim_rows = np.flatnonzero(np.any(state.tensors[w] != tiny.tensors[w].data, axis=tuple(range(1, 4))))
    # the emitted C: its state holds exactly the selected rows, and only they change
    trainer = CTrainer(tg)
    trainer.train(x, y)
    c_w = trainer.state().tensors[w]
    c_rows = np.flatnonzero(np.any(c_w != tiny.tensors[w].data, axis=tuple(range(1, 4))))
    assert len(sim_rows) and set(sim_rows) <= set(chosen)
    assert len(c_rows) and set(c_rows) <= set(chosen)
    from tinytrain.codegen.state import state_layout

    entry = next(e for e in state_layout(tg) if e.name == w)  # the rows the emitted C keeps in SRAM and saves
    assert (entry.row0, entry.shape[0]) == (chosen[0], len(chosen))


# ---- the searches ---------------------------------------------------------------------------------------

def _synthetic(seed: int):
    """Random gains and a monotone, non-additive memory model over 5 layers."""
    from tinytrain.search.space import Gains

    rng = np.random.default_rng(seed)
    ratios = (0.125, 0.25, 0.5, 1.0)
    bias = {1: 0.0} | {k: float(rng.normal(0.01 * k, 0.01)) for k in (2, 3, 4, 6)}
    weight = {(i, r): float(rng.normal(0.02 * r, 0.015)) for i in range(5) for r in ratios}
    cost = rng.uniform(1, 4, 5)

    def mem(c):
        depth = min([5 - c.k + 1] + [i for i, _ in c.weights]) if (c.k > 1 or c.weights) else 6
        weights = [cost[i] * r for i, r in c.weights]
        return 2 * (6 - depth) + 2 * sum(weights) + max([0] + weights)

    return Gains(bias, weight), mem


def _brute_force(gains, fits):
    from tinytrain.search.space import Choice

    best = None
    layers_ = gains.layers
    for k in gains.bias:
        for rs in itertools.product(*[[0.0] + gains.options(i) for i in layers_]):
            c = Choice(k, tuple((i, r) for i, r in zip(layers_, rs) if r > 0))
            if fits(c) and (best is None or gains.score(c) > gains.score(best) + 1e-12):
                best = c
    return best


@pytest.mark.parametrize("seed", range(4))
def test_branch_and_bound_is_exact_and_evolution_is_feasible(seed):
    from tinytrain.search.evolution import evolve
    from tinytrain.search.exact import branch_and_bound

    gains, mem = _synthetic(seed)
    budget = 9.0
    calls = []

    def fits(c):
        calls.append(c)
        return mem(c) <= budget

    want = _brute_force(gains, fits)
    n_brute = len(calls)
    calls.clear()
    got = branch_and_bound(gains, fits)
    assert got["proven_optimal"] and abs(got["score"] - gains.score(want)) < 1e-12 and fits(got["choice"])
    assert len(calls) < n_brute
    evo = evolve(gains, fits, population=40, generations=15, seed=seed)
    assert fits(evo["choice"]) and evo["score"] <= got["score"] + 1e-12
    assert evo["history"] == sorted(evo["history"])  # elitist: the best never gets worse


def test_branch_and_bound_counts_nodes_against_its_budget():
    """Its progress is nodes of a known total (the budget); a search the budget stops says so, with the best plan
    it found (never over the budget, never worse than the baseline)."""
    from tinytrain.search.exact import branch_and_bound

    gains, mem = _synthetic(0)
    seen = []

    class Bar:
        def update(self, n):
            seen.append(n)

    whole = branch_and_bound(gains, lambda c: mem(c) <= 9.0, progress=Bar())
    assert whole["proven_optimal"] and whole["stopped"] is None and sum(seen) == whole["nodes"] > 3
    cut = branch_and_bound(gains, lambda c: mem(c) <= 9.0, max_nodes=3)
    assert not cut["proven_optimal"] and cut["stopped"] == "node budget" and cut["nodes"] == 3
    assert mem(cut["choice"]) <= 9.0 and cut["score"] <= whole["score"] + 1e-12


def test_a_rung_the_time_limit_cuts_is_the_last_of_those_it_measured():
    """successive halving with a measure that leaves names out (the --time-limit): that rung ranks what it measured
    and ends the halving; without the reference it stops with one line."""
    from tinytrain.errors import UsageError
    from tinytrain.search.halving import successive_halving

    final = {"ref": 0.70, "a": 0.75, "b": 0.74, "c": 0.60}

    def measure(names, steps):  # the second rung runs out of time after one finalist
        return {n: final[n] for n in names if steps < 400 or n in ("ref", "b")}

    winner, rungs = successive_halving(list(final), "ref", measure, 400, size=lambda n: 0, max_rungs=2)
    assert [r.steps for r in rungs] == [200, 400] and rungs[-1].kept == ("b",) and winner == "b"
    with pytest.raises(UsageError, match="--time-limit ran out"):
        successive_halving(list(final), "ref", lambda names, steps: {"a": 0.7}, 400, size=lambda n: 0)


def test_presets_that_fit_are_always_finalists():
    from tinytrain.search.candidates import Candidate, finalists, presets
    from tinytrain.search.space import Choice, Space

    space = Space(10, (1, 2, 4, 10), tuple(range(9)))
    size = {"b": 1.0, "w": 3.0}

    def fits(c):  # monotone: biases cost 1 per layer, weights 3 per layer (x ratio)
        return size["b"] * c.k + size["w"] * sum(r for _, r in c.weights) <= 14

    got = presets(space, fits)
    assert [c.name for c in got] == ["classifier-only", "bias-only (last 10)", "last-k:2", "last-k:3",
                                     "last-k:4"]
    assert got[2].choice == Choice(2, ((8, 1.0),)) and all(c.preset for c in got)
    size["b"] = 2.0  # the biases of every layer no longer fit: the deepest k that does
    assert presets(space, fits)[1] == Candidate("bias-only (last 7)", Choice(7), True)
    proposal = Candidate("exact", Choice(3, ((7, 1.0), (8, 1.0))), False)  # = last-k:3: kept once, as the preset
    merged = finalists(got, [proposal, Candidate("evolution #1", Choice(2, ((5, 0.5),)), False)])
    assert [c.name for c in merged] == [c.name for c in got] + ["evolution #1"]


def test_sparse_presets_reach_deeper_than_the_dense_ones():
    from tinytrain.search.candidates import sparse_presets
    from tinytrain.search.space import Choice, Space

    space = Space(10, (1, 2, 4, 10), tuple(range(9)))

    def fits(c):  # biases cost 1 per layer, weights 3 per layer (x ratio): dense last-k:4 is the deepest
        return c.k + 3.0 * sum(r for _, r in c.weights) <= 14

    got = sparse_presets(space, fits)
    assert [c.name for c in got] == ["last-k:6 at 1/2", "last-k:8 at 1/4", "last-k:10 at 1/8"]
    assert got[1].choice == Choice(8, tuple((i, 0.25) for i in range(2, 9))) and all(c.preset for c in got)
    assert sparse_presets(space, lambda c: c.k + 3.0 * sum(r for _, r in c.weights) <= 1000) == []  # all fits


def test_successive_halving_keeps_the_reference_and_returns_the_best_measured():
    from tinytrain.search.halving import rung_steps, successive_halving

    assert rung_steps(8, 400, 3) == [100, 200, 400] and rung_steps(2, 400, 3) == [400]
    assert rung_steps(3, 400, 3) == [200, 400] and rung_steps(8, 400) == [200, 400]
    assert rung_steps(8, 400, fraction=0.75) == [300, 400] and rung_steps(8, 400, 3, fraction=0.75) == [225, 300, 400]
    # accuracy grows with steps; "deep" is slow at first and best at the end; "ref" is measured at every rung
    final = {"ref": 0.70, "a": 0.75, "b": 0.74, "c": 0.60, "d": 0.50, "deep": 0.80, "e": 0.55, "f": 0.76}
    calls = []

    def measure(names, steps):
        calls.append((tuple(names), steps))
        return {n: final[n] - (0.002 if n == "deep" else 0.001) * (400 - steps) / 100 for n in names}

    winner, rungs = successive_halving(list(final), "ref", measure, 400, size=lambda n: 0, max_rungs=3)
    assert winner == "deep" and [r.steps for r in rungs] == [100, 200, 400]
    assert [len(r.kept) for r in rungs] == [4, 2, 2] and all("ref" in r.accuracy for r in rungs)
    assert rungs[-1].kept[0] == winner and max(rungs[-1].accuracy, key=rungs[-1].accuracy.get) == winner
    # a tie at the last rung goes to the smaller plan
    winner, _ = successive_halving(["x", "y"], "x", lambda ns, s: dict.fromkeys(ns, 0.5), 10,
                                   size={"x": 2, "y": 1}.get)
    assert winner == "y"


def test_a_searched_finalist_must_beat_the_best_preset_by_the_noise_floor():
    from tinytrain.search.halving import successive_halving

    acc = {"classifier-only": 0.80, "bias-only": 0.81, "searched": 0.83}

    def halving(margin):
        return successive_halving(list(acc), "classifier-only", lambda ns, s: {n: acc[n] for n in ns}, 10,
                                  size=lambda n: 0, max_rungs=1, presets=frozenset({"classifier-only", "bias-only"}),
                                  margin=margin)[0]

    assert halving(0.0) == "searched" and halving(0.019) == "searched"
    assert halving(0.02) == "bias-only" and halving(0.05) == "bias-only"  # within the noise: the preset
    asked = []

    def margin(candidate, preset):  # the margin may depend on the pair (run.py: their paired standard error)
        asked.append((candidate, preset))
        return 0.025

    assert halving(margin) == "bias-only" and asked == [("searched", "bias-only")]


def test_the_margin_adds_the_paired_standard_error_of_the_validation_rows():
    from tinytrain.search.measure import pack_correct, unpack_correct
    from tinytrain.search.noise import NoiseFloor, paired_se

    a = [True] * 80 + [False] * 20
    b = [True] * 70 + [False] * 30  # b's right rows are a subset of a's: d = 1 on 10 rows, 0 elsewhere
    d_mean, d_var = 0.1, (10 * 0.9 ** 2 + 90 * 0.1 ** 2) / 99
    assert abs(paired_se(a, b) - (d_var / 100) ** 0.5) < 1e-12
    assert paired_se(a, a) == 0.0 and d_mean > 0
    with pytest.raises(ValueError):
        paired_se(a, b[:50])
    nf = NoiseFloor((0.80, 0.82, 0.84), n_val=100, z=2.0)
    assert abs(nf.margin(0.0) - nf.threshold) < 1e-12
    assert abs(nf.margin(0.03) - 2 * (nf.gain_sd ** 2 + 0.03 ** 2) ** 0.5) < 1e-12
    rows = np.random.default_rng(0).random(37) < 0.5
    assert unpack_correct(pack_correct(rows), 37) == rows.tolist()


def test_noise_floor_comes_from_the_repeated_runs():
    from tinytrain.search.noise import NoiseFloor

    nf = NoiseFloor((0.80, 0.82, 0.84), n_val=400, z=2.0)
    assert abs(nf.run_sd - 0.02) < 1e-12 and abs(nf.gain_sd - 0.02 * 2 ** 0.5) < 1e-12
    assert abs(nf.threshold - 2 * 0.02 * 2 ** 0.5) < 1e-12
    assert abs(nf.binomial_se - (0.82 * 0.18 / 400) ** 0.5) < 1e-12
    assert NoiseFloor((0.8, 0.8), 10, 2.0).threshold == 0.0  # identical runs: no floor
    with pytest.raises(ValueError, match="at least two"):
        NoiseFloor((0.8,), 10, 2.0)


def test_memory_oracle_is_compiles_peak_and_is_cached(tiny, tmp_path):
    from tinytrain.memory.report import memory_report
    from tinytrain.training.reorder import reorder
    from tinytrain.search.memory import MemoryOracle
    from tinytrain.training.fuse import fuse_updates

    n = len(layers(tiny))
    plan = Plan(4, (WeightUpdate(n - 1, 1.0), WeightUpdate(n - 3, 0.5)))
    oracle = MemoryOracle(tiny, path=tmp_path / "mem.json")
    want = memory_report(reorder(fuse_updates(build_training_graph(tiny, plan))), 1 << 30, 1 << 30).peak_sram_bytes
    assert oracle(plan) == want and oracle(plan) == want and oracle.evaluations == 1
    oracle.save()
    again = MemoryOracle(tiny, path=tmp_path / "mem.json")
    assert again(plan) == want and again.evaluations == 0
    # figures of another memory model (e.g. before gradients were fused with their updates) are not reused
    stale = json.loads((tmp_path / "mem.json").read_text())
    stale["memory_model"] = "0" * 16
    (tmp_path / "mem.json").write_text(json.dumps(stale))
    fresh = MemoryOracle(tiny, path=tmp_path / "mem.json")
    assert fresh(plan) == want and fresh.evaluations == 1


# ---- the command ----------------------------------------------------------------------------------------------

def _plan_cli(files, capsys, sram, *extra):
    argv = ["plan", str(files / "tiny.onnx"), "--data", str(files / "tiny.npz"), "--new-head", "2",
            "--sram", sram, "--held-out", "0.25", "--ft-steps", "12", "--bias-k", "1,2,4",
            "--cache", str(files / "cache"), "--no-progress", "--generations", "5", "--population", "12",
            "--json", "-o", str(files / f"plan-{sram}.json"), *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@needs_cc
@pytest.mark.slow
def test_plan_cli_writes_a_plan_compile_and_train_accept_and_a_second_budget_reuses_the_cache(files, capsys):
    first = _plan_cli(files, capsys, "8k")
    assert first["finetunes_run"] > 1 and first["finetunes_cached"] == 0
    assert first["peak_sram_bytes"] <= 8 * 1024
    assert {"evolution", "exact"} <= set(first) and first["exact"]["gain"] >= first["evolution"]["gain"] - 1e-9
    plan_file = files / "plan-8k.json"
    plan = load_plan(plan_file)  # a strict version-1 plan
    assert plan.to_json() == first["plan"]
    assert (files / "plan-8k.search.json").exists()
    # the presets that fit are finalists, and the plan written is the best measured finalist
    names = [f["name"] for f in first["finalists"]]
    assert names[0] == "classifier-only" and "last-k:2" in names and any(n.startswith("bias-only") for n in names)
    # (the rank check trained every finalist at full length: the best of them; rank_check: each rung's Spearman)
    last = {f["name"]: f["full_length"]["accuracy"] for f in first["finalists"]}
    assert first["validation_accuracy"] == max(last.values()) == last[first["chosen"]]
    assert [r["steps"] for r in first["rank_check"]["rungs"]] == [r["steps"] for r in first["rungs"]]
    # the plan is the chosen finalist's with the recipe's schedule (cosine by default) over --epochs of the data
    assert {k: v for k, v in first["plan"].items() if k != "lr_schedule"} == next(
        f["plan"] for f in first["finalists"] if f["name"] == first["chosen"])
    assert first["plan"]["lr_schedule"]["kind"] == "cosine"
    assert first["noise_floor"]["repeats"] == 3 and len(first["noise_floor"]["accuracies"]) == 3
    # another (smaller) budget: every contribution it needs was measured: no contribution fine-tune at all
    second = _plan_cli(files, capsys, "6k")
    assert second["finetunes_run"] == 0 and second["finetunes_cached"] >= 1
    assert second["peak_sram_bytes"] <= 6 * 1024
    # compile and train take the plan
    out = files / "build"
    assert main(["compile", str(files / "tiny.onnx"), "--new-head", "2", "--sram", "8k", "--plan", str(plan_file),
                 "-o", str(out)]) == 0
    capsys.readouterr()
    report = json.loads((out / "report.json").read_text())
    assert report["fits"] and report["peak_sram_bytes"] == first["peak_sram_bytes"]
    assert main(["train", str(files / "tiny.onnx"), "--data", str(files / "tiny.npz"), "--new-head", "2",
                 "--plan", str(plan_file), "--steps", "4", "--engine", "c", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 4
    # a cosine recipe: its own fine-tunes (another cache key), and the plan's schedule spans --epochs of the data
    cosine = _plan_cli(files, capsys, "8k", "--lr-schedule", "cosine", "--warmup", "0.1")
    assert cosine["finetunes_run"] > 1
    n = len(np.load(files / "tiny.npz")["y"])
    steps = 2 * (n - round(0.25 * n))  # --epochs 2 over the rows --held-out 0.25 leaves
    assert cosine["plan"]["lr_schedule"] == {"kind": "cosine", "warmup": int(0.1 * steps), "steps": steps,
                                                "floor": 0.1}


def test_plan_cli_refuses_a_budget_below_the_classifier(files, capsys):
    argv = ["plan", str(files / "tiny.onnx"), "--data", str(files / "tiny.npz"), "--new-head", "2",
            "--sram", "1k", "--no-cache", "--no-progress", "-o", str(files / "none.json")]
    assert main(argv) == 2
    assert "classifier alone" in capsys.readouterr().err
    assert main([*argv[:-2], "--sram", "64k", "--rung-fraction", "1", "-o", str(files / "none.json")]) == 2
    assert "--rung-fraction 1.0: give a fraction between 0 and 1" in capsys.readouterr().err
    assert not (files / "none.json").exists()


# ---- a searched VWW plan: host C == QEMU firmware -------------------------------------------------------------

# A plan an earlier VWW study's search chose (1-SE noise floor): 6 backbone layers, some at partial ratios. The
# harness keeps a copy of the trained state in its heap, so plans with a state over ~100 KB (last-k:5, 106 KB) do
# not run on the QEMU boards' 256 KB region: the harness, not the plan, is over it.
SEARCHED_VWW_PLAN = {"version": 1, "bias_last_k": 1, "channels": "first", "lr": 0.001,
                     "weights": [{"conv": 15, "ratio": 0.25}, {"conv": 17, "ratio": 1.0}, {"conv": 19, "ratio": 1.0},
                                 {"conv": 20, "ratio": 0.25}, {"conv": 22, "ratio": 0.125},
                                 {"conv": 24, "ratio": 0.125}, {"conv": 27, "ratio": 1.0}]}


@pytest.mark.slow
@pytest.mark.qemu
def test_searched_vww_plan_trains_identically_on_the_host_c_and_on_qemu(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(SEARCHED_VWW_PLAN))
    model = str(shared_file("models/mobilenet_v1_0.25_128_quant.tflite"))
    with np.load(shared_file("data/vww96/vww96_dev800.npz")) as f:
        np.savez(tmp_path / "d.npz", x=f["x"][:4], y=f["y"][:4])
    out = {}
    for engine in ("qemu", "c"):
        assert main(["train", model, "--data", str(tmp_path / "d.npz"), "--new-head", "2", "--plan", str(plan),
                     "--steps", "4", "--engine", engine, "--state-out", str(tmp_path / f"{engine}.npz"),
                     "--json"]) == 0
        out[engine] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (tmp_path / "qemu.npz").read_bytes() == (tmp_path / "c.npz").read_bytes()
    assert out["qemu"]["final_loss"] == out["c"]["final_loss"]


@needs_cc
def test_contribution_cache_is_resumable_and_keyed_by_the_setting(tiny, tmp_path):
    from tinytrain.search.executors import LocalExecutor
    from tinytrain.search.measure import ContributionCache, FineTune, Measurement, prepare_job
    from tinytrain.search.space import Space

    space = Space.of(tiny)
    x, y = _images(tiny, 12, seed=2), np.arange(12) % 2
    ft = FineTune(lr=0.05, steps=6)
    plans = [(c.key(), space.plan(c, ft.lr)) for c in (space.bias_option(1), space.bias_option(2),
                                                        space.weight_option(space.n_layers - 2, 0.5))]
    job = prepare_job(tiny, x, y, np.arange(8), np.arange(8, 12), ft, [p for _, p in plans])
    ident = Measurement("sha", 2, 0, "data", 0.25, 0, 0.25, ft)
    path = tmp_path / f"{ident.key()}.json"
    cache = ContributionCache(path, {})
    # an "interrupted" run: the deadline has passed after the first result
    local = LocalExecutor(1)
    done = local.run(job, [(k, p.to_json()) for k, p in plans[:1]], cache.put, None)
    assert done and set(ContributionCache(path, {}).results) == {plans[0][0]}
    resumed = ContributionCache(path, {})
    todo = [(k, p.to_json()) for k, p in plans if resumed.get(k) is None]
    assert len(todo) == 2
    assert not local.run(job, todo, resumed.put, deadline=0.0)  # out of time: nothing runs
    assert local.run(job, todo, resumed.put, None)
    assert set(ContributionCache(path, {}).results) == {k for k, _ in plans}
    again = ContributionCache(path, {}).get(plans[0][0])
    assert 0 <= again["accuracy"] <= 1
    # another hyper-parameter is another cache file
    assert Measurement("sha", 2, 0, "data", 0.25, 0, 0.25, FineTune(lr=0.01, steps=6)).key() != ident.key()
