"""``tinytrain plan`` (docs/design.md §5a): search the sparse-update plan with the best measured accuracy under the SRAM
budget, write it as a version-1 plan file (§5b).

    tinytrain plan MODEL --data DATA --sram 256k [--new-head N] [--held-out F] [--workers N]
                   [--time-limit SECONDS] [--json] -o PLAN.json

Method (tinytrain/search/): the gain model proposes, training decides.
1. Contributions by short fine-tunes on the host C engine (search/measure.py, cached on disk under ``--cache``,
   default ``$TINYTRAIN_CACHE/contrib``); the classifier-only baseline is run ``--repeats`` times with other
   seeds, and gains within ``--noise-floor`` standard deviations of that run-to-run noise count as 0
   (search/noise.py).
2. An evolutionary search (search/evolution.py) and an exact branch and bound (search/exact.py) over the
   additive gain model, each plan checked with the true peak SRAM of its training step (search/memory.py, what
   ``tinytrain compile --plan`` reports).
3. Finalists: every preset that fits (classifier-only, bias-only, every last-k:N; search/candidates.py), the
   exact search's plan and the best of the evolution's population, ranked by training them with the recipe
   (``--epochs`` over the fit rows, the plan's learning rates) by successive halving (search/halving.py). The
   best measured finalist is PLAN.json, so the result is never a plan that measured worse than a preset;
   PLAN.search.json beside it records every finalist's predicted (additive) and measured gain, the noise floor,
   every contribution and the timings. With ``--held-out F`` the held-out part of DATA (the same split as
   ``train --held-out F``) is never seen: everything is measured on a validation part (``--val``) of the rest.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
import os
import sys
import time
from pathlib import Path

import numpy as np

from tinytrain.cli_train import add_schedule_arguments
from tinytrain.errors import BudgetError, UsageError

DEFAULT_LR = 0.01


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled, leave=False, mininterval=0.5)


def _ks(spec: str | None) -> tuple[int, ...] | None:
    if not spec:
        return None
    try:
        return tuple(sorted({int(k) for k in spec.split(",")}))
    except ValueError:
        raise UsageError(f"--bias-k {spec}: give comma-separated integers, e.g. 1,2,4,8") from None


def _predicted(choice, bias: dict, weight: dict) -> float | None:
    """The additive model's gain of a plan from the raw (unfloored) contributions; None if one is unmeasured."""
    if choice.k not in bias or any((i, r) not in weight for i, r in choice.weights):
        return None
    return bias[choice.k] + sum(weight[(i, r)] for i, r in choice.weights)


