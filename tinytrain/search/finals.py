"""The plan search's finalists (run.py, phases 3 and 4): successive halving of the presets and proposals with the
recipe, the reference ranking at full length, and the search report."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from tinytrain.search.candidates import Candidate, finalists, presets, sparse_presets
from tinytrain.search.halving import successive_halving
from tinytrain.search.measure import unpack_correct
from tinytrain.search.noise import NoiseFloor, paired_se
from tinytrain.search.rank import rung_agreement
from tinytrain.search.state import Contributions, Run, frozen_features, predicted
from tinytrain.training.sparse import Plan
from tinytrain.training.sparse import parse_plan
from tinytrain.version import __version__

BASE = "classifier-only"  # the reference every finalist's gain is measured against

@dataclass(frozen=True)
class Final:
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

    rows = None
    if all("correct" in r for r in results):
        rows = np.mean([unpack_correct(r["correct"], n_val) for r in results], axis=0).tolist()
    elif all("scores" in r for r in results):  # an autoencoder's per-row scores
        rows = np.mean([r["scores"] for r in results], axis=0).tolist()
    return {"accuracy": float(np.mean([r["accuracy"] for r in results])), "rows": rows, "seeds": len(results)}


def _margin(run: Run, noise, results: dict, decision: dict, candidate: str, preset: str) -> float:
    """The lead ``candidate`` needs over ``preset`` (noise.py): run-to-run noise (of means over their seeds) and
    the paired standard error of the two on the validation rows (unpaired, from the accuracies, for a cached
    result without rows). ``results``: ``_pooled`` measurements."""

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


def _measure(run: Run, job: dict, by_name: dict, wanted: list[tuple[str, int]], steps: int, ran: list,
             name: str = "finalists") -> dict:
    """{(name, seed): fine-tune result} of the finalists ``wanted`` trained ``steps`` steps with those seeds
    (sample order, rounding; cached under the option key, @steps and #seedS when not the run's seed): the lrs
    follow the recipe's schedule compressed to ``steps`` (measure.finetune_accuracy). The baseline first; those the
    time limit left unmeasured are absent (``name``: the phase's)."""

    keys = {(n, s): f"{by_name[n].choice.key()}@{steps}" + ("" if s == run.ft.seed else f"#seed{s}")
            for n, s in wanted}
    todo = [(keys[w], run.plan_of(by_name[w[0]].choice).to_json(), steps, w[1])
            for w in sorted(wanted, key=lambda w: w[0] != BASE) if run.cache.get(keys[w]) is None]
    frozen_features(run, job, [parse_plan(t[1]) for t in todo])
    with run.clock.phase(f"{name} ({steps} steps each)", len(todo)) as phase:

        def on_result(key, result):
            run.cache.put(key, result)
            ran.append(key)

        # the reference first and whatever the time (one short fine-tune): without it no gain can be measured
        first = [t for t in todo if t[0].startswith(by_name[BASE].choice.key() + "@")]
        run.executor.run(job, first, on_result, None, phase)
        if not run.executor.run(job, [t for t in todo if t not in first], on_result, run.clock.deadline, phase):
            phase.cut(f"{phase.record.total - phase.record.done} of {phase.record.total} fine-tunes not run")
    got = {w: run.cache.get(keys[w]) for w in wanted}
    return {w: r for w, r in got.items() if r is not None}


def _final_seeds(run: Run) -> list[int]:
    """The seeds of a finalist's full-length measurement in the last rung (``final_seeds`` of them)."""
    return [run.ft.seed + j for j in range(run.opts.final_seeds)]


def _reference(run: Run, job: dict, by_name: dict, rungs: list, full_steps: int, ran: list) -> dict:
    """The last phase: every finalist trained for the whole recipe (the reference ranking; the last rung's are
    cached, with their ``final_seeds`` seeds; the others with one), the baseline repeated with other seeds at that
    length (the noise floor of the gains ranked), and each rung's Spearman correlation with the reference
    (rank.py). A finalist's full-length accuracy is the mean over its seeds. A finalist the first rung dropped
    whose one run beats the last rung's best mean is trained with the final seeds too before it can be chosen:
    the best of many single runs is not compared with means (it is high by chance more often)."""

    base, final = BASE, _final_seeds(run)
    repeats = [run.ft.seed + j for j in range(max(run.opts.repeats, run.opts.final_seeds))]
    seeds = {n: repeats if n == base else final if n in rungs[-1].accuracy else final[:1] for n in by_name}
    wanted = [(n, s) for n in by_name for s in seeds[n]]
    got = _measure(run, job, by_name, wanted, full_steps, ran, "rank check")
    if len(got) < len(wanted):
        return None  # the time limit: no reference ranking
    results = {n: _pooled([got[(n, s)] for s in seeds[n]], len(run.val_rows)) for n in by_name}
    lead = max(results[n]["accuracy"] for n in rungs[-1].accuracy)
    challengers = [n for n in by_name if len(seeds[n]) < len(final) and results[n]["accuracy"] > lead]
    if challengers:
        seeds.update({n: final for n in challengers})
        more = [(n, s) for n in challengers for s in final]
        got.update(_measure(run, job, by_name, more, full_steps, ran, "rank check's challengers"))
        if any(w not in got for w in more):
            return None
        results.update({n: _pooled([got[(n, s)] for s in final], len(run.val_rows)) for n in challengers})
    acc = {n: r["accuracy"] for n, r in results.items()}
    noise = NoiseFloor(tuple(got[(base, s)]["accuracy"] for s in repeats), len(run.val_rows), run.opts.noise_floor)
    above = [n for n in acc if n != base
             and acc[n] - acc[base] > noise.threshold_of(results[n]["seeds"], results[base]["seeds"])]
    return {"steps": full_steps, "results": results, "accuracy": acc, "noise": noise,
            "rungs": rung_agreement([(r.steps, r.accuracy) for r in rungs], acc), "gains_above_noise": len(above),
            "final_seeds": len(final), "last_rung": [n for n in rungs[-1].kept if n != base],
            "last_rung_above_noise": sum(n in rungs[-1].kept for n in above)}


def _candidates(run: Run, evo: dict, exact: dict, others: dict[int, dict]) -> list:
    """The finalists: the presets that fit (dense and sparse) and the proposals at the default remainder bits, then
    for each other bits the deepest last-k:N that fits with them and the exact search's plan (candidates.py)."""

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


def rank_finalists(run: Run, contrib: Contributions, evo: dict, exact: dict, others: dict[int, dict]) -> Final:
    """Phase 3: the finalists ranked by training them (successive halving), then, with ``rank_check``, every one
    at full length: the winner is then the best of them all at full length (halving.py's rule against the
    presets)."""

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
        done = [n for n in names if all((n, s) in got for s in seeds)]  # the time limit may leave some out
        last.clear()
        last.update({n: _pooled([got[(n, s)] for s in seeds], len(run.val_rows)) for n in done})
        return {n: last[n]["accuracy"] for n in done}

    def rank(max_rungs: int, measure_, noise) -> tuple[str, list]:
        return successive_halving(
            [c.name for c in cands], BASE, measure_, full_steps,
            lambda n: run.mem(run.plan_of(by_name[n].choice)), max_rungs,
            presets=frozenset(c.name for c in cands if c.preset),
            margin=lambda cand, preset: _margin(run, noise, last, decision, cand, preset),
            fraction=run.opts.rung_fraction)

    winner, rungs = rank(run.opts.max_rungs, measure, contrib.noise)
    accuracy, ref = rungs[-1].accuracy[winner], None
    if run.opts.rank_check and run.clock.out_of_time():
        run.clock.skip("rank check", "not run: the time limit was reached; the plan is the last rung's best")
    elif run.opts.rank_check:
        ref = _reference(run, contrib.job, by_name, rungs, full_steps, ran)
        if ref is None:
            run.clock.records[-1].cut_short += "; no reference ranking: the plan is the last rung's best"
    if ref is not None:
        last.clear()
        last.update(ref["results"])
        decision.clear()
        # the noise of the full-length runs (the baseline's other seeds at that length) decides the margin
        winner = rank(1, lambda names, steps: {n: ref["accuracy"][n] for n in names}, ref["noise"])[0]
        accuracy = ref["accuracy"][winner]
    run.mem.save()
    return Final(cands, by_name, winner, accuracy, rungs, decision, ran, full_steps, ref)


def _finalist_json(run: Run, c, contrib: Contributions, final: Final) -> dict:
    rungs = final.rungs
    measured = [{"steps": r.steps, "accuracy": r.accuracy[c.name],
                 "gain": round(r.accuracy[c.name] - r.accuracy["classifier-only"], 6)}
                for r in rungs if c.name in r.accuracy]
    ref = final.reference
    full = None if ref is None else {"accuracy": ref["accuracy"][c.name], "gain": round(
        ref["accuracy"][c.name] - ref["accuracy"]["classifier-only"], 6), "seeds": ref["results"][c.name]["seeds"]}
    pred = predicted(c.choice, contrib.bias, contrib.weight)
    gains = contrib.gains
    return {"name": c.name, "preset": c.preset, "plan": run.plan_of(c.choice).to_json(),
            "peak_sram_bytes": run.mem(run.plan_of(c.choice)),
            "predicted_gain": None if pred is None else round(pred, 6),
            "model_score": round(gains.score(c.choice), 6) if c.choice.k in gains.bias and all(
                o in gains.weight for o in c.choice.weights) else None,
            "measured": measured, "last_rung": len(measured) == len(rungs), "full_length": full}


def _rank_check_json(final: Final) -> dict | None:
    """PLAN.search.json's "rank_check": each rung's Spearman correlation with the full-length ranking of the
    finalists, and the noise floor at full length beside the gains it ranks."""
    ref = final.reference
    if ref is None:
        return None
    return {"steps": ref["steps"], "rungs": ref["rungs"], "noise_floor": ref["noise"].to_json(),
            "final_seeds": ref["final_seeds"], "gains_above_noise": ref["gains_above_noise"],
            "finalists": len(ref["accuracy"]) - 1, "last_rung_finalists": len(ref["last_rung"]),
            "last_rung_above_noise": ref["last_rung_above_noise"], "chosen_at_full_length": True}


def _proposal_json(run: Run, res: dict) -> dict:
    plan = run.plan_of(res["choice"])
    return {"plan": plan.to_json(), "gain": round(res["score"], 6), "peak_sram_bytes": run.mem(plan),
            "fits": run.mem(plan) <= run.opts.sram_bytes}


def search_report(run: Run, chosen: Plan, contrib: Contributions, evo: tuple, exact: tuple, fits, final: Final,
            others: dict) -> dict:
    """PLAN.search.json."""

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
        "seconds": round(time.time() - run.clock.start, 2),
        "phases": run.clock.to_json(), "time_limit": opts.time_limit, "cut_short": run.clock.cut_short(),
    }

