"""A fleet that learns together, measured: the study (``fleet.py``) and the tuning of its recipe on a validation split
(``fleet.py tune``).

Fleet study: federated fine-tuning of the compiled training step across non-IID devices, on Flower.

    python benchmarks/fleet.py [--devices 20 --per-device 100 --classes 2 --rounds 200]

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared/models) with a new 10-class head (seed 0),
the plan classifier-only (``last-k:1``: the new head's weights with 4-bit remainders and its bias) at lr 0.03
(as good as 0.01 in the transfer study's sweep, 85.5 % against 85.6 %, and 3x the progress per round) with a
cosine lr schedule spanning each run (``--lr-schedule``; the fleet's devices count their steps on the global
state's counter, so the schedule spans the fleet's rounds), batch-1 SGD, QAS, stochastic rounding. The defaults
(``--local-steps 10`` a round, ``--server-lr 3``; centralized ``--central-lr 0.03 --central-epochs 10``) were
chosen on a validation split by ``benchmarks/fleet.py tune`` (benchmarks/results/fleet_tune.md). Data:
Fashion-MNIST (Debian
``dataset-fashion-mnist``); ``--devices`` simulated devices each hold ``--per-device`` images of ``--classes``
classes only (non-IID shards from the stratified pool ``--pool``, no image on two devices). Every device trains
on the host C engine (the emitted training step, ``tinytrain train --engine c``'s code). Rows, all scored on the
official 10,000 test images (``--test``):

- global: ``--rounds`` rounds of ``tinytrain fleet`` (``--engine local``: in this process, the bytes of Flower's
  simulation engine, tests/federated/test_fleet.py; ``flower``: on Flower's simulation engine, Ray, ``--cpus`` devices at a
  time), ``--local-steps`` steps (or ``--local-epochs`` epochs) per device per round; the test accuracy of the
  global state after every round;
- best single device: each device trains alone on its own shard for the fleet's passes over its data (rounds x
  local steps / per-device epochs); the best of the devices, and their mean;
- centralized: the same plan and engine trained on the union of the shards, ``--central-epochs`` epochs at
  ``--central-lr``.

Bytes per device per round: the state sent down plus the state sent back (tt_state_load bytes; Flower's framing
not counted). Writes benchmarks/results/fleet_study.{md,json}; work files in build/fleet_study.

**tune**: Choosing the fleet study's settings on a validation split (never the test set): federated rounds and the
centralized baseline of the classifier-only plan, run by the host C engine on features computed once: the frozen
layers run once per image (host C forward, ``simulator.split_frozen``), the C training step of the rest every step
(bit-identical to the whole step, docs/design.md §4; checked against the simulator's state bytes).

    python benchmarks/fleet.py tune [--grid fleet|central|all] [--workers 2]

The devices' shards are those of ``benchmarks/fleet.py`` (20 devices x 100 images of 2 classes from
``fashion-mnist:12000``, seed 0); the validation split is ``--val-per-class`` images per class of the same pool that
no device holds. Each configuration: lr, rounds R, local steps K per round (a device trains on the first K rows of a
fresh permutation of its shard each round; K = per-device is one local epoch), server lr (aggregate.py's rate), the
cosine lr schedule spanning the fleet's R x K steps. Writes benchmarks/results/fleet_tune.{md,json}.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from fractions import Fraction  # noqa: E402
from multiprocessing import get_context  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)

MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"

# ---- the study ------------------------------------------------------------------------------------------------

ENGINES = {"flower": "flower (Flower's simulation engine)",
           "local": "local (in-process rounds: the bytes Flower's simulation engine gives, tests/federated/test_fleet.py)"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=20)
    p.add_argument("--per-device", type=int, default=100)
    p.add_argument("--classes", type=int, default=2, help="classes per device (non-IID)")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--local-epochs", type=int, default=2)
    p.add_argument("--local-steps", type=int, default=10,
                   help="steps per device per round (0: --local-epochs epochs)")
    p.add_argument("--server-lr", default="3", help="the aggregation's server lr, a fraction a/b")
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--central-lr", type=float, default=0.03, help="the centralized baseline's lr (0: --lr)")
    p.add_argument("--central-epochs", type=int, default=10,
                   help="the centralized baseline's epochs (0: the fleet's passes over each shard)")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="cosine")
    p.add_argument("--pool", default="fashion-mnist:12000")
    p.add_argument("--test", default="fashion-mnist:test")
    p.add_argument("--engine", choices=("flower", "local"), default="local")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fleet_study"))
    return p.parse_args(argv)


def alone(built, device_rows, epochs: int, schedule: str, plan, seed: int):
    """The test-ready state of the plan trained by the host C engine on ``device_rows`` of the pool alone (``plan``
    with its lr; ``schedule`` spans this run's steps and decays to 0, as ``tune`` chose it: an offline baseline
    need not go on learning, and the floor the devices keep costs a finite run accuracy)."""
    from tinytrain.api import train

    ds = built.dataset
    result = train(built.graph, (ds.x[device_rows], ds.y[device_rows]), plan=plan, epochs=epochs, engine="c",
                   seed=seed, lr_schedule=schedule, lr_floor=0.0)
    return result.state


def passes(args) -> int:
    """The fleet's passes over each device's shard: rounds x local steps / per-device (at least 1)."""
    steps = args.local_steps if args.local_steps else args.local_epochs * args.per_device
    return max(1, round(args.rounds * steps / args.per_device))


def run_fleet(args, task, scorer):
    from tinytrain.federated.server import FleetServer, drive_local
    from tinytrain.federated.strategy import simulate

    state_dir = ROOT / "build" / "fleet_study" / "state"
    shutil.rmtree(state_dir, ignore_errors=True)
    server = FleetServer(task, args.rounds, state_dir, scorer)
    t0 = time.time()
    if args.engine == "flower":
        simulate(server, cpus=args.cpus)
    else:
        drive_local(server)
    return server, time.time() - t0


def baselines(args, built, scorer, plan):
    """(centralized accuracy, per-device accuracies alone, seconds): trained two at a time (threads: the C step
    runs without the GIL). The devices alone: the fleet's passes over their shard at the fleet's lr; centralized:
    ``--central-epochs`` at ``--central-lr`` (chosen on the validation split, benchmarks/fleet.py tune)."""
    from dataclasses import replace

    union = np.sort(np.concatenate(built.shards))
    central = replace(plan, lr=args.central_lr) if args.central_lr else plan
    jobs = [(union, args.central_epochs or passes(args), central)] + [(r, passes(args), plan) for r in built.shards]
    t0 = time.time()
    with ThreadPoolExecutor(args.cpus) as pool:
        states = list(pool.map(lambda job: alone(built, job[0], job[1], args.lr_schedule, job[2], built.task.seed),
                               jobs))
    accs = [scorer(s) for s in states]
    return accs[0], accs[1:], time.time() - t0


def study_main(argv=None) -> dict:
    from tinytrain.api import load_data
    from tinytrain.federated import fleet_task
    from tinytrain.federated.score import Scorer
    from tinytrain.federated.task import local

    args = parse_args(argv)
    t_all = time.time()
    task = fleet_task(str(MODEL), args.pool, update="last-k:1", lr=args.lr, devices=args.devices,
                      per_device=args.per_device, classes_per_device=args.classes, local_epochs=args.local_epochs,
                      new_head=10, seed=0, lr_schedule=args.lr_schedule, rounds=args.rounds,
                      local_steps=args.local_steps or None, server_lr=args.server_lr)
    built = local(task)
    t0 = time.time()
    test = load_data(args.test)
    scorer = Scorer(built.graph, built.step_graph, test.x, test.y)
    t_features = time.time() - t0
    server, t_fleet = run_fleet(args, task, scorer)
    central, single, t_base = baselines(args, built, scorer, task.plan)
    history = server.progress.history
    final = history[-1]["accuracy"]
    record = {
        "command": shlex.join(["python", "benchmarks/fleet.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": "mobilenet_v1_0.25_128_quant.tflite + new 10-class head (seed 0)", "plan": json.loads(task.plan_json),
        "pool": args.pool, "test": args.test, "n_test": int(len(test.y)), "devices": args.devices,
        "per_device": args.per_device, "classes_per_device": args.classes, "rounds": args.rounds,
        "local_epochs": args.local_epochs, "local_steps": task.steps_per_round, "server_lr": task.server_lr,
        "central_lr": args.central_lr or args.lr, "central_epochs": args.central_epochs or passes(args),
        "single_device_epochs": passes(args), "lr_schedule": args.lr_schedule, "engine": args.engine, "cpus": args.cpus,
        "device_classes": [sorted(set(built.dataset.y[r].tolist())) for r in built.shards],
        "global_accuracy_per_round": [h["accuracy"] for h in history], "global_accuracy": final,
        "centralized_accuracy": central, "single_device_accuracy": single,
        "best_single_device_accuracy": max(single), "mean_single_device_accuracy": float(np.mean(single)),
        "global_minus_best_single_points": 100 * (final - max(single)),
        "global_minus_centralized_points": 100 * (final - central),
        "state_bytes": len(server.state), "bytes_per_device_per_round": 2 * len(server.state),
        "counts": server.progress.counts, "history": history,
        "seconds": {"test_features": round(t_features, 1), "fleet": round(t_fleet, 1),
                    "baselines": round(t_base, 1), "total": round(time.time() - t_all, 1)},
    }
    record["notes"] = notes(record)
    study_write(record, Path(args.out))
    return record


def notes(rec: dict) -> list[str]:
    """Where the settings come from (never the test set), and what is short if anything is."""
    out = ["**Settings.** Chosen on a validation split (2,000 images of the pool that no device holds, never the test "
           "images) by `benchmarks/fleet.py tune` (`benchmarks/results/fleet_tune.md`): for the fleet the local "
           "steps per round, rounds, lr and server lr; for the centralized baseline its own lr and epochs. The "
           "cosine lr schedule spans the fleet's rounds (each device's step counter is the global state's)."]
    if rec["global_minus_centralized_points"] < -2:
        out += ["", f"**Shortfall.** The global model ends {-rec['global_minus_centralized_points']:.1f} points below "
                "centralized training, not within 2."]
    return out


def study_write(rec: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=1) + "\n")
    s = rec["seconds"]
    lines = [
        "# Fleet study: federated fine-tuning on non-IID devices (host C devices)", "",
        f"`{rec['command']}` ({s['total'] / 60:.1f} min on 2 shared cores: fleet {s['fleet']:.0f} s, baselines "
        f"{s['baselines']:.0f} s, test features {s['test_features']:.0f} s).", "",
        f"Model: {rec['model']}; plan: classifier-only (`last-k:1`, lr {rec['plan'].get('lr', '')}, 4-bit remainders, "
        f"{rec['lr_schedule']} lr schedule over each run's steps: the fleet's devices keep 0.1x the lr after it, as "
        "every compiled step does; the baselines decay to 0, the best offline schedule on the validation split); "
        f"{rec['devices']} devices x {rec['per_device']} images of {rec['classes_per_device']} classes each, from "
        f"`{rec['pool']}`; {rec['rounds']} rounds x {rec['local_steps']} local steps per device, server lr "
        f"{rec['server_lr']}, engine {ENGINES[rec['engine']]}; centralized: lr {rec['central_lr']}, {rec['central_epochs']} "
        f"epochs; each device alone: {rec['single_device_epochs']} epochs (the fleet's passes over its shard); every "
        f"accuracy on `{rec['test']}` ({rec['n_test']} images).", "",
        "| row | test accuracy |", "|---|---|",
        f"| global model after {rec['rounds']} rounds | {100 * rec['global_accuracy']:.1f} |",
        f"| centralized on the union (same plan and engine) | {100 * rec['centralized_accuracy']:.1f} |",
        f"| best single device alone | {100 * rec['best_single_device_accuracy']:.1f} |",
        f"| mean single device alone | {100 * rec['mean_single_device_accuracy']:.1f} |", "",
        f"Global minus best single device: {rec['global_minus_best_single_points']:+.1f} points (the issue asks for "
        f"at least +5: {'met' if rec['global_minus_best_single_points'] >= 5 else 'NOT met'}); global minus "
        f"centralized: {rec['global_minus_centralized_points']:+.1f} points (the issue asks for at most 2 below: "
        f"{'met' if rec['global_minus_centralized_points'] >= -2 else 'NOT met'}).", "",
        f"Bytes per device per round: {rec['bytes_per_device_per_round']} ({rec['state_bytes']} down, the same up: "
        "the tt_state_load state; Flower's framing not counted).", "",
        *curve_table(rec["history"]), "", *rec.get("notes", []),
    ]
    out.with_suffix(".md").write_text("\n".join(lines))


def curve_table(history: list, columns: int = 20) -> list[str]:
    """The global model's test accuracy per round (every n-th round when there are more than ``columns``)."""
    every = max(1, -(-len(history) // columns))
    shown = [h for h in history if h["round"] % every == 0 or h["round"] == len(history)]
    return ["| round | " + " | ".join(str(h["round"]) for h in shown) + " |", "|---|" + "---|" * len(shown),
            "| global test accuracy | " + " | ".join(f"{100 * h['accuracy']:.1f}" for h in shown) + " |",
            "| states averaged | " + " | ".join(str(h["ok"]) for h in shown) + " |"]

# ---- tune: the recipe chosen on a validation split -----------------------------------------------------------

POOL = "fashion-mnist:12000"
# (lr, rounds, local steps, server lr)
FLEET_GRID = [
    (0.03, 20, 200, "1"), (0.03, 100, 20, "1"), (0.03, 200, 10, "1"), (0.03, 100, 20, "10"), (0.03, 200, 10, "10"),
    (0.1, 200, 10, "1"), (0.01, 200, 10, "20"),
]
# (lr, epochs)
CENTRAL_GRID = [(0.01, 10), (0.03, 10), (0.01, 40), (0.03, 40)]

_CTX: dict = {}


def setup(args) -> dict:
    from tinytrain.data import model_inputs
    from tinytrain.federated import fleet_task
    from tinytrain.federated.score import Scorer, _prefix
    from tinytrain.federated.task import local
    from tinytrain.simulator import split_frozen

    task = fleet_task(str(MODEL), POOL, update="last-k:1", lr=0.03, devices=20, per_device=100, classes_per_device=2,
                      local_epochs=1, new_head=10, seed=0, lr_schedule="cosine", rounds=20)
    b = local(task)
    used = np.sort(np.concatenate(b.shards))
    rng = np.random.default_rng(1)
    free = np.setdiff1d(np.arange(len(b.dataset.y)), used)
    val = np.sort(np.concatenate([rng.permutation(free[b.dataset.y[free] == c])[: args.val_per_class]
                                  for c in range(10)]))
    prefix, _ = split_frozen(b.step_graph)
    feats = _prefix(prefix, model_inputs(b.graph, b.dataset.x[used]))[prefix.outputs[0]]
    scorer = Scorer(b.graph, b.step_graph, b.dataset.x[val], b.dataset.y[val])
    pos = {int(r): i for i, r in enumerate(used)}
    devices = [(np.array([pos[int(r)] for r in rows]), b.dataset.y[rows].astype(np.int64)) for rows in b.shards]
    return {"built": b, "feats": feats, "devices": devices, "scorer": scorer, "union_y": b.dataset.y[used]}


def step_graph(lr: float, steps: int):
    from dataclasses import replace

    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import with_lr_schedule
    from tinytrain.training.train_graph import build_training_graph

    b = _CTX["built"]
    plan = b.task.plan
    plan = with_lr_schedule(replace(plan, lr=lr), "cosine", 0.0, steps)
    return build_training_graph(b.graph, plan, UpdateConfig(seed=b.task.seed))


def trainer(lr: float, steps: int):
    """(step graph, host C trainer of its suffix: the training step after the frozen layers, fed the features)."""
    from tinytrain.engines.host_c import CTrainer
    from tinytrain.simulator import split_frozen

    g = step_graph(lr, steps)
    return g, CTrainer(split_frozen(g)[1])


def fleet_run(cfg) -> dict:
    from tinytrain.engines.order import sample_order
    from tinytrain.codegen.state import pack, state_layout, unpack
    from tinytrain.federated.aggregate import aggregate
    from tinytrain.simulator import init_state

    lr, rounds, k, rate = cfg
    g, c = trainer(lr, rounds * k)
    layout, feats, bits = state_layout(g), _CTX["feats"], _CTX["built"].task.plan.remainder_bits
    state, curve = init_state(g), []
    for rnd in range(1, rounds + 1):
        states, sent = [], pack(g, state)
        for idx, y in _CTX["devices"]:
            c.load_state_bytes(sent)
            c.train(feats[idx], y, sample_order(np.arange(len(y)), k, rnd - 1))
            states.append(unpack(g, c.state_bytes()))
        state = aggregate(layout, states, [len(y) for _, y in _CTX["devices"]], max(s.step for s in states), state,
                          bits, Fraction(rate))
        if rnd % max(1, rounds // 10) == 0 or rnd == rounds:
            curve.append((rnd, _CTX["scorer"](state)))
    return {"kind": "fleet", "lr": lr, "rounds": rounds, "local_steps": k, "server_lr": rate,
            "val_accuracy": curve[-1][1], "curve": curve}


def central_run(cfg) -> dict:
    from tinytrain.engines.order import sample_order
    from tinytrain.codegen.state import unpack

    lr, epochs = cfg
    y = np.asarray(_CTX["union_y"], np.int64)
    g, c = trainer(lr, epochs * len(y))
    c.train(_CTX["feats"], y, sample_order(np.arange(len(y)), epochs * len(y), 0))
    return {"kind": "central", "lr": lr, "epochs": epochs, "val_accuracy": _CTX["scorer"](unpack(g, c.state_bytes()))}


def run(job):
    kind, cfg = job
    t0 = time.time()
    out = fleet_run(cfg) if kind == "fleet" else central_run(cfg)
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out), flush=True)
    return out


def fleet_grid(given: list[str] | None) -> list[tuple]:
    if not given:
        return FLEET_GRID
    return [(float(lr), int(r), int(k), rate) for lr, r, k, rate in (g.split(",") for g in given)]


def tune_main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", choices=("fleet", "central", "all"), default="all")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--val-per-class", type=int, default=200)
    p.add_argument("--fleet", nargs="*", metavar="LR,ROUNDS,STEPS,SERVER_LR",
                   help="fleet configurations to run instead of the built-in grid")
    p.add_argument("--central", nargs="*", metavar="LR,EPOCHS",
                   help="centralized configurations to run instead of the built-in grid")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fleet_tune"))
    args = p.parse_args(argv)
    t0 = time.time()
    _CTX.update(setup(args))
    central = [(float(lr), int(e)) for lr, e in (c.split(",") for c in args.central)] if args.central else CENTRAL_GRID
    jobs = ([("central", c) for c in central] if args.grid != "fleet" else []) + \
           ([("fleet", c) for c in fleet_grid(args.fleet)] if args.grid != "central" else [])
    with get_context("fork").Pool(args.workers) as pool:
        rows = pool.map(run, jobs, chunksize=1)
    rec = {"command": shlex.join(["python", "benchmarks/fleet.py", "tune", *(sys.argv[2:] if argv is None else argv)]),
           "pool": POOL, "val_images": int(len(_CTX["scorer"].y)), "rows": rows, "seconds": round(time.time() - t0)}
    tune_write(rec, Path(args.out))


def tune_write(rec: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=1) + "\n")
    lines = ["# Fleet study settings, chosen on a validation split", "",
             f"`{rec['command']}` ({rec['seconds'] / 60:.1f} min); validation: {rec['val_images']} images of "
             f"`{rec['pool']}` no device holds (not the test set).", "",
             "| run | lr | rounds x local steps (or epochs) | server lr | validation accuracy |", "|---|---|---|---|---|"]
    for r in rec["rows"]:
        shape = f"{r['rounds']} x {r['local_steps']}" if r["kind"] == "fleet" else f"{r['epochs']} epochs"
        lines.append(f"| {r['kind']} | {r['lr']} | {shape} | {r.get('server_lr', '')} | {100 * r['val_accuracy']:.1f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["tune"]:
        tune_main(sys.argv[2:])
    else:
        study_main()