def cmd_plan(args: argparse.Namespace) -> None:
    from tinytrain import __version__
    from tinytrain.cli_train import _data, _model, _split, check_schedule_arguments
    from tinytrain.data import stratified_split
    from tinytrain.engine_c import default_cache_dir
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.search.candidates import Candidate, finalists, presets
    from tinytrain.search.evolution import evolve
    from tinytrain.search.exact import branch_and_bound
    from tinytrain.search.halving import successive_halving
    from tinytrain.search.measure import (ContributionCache, FineTune, Measurement, add_features, dataset_sha256,
                                          prepare_job, run_finetunes)
    from tinytrain.search.memory import MemoryOracle, MonotoneFits
    from tinytrain.search.noise import NoiseFloor
    from tinytrain.search.space import Gains, Space
    from tinytrain.sizes import format_size, parse_size
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan, with_lr_schedule

    t_start = time.time()
    deadline = t_start + args.time_limit if args.time_limit else None
    budget = parse_size(args.sram)
    out = Path(args.output)
    if not out.resolve().parent.is_dir():
        raise UsageError(f"cannot write {out}: its folder does not exist")
    if not 0 < args.val < 1:
        raise UsageError(f"--val {args.val}: give a fraction between 0 and 1")
    if args.repeats < 2:
        raise UsageError(f"--repeats {args.repeats}: the noise floor needs at least 2 runs of the baseline")
    if args.epochs < 1:
        raise UsageError(f"--epochs {args.epochs}: give a positive number of epochs")
    check_schedule_arguments(args)
    graph = _model(args)
    space = Space.of(graph, _ks(args.bias_k))
    x, y = _data(graph, args.data)
    split = _split(args, y)
    rows = split[0] if split is not None else np.arange(len(y))
    fit_idx, val_idx = stratified_split(y[rows], args.val, args.split_seed)
    train_rows, val_rows = rows[fit_idx], rows[val_idx]
    ft = FineTune(lr=args.lr, bias_lr=args.bias_lr, head_lr=args.head_lr, lr_schedule=args.lr_schedule or "constant",
                  warmup=args.warmup,
                  steps=args.ft_steps or args.ft_epochs * len(train_rows), qas=not args.no_qas,
                  rounding=args.rounding, seed=args.seed)
    config = UpdateConfig(rounding=Rounding(ft.rounding), qas=ft.qas, seed=ft.seed)
    progress = not args.no_progress

    def plan_of(choice):
        return space.plan(choice, ft.lr, ft.bias_lr, ft.head_lr)

    cache_root = None if args.no_cache else Path(args.cache) if args.cache else default_cache_dir() / "contrib"
    head = f"head{args.new_head}" if args.new_head else "nohead"
    mem = MemoryOracle(graph, config, cache_root / f"memory-{graph.source_sha256[:16]}-{head}.json"
                       if cache_root else None)
    ident = Measurement(graph.source_sha256, args.new_head, args.seed, dataset_sha256(x, y), args.held_out,
                        args.split_seed, args.val, ft)
    cache = ContributionCache(cache_root / f"{ident.key()}.json" if cache_root else None,
                              {"model": args.model, "data": args.data, **asdict(ident)})

    def fits_plan(plan) -> bool:
        return mem(plan) <= budget

    base_choice = space.bias_option(1)
    base = plan_of(base_choice)
    if not fits_plan(base):
        raise BudgetError(f"even the classifier alone (the baseline every plan updates) needs "
                          f"{format_size(mem(base))} of SRAM, over the {format_size(budget)} budget; "
                          "try a larger --sram")
    # 1. contributions: the options that fit the budget alone (under monotone memory no other can be part of a
    # fitting plan), each fine-tuned alone over the baseline, and the baseline repeated with other seeds
    options = [("bias", k, 0.0) for k in space.bias_ks if k > 1] + \
              [("weight", i, r) for i in space.weight_layers for r in (0.125, 0.25, 0.5, 1.0)]
    feasible, skipped = [], 0
    bar = _bar(len(options), "memory of each option", progress)
    for kind, i, r in options:
        c = space.bias_option(i) if kind == "bias" else space.weight_option(i, r)
        if fits_plan(plan_of(c)):
            feasible.append((kind, i, r, c))
        else:
            skipped += 1
        bar.update(1)
    bar.close()
    seeds = [ft.seed + j for j in range(args.repeats)]
    repeat_keys = [base_choice.key() if s == ft.seed else f"{base_choice.key()}#seed{s}" for s in seeds]
    tasks = [(c.key(), plan_of(c).to_json()) for _, _, _, c in [(0, 0, 0, base_choice)] + feasible]
    tasks += [(key, base.to_json(), None, s) for key, s in zip(repeat_keys, seeds) if s != ft.seed]
    todo = [t for t in tasks if cache.get(t[0]) is None]
    measured_now, finalists_run = [], []
    complete = True
    job = prepare_job(graph, x, y, train_rows, val_rows, ft, [parse_plan(t[1]) for t in todo])
    if todo:
        bar = _bar(len(todo), f"fine-tunes ({ft.steps} steps each)", progress)

        def on_result(key, result):
            cache.put(key, result)
            measured_now.append(key)

        # the baseline and its repeats first: without them nothing can be compared
        todo.sort(key=lambda t: t[0].split("#")[0] != base_choice.key())
        complete = run_finetunes(job, todo, args.workers, on_result,
                                 None if deadline is None else deadline - args.search_seconds_min, bar)
        bar.close()
    repeats = [cache.get(k) for k in repeat_keys]
    if any(r is None for r in repeats):
        raise UsageError("--time-limit ran out before the baseline's repeated fine-tunes finished; give more time")
    noise = NoiseFloor(tuple(r["accuracy"] for r in repeats), len(val_rows), args.noise_floor)
    base_acc = repeats[0]["accuracy"]
    bias, weight = {1: 0.0}, {}
    for kind, i, r, c in feasible:
        got = cache.get(c.key())
        if got is None:
            continue  # not measured in time: left out of the search space
        if kind == "bias":
            bias[i] = got["accuracy"] - base_acc
        else:
            weight[(i, r)] = got["accuracy"] - base_acc
    # gains within the noise of repeated runs count as 0: summing many of them picks plans that update much and
    # gain nothing (benchmarks/results/vww_study.md shows it)
    gains = Gains({k: g for k, g in bias.items() if k == 1 or g > noise.threshold},
                  {o: g for o, g in weight.items() if g > noise.threshold})

    # 2. the gain model proposes: evolution and an exact branch and bound
    fits = MonotoneFits(mem, budget, plan_of)
    t0 = time.time()
    share = None if deadline is None else max(args.search_seconds_min / 2, (deadline - t0) / 2)
    bar = _bar(args.generations, "evolutionary search", progress)
    evo = evolve(gains, fits, population=args.population, generations=args.generations, seed=args.seed,
                 deadline=None if share is None else t0 + share, progress=bar)
    bar.close()
    evo_seconds = time.time() - t0
    t0 = time.time()
    bar = _bar(0, "branch and bound (nodes)", progress)
    exact = branch_and_bound(gains, fits, deadline=None if deadline is None else max(deadline, t0 + share),
                             progress=bar)
    bar.close()
    exact_seconds = time.time() - t0

    # 3. finalists: the presets that fit + the model's proposals, ranked by training them (successive halving)
    proposals = [Candidate("exact", exact["choice"], False)]
    proposals += [Candidate(f"evolution #{j + 1}", c, False)
                  for j, c in enumerate(evo["population"][: args.proposals]) if fits_plan(plan_of(c))]
    cands = finalists(presets(space, lambda c: fits_plan(plan_of(c))), proposals)
    by_name = {c.name: c for c in cands}
    full_steps = args.epochs * len(train_rows)

    def measure(names: list[str], steps: int) -> dict[str, float]:
        keys = {n: f"{by_name[n].choice.key()}@{steps}" for n in names}
        todo_ = [(keys[n], plan_of(by_name[n].choice).to_json(), steps, ft.seed)
                 for n in names if cache.get(keys[n]) is None]
        add_features(job, [parse_plan(t[1]) for t in todo_])
        bar_ = _bar(len(todo_), f"finalists ({steps} steps each)", progress)

        def on_result_(key, result):
            cache.put(key, result)
            finalists_run.append(key)

        run_finetunes(job, todo_, args.workers, on_result_, None, bar_)
        bar_.close()
        return {n: cache.get(keys[n])["accuracy"] for n in names}

    winner, rungs = successive_halving([c.name for c in cands], "classifier-only", measure, full_steps,
                                       lambda n: mem(plan_of(by_name[n].choice)), args.max_rungs)
    mem.save()
    # the plan's lrs follow the recipe's schedule over the steps of `train --epochs E` on the same data
    chosen = with_lr_schedule(plan_of(by_name[winner].choice), args.lr_schedule, args.warmup, args.epochs * len(rows))
    plan_json = chosen.to_json()
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(json.dumps(plan_json, indent=1) + "\n")
    os.replace(tmp, out)

    def finalist_json(c: Candidate) -> dict:
        measured = [{"steps": r.steps, "accuracy": r.accuracy[c.name],
                     "gain": round(r.accuracy[c.name] - r.accuracy["classifier-only"], 6)}
                    for r in rungs if c.name in r.accuracy]
        pred = _predicted(c.choice, bias, weight)
        return {"name": c.name, "preset": c.preset, "plan": plan_of(c.choice).to_json(),
                "peak_sram_bytes": mem(plan_of(c.choice)),
                "predicted_gain": None if pred is None else round(pred, 6),
                "model_score": round(gains.score(c.choice), 6) if c.choice.k in gains.bias and all(
                    o in gains.weight for o in c.choice.weights) else None,
                "measured": measured, "last_rung": len(measured) == len(rungs)}

    def proposal_json(res: dict) -> dict:
        plan = plan_of(res["choice"])
        return {"plan": plan.to_json(), "gain": round(res["score"], 6), "peak_sram_bytes": mem(plan),
                "fits": mem(plan) <= budget}

    final_rung = rungs[-1]
    details = out.with_name(out.stem + ".search.json")
    report = {
        "tinytrain_version": __version__, "model": args.model, "model_sha256": graph.source_sha256,
        "new_head": args.new_head, "data": args.data, "sram_budget_bytes": budget, "plan": plan_json,
        "peak_sram_bytes": mem(chosen), "chosen": winner, "preset_chosen": by_name[winner].preset,
        "validation_accuracy": final_rung.accuracy[winner],
        "validation_se": round(float(np.sqrt(final_rung.accuracy[winner] * (1 - final_rung.accuracy[winner])
                                             / len(val_rows))), 6),
        "finalists": [finalist_json(c) for c in cands],
        "rungs": [{"steps": r.steps, "kept": list(r.kept)} for r in rungs],
        "evolution": {**proposal_json(evo), "generations": evo["generations"], "seconds": round(evo_seconds, 2)},
        "exact": {**proposal_json(exact), "proven_optimal": exact["proven_optimal"], "nodes": exact["nodes"],
                  "seconds": round(exact_seconds, 2)},
        "baseline": {"plan": base.to_json(), "accuracy": base_acc, "peak_sram_bytes": mem(base)},
        "measurement": {"finetune": asdict(ft), "finalist_steps": full_steps, "n_fit": int(len(train_rows)),
                        "n_val": int(len(val_rows)), "held_out": args.held_out, "split_seed": args.split_seed,
                        "val": args.val, "engine": "c", "cache": str(cache.path) if cache.path else None},
        "contributions": {"bias": {str(k): round(v, 6) for k, v in sorted(bias.items())},
                          "weight": [{"conv": i, "ratio": r, "gain": round(g, 6)}
                                     for (i, r), g in sorted(weight.items())]},
        "noise_floor": {**noise.to_json(), "options_above": len(gains.bias) - 1 + len(gains.weight)},
        "options": {"total": len(options) + 1, "over_budget_alone": skipped, "measured": len(bias) + len(weight),
                    "measured_complete": complete},
        "finetunes_run": len(measured_now), "finetunes_cached": len(tasks) - len(todo),
        "finalist_finetunes_run": len(finalists_run),
        "memory_evaluations": mem.evaluations, "memory_checks_inferred": fits.inferred,
        "seconds": round(time.time() - t_start, 2),
    }
    details.write_text(json.dumps(report, indent=1) + "\n")
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "contributions"}))
        return
    print(f"baseline (classifier only): validation accuracy {base_acc:.4f} on {len(val_rows)} images, "
          f"peak SRAM {format_size(mem(base))}")
    print(f"noise floor: {args.repeats} baseline runs, sd {100 * noise.run_sd:.2f} points per run "
          f"(binomial SE {100 * noise.binomial_se:.2f}); gains under {args.noise_floor:g} x "
          f"{100 * noise.gain_sd:.2f} points count as 0")
    print(f"options: {len(bias) + len(weight)} measured, {skipped} over the budget alone, "
          f"{len(gains.bias) - 1 + len(gains.weight)} above the noise floor"
          + ("" if complete else "; --time-limit stopped the measurement early"))
    print(f"finalists, trained {' -> '.join(str(r.steps) for r in rungs)} steps (successive halving), "
          f"gain over classifier-only on the validation rows:")
    for c in cands:
        f = finalist_json(c)
        pred = "   n/a" if f["predicted_gain"] is None else f"{100 * f['predicted_gain']:+6.1f}"
        last = f["measured"][-1]
        print(f"  {c.name:22s} {format_size(f['peak_sram_bytes']):>9s}  predicted {pred}  measured "
              f"{100 * last['gain']:+6.1f} ({100 * last['accuracy']:.1f} % at {last['steps']} steps)"
              + ("  <- chosen" if c.name == winner else ""))
    print(f"wrote {out} ({winner}: bias_last_k {chosen.bias_last_k}, {len(chosen.weights)} weight layers, "
          f"{format_size(mem(chosen))}) and {details}")


