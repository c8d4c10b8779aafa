"""The plan search of ``tinytrain plan`` / ``tinytrain.plan`` (docs/design.md §5a, §5b): the gain model proposes,
training decides.

1. Contributions by short fine-tunes on the host C engine (measure.py, cached on disk under ``cache``, default
   ``$TINYTRAIN_CACHE/contrib``); the classifier-only baseline is run ``repeats`` times with other seeds, and gains
   within ``noise_floor`` standard deviations of that run-to-run noise count as 0 (noise.py).
2. An evolutionary search (evolution.py) and an exact branch and bound (exact.py) over the additive gain model,
   each plan checked with the true peak SRAM of its training step (memory.py, what ``tinytrain compile --plan``
   reports).
3. Finalists: every preset that fits (classifier-only, bias-only, every last-k:N; candidates.py), the exact
   search's plan and the best of the evolution's population, and for each of the ``other_bits`` remainder bits
   (a whole-plan choice; its bytes are in the memory check) the deepest last-k:N and the exact search's plan with
   them, ranked by training them with the recipe (``epochs`` over the fit rows, the plan's learning rates) by
   successive halving (halving.py). Every fine-tune and rung follows the recipe's lr schedule compressed to its
   own steps (cosine by default), so a short run is a small copy of the full one.
4. With ``rank_check`` (default), every finalist is trained for the whole recipe: the reference ranking. The
   report gives each rung's Spearman correlation with it (rank.py) and the noise floor at full length (the
   baseline repeated with other seeds) beside the gains; the winner is the best of them all at full length.
   With ``final_seeds`` N > 1 the last rung's finalists are trained with N seeds at full length and measured by
   their mean (``_pooled``), and their gains held to the noise of means (noise.py ``gain_sd_of``).
The best measured finalist is the plan, so the result is never a plan that measured worse than a preset, and a
searched plan must lead the best preset by more than the noise (noise.py: run-to-run and paired validation-row
noise); the report records every finalist's predicted (additive) and measured gain, the noise floor, every
contribution and the timings. With ``held_out`` the held-out part of the data (the same split as
``train(held_out=...)``) is never seen: everything is measured on a validation part (``val``) of the rest.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.errors import BudgetError, UsageError
from tinytrain.ir import Graph
from tinytrain.training.sparse import DEFAULT_REMAINDER_BITS, REMAINDER_BITS, Plan
from tinytrain.training.spec import StepSpec

DEFAULT_LR = 0.01


@dataclass(frozen=True)
class SearchOptions:
    """Everything ``tinytrain plan`` takes besides the model and the data (its options, same defaults)."""

    sram_bytes: int = 256 * 1024
    new_head: int | None = None
    seed: int = 0                    # new-head init, sample order, rounding, search
    held_out: float | None = None
    split_seed: int = 0
    val: float = 0.25
    lr: float = DEFAULT_LR
    bias_lr: float | None = None
    head_lr: float | None = None
    epochs: int = 2                  # the finalists' recipe
    lr_schedule: str | None = "cosine"  # (None too) every fine-tune's and rung's lrs follow a cosine over its own
    warmup: float = 0.0              # steps, the plan's over --epochs of the data (the warm-up fraction); "constant"
    ft_epochs: int = 1
    ft_steps: int | None = None
    qas: bool = True
    rounding: str = "stochastic"
    bias_k: tuple[int, ...] | None = None
    noise_floor: float = 2.0
    repeats: int = 3
    proposals: int = 4
    max_rungs: int = 2
    rung_fraction: float = 0.75      # a rung's steps as a fraction of the next one's (halving.py)
    other_bits: tuple[int, ...] = (0, 8)  # remainder bits besides the default the finalists may keep
    rank_check: bool = True          # train every finalist at full length: the reference ranking of the rungs
    final_seeds: int = 1             # seeds of each last-rung finalist at full length: its accuracy is their mean
    workers: int = 1                 # local: fine-tune processes; ray: CPUs of a local Ray instance
    executor: str = "local"          # "local" or "ray" (search/executors.py)
    address: str | None = None       # ray: the cluster to connect to (default: this process's or a local one)
    time_limit: float | None = None
    search_seconds_min: float = 20.0
    population: int = 100
    generations: int = 30
    cache: str | None = None
    use_cache: bool = True
    progress: bool = False
    loss: str = "xent"               # "mse": an autoencoder, scored by minus its validation reconstruction error
    anomaly: bool = False            # mse, y the 0/1 anomaly labels: fit on the normal rows, scored by the ROC AUC


@dataclass(frozen=True)
class SearchResult:
    plan: Plan     # the best measured finalist
    report: dict   # PLAN.search.json
    spec: StepSpec | None = None  # PLAN.json: the plan with the recipe it was measured with, bound to its model

    def write(self, out: str | Path) -> Path:
        """PLAN.json (version 1) at ``out`` and PLAN.search.json beside it, both or neither (tinytrain/outputs);
        returns the latter."""
        from tinytrain.outputs import write_files

        out = Path(out)
        details = search_report_path(out)
        spec = self.spec or StepSpec(self.plan)
        write_files({out: (json.dumps(spec.to_json(), indent=1) + "\n").encode(),
                     details: (json.dumps(self.report, indent=1) + "\n").encode()}, {out: "plan", details: "search"})
        return details


def search_report_path(plan: Path) -> Path:
    """PLAN.search.json, beside PLAN.json."""
    return plan.with_name(plan.stem + ".search.json")


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled, leave=False, mininterval=0.5)


def _predicted(choice, bias: dict, weight: dict) -> float | None:
    """The additive model's gain of a plan from the raw (unfloored) contributions; None if one is unmeasured."""
    if choice.k not in bias or any((i, r) not in weight for i, r in choice.weights):
        return None
    return bias[choice.k] + sum(weight[(i, r)] for i, r in choice.weights)


