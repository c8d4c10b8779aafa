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
   their mean (finals.py ``_pooled``), and their gains held to the noise of means (noise.py ``gain_sd_of``).
The best measured finalist is the plan, so the result is never a plan that measured worse than a preset, and a
searched plan must lead the best preset by more than the noise (noise.py: run-to-run and paired validation-row
noise); the report records every finalist's predicted (additive) and measured gain, the noise floor, every
contribution and the timings. With ``held_out`` the held-out part of the data (the same split as
``train(held_out=...)``) is never seen: everything is measured on a validation part (``val``) of the rest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.engines.host_c import default_cache_dir
from tinytrain.engines.samples import default_loss, prepared
from tinytrain.errors import BudgetError, UsageError
from tinytrain.ir import Graph
from tinytrain.lr_schedule import check_schedule
from tinytrain.ops.sgd_update import Rounding
from tinytrain.search.evolution import evolve
from tinytrain.search.exact import branch_and_bound
from tinytrain.search.executors import make_executor
from tinytrain.search.finals import rank_finalists, search_report
from tinytrain.search.measure import ContributionCache, FineTune, Measurement, dataset_sha256, prepare_job
from tinytrain.search.state import frozen_features
from tinytrain.search.memory import MemoryOracle, MonotoneFits
from tinytrain.search.noise import NoiseFloor
from tinytrain.search.space import Gains, Space
from tinytrain.search.phases import Clock
from tinytrain.search.state import Contributions, Run, SearchOptions, SearchResult
from tinytrain.sizes import format_size
from tinytrain.splits import held_out_split, stratified_split
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import DEFAULT_REMAINDER_BITS, REMAINDER_BITS
from tinytrain.training.sparse import layers, parse_plan, with_lr_schedule
from tinytrain.training.spec import StepSpec

CONTRIBUTIONS_SHARE = 0.5  # of --time-limit: the options' memory and fine-tunes stop by then
PROPOSALS_SHARE = 0.6     # the evolution and the branch and bound by then; the finalists have the rest


def _check_options(opts: SearchOptions) -> None:
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


def _setup(graph: Graph, x: np.ndarray, y: np.ndarray, opts: SearchOptions, source: dict) -> Run:
    """The options checked, the data split into fit and validation rows, the recipe, the memory oracle and the
    contribution cache."""

    clock = Clock(time.time(), opts.time_limit, opts.progress)
    executor = make_executor(opts.executor, opts.workers, opts.address)
    _check_options(opts)
    n = len(layers(graph))
    if opts.bias_k and not all(1 <= k <= n for k in opts.bias_k):
        raise UsageError(f"--bias-k {','.join(map(str, opts.bias_k))}: k counts the layers from the last; give "
                         f"values from 1 to {n} (this model has {n} layers)")
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
    return Run(graph, x, y, opts, source, clock, executor, space, rows, train_rows, val_rows, ft, mem,
                cache)


def _feasible(run: Run) -> tuple[list, list, int]:
    """The options (bias depths, weight layers x ratios) and those that fit the budget alone (under monotone memory
    no other can be part of a fitting plan); how many did not."""
    space = run.space
    options = [("bias", k, 0.0) for k in space.bias_ks if k > 1] + \
              [("weight", i, r) for i in space.weight_layers for r in (0.125, 0.25, 0.5, 1.0)]
    feasible, skipped, checked = [], 0, 0
    stop = run.clock.at(CONTRIBUTIONS_SHARE)
    choices = [space.bias_option(i) if kind == "bias" else space.weight_option(i, r) for kind, i, r in options]
    with run.clock.phase("memory of each option", len(options)) as phase:
        if run.opts.executor == "local":  # the workers evaluate them in parallel
            run.mem.prefetch([run.plan_of(c) for c in choices], run.opts.workers, stop, phase.update)
        for (kind, i, r), c in zip(options, choices):
            if stop is not None and time.time() > stop:
                phase.cut(f"{len(options) - checked} options not checked, left out")
                break
            if run.fits_plan(run.plan_of(c)):
                feasible.append((kind, i, r, c))
            else:
                skipped += 1
            checked += 1
            phase.update(max(0, checked - phase.record.done))
    return options, feasible, skipped


def _fine_tune_options(run: Run, base, feasible: list, repeat_keys: list, seeds: list):
    """Every feasible option fine-tuned alone over the baseline, and the baseline repeated with other seeds (the
    cached ones skipped): the tasks, those run, the keys measured now, whether all finished, and the job."""

    base_key = run.space.bias_option(1).key()
    tasks = [(c.key(), run.plan_of(c).to_json()) for _, _, _, c in [(0, 0, 0, run.space.bias_option(1))] + feasible]
    tasks += [(key, base.to_json(), None, s) for key, s in zip(repeat_keys, seeds) if s != run.ft.seed]
    todo = [t for t in tasks if run.cache.get(t[0]) is None]
    measured_now, complete = [], True
    job = frozen_features(run, prepare_job(run.graph, run.x, run.y, run.train_rows, run.val_rows, run.ft, []),
                          [parse_plan(t[1]) for t in todo])
    with run.clock.phase(f"contribution fine-tunes ({run.ft.steps} steps each)", len(todo)) as phase:

        def on_result(key, result):
            run.cache.put(key, result)
            measured_now.append(key)

        # the baseline and its repeats first, by the whole run's limit: without them nothing can be compared
        first = [t for t in todo if t[0].split("#")[0] == base_key]
        if run.clock.limit is None:  # the longest first (the deepest backward): no worker idles at the end
            todo.sort(key=lambda t: (-_depth(run, t[1]), t[0]))
        complete = run.executor.run(job, first, on_result, run.clock.deadline, phase) and run.executor.run(
            job, [t for t in todo if t not in first], on_result, run.clock.at(CONTRIBUTIONS_SHARE), phase)
        if not complete:
            phase.cut(f"{len(todo) - len(measured_now)} options not measured, left out of the gain model")
    return tasks, todo, measured_now, complete, job