def add_plan_command(sub) -> None:
    s = sub.add_parser("plan", help="search the sparse-update plan with the best measured gain under the SRAM budget")
    s.add_argument("model")
    s.add_argument("--data", required=True,
                   help=".npz (x uint8 NHWC, y labels), a class-folder tree, lfw or fashion-mnist[:test][:N]")
    s.add_argument("--sram", default="256k", help="SRAM budget of the training step (default 256k)")
    s.add_argument("--new-head", type=int, metavar="N", help="replace the last layer by a new N-class head")
    s.add_argument("--seed", type=int, default=0, help="new-head init, sample order, rounding, search")
    s.add_argument("--held-out", type=float, metavar="FRACTION",
                   help="hold out this fraction of DATA (stratified; as train --held-out): never used here")
    s.add_argument("--split-seed", type=int, default=0, help="seed of the --held-out and --val splits")
    s.add_argument("--val", type=float, default=0.25,
                   help="fraction of the (non-held-out) data the contributions are scored on (default 0.25)")
    s.add_argument("--lr", type=float, default=DEFAULT_LR, help="learning rate of the fine-tunes and the plan")
    s.add_argument("--bias-lr", type=float, help="learning rate of the biases (default: --lr)")
    s.add_argument("--head-lr", type=float, help="learning rate of the last layer (default: --lr / --bias-lr)")
    s.add_argument("--epochs", type=int, default=2,
                   help="epochs over the fit rows of the finalists' last rung, the recipe (default 2)")
    add_schedule_arguments(s, "each fine-tune's steps (the written plan: over --epochs of the data)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--ft-epochs", type=int, default=1, help="epochs of each contribution fine-tune (default 1)")
    n.add_argument("--ft-steps", type=int, help="steps of each contribution fine-tune")
    s.add_argument("--no-qas", action="store_true", help="fine-tune with plain int8 SGD (no QAS)")
    s.add_argument("--rounding", choices=("stochastic", "nearest"), default="stochastic")
    s.add_argument("--bias-k", help="comma-separated k values of the bias option (default: 1-6, even k to 16, "
                   "every 4th, and all layers)")
    s.add_argument("--noise-floor", type=float, default=2.0, metavar="Z",
                   help="gains below Z standard deviations of a gain (from --repeats runs of the baseline) count "
                        "as 0 in the gain model (default 2; 0: all, as published)")
    s.add_argument("--repeats", type=int, default=3, help="runs of the baseline (seeds) the noise floor is "
                   "measured from (default 3)")
    s.add_argument("--proposals", type=int, default=4,
                   help="finalists from the evolutionary search's population, beside the exact search's plan "
                        "and the presets (default 4)")
    s.add_argument("--max-rungs", type=int, default=2,
                   help="successive-halving rungs at most (default 2: half the recipe, then the whole; deep plans "
                        "can start slowly, shorter rungs drop them before they recover)")
    s.add_argument("--workers", type=int, default=1, help="fine-tune processes (default 1)")
    s.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="cap on the contribution measurement: options not measured by then are left out of the "
                        "gain model (the finalists are always trained)")
    s.add_argument("--search-seconds-min", type=float, default=20.0, help=argparse.SUPPRESS)
    s.add_argument("--population", type=int, default=100, help="evolutionary search: population (default 100)")
    s.add_argument("--generations", type=int, default=30, help="evolutionary search: generations (default 30)")
    s.add_argument("--cache", help="folder of the contribution / memory caches (default $TINYTRAIN_CACHE/contrib)")
    s.add_argument("--no-cache", action="store_true", help="measure everything again, keep nothing")
    s.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.add_argument("-o", "--output", required=True, help="PLAN.json (version 1); PLAN.search.json beside it")
    s.set_defaults(func=cmd_plan)
