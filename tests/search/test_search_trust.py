"""The plan search's measurements (issue 28): every rung follows the recipe's schedule compressed to its steps, the
rank check (every finalist at full length, each rung's Spearman correlation with it, the noise floor there) is
computed and written, and the memory model counts the remainder bytes the search trades."""

import json

import numpy as np
import pytest

from ir_builders import ModelBuilder, tiny_mobilenet
from tinytrain.training.head import new_head
from tinytrain.training.sparse import Plan, WeightUpdate, layers


@pytest.fixture(scope="module")
def tiny():
    g, _ = tiny_mobilenet(seed=0)
    return new_head(g, 2)


def test_spearman_ranks_ties_and_rungs():
    from tinytrain.search.rank import ranks, rung_agreement, spearman

    assert ranks([0.3, 0.1, 0.3, 0.2]) == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # d = (0, 0, 1, -1): rho = 1 - 6 * 2 / (4 * 15)
    assert spearman([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(0.8)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])
    full = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}
    got = rung_agreement([(10, {"a": 0.5, "b": 0.6, "c": 0.4, "d": 0.3}), (20, {"a": 0.9, "b": 0.8})], full)
    assert got == [{"steps": 10, "finalists": 4, "spearman": 0.8}, {"steps": 20, "finalists": 2, "spearman": None}]


def test_each_rung_trains_with_the_recipes_schedule_over_its_own_steps(tiny, monkeypatch):
    """finetune_accuracy (every contribution fine-tune and every rung) gives the plan the schedule of the recipe
    over the steps it runs: a cosine over 7 steps for a 7-step rung, 30 for a 30-step one; constant: none."""
    from tinytrain.search import measure

    built = []

    class FakeTrainer:
        def __init__(self, graph):
            built.append(graph)

        def train(self, x, y, order):
            built.append(len(order))

        def predict(self, x):
            return np.zeros((len(x), 2))

    seen = []
    real = measure.build_training_graph
    monkeypatch.setattr(measure, "build_training_graph", lambda g, p, c: seen.append(p) or real(g, p, c))
    monkeypatch.setattr(measure, "CTrainer", FakeTrainer)
    x = np.zeros((12,) + tiny.tensors[tiny.inputs[0]].shape[1:], np.int8)
    y = np.arange(12) % 2
    n = len(layers(tiny))
    plan = Plan(1, (WeightUpdate(n - 1, 1.0),))
    for kind, warmup in (("cosine", 0.0), ("cosine", 0.25), ("constant", 0.0)):
        ft = measure.FineTune(lr_schedule=kind, warmup=warmup, steps=10)
        measure.set_job(measure.prepare_job(tiny, x, y, np.arange(8), np.arange(8, 12), ft, [plan]))
        for steps in (7, 30):
            measure.finetune_accuracy(plan.to_json(), steps)
            p = seen[-1]
            assert built[-1] == steps
            if kind == "constant":
                assert p.lr_schedule is None
            else:
                assert (p.lr_schedule.steps, p.lr_schedule.warmup) == (steps, int(warmup * steps))


def _fake_finetune(plan_json, steps=None, seed=None):
    """A deterministic stand-in for a C fine-tune: deeper plans learn more, every plan more with more steps,
    a little seed noise; per-row results for the paired margin."""
    from tinytrain.search import measure

    job = measure._JOB
    ft = job["finetune"]
    steps = steps or ft.steps
    seed = ft.seed if seed is None else seed
    depth = len(plan_json["weights"]) + 0.5 * plan_json["bias_last_k"] / 10 + plan_json["remainder_bits"] / 100
    acc = min(0.99, 0.5 + 0.04 * depth * min(1.0, steps / 40) + 0.003 * (seed % 3))
    n_val = len(job["y_val"])
    correct = np.arange(n_val) < round(acc * n_val)
    return {"accuracy": float(correct.mean()), "correct": measure.pack_correct(correct), "seconds": 0.0}