@dataclass(frozen=True)
class _Run:
    """What the search's phases share: the model, data, options, split, fine-tune recipe, memory oracle, caches."""

    graph: Graph
    x: np.ndarray
    y: np.ndarray
    opts: SearchOptions
    source: dict
    t_start: float
    deadline: float | None
    executor: Any
    space: Any
    rows: np.ndarray
    train_rows: np.ndarray
    val_rows: np.ndarray
    ft: Any
    mem: Any
    cache: Any

    def plan_of(self, choice) -> Plan:
        return replace(self.space.plan(choice, self.ft.lr, self.ft.bias_lr, self.ft.head_lr), loss=self.ft.loss)

    def fits_plan(self, plan) -> bool:
        return self.mem(plan) <= self.opts.sram_bytes


@dataclass(frozen=True)
class _Contributions:
    """Phase 1's results: the options, their measured gains over the baseline and the noise floor."""

    options: list
    skipped: int
    base: Plan
    base_acc: float
    bias: dict
    weight: dict
    gains: Any
    noise: Any
    tasks: list
    todo: list
    measured_now: list
    complete: bool
    job: Any


def _check_options(opts: SearchOptions) -> None:
    from tinytrain.lr_schedule import check_schedule

    if not 0 < opts.val < 1:
        raise UsageError(f"--val {opts.val}: give a fraction between 0 and 1")
    if not 0 < opts.rung_fraction < 1:
        raise UsageError(f"--rung-fraction {opts.rung_fraction}: give a fraction between 0 and 1")
    if opts.repeats < 2:
        raise UsageError(f"--repeats {opts.repeats}: the noise floor needs at least 2 runs of the baseline")
    if opts.final_seeds < 1:
        raise UsageError(f"--final-seeds {opts.final_seeds}: give a positive number of seeds")
    if opts.epochs < 1:
        raise UsageError(f"--epochs {opts.epochs}: give a positive number of epochs")
    check_schedule(opts.lr_schedule, opts.warmup)
    if not set(opts.other_bits) <= set(REMAINDER_BITS):
        raise UsageError(f"--other-remainder-bits {','.join(map(str, opts.other_bits))}: give some of "
                         f"{', '.join(map(str, REMAINDER_BITS))}")


