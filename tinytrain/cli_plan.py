"""``tinytrain plan`` (design.md §5a): measure the contribution of each update option, search the sparse-update
plan that maximizes their sum under the SRAM budget, write it as a version-1 plan file (§5b).

    tinytrain plan MODEL --data DATA --sram 256k [--new-head N] [--held-out F] [--workers N]
                   [--time-limit SECONDS] [--json] -o PLAN.json

Method (tinytrain/search/): contributions by short fine-tunes on the host C engine (search/measure.py,
cached on disk under ``--cache``, default ``$TINYTRAIN_CACHE/contrib``), then an evolutionary search
(search/evolution.py) and an exact branch and bound (search/exact.py) over the separable gain model, each
plan checked with the true peak SRAM of its training step (search/memory.py, what ``tinytrain compile
--plan`` reports). PLAN.json gets the better of the two; PLAN.search.json beside it records both, every
contribution and the timings. With ``--held-out F`` the held-out part of DATA (the same split as ``train
--held-out F``) is never seen: the contributions are measured on a validation part (``--val``) of the rest.
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


def cmd_plan(args: argparse.Namespace) -> None:
    from tinytrain import __version__
    from tinytrain.cli_train import _data, _model, _split
    from tinytrain.data import stratified_split
    from tinytrain.engine_c import default_cache_dir
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.search.evolution import evolve
    from tinytrain.search.exact import branch_and_bound
    from tinytrain.search.measure import (ContributionCache, FineTune, Measurement, dataset_sha256, prepare_job,
                                          run_finetunes)
    from tinytrain.search.memory import MemoryOracle, MonotoneFits
    from tinytrain.search.space import Gains, Space
    from tinytrain.sizes import format_size, parse_size
    from tinytrain.training.qas import UpdateConfig

    t_start = time.time()
    deadline = t_start + args.time_limit if args.time_limit else None
    budget = parse_size(args.sram)
    out = Path(args.output)
    if not out.resolve().parent.is_dir():
        raise UsageError(f"cannot write {out}: its folder does not exist")
    if not 0 < args.val < 1:
        raise UsageError(f"--val {args.val}: give a fraction between 0 and 1")
    graph = _model(args)
    space = Space.of(graph, _ks(args.bias_k))
    x, y = _data(graph, args.data)
    split = _split(args, y)
    rows = split[0] if split is not None else np.arange(len(y))
    fit_idx, val_idx = stratified_split(y[rows], args.val, args.split_seed)
    train_rows, val_rows = rows[fit_idx], rows[val_idx]
    ft = FineTune(lr=args.lr, bias_lr=args.bias_lr, steps=args.ft_steps or args.ft_epochs * len(train_rows),
                  qas=not args.no_qas, rounding=args.rounding, seed=args.seed)
    config = UpdateConfig(rounding=Rounding(ft.rounding), qas=ft.qas, seed=ft.seed)
    progress = not args.no_progress

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

    base = space.plan(space.bias_option(1), ft.lr, ft.bias_lr)
    if not fits_plan(base):
        raise BudgetError(f"even the classifier alone (the baseline every plan updates) needs "
                          f"{format_size(mem(base))} of SRAM, over the {format_size(budget)} budget; "
                          "try a larger --sram")
    # the options that fit the budget alone (under monotone memory no other can be part of a fitting plan)
    options = [("bias", k, 0.0) for k in space.bias_ks if k > 1] + \
              [("weight", i, r) for i in space.weight_layers for r in (0.125, 0.25, 0.5, 1.0)]
    feasible, skipped = [], 0
    bar = _bar(len(options), "memory of each option", progress)
    for kind, i, r in options:
        c = space.bias_option(i) if kind == "bias" else space.weight_option(i, r)
        if fits_plan(space.plan(c, ft.lr, ft.bias_lr)):
            feasible.append((kind, i, r, c))
        else:
            skipped += 1
        bar.update(1)
    bar.close()
    wanted = [("base", 1, 0.0, space.bias_option(1))] + feasible
    todo = [(c.key(), space.plan(c, ft.lr, ft.bias_lr)) for _, _, _, c in wanted if cache.get(c.key()) is None]
    measured_now = []
    complete = True
    if todo:
        job = prepare_job(graph, x, y, train_rows, val_rows, ft, [p for _, p in todo])
        bar = _bar(len(todo), f"fine-tunes ({ft.steps} steps each)", progress)

        def on_result(key, result):
            cache.put(key, result)
            measured_now.append(key)

        complete = run_finetunes(job, [(k, p.to_json()) for k, p in todo], args.workers, on_result,
                                 None if deadline is None else deadline - args.search_seconds_min, bar)
        bar.close()
    base_acc = cache.get(space.bias_option(1).key())
    if base_acc is None:
        raise UsageError("--time-limit ran out before the baseline fine-tune finished; give more time")
    base_acc = base_acc["accuracy"]
    bias, weight = {1: 0.0}, {}
    for kind, i, r, c in feasible:
        got = cache.get(c.key())
        if got is None:
            continue  # not measured in time: left out of the search space
        if kind == "bias":
            bias[i] = got["accuracy"] - base_acc
        else:
            weight[(i, r)] = got["accuracy"] - base_acc
    # noise floor: a validation accuracy on n images has a standard error of sqrt(p (1 - p) / n); a gain within
    # --noise-floor of them is indistinguishable from the fine-tune's noise, and summing many such gains picks
    # plans that update much and gain nothing (benchmarks/results/vww_study.md shows it): they count as 0.
    se = float(np.sqrt(max(base_acc * (1 - base_acc), 1e-12) / len(val_rows)))
    threshold = args.noise_floor * se
    gains = Gains({k: g for k, g in bias.items() if k == 1 or g > threshold},
                  {o: g for o, g in weight.items() if g > threshold})

    fits = MonotoneFits(mem, budget, lambda c: space.plan(c, ft.lr, ft.bias_lr))

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
    mem.save()

    def describe(res: dict, seconds: float) -> dict:
        plan = space.plan(res["choice"], ft.lr, ft.bias_lr)
        extra = {k: v for k, v in res.items() if k not in ("choice", "score", "history")}
        return {"plan": plan.to_json(), "gain": round(res["score"], 6),
                "expected_accuracy": round(base_acc + res["score"], 6), "peak_sram_bytes": mem(plan),
                "fits": mem(plan) <= budget,
                "seconds": round(seconds, 2), **extra}

    results = {"evolution": describe(evo, evo_seconds), "exact": describe(exact, exact_seconds)}
    ranked = sorted((r for r in (("exact", exact), ("evolution", evo)) if results[r[0]]["fits"]),
                    key=lambda r: -round(r[1]["score"], 9))  # equal sums in another order: exact first
    if not ranked:  # memory was not monotone somewhere: never write a plan that does not fit
        raise BudgetError("internal: neither search's plan fits when checked (non-monotone memory); "
                          "please report it")
    winner = ranked[0][0]
    chosen = space.plan((exact if winner == "exact" else evo)["choice"], ft.lr, ft.bias_lr)
    plan_json = chosen.to_json()
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(json.dumps(plan_json, indent=1) + "\n")
    os.replace(tmp, out)
    details = out.with_name(out.stem + ".search.json")
    report = {
        "tinytrain_version": __version__, "model": args.model, "model_sha256": graph.source_sha256,
        "new_head": args.new_head, "data": args.data, "sram_budget_bytes": budget, "plan": plan_json,
        "peak_sram_bytes": mem(chosen), "chosen": winner, **results,
        "baseline": {"plan": base.to_json(), "accuracy": base_acc, "peak_sram_bytes": mem(base)},
        "measurement": {"finetune": asdict(ft), "n_fit": int(len(train_rows)), "n_val": int(len(val_rows)),
                        "held_out": args.held_out, "split_seed": args.split_seed, "val": args.val,
                        "engine": "c", "cache": str(cache.path) if cache.path else None},
        "contributions": {"bias": {str(k): round(v, 6) for k, v in sorted(bias.items())},
                          "weight": [{"conv": i, "ratio": r, "gain": round(g, 6)}
                                     for (i, r), g in sorted(weight.items())]},
        "noise_floor": {"z": args.noise_floor, "standard_error": round(se, 6), "threshold": round(threshold, 6),
                        "options_above": len(gains.bias) - 1 + len(gains.weight)},
        "options": {"total": len(options) + 1, "over_budget_alone": skipped, "measured": len(bias) + len(weight),
                    "measured_complete": complete},
        "finetunes_run": len(measured_now), "finetunes_cached": len(wanted) - len(todo),
        "memory_evaluations": mem.evaluations, "memory_checks_inferred": fits.inferred,
        "seconds": round(time.time() - t_start, 2),
    }
    details.write_text(json.dumps(report, indent=1) + "\n")
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "contributions"}))
        return
    print(f"baseline (classifier only): validation accuracy {base_acc:.4f}, peak SRAM {format_size(mem(base))}")
    print(f"options: {len(bias) + len(weight)} measured ({len(measured_now)} fine-tuned now, "
          f"{len(wanted) - len(todo)} from the cache), {skipped} over the budget alone"
          + ("" if complete else "; --time-limit stopped the measurement early"))
    print(f"noise floor {args.noise_floor:g} x {100 * se:.1f} points (standard error of the validation accuracy): "
          f"{len(gains.bias) - 1 + len(gains.weight)} options above it")
    for name, r in results.items():
        extra = (f", {'proven optimal' if r['proven_optimal'] else 'not proven optimal (time limit)'}, "
                 f"{r['nodes']} nodes") if name == "exact" else f", {r['generations']} generations"
        print(f"{name:9s}: gain {100 * r['gain']:+.2f} points, peak SRAM {format_size(r['peak_sram_bytes'])}"
              f"{extra}, {r['seconds']:.1f} s")
    print(f"wrote {out} ({winner}: bias_last_k {chosen.bias_last_k}, "
          f"{len(chosen.weights)} weight layers) and {details}")


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
    n = s.add_mutually_exclusive_group()
    n.add_argument("--ft-epochs", type=int, default=1, help="epochs of each contribution fine-tune (default 1)")
    n.add_argument("--ft-steps", type=int, help="steps of each contribution fine-tune")
    s.add_argument("--no-qas", action="store_true", help="fine-tune with plain int8 SGD (no QAS)")
    s.add_argument("--rounding", choices=("stochastic", "nearest"), default="stochastic")
    s.add_argument("--bias-k", help="comma-separated k values of the bias option (default: 1-6, even k to 16, "
                   "every 4th, and all layers)")
    s.add_argument("--noise-floor", type=float, default=2.0, metavar="Z",
                   help="gains below Z standard errors of the validation accuracy count as 0 (default 2; 0: all)")
    s.add_argument("--workers", type=int, default=1, help="fine-tune processes (default 1)")
    s.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="cap on the whole run: options not measured by then are left out of the search")
    s.add_argument("--search-seconds-min", type=float, default=20.0, help=argparse.SUPPRESS)
    s.add_argument("--population", type=int, default=100, help="evolutionary search: population (default 100)")
    s.add_argument("--generations", type=int, default=30, help="evolutionary search: generations (default 30)")
    s.add_argument("--cache", help="folder of the contribution / memory caches (default $TINYTRAIN_CACHE/contrib)")
    s.add_argument("--no-cache", action="store_true", help="measure everything again, keep nothing")
    s.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.add_argument("-o", "--output", required=True, help="PLAN.json (version 1); PLAN.search.json beside it")
    s.set_defaults(func=cmd_plan)
