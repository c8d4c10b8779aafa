"""``tinytrain plan`` (docs/design.md §5a): search the sparse-update plan with the best measured accuracy under the SRAM
budget, write it as a version-1 plan file (§5b).

    tinytrain plan MODEL --data DATA --sram 256k [--new-head N] [--loss xent|mse] [--held-out F]
                   [--workers N | --executor ray [--address ADDR]] [--time-limit SECONDS] [--json] -o PLAN.json

The search itself is tinytrain/search/run.py (``tinytrain.plan`` in Python); this module turns the options into a
``SearchOptions``, prints the result and writes the files. Method: the gain model proposes, training decides.
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
An autoencoder (``--loss mse``, the default for its DATA without y) is scored by minus its validation reconstruction
error, or by the ROC AUC of that error when DATA has anomaly labels (docs/guide/data.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinytrain.api import plan
from tinytrain.cli_args import non_negative_float, non_negative_int, positive_float, positive_int
from tinytrain.cli_train import add_input_mapping_argument, add_input_size_argument, add_schedule_arguments
from tinytrain.errors import UsageError
from tinytrain.outputs import check_file
from tinytrain.search.exact import MAX_NODES
from tinytrain.search.state import DEFAULT_LR
from tinytrain.search.state import search_report_path
from tinytrain.sizes import format_size


def _ks(spec: str | None) -> tuple[int, ...] | None:
    if not spec:
        return None
    try:
        return tuple(sorted({int(k) for k in spec.split(",")}))
    except ValueError:
        raise UsageError(f"--bias-k {spec}: give comma-separated integers, e.g. 1,2,4,8") from None


def _bits(spec: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(b) for b in spec.split(",") if b.strip()}))
    except ValueError:
        raise UsageError(f"--other-remainder-bits {spec}: give comma-separated bits, e.g. 0,8 (or '' for none)") \
            from None


def _print_rank_check(report: dict) -> None:
    check = report["rank_check"]
    if check is None:
        return
    noise = check["noise_floor"]
    rho = ", ".join(f"{r['steps']} steps {'n/a' if r['spearman'] is None else format(r['spearman'], '.2f')}"
                    for r in check["rungs"])
    seeds = check["final_seeds"]
    print(f"rank check: every finalist at {check['steps']} steps; Spearman of each rung with it: {rho}; noise floor "
          f"there: sd {100 * noise['run_sd']:.2f} points per run, {check['gains_above_noise']} of "
          f"{check['finalists']} gains above {noise['z']:g} x their sd ({100 * noise['gain_sd']:.2f} for one run "
          f"each" + ("" if seeds == 1 else f"; the last rung's {check['last_rung_finalists']}, means of {seeds} "
                     f"seeds: {check['last_rung_above_noise']} above") + ")")


def _gain(g: float, pct: bool) -> str:
    """A gain in accuracy points, or (an autoencoder) in score: the reconstruction error it removed."""
    return f"{100 * g:+6.1f}" if pct else f"{g:+8.4f}"


def cmd_plan(args: argparse.Namespace) -> None:
    out = Path(args.output)
    inputs = [p for p in (args.model, args.data) if p]
    check_file(out, "plan", inputs)
    check_file(search_report_path(out), "search", inputs)
    if args.cache and Path(args.cache).exists() and not Path(args.cache).is_dir():
        raise UsageError(f"--cache {args.cache} is a file; give a folder for the caches")
    result = plan(args.model, args.data, sram=args.sram, new_head=args.new_head, seed=args.seed,
                  input_size=args.input_size, input_mapping=args.input_mapping,
                  progress=not args.no_progress, held_out=args.held_out, split_seed=args.split_seed, val=args.val,
                  lr=args.lr, bias_lr=args.bias_lr, head_lr=args.head_lr, epochs=args.epochs,
                  lr_schedule=args.lr_schedule, warmup=args.warmup,
                  ft_epochs=args.ft_epochs, ft_steps=args.ft_steps, qas=not args.no_qas, rounding=args.rounding,
                  bias_k=_ks(args.bias_k), noise_floor=args.noise_floor, repeats=args.repeats,
                  proposals=args.proposals, max_rungs=args.max_rungs, rung_fraction=args.rung_fraction,
                  workers=args.workers,
                  other_bits=_bits(args.other_remainder_bits), rank_check=not args.no_rank_check,
                  final_seeds=args.final_seeds,
                  executor=args.executor, address=args.address,
                  time_limit=args.time_limit, search_seconds_min=args.search_seconds_min,
                  exact_nodes=args.exact_nodes,
                  population=args.population, generations=args.generations, cache=args.cache,
                  use_cache=not args.no_cache, loss=args.loss)
    details = result.write(out)
    if args.json:
        print(json.dumps({k: v for k, v in result.report.items() if k != "contributions"}))
        return
    _print_report(result, out, details)


def _print_report(result, out: Path, details: Path) -> None:
    report = result.report
    base, noise, options = report["baseline"], report["noise_floor"], report["options"]
    score = {"accuracy": "accuracy", "roc_auc": "ROC AUC of the reconstruction error"}.get(
        report["score"], "score (minus the reconstruction error)")
    print(f"baseline (classifier only): validation {score} {base['accuracy']:.4f} on {noise['n_val']} samples, "
          f"peak SRAM {format_size(base['peak_sram_bytes'])}")
    if score == "accuracy":
        print(f"noise floor: {noise['repeats']} baseline runs, sd {100 * noise['run_sd']:.2f} points per run "
              f"(binomial SE {100 * noise['binomial_se']:.2f}); gains under {noise['z']:g} x "
              f"{100 * noise['gain_sd']:.2f} points count as 0")
    else:
        print(f"noise floor: {noise['repeats']} baseline runs, sd {noise['run_sd']:.4f} per run; gains under "
              f"{noise['z']:g} x {noise['gain_sd']:.4f} count as 0")
    print(f"options: {options['measured']} measured, {options['over_budget_alone']} over the budget alone, "
          f"{noise['options_above']} above the noise floor"
          + ("" if options["measured_complete"] else "; --time-limit stopped the measurement early"))
    print(f"finalists, trained {' -> '.join(str(r['steps']) for r in report['rungs'])} steps (successive halving), "
          f"gain over classifier-only on the validation rows:")
    pct = report["score"] == "accuracy"
    for f in report["finalists"]:
        pred = "   n/a" if f["predicted_gain"] is None else _gain(f["predicted_gain"], pct)
        if not f["measured"]:
            print(f"  {f['name']:22s} {format_size(f['peak_sram_bytes']):>9s}  predicted {pred}  not measured "
                  "(the time limit)")
            continue
        last = f["measured"][-1] if f["full_length"] is None else {**f["full_length"], "steps": report[
            "measurement"]["finalist_steps"]}
        at = f"{100 * last['accuracy']:.1f} %" if pct else f"score {last['accuracy']:.4f}"
        print(f"  {f['name']:22s} {format_size(f['peak_sram_bytes']):>9s}  predicted {pred}  measured "
              f"{_gain(last['gain'], pct)} ({at} at {last['steps']} steps)"
              + ("  <- chosen" if f["name"] == report["chosen"] else ""))
    _print_rank_check(report)
    for what in report["cut_short"]:
        print(f"cut short: {what}")
    chosen = result.plan
    print(f"wrote {out} ({report['chosen']}: bias_last_k {chosen.bias_last_k}, {len(chosen.weights)} weight layers, "
          f"{format_size(report['peak_sram_bytes'])}) and {details}")
    if result.spec is not None:
        print(f"step: {result.spec.recipe()}")


def add_plan_command(sub) -> None:
    s = sub.add_parser("plan", help="search the sparse-update plan with the best measured gain under the SRAM budget")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--data", required=True,
                   help=".npz (x: uint8 NHWC images or int8 / float32 features of the input shape; y labels), a "
                        "class-folder tree, lfw or fashion-mnist[:test][:N] (docs/guide/data.md)")
    s.add_argument("--sram", default="256k", help="SRAM budget of the training step (default 256k)")
    s.add_argument("--new-head", type=positive_int, metavar="N", help="replace the last layer by a new N-class head")
    s.add_argument("--seed", type=non_negative_int, default=0, help="new-head init, sample order, rounding, search")
    s.add_argument("--loss", choices=("xent", "mse"),
                   help="xent: accuracy on labels y; mse: an autoencoder on DATA without y, scored by minus its "
                        "validation reconstruction error (default: mse for an autoencoder's DATA without y)")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    s.add_argument("--held-out", type=float, metavar="FRACTION",
                   help="hold out this fraction of DATA (stratified; as train --held-out): never used here")
    s.add_argument("--split-seed", type=non_negative_int, default=0, help="seed of the --held-out and --val splits")
    s.add_argument("--val", type=float, default=0.25,
                   help="fraction of the (non-held-out) data the contributions are scored on (default 0.25)")
    _add_finetune_arguments(s)
    _add_search_arguments(s)
    _add_run_arguments(s)
    s.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.add_argument("-o", "--output", required=True, help="PLAN.json (version 1); PLAN.search.json beside it")
    s.set_defaults(func=cmd_plan)


def _add_finetune_arguments(s) -> None:
    """The recipe of the contribution fine-tunes, the rungs and the written plan."""
    s.add_argument("--lr", type=positive_float, default=DEFAULT_LR, help="learning rate of the fine-tunes and the plan")
    s.add_argument("--bias-lr", type=positive_float, help="learning rate of the biases (default: --lr)")
    s.add_argument("--head-lr", type=positive_float, help="learning rate of the last layer (default: --lr / --bias-lr)")
    s.add_argument("--epochs", type=int, default=2,
                   help="epochs over the fit rows of the finalists' last rung, the recipe (default 2)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--ft-epochs", type=positive_int, default=1, help="epochs of each contribution fine-tune (default 1)")
    n.add_argument("--ft-steps", type=positive_int, help="steps of each contribution fine-tune")
    add_schedule_arguments(s, "each fine-tune's and rung's own steps (the written plan: over --epochs of the data, "
                           "then 0.1 of it for good)", "cosine", floor="0.1 of it")
    s.add_argument("--no-qas", action="store_true", help="fine-tune with plain int8 SGD (no QAS)")
    s.add_argument("--rounding", choices=("stochastic", "nearest"), default="stochastic",
                   help="rounding of the int8 update: stochastic (a deterministic hash PRNG) or to nearest")


def _add_search_arguments(s) -> None:
    """The search space, the gain model's noise floor and the finalists' successive halving."""
    s.add_argument("--bias-k", help="comma-separated k values of the bias option (default: 1-6, even k to 16, "
                   "every 4th, and all layers)")
    s.add_argument("--noise-floor", type=non_negative_float, default=2.0, metavar="Z",
                   help="gains below Z standard deviations of a gain (from --repeats runs of the baseline) count "
                        "as 0 in the gain model (default 2; 0: all, as published)")
    s.add_argument("--repeats", type=int, default=3, help="runs of the baseline (seeds) the noise floor is "
                   "measured from (default 3)")
    s.add_argument("--proposals", type=non_negative_int, default=4,
                   help="finalists from the evolutionary search's population, beside the exact search's plan "
                        "and the presets (default 4)")
    s.add_argument("--max-rungs", type=positive_int, default=2,
                   help="successive-halving rungs at most (default 2: --rung-fraction of the recipe, then the "
                        "whole)")
    s.add_argument("--rung-fraction", type=float, default=0.75, metavar="F",
                   help="a rung's steps as a fraction of the next rung's (default 0.75; 0.5: halving; deep plans "
                        "start slowly, and shorter rungs drop them before they recover)")
    s.add_argument("--other-remainder-bits", default="0,8", metavar="BITS",
                   help="remainder bits besides the default 4 the finalists may keep (the deepest last-k:N and the "
                        "exact search's plan with them; default 0,8; '' for none)")
    s.add_argument("--final-seeds", type=int, default=1, metavar="N",
                   help="seeds each finalist of the last rung is trained with at full length; its accuracy is their "
                        "mean, with 1/sqrt(N) of one run's noise (default 1)")
    s.add_argument("--no-rank-check", action="store_true",
                   help="skip the last phase: every finalist trained at full length (the reference ranking each "
                        "rung's Spearman correlation is measured against; the winner is then the best of them)")


def _add_run_arguments(s) -> None:
    """Where and how long the search runs: workers, executor, time limit, the evolutionary search, caches."""
    s.add_argument("--workers", type=positive_int, default=1,
                   help="fine-tune processes (default 1); --executor ray: the CPUs of the local Ray instance it "
                        "starts (default: every core)")
    s.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the fine-tunes run: this machine (default) or Ray tasks (pip install "
                        "'tinytrain[cluster]'); the results and the cache are the same")
    s.add_argument("--address", help="--executor ray: the Ray cluster to connect to (e.g. auto, HOST:6379, "
                   "ray://HOST:10001; default: start a local Ray instance)")
    s.add_argument("--time-limit", type=positive_float, metavar="SECONDS",
                   help="seconds the whole search may take (from the model and data loaded): the options' memory "
                        "and fine-tunes stop at half of it (those not measured are left out of the gain model), "
                        "the proposals' searches at 0.6, the finalists' rungs and the rank check at the limit "
                        "(a rung cut short is the last; the rank check is then skipped); the printout and "
                        "PLAN.search.json say what was cut short")
    s.add_argument("--exact-nodes", type=positive_int, default=MAX_NODES, metavar="N",
                   help=f"the branch and bound's node budget (default {MAX_NODES:,}): its progress counts nodes "
                        "against it; a search that reaches it returns the best plan found, not proven optimal")
    s.add_argument("--search-seconds-min", type=float, default=20.0, help=argparse.SUPPRESS)
    s.add_argument("--population", type=positive_int, default=100, help="evolutionary search: population (default 100)")
    s.add_argument("--generations", type=positive_int, default=30, help="evolutionary search: generations (default 30)")
    s.add_argument("--cache", help="folder of the contribution / memory caches (default $TINYTRAIN_CACHE/contrib)")
    s.add_argument("--no-cache", action="store_true", help="measure everything again, keep nothing")