def _setup(graph: Graph, x: np.ndarray, y: np.ndarray, opts: SearchOptions, source: dict) -> _Run:
    """The options checked, the data split into fit and validation rows, the recipe, the memory oracle and the
    contribution cache."""
    from tinytrain.data import held_out_split, stratified_split
    from tinytrain.engines.host_c import default_cache_dir
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.search.executors import make_executor
    from tinytrain.search.measure import ContributionCache, FineTune, Measurement, dataset_sha256
    from tinytrain.search.memory import MemoryOracle
    from tinytrain.search.space import Space
    from tinytrain.training.qas import UpdateConfig

    t_start = time.time()
    deadline = t_start + opts.time_limit if opts.time_limit else None
    executor = make_executor(opts.executor, opts.workers, opts.address)
    _check_options(opts)
    space = Space.of(graph, opts.bias_k)
    parts = held_out_split(y, opts.held_out, opts.split_seed)
    rows = parts[0] if parts is not None else np.arange(len(y))
    fit_idx, val_idx = stratified_split(y[rows], opts.val, opts.split_seed)
    train_rows, val_rows = rows[fit_idx], rows[val_idx]
    if opts.anomaly:  # an autoencoder learns the normal: the anomalous rows are only scored
        train_rows = train_rows[y[train_rows] == 0]
    ft = FineTune(lr=opts.lr, bias_lr=opts.bias_lr, head_lr=opts.head_lr, lr_schedule=opts.lr_schedule or "cosine",
                  warmup=opts.warmup, steps=opts.ft_steps or opts.ft_epochs * len(train_rows), qas=opts.qas,
                  rounding=opts.rounding, seed=opts.seed, loss=opts.loss, anomaly=opts.anomaly)
    config = UpdateConfig(rounding=Rounding(ft.rounding), qas=ft.qas, seed=ft.seed)
    cache_root = None if not opts.use_cache else Path(opts.cache) if opts.cache else default_cache_dir() / "contrib"
    head = f"head{opts.new_head}" if opts.new_head else "nohead"
    mem = MemoryOracle(graph, config, cache_root / f"memory-{graph.source_sha256[:16]}-{head}.json"
                       if cache_root else None)
    ident = Measurement(graph.source_sha256, opts.new_head, opts.seed, dataset_sha256(x, y), opts.held_out,
                        opts.split_seed, opts.val, ft)
    cache = ContributionCache(cache_root / f"{ident.key()}.json" if cache_root else None,
                              {"model": source["model"], "data": source["data"], **asdict(ident)})
    return _Run(graph, x, y, opts, source, t_start, deadline, executor, space, rows, train_rows, val_rows, ft, mem,
                cache)


def _feasible(run: _Run) -> tuple[list, list, int]:
    """The options (bias depths, weight layers x ratios) and those that fit the budget alone (under monotone memory
    no other can be part of a fitting plan); how many did not."""
    space = run.space
    options = [("bias", k, 0.0) for k in space.bias_ks if k > 1] + \
              [("weight", i, r) for i in space.weight_layers for r in (0.125, 0.25, 0.5, 1.0)]
    feasible, skipped = [], 0
    bar = _bar(len(options), "memory of each option", run.opts.progress)
    for kind, i, r in options:
        c = space.bias_option(i) if kind == "bias" else space.weight_option(i, r)
        if run.fits_plan(run.plan_of(c)):
            feasible.append((kind, i, r, c))
        else:
            skipped += 1
        bar.update(1)
    bar.close()
    return options, feasible, skipped


def _fine_tune_options(run: _Run, base, feasible: list, repeat_keys: list, seeds: list):
    """Every feasible option fine-tuned alone over the baseline, and the baseline repeated with other seeds (the
    cached ones skipped): the tasks, those run, the keys measured now, whether all finished, and the job."""
    from tinytrain.search.measure import prepare_job
    from tinytrain.training.sparse import parse_plan

    base_key = run.space.bias_option(1).key()
    tasks = [(c.key(), run.plan_of(c).to_json()) for _, _, _, c in [(0, 0, 0, run.space.bias_option(1))] + feasible]
    tasks += [(key, base.to_json(), None, s) for key, s in zip(repeat_keys, seeds) if s != run.ft.seed]
    todo = [t for t in tasks if run.cache.get(t[0]) is None]
    measured_now, complete = [], True
    job = prepare_job(run.graph, run.x, run.y, run.train_rows, run.val_rows, run.ft, [parse_plan(t[1]) for t in todo])
    if todo:
        bar = _bar(len(todo), f"fine-tunes ({run.ft.steps} steps each)", run.opts.progress)

        def on_result(key, result):
            run.cache.put(key, result)
            measured_now.append(key)

        # the baseline and its repeats first: without them nothing can be compared
        todo.sort(key=lambda t: t[0].split("#")[0] != base_key)
        complete = run.executor.run(job, todo, on_result, None if run.deadline is None
                                    else run.deadline - run.opts.search_seconds_min, bar)
        bar.close()
    return tasks, todo, measured_now, complete, job