def test_the_rank_check_trains_every_finalist_at_full_length_and_writes_spearman(tmp_path, monkeypatch):
    import tinytrain
    from tinytrain.search import measure
    from tinytrain.search.rank import spearman

    monkeypatch.setattr(measure, "finetune_accuracy", _fake_finetune)
    mb = ModelBuilder("small", 0)  # four layers: few options to measure the memory of
    h = mb.conv(mb.conv(mb.input((8, 8, 3)), 4, 3, 2), 8, 1)
    graph = mb.build(mb.classifier(mb.conv(h, 8, 1), 2))
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (400, 8, 8, 3)).astype(np.uint8), np.arange(400) % 2
    result = tinytrain.plan(graph, (x, y), sram="6k", ft_steps=12, generations=3, population=8, use_cache=False,
                            output=tmp_path / "plan.json")
    report = json.loads((tmp_path / "plan.search.json").read_text())
    assert report == json.loads(json.dumps(result.report))
    check = report["rank_check"]
    full = {f["name"]: f["full_length"]["accuracy"] for f in report["finalists"]}
    assert check["steps"] == report["measurement"]["finalist_steps"] and len(full) == check["finalists"] + 1
    for rung, got in zip(report["finalists"][0]["measured"], check["rungs"]):
        measured = {f["name"]: m["accuracy"] for f in report["finalists"] for m in f["measured"]
                    if m["steps"] == got["steps"]}
        want = spearman([measured[n] for n in measured], [full[n] for n in measured])
        assert got["steps"] == rung["steps"] and got["finalists"] == len(measured)
        assert got["spearman"] == (None if want is None else round(want, 4))
    assert check["noise_floor"]["repeats"] == 3 and check["noise_floor"]["run_sd"] > 0
    # the winner is the best finalist at full length (or the best preset, if that one's lead is within the noise);
    # the finalists trade remainder bits (@r0, @r8)
    chosen, decision = report["chosen"], report["searched_vs_best_preset"]
    assert report["validation_accuracy"] == full[chosen]
    assert full[chosen] == max(full.values()) or (decision["best_preset"] == chosen
                                                  and decision["lead"] <= decision["margin"])
    assert {f["plan"]["remainder_bits"] for f in report["finalists"]} == {0, 4, 8}
    assert report["measurement"]["finetune"]["lr_schedule"] == "cosine"
    assert report["plan"]["lr_schedule"]["kind"] == "cosine"


def test_the_last_rung_averages_its_finalists_over_the_final_seeds(tmp_path, monkeypatch):
    """--final-seeds 3: every finalist of the last rung is trained with 3 seeds at full length and measured by
    their mean (the baseline with max(repeats, 3)); the rank check's other finalists run one seed; the gains are
    held to the noise of their means (run sd x sqrt(1/n + 1/m))."""
    import tinytrain
    from tinytrain.search import measure

    runs = []
    monkeypatch.setattr(measure, "finetune_accuracy",
                        lambda plan_json, steps=None, seed=None: runs.append((steps, seed))
                        or _fake_finetune(plan_json, steps, seed))
    mb = ModelBuilder("small", 0)
    h = mb.conv(mb.conv(mb.input((8, 8, 3)), 4, 3, 2), 8, 1)
    graph = mb.build(mb.classifier(mb.conv(h, 8, 1), 2))
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (400, 8, 8, 3)).astype(np.uint8), np.arange(400) % 2
    report = tinytrain.plan(graph, (x, y), sram="6k", ft_steps=12, generations=3, population=8, use_cache=False,
                            final_seeds=3, output=tmp_path / "plan.json").report
    check, full_steps = report["rank_check"], report["measurement"]["finalist_steps"]
    assert check["final_seeds"] == 3 and report["measurement"]["final_seeds"] == 3
    last = set(report["rungs"][-1]["kept"]) | {"classifier-only"}
    lead = max(f["full_length"]["accuracy"] for f in report["finalists"] if f["name"] in last)
    challengers = 0
    for f in report["finalists"]:
        seeds = f["full_length"]["seeds"]
        if f["name"] in last:  # the last rung measured the same mean
            assert seeds == 3 and f["measured"][-1]["accuracy"] == pytest.approx(f["full_length"]["accuracy"])
        else:  # one run, or 3 when that run beat the last rung's best mean: the mean decides
            assert seeds in (1, 3)
            assert seeds == 3 or f["full_length"]["accuracy"] <= lead
            challengers += seeds == 3
    # the third seed: the last rung's finalists and the challengers only
    assert [s for st, s in runs if st == full_steps].count(2) == len(last) + challengers
    noise = check["noise_floor"]
    assert check["last_rung_finalists"] == len(last - {"classifier-only"})
    assert 0 <= check["last_rung_above_noise"] <= check["gains_above_noise"] and noise["repeats"] == 3
    with pytest.raises(tinytrain.UsageError, match="--final-seeds 0"):
        tinytrain.plan(graph, (x, y), sram="6k", final_seeds=0, use_cache=False)


