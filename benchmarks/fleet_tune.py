"""Choosing the fleet study's settings on a validation split (never the test set): federated rounds and the
centralized baseline of the classifier-only plan, run by the host C engine on features computed once: the frozen
layers run once per image (host C forward, ``simulator.split_frozen``), the C training step of the rest every step
(bit-identical to the whole step, docs/design.md §4; checked against the simulator's state bytes).

    .venv/bin/python benchmarks/fleet_tune.py [--grid fleet|central|all] [--workers 2]

The devices' shards are those of ``benchmarks/fleet_study.py`` (20 devices x 100 images of 2 classes from
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
import sys  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402
from multiprocessing import get_context  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)

MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
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


def main(argv=None) -> None:
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
    rec = {"command": shlex.join(["python", "benchmarks/fleet_tune.py", *(sys.argv[1:] if argv is None else argv)]),
           "pool": POOL, "val_images": int(len(_CTX["scorer"].y)), "rows": rows, "seconds": round(time.time() - t0)}
    write(rec, Path(args.out))


def write(rec: dict, out: Path) -> None:
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
    main()