def _contributions(run: _Run) -> _Contributions:
    """Phase 1: the options that fit, each fine-tuned alone over the baseline, and the noise floor of the baseline
    repeated with other seeds."""
    from tinytrain.search.noise import NoiseFloor
    from tinytrain.search.space import Gains
    from tinytrain.sizes import format_size

    base_choice = run.space.bias_option(1)
    base = run.plan_of(base_choice)
    if not run.fits_plan(base):
        raise BudgetError(f"even the classifier alone (the baseline every plan updates) needs "
                          f"{format_size(run.mem(base))} of SRAM, over the {format_size(run.opts.sram_bytes)} budget; "
                          "try a larger --sram")
    options, feasible, skipped = _feasible(run)
    seeds = [run.ft.seed + j for j in range(run.opts.repeats)]
    repeat_keys = [base_choice.key() if s == run.ft.seed else f"{base_choice.key()}#seed{s}" for s in seeds]
    tasks, todo, measured_now, complete, job = _fine_tune_options(run, base, feasible, repeat_keys, seeds)
    repeats = [run.cache.get(k) for k in repeat_keys]
    if any(r is None for r in repeats):
        raise UsageError("--time-limit ran out before the baseline's repeated fine-tunes finished; give more time")
    noise = NoiseFloor(tuple(r["accuracy"] for r in repeats), len(run.val_rows), run.opts.noise_floor)
    base_acc = repeats[0]["accuracy"]
    bias, weight = {1: 0.0}, {}
    for kind, i, r, c in feasible:
        got = run.cache.get(c.key())
        if got is None:
            continue  # not measured in time: left out of the search space
        if kind == "bias":
            bias[i] = got["accuracy"] - base_acc
        else:
            weight[(i, r)] = got["accuracy"] - base_acc
    # gains within the noise of repeated runs count as 0: summing many of them picks plans that update much and
    # gain nothing (docs/guide/plan-search.md: the VWW study of an earlier round showed it)
    gains = Gains({k: g for k, g in bias.items() if k == 1 or g > noise.threshold},
                  {o: g for o, g in weight.items() if g > noise.threshold})
    return _Contributions(options, skipped, base, base_acc, bias, weight, gains, noise, tasks, todo, measured_now,
                          complete, job)


def _propose(run: _Run, gains) -> tuple[dict, float, dict, float, Any]:
    """Phase 2: the gain model proposes, by evolution and an exact branch and bound (each with half the time
    left), at the default remainder bits; their results and seconds, and the memory check they shared."""
    from tinytrain.search.evolution import evolve
    from tinytrain.search.exact import branch_and_bound
    from tinytrain.search.memory import MonotoneFits

    opts, deadline = run.opts, run.deadline
    fits = MonotoneFits(run.mem, opts.sram_bytes, run.plan_of)
    t0 = time.time()
    share = None if deadline is None else max(opts.search_seconds_min / 2, (deadline - t0) / 2)
    bar = _bar(opts.generations, "evolutionary search", opts.progress)
    evo = evolve(gains, fits, population=opts.population, generations=opts.generations, seed=opts.seed,
                 deadline=None if share is None else t0 + share, progress=bar)
    bar.close()
    evo_seconds = time.time() - t0
    t0 = time.time()
    bar = _bar(0, "branch and bound (nodes)", opts.progress)
    exact = branch_and_bound(gains, fits, deadline=None if deadline is None else max(deadline, t0 + share),
                             progress=bar)
    bar.close()
    return evo, evo_seconds, exact, time.time() - t0, fits


def _propose_bits(run: _Run, gains) -> dict[int, dict]:
    """The exact search's plan for each of the other remainder bits (the same gains, the memory of the plan with
    those bits: fewer bits leave room for more trained rows)."""
    from tinytrain.search.exact import branch_and_bound
    from tinytrain.search.memory import MonotoneFits

    out = {}
    for bits in sorted(set(run.opts.other_bits) - {DEFAULT_REMAINDER_BITS}):
        fits = MonotoneFits(run.mem, run.opts.sram_bytes, lambda c, b=bits: run.plan_of(replace(c, bits=b)))
        t0 = time.time()
        share = None if run.deadline is None else max(run.opts.search_seconds_min / 2, run.deadline - t0)
        res = branch_and_bound(gains, fits, deadline=None if share is None else t0 + share)
        out[bits] = {**res, "choice": replace(res["choice"], bits=bits), "seconds": round(time.time() - t0, 2)}
    return out