def _depth(run: Run, plan_json: dict) -> int:
    """How many layers a fine-tune's backward pass goes through (its cost grows with it)."""
    convs = [w["conv"] for w in plan_json.get("weights", ())]
    return max(plan_json.get("bias_last_k", 1), run.space.n_layers - min(convs, default=run.space.n_layers))


def _contributions(run: Run) -> Contributions:
    """Phase 1: the options that fit, each fine-tuned alone over the baseline, and the noise floor of the baseline
    repeated with other seeds."""

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
    return Contributions(options, skipped, base, base_acc, bias, weight, gains, noise, tasks, todo, measured_now,
                          complete, job)


def _propose(run: Run, gains) -> tuple[dict, float, dict, float, Any]:
    """Phase 2: the gain model proposes, by evolution and an exact branch and bound (each with half the time
    left), at the default remainder bits; their results and seconds, and the memory check they shared."""

    opts = run.opts
    fits = MonotoneFits(run.mem, opts.sram_bytes, run.plan_of)
    t0, end = time.time(), _proposals_end(run)
    with run.clock.phase("evolutionary search (generations)", opts.generations) as phase:
        evo = evolve(gains, fits, population=opts.population, generations=opts.generations, seed=opts.seed,
                     deadline=None if end is None else t0 + (end - t0) / 2, progress=phase)
        if evo["generations"] < opts.generations:
            phase.cut(f"{opts.generations - evo['generations']} generations not run")
    evo_seconds = time.time() - t0
    t0 = time.time()
    exact = _exact(run, gains, fits, "branch and bound (nodes of its budget)", end)
    return evo, evo_seconds, exact, time.time() - t0, fits


def _proposals_end(run: Run) -> float | None:
    """When the proposals' searches stop: at PROPOSALS_SHARE of the time limit, but with at least
    ``search_seconds_min`` if the run has them (never past the limit)."""
    if run.clock.limit is None:
        return None
    return min(run.clock.deadline, max(run.clock.at(PROPOSALS_SHARE), time.time() + run.opts.search_seconds_min))


def _exact(run: Run, gains, fits, name: str, end: float | None) -> dict:
    """The branch and bound as a phase: nodes against the node budget, and what stopped it short of a proof."""
    with run.clock.phase(name, run.opts.exact_nodes) as phase:
        res = branch_and_bound(gains, fits, deadline=end, progress=phase, max_nodes=run.opts.exact_nodes)
        if res["stopped"]:
            phase.cut(f"stopped by the {res['stopped']} after {res['nodes']} nodes: the best plan found, "
                      "not proven optimal")
    return res


def _propose_bits(run: Run, gains) -> dict[int, dict]:
    """The exact search's plan for each of the other remainder bits (the same gains, the memory of the plan with
    those bits: fewer bits leave room for more trained rows)."""

    out = {}
    for bits in sorted(set(run.opts.other_bits) - {DEFAULT_REMAINDER_BITS}):
        fits = MonotoneFits(run.mem, run.opts.sram_bytes, lambda c, b=bits: run.plan_of(replace(c, bits=b)))
        t0 = time.time()
        res = _exact(run, gains, fits, f"branch and bound @r{bits} (nodes of its budget)", _proposals_end(run))
        out[bits] = {**res, "choice": replace(res["choice"], bits=bits), "seconds": round(time.time() - t0, 2)}
    return out


def search(graph: Graph, x: np.ndarray, y: np.ndarray, opts: SearchOptions, source: dict) -> SearchResult:
    """The plan of ``graph`` (with its new head, if any) on the int8 inputs ``x`` and labels ``y``; ``source``
    names the model and the data in the report and the cache's metadata. The phases of the module's docstring."""

    run = _setup(graph, x, y, opts, source)
    contrib = _contributions(run)                                                   # 1. contributions, noise floor
    evo, evo_seconds, exact, exact_seconds, fits = _propose(run, contrib.gains)     # 2. evolution, exact search
    others = _propose_bits(run, contrib.gains)                                      #    other remainder bits
    final = rank_finalists(run, contrib, evo, exact, others)                            # 3. finalists, halving,
    #                                                                                    4. full-length reference
    # the plan's lrs follow the recipe's schedule over the steps of `train --epochs E` on the same data
    # and then keep the floor of the fine-tunes' cosine (a tenth of them): a device goes on learning after them
    chosen = with_lr_schedule(run.plan_of(final.by_name[final.winner].choice), run.ft.lr_schedule, opts.warmup,
                              opts.epochs * len(run.rows), run.ft.lr_floor)
    report = search_report(run, chosen, contrib, (evo, evo_seconds), (exact, exact_seconds), fits, final, others)
    spec = StepSpec(chosen, rounding=opts.rounding, qas=opts.qas, seed=opts.seed, new_head=opts.new_head)
    return SearchResult(chosen, report, spec.bind(graph))


def search_data(graph: Graph, ds, source: dict, **options) -> SearchResult:
    """``search`` on a Dataset: the loss (``options``' or the data's default, as ``train``'s), the model's int8
    inputs and the labels (an autoencoder's: its anomaly labels, or none); ``options``: SearchOptions' fields."""

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