def test_a_dropped_finalist_that_beats_the_last_rung_in_one_run_is_measured_with_every_seed(tmp_path, monkeypatch):
    """A finalist the first rung dropped (8-bit remainders here: slow at first) whose one full-length run beats
    the last rung's best mean is trained with the final seeds too; its mean, lucky seed 0 and all, decides."""
    import tinytrain
    from tinytrain.search import measure

    def fake(plan_json, steps=None, seed=None):
        got = _fake_finetune(plan_json, steps, seed)
        if plan_json["remainder_bits"] != 8 or len(plan_json["weights"]) == 0:
            return got
        n_val = len(measure._JOB["y_val"])
        acc = 0.99 if steps == full[0] and not seed else 0.3  # one lucky run at full length
        correct = np.arange(n_val) < round(acc * n_val)
        return {"accuracy": float(correct.mean()), "correct": measure.pack_correct(correct), "seconds": 0.0}

    full = [0]
    monkeypatch.setattr(measure, "finetune_accuracy", fake)
    mb = ModelBuilder("small", 0)
    h = mb.conv(mb.conv(mb.input((8, 8, 3)), 4, 3, 2), 8, 1)
    graph = mb.build(mb.classifier(mb.conv(h, 8, 1), 2))
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (400, 8, 8, 3)).astype(np.uint8), np.arange(400) % 2
    kwargs = dict(sram="6k", ft_steps=12, generations=3, population=8, use_cache=False, val=0.25, epochs=2)
    full[0] = 2 * round(400 * 0.75)  # the recipe's steps: 2 epochs over the fit rows
    report = tinytrain.plan(graph, (x, y), final_seeds=3, **kwargs).report
    assert report["measurement"]["finalist_steps"] == full[0]
    lucky = [f for f in report["finalists"] if f["plan"]["remainder_bits"] == 8 and f["plan"]["weights"]]
    assert lucky and all(f["name"] not in report["rungs"][-1]["kept"] for f in lucky)
    for f in lucky:
        assert f["full_length"]["seeds"] == 3 and f["full_length"]["accuracy"] == pytest.approx((0.99 + 0.6) / 3)
    assert report["chosen"] not in {f["name"] for f in lucky}
    # with one seed per finalist the lucky run wins, as before
    assert report["chosen"] != tinytrain.plan(graph, (x, y), **kwargs).report["chosen"]


def test_the_noise_of_a_gain_of_means_shrinks_with_their_seeds():
    from tinytrain.search.noise import NoiseFloor

    nf = NoiseFloor((0.80, 0.82, 0.84), n_val=100, z=2.0)
    assert nf.gain_sd_of(1, 1) == pytest.approx(nf.gain_sd)
    assert nf.gain_sd_of(3, 3) == pytest.approx(nf.gain_sd / 3 ** 0.5)
    assert nf.threshold_of(3, 1) == pytest.approx(2 * nf.run_sd * (4 / 3) ** 0.5)
    assert nf.margin(0.01, 3, 3) == pytest.approx(2 * ((nf.gain_sd ** 2) / 3 + 0.01 ** 2) ** 0.5)


def test_the_search_memory_model_counts_the_remainder_bytes(tiny):
    from dataclasses import replace

    from tinytrain.memory.report import memory_report
    from tinytrain.search.memory import MemoryOracle, MonotoneFits, plan_key
    from tinytrain.search.space import Choice, Space
    from tinytrain.training.device_step import device_step

    n = len(layers(tiny))
    oracle = MemoryOracle(tiny)
    plan = Plan(3, (WeightUpdate(n - 3, 0.5), WeightUpdate(n - 1, 1.0)))
    peaks = {}
    for bits in (0, 4, 8):
        p = replace(plan, remainder_bits=bits)
        report = memory_report(device_step(tiny, p), 1 << 62, 1 << 62)
        peaks[bits] = oracle(p)
        assert peaks[bits] == report.peak_sram_bytes  # what compile reports, remainders included
        assert (report.remainder_bytes > 0) == (bits > 0)
        assert peaks[bits] - peaks[0] == report.remainder_bytes
    assert peaks[0] < peaks[4] < peaks[8] and oracle.evaluations == 3
    assert len({plan_key(replace(plan, remainder_bits=b)) for b in (0, 4, 8)}) == 3
    # the search's choices carry their bits into the plan, and the monotone check orders them by bits too
    space = Space.of(tiny)
    assert space.plan(Choice(2, bits=0), 0.01).remainder_bits == 0 and Choice(2, bits=0).key() == "b2|r0"
    fits = MonotoneFits(oracle, peaks[4], lambda c: space.plan(c, 0.01))
    choice = Choice(3, ((n - 3, 0.5),))
    assert fits(choice) and fits(replace(choice, bits=0)) and not fits(replace(choice, bits=8))