@dataclass(frozen=True)
class _Final:
    """Phase 3's results: the finalists, the winner, the rungs, the decision against the best preset and the
    reference ranking (every finalist at full length; None without ``rank_check``)."""

    cands: list
    by_name: dict
    winner: str
    accuracy: float  # the winner's, at full length
    rungs: list
    decision: dict
    finalists_run: list
    full_steps: int
    reference: dict | None


def _pooled(results: list[dict], n_val: int) -> dict:
    """One finalist's measurement from its runs with one or more seeds: the mean accuracy, each validation row's
    mean (1 right, 0 wrong; an autoencoder's score; None when a run kept no rows) for paired comparisons, and the
    number of seeds."""
    from tinytrain.search.measure import unpack_correct

    rows = None
    if all("correct" in r for r in results):
        rows = np.mean([unpack_correct(r["correct"], n_val) for r in results], axis=0).tolist()
    elif all("scores" in r for r in results):  # an autoencoder's per-row scores
        rows = np.mean([r["scores"] for r in results], axis=0).tolist()
    return {"accuracy": float(np.mean([r["accuracy"] for r in results])), "rows": rows, "seeds": len(results)}


def _margin(run: _Run, noise, results: dict, decision: dict, candidate: str, preset: str) -> float:
    """The lead ``candidate`` needs over ``preset`` (noise.py): run-to-run noise (of means over their seeds) and
    the paired standard error of the two on the validation rows (unpaired, from the accuracies, for a cached
    result without rows). ``results``: ``_pooled`` measurements."""
    from tinytrain.search.noise import paired_se

    n_val = len(run.val_rows)
    a, b = results[candidate], results[preset]
    if a["rows"] is not None and b["rows"] is not None:
        se = paired_se(a["rows"], b["rows"])
    else:
        se = float(np.sqrt(sum(r["accuracy"] * (1 - r["accuracy"]) for r in (a, b)) / n_val))
    margin = noise.margin(se, a["seeds"], b["seeds"])
    decision.update({"candidate": candidate, "best_preset": preset,
                     "lead": round(a["accuracy"] - b["accuracy"], 6), "paired_se": round(se, 6),
                     "seeds": [a["seeds"], b["seeds"]], "margin": round(margin, 6)})
    return margin


def _measure(run: _Run, job: dict, by_name: dict, wanted: list[tuple[str, int]], steps: int, ran: list) -> dict:
    """{(name, seed): fine-tune result} of the finalists ``wanted`` trained ``steps`` steps with those seeds
    (sample order, rounding; cached under the option key, @steps and #seedS when not the run's seed): the lrs
    follow the recipe's schedule compressed to ``steps`` (measure.finetune_accuracy)."""
    from tinytrain.search.measure import add_features
    from tinytrain.training.sparse import parse_plan

    keys = {(n, s): f"{by_name[n].choice.key()}@{steps}" + ("" if s == run.ft.seed else f"#seed{s}")
            for n, s in wanted}
    todo = [(keys[w], run.plan_of(by_name[w[0]].choice).to_json(), steps, w[1])
            for w in wanted if run.cache.get(keys[w]) is None]
    add_features(job, [parse_plan(t[1]) for t in todo])
    bar = _bar(len(todo), f"finalists ({steps} steps each)", run.opts.progress)

    def on_result(key, result):
        run.cache.put(key, result)
        ran.append(key)

    run.executor.run(job, todo, on_result, None, bar)
    bar.close()
    return {w: run.cache.get(keys[w]) for w in wanted}


def _final_seeds(run: _Run) -> list[int]:
    """The seeds of a finalist's full-length measurement in the last rung (``final_seeds`` of them)."""
    return [run.ft.seed + j for j in range(run.opts.final_seeds)]


def _reference(run: _Run, job: dict, by_name: dict, rungs: list, full_steps: int, ran: list) -> dict:
    """The last phase: every finalist trained for the whole recipe (the reference ranking; the last rung's are
    cached, with their ``final_seeds`` seeds; the others with one), the baseline repeated with other seeds at that
    length (the noise floor of the gains ranked), and each rung's Spearman correlation with the reference
    (rank.py). A finalist's full-length accuracy is the mean over its seeds. A finalist the first rung dropped
    whose one run beats the last rung's best mean is trained with the final seeds too before it can be chosen:
    the best of many single runs is not compared with means (it is high by chance more often)."""
    from tinytrain.search.noise import NoiseFloor
    from tinytrain.search.rank import rung_agreement

    base, final = "classifier-only", _final_seeds(run)
    repeats = [run.ft.seed + j for j in range(max(run.opts.repeats, run.opts.final_seeds))]
    seeds = {n: repeats if n == base else final if n in rungs[-1].accuracy else final[:1] for n in by_name}
    got = _measure(run, job, by_name, [(n, s) for n in by_name for s in seeds[n]], full_steps, ran)
    results = {n: _pooled([got[(n, s)] for s in seeds[n]], len(run.val_rows)) for n in by_name}
    lead = max(results[n]["accuracy"] for n in rungs[-1].accuracy)
    challengers = [n for n in by_name if len(seeds[n]) < len(final) and results[n]["accuracy"] > lead]
    if challengers:
        seeds.update({n: final for n in challengers})
        got.update(_measure(run, job, by_name, [(n, s) for n in challengers for s in final], full_steps, ran))
        results.update({n: _pooled([got[(n, s)] for s in final], len(run.val_rows)) for n in challengers})
    acc = {n: r["accuracy"] for n, r in results.items()}
    noise = NoiseFloor(tuple(got[(base, s)]["accuracy"] for s in repeats), len(run.val_rows), run.opts.noise_floor)
    above = [n for n in acc if n != base
             and acc[n] - acc[base] > noise.threshold_of(results[n]["seeds"], results[base]["seeds"])]
    return {"steps": full_steps, "results": results, "accuracy": acc, "noise": noise,
            "rungs": rung_agreement([(r.steps, r.accuracy) for r in rungs], acc), "gains_above_noise": len(above),
            "final_seeds": len(final), "last_rung": [n for n in rungs[-1].kept if n != base],
            "last_rung_above_noise": sum(n in rungs[-1].kept for n in above)}


def _candidates(run: _Run, evo: dict, exact: dict, others: dict[int, dict]) -> list:
    """The finalists: the presets that fit (dense and sparse) and the proposals at the default remainder bits, then
    for each other bits the deepest last-k:N that fits with them and the exact search's plan (candidates.py)."""
    from tinytrain.search.candidates import Candidate, finalists, presets, sparse_presets

    def fits(c) -> bool:
        return run.fits_plan(run.plan_of(c))

    proposals = [Candidate("exact", exact["choice"], False)]
    proposals += [Candidate(f"evolution #{j + 1}", c, False)
                  for j, c in enumerate(evo["population"][: run.opts.proposals]) if fits(c)]
    for bits, res in others.items():
        deepest = presets(run.space, fits, bits)[-1]
        proposals += [deepest] if deepest.name.startswith("last-k:") else []
        proposals += [Candidate(f"exact @r{bits}", res["choice"], False)] if fits(res["choice"]) else []
    return finalists(presets(run.space, fits) + sparse_presets(run.space, fits), proposals)


def _finalists(run: _Run, contrib: _Contributions, evo: dict, exact: dict, others: dict[int, dict]) -> _Final:
    """Phase 3: the finalists ranked by training them (successive halving), then, with ``rank_check``, every one
    at full length: the winner is then the best of them all at full length (halving.py's rule against the
    presets)."""
    from tinytrain.search.halving import successive_halving

    cands = _candidates(run, evo, exact, others)
    by_name = {c.name: c for c in cands}
    full_steps = run.opts.epochs * len(run.train_rows)
    last: dict[str, dict] = {}  # the latest rung's fine-tunes
    decision: dict = {}
    ran: list = []

    def measure(names: list[str], steps: int) -> dict[str, float]:
        # the last rung (full length) averages each finalist over the final seeds; shorter rungs run one
        seeds = _final_seeds(run) if steps == full_steps else [run.ft.seed]
        got = _measure(run, contrib.job, by_name, [(n, s) for n in names for s in seeds], steps, ran)
        last.clear()
        last.update({n: _pooled([got[(n, s)] for s in seeds], len(run.val_rows)) for n in names})
        return {n: last[n]["accuracy"] for n in names}

    def rank(max_rungs: int, measure_, noise) -> tuple[str, list]:
        return successive_halving(
            [c.name for c in cands], "classifier-only", measure_, full_steps,
            lambda n: run.mem(run.plan_of(by_name[n].choice)), max_rungs,
            presets=frozenset(c.name for c in cands if c.preset),
            margin=lambda cand, preset: _margin(run, noise, last, decision, cand, preset),
            fraction=run.opts.rung_fraction)

    winner, rungs = rank(run.opts.max_rungs, measure, contrib.noise)
    accuracy, ref = rungs[-1].accuracy[winner], None
    if run.opts.rank_check:
        ref = _reference(run, contrib.job, by_name, rungs, full_steps, ran)
        last.clear()
        last.update(ref["results"])
        decision.clear()
        # the noise of the full-length runs (the baseline's other seeds at that length) decides the margin
        winner = rank(1, lambda names, steps: {n: ref["accuracy"][n] for n in names}, ref["noise"])[0]
        accuracy = ref["accuracy"][winner]
    run.mem.save()
    return _Final(cands, by_name, winner, accuracy, rungs, decision, ran, full_steps, ref)


def _finalist_json(run: _Run, c, contrib: _Contributions, final: _Final) -> dict:
    rungs = final.rungs
    measured = [{"steps": r.steps, "accuracy": r.accuracy[c.name],
                 "gain": round(r.accuracy[c.name] - r.accuracy["classifier-only"], 6)}
                for r in rungs if c.name in r.accuracy]
    ref = final.reference
    full = None if ref is None else {"accuracy": ref["accuracy"][c.name], "gain": round(
        ref["accuracy"][c.name] - ref["accuracy"]["classifier-only"], 6), "seeds": ref["results"][c.name]["seeds"]}
    pred = _predicted(c.choice, contrib.bias, contrib.weight)
    gains = contrib.gains
    return {"name": c.name, "preset": c.preset, "plan": run.plan_of(c.choice).to_json(),
            "peak_sram_bytes": run.mem(run.plan_of(c.choice)),
            "predicted_gain": None if pred is None else round(pred, 6),
            "model_score": round(gains.score(c.choice), 6) if c.choice.k in gains.bias and all(
                o in gains.weight for o in c.choice.weights) else None,
            "measured": measured, "last_rung": len(measured) == len(rungs), "full_length": full}


def _rank_check_json(final: _Final) -> dict | None:
    """PLAN.search.json's "rank_check": each rung's Spearman correlation with the full-length ranking of the
    finalists, and the noise floor at full length beside the gains it ranks."""
    ref = final.reference
    if ref is None:
        return None
    return {"steps": ref["steps"], "rungs": ref["rungs"], "noise_floor": ref["noise"].to_json(),
            "final_seeds": ref["final_seeds"], "gains_above_noise": ref["gains_above_noise"],
            "finalists": len(ref["accuracy"]) - 1, "last_rung_finalists": len(ref["last_rung"]),
            "last_rung_above_noise": ref["last_rung_above_noise"], "chosen_at_full_length": True}


def _proposal_json(run: _Run, res: dict) -> dict:
    plan = run.plan_of(res["choice"])
    return {"plan": plan.to_json(), "gain": round(res["score"], 6), "peak_sram_bytes": run.mem(plan),
            "fits": run.mem(plan) <= run.opts.sram_bytes}


def _report(run: _Run, chosen: Plan, contrib: _Contributions, evo: tuple, exact: tuple, fits, final: _Final,
            others: dict) -> dict:
    """PLAN.search.json."""
    from tinytrain.version import __version__

    opts, winner, val = run.opts, final.winner, len(run.val_rows)
    acc = final.accuracy
    return {
        "tinytrain_version": __version__, "model": run.source["model"], "model_sha256": run.graph.source_sha256,
        "new_head": opts.new_head, "data": run.source["data"], "sram_budget_bytes": opts.sram_bytes,
        "plan": chosen.to_json(), "peak_sram_bytes": run.mem(chosen), "chosen": winner,
        "preset_chosen": final.by_name[winner].preset, "validation_accuracy": acc,
        "score": "accuracy" if opts.loss == "xent" else "roc_auc" if opts.anomaly else "-reconstruction_error",
        "validation_se": round(float(np.sqrt(acc * (1 - acc) / val)), 6) if opts.loss == "xent" else None,
        "finalists": [_finalist_json(run, c, contrib, final) for c in final.cands],
        "rungs": [{"steps": r.steps, "kept": list(r.kept)} for r in final.rungs],
        "rank_check": _rank_check_json(final),
        "searched_vs_best_preset": final.decision or None,
        "evolution": {**_proposal_json(run, evo[0]), "generations": evo[0]["generations"],
                      "seconds": round(evo[1], 2)},
        "exact": {**_proposal_json(run, exact[0]), "proven_optimal": exact[0]["proven_optimal"],
                  "nodes": exact[0]["nodes"], "seconds": round(exact[1], 2)},
        "exact_other_bits": {str(b): {**_proposal_json(run, r), "proven_optimal": r["proven_optimal"],
                                      "seconds": r["seconds"]} for b, r in others.items()},
        "baseline": {"plan": contrib.base.to_json(), "accuracy": contrib.base_acc,
                     "peak_sram_bytes": run.mem(contrib.base)},
        "measurement": {"finetune": asdict(run.ft), "finalist_steps": final.full_steps,
                        "final_seeds": opts.final_seeds,
                        "rung_steps": [r.steps for r in final.rungs],
                        "n_fit": int(len(run.train_rows)), "n_val": int(val), "held_out": opts.held_out,
                        "split_seed": opts.split_seed, "val": opts.val, "engine": "c", "executor": opts.executor,
                        "cache": str(run.cache.path) if run.cache.path else None},
        "contributions": {"bias": {str(k): round(v, 6) for k, v in sorted(contrib.bias.items())},
                          "weight": [{"conv": i, "ratio": r, "gain": round(g, 6)}
                                     for (i, r), g in sorted(contrib.weight.items())]},
        "noise_floor": {**contrib.noise.to_json(),
                        "options_above": len(contrib.gains.bias) - 1 + len(contrib.gains.weight)},
        "options": {"total": len(contrib.options) + 1, "over_budget_alone": contrib.skipped,
                    "measured": len(contrib.bias) + len(contrib.weight), "measured_complete": contrib.complete},
        "finetunes_run": len(contrib.measured_now), "finetunes_cached": len(contrib.tasks) - len(contrib.todo),
        "finalist_finetunes_run": len(final.finalists_run),
        "memory_evaluations": run.mem.evaluations, "memory_checks_inferred": fits.inferred,
        "seconds": round(time.time() - run.t_start, 2),
    }


def search(graph: Graph, x: np.ndarray, y: np.ndarray, opts: SearchOptions, source: dict) -> SearchResult:
    """The plan of ``graph`` (with its new head, if any) on the int8 inputs ``x`` and labels ``y``; ``source``
    names the model and the data in the report and the cache's metadata. The phases of the module's docstring."""
    from tinytrain.training.sparse import with_lr_schedule

    run = _setup(graph, x, y, opts, source)
    contrib = _contributions(run)                                                   # 1. contributions, noise floor
    evo, evo_seconds, exact, exact_seconds, fits = _propose(run, contrib.gains)     # 2. evolution, exact search
    others = _propose_bits(run, contrib.gains)                                      #    other remainder bits
    final = _finalists(run, contrib, evo, exact, others)                            # 3. finalists, halving,
    #                                                                                    4. full-length reference
    # the plan's lrs follow the recipe's schedule over the steps of `train --epochs E` on the same data
    # and then keep the floor of the fine-tunes' cosine (a tenth of them): a device goes on learning after them
    chosen = with_lr_schedule(run.plan_of(final.by_name[final.winner].choice), run.ft.lr_schedule, opts.warmup,
                              opts.epochs * len(run.rows), run.ft.lr_floor)
    report = _report(run, chosen, contrib, (evo, evo_seconds), (exact, exact_seconds), fits, final, others)
    spec = StepSpec(chosen, rounding=opts.rounding, qas=opts.qas, seed=opts.seed, new_head=opts.new_head)
    return SearchResult(chosen, report, spec.bind(graph))


def search_data(graph: Graph, ds, source: dict, **options) -> SearchResult:
    """``search`` on a Dataset: the loss (``options``' or the data's default, as ``train``'s), the model's int8
    inputs and the labels (an autoencoder's: its anomaly labels, or none); ``options``: SearchOptions' fields."""
    from tinytrain.engines.samples import default_loss, prepared

    loss = options.pop("loss", None) or default_loss(graph, ds)
    anomaly = loss == "mse" and ds.anomaly is not None  # scored by the ROC AUC, fit on the normal rows
    try:
        opts = SearchOptions(loss=loss, anomaly=anomaly, **options)
    except TypeError as e:
        raise UsageError(f"plan: {e}") from None
    x, y = prepared(graph, ds, loss)
    if loss == "mse" and y is not None:
        raise UsageError(f"{ds.source}: the plan search scores an autoencoder's reconstruction of its input; float "
                         "targets y are not searched (drop y, or train a preset: tinytrain train --loss mse)")
    if loss == "mse":
        y = ds.anomaly.astype(np.int64) if anomaly else np.zeros(len(x), np.int64)
    return search(graph, x, y, opts, source)

