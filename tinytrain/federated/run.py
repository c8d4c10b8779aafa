"""``tinytrain.fleet``: a federated run of the compiled training step (docs/guide/fleet.md)."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from dataclasses import dataclass, field
from pathlib import Path

from tinytrain.api import load_data, load_model
from tinytrain.errors import UsageError
from tinytrain.federated.aggregate import MAX_RATE_TERM, check_rate
from tinytrain.federated.score import Scorer
from tinytrain.federated.server import FleetServer, drive_local
from tinytrain.federated.strategy import simulate
from tinytrain.federated.task import FleetTask
from tinytrain.federated.task import local
from tinytrain.lr_schedule import DEFAULT_FLOOR, check_schedule
from tinytrain.training.resolve import resolve_plan
from tinytrain.training.sparse import with_lr_schedule

FLEET_ENGINES = ("flower", "local")


@dataclass(frozen=True)
class FleetResult:
    """A fleet run: the final global state (``tt_state_load`` bytes), per-round records, fault counters."""

    task: FleetTask = field(repr=False)
    rounds: int
    state: bytes = field(repr=False)
    history: list
    counts: dict
    seconds: float
    resumed_from: int | None = None

    def to_json(self) -> dict:
        return {"rounds": self.rounds, "devices": self.task.devices, "per_device": self.task.per_device,
                "classes_per_device": self.task.classes_per_device, "local_epochs": self.task.local_epochs,
                "local_steps": self.task.steps_per_round, "server_lr": self.task.server_lr,
                "state_bytes": len(self.state), "counts": self.counts, "history": self.history,
                "seconds": self.seconds, "resumed_from": self.resumed_from}


def fleet_task(model, data: str, *, plan=None, update: str | None = None, lr: float | None = None,
               devices: int = 20, per_device: int = 200, classes_per_device: int | None = 2, local_epochs: int = 1,
               new_head: int | None = None, seed: int = 0, input_size: str | None = None,
               remainder_bits: int | None = None, lr_schedule: str | None = None, warmup: float = 0.0,
               rounds: int = 10, local_steps: int | None = None, server_lr: str = "1",
               input_mapping: str | None = None) -> FleetTask:
    """The task every process of the run rebuilds: the model path, a DATA spec, the plan (default classifier-only:
    the last layer, ``last-k:1``), the devices' shards. ``lr_schedule`` "cosine" spans the run and then keeps
    ``DEFAULT_FLOOR`` of the lrs (the devices go on learning): a device's step counter is the global state's, which
    advances by the steps of a round (``local_steps``, or local_epochs x per_device). ``server_lr``: a fraction "a/b" scaling the averaged step (aggregate.py)."""

    if not isinstance(model, (str, Path)) or not isinstance(data, str):
        raise UsageError("fleet: give the model as a path and the data as a DATA spec (every device reloads them)")
    if local_epochs < 1 or (local_steps is not None and local_steps < 1):
        raise UsageError(f"--local-epochs {local_epochs} and --local-steps {local_steps} must be positive")
    rate = _server_lr(server_lr)
    graph = load_model(str(model), new_head=new_head, seed=seed, input_size=input_size, input_mapping=input_mapping)
    check_schedule(lr_schedule, warmup)
    chosen = resolve_plan(graph, plan=plan, update=update, lr=lr, default="last-k:1",
                          remainder_bits=remainder_bits)
    steps = local_steps if local_steps is not None else local_epochs * per_device
    chosen = with_lr_schedule(chosen, lr_schedule, warmup, rounds * steps, DEFAULT_FLOOR)  # the devices go on learning
    if chosen.loss != "xent":
        raise UsageError("fleet trains classifiers (loss xent): its shards are split by class")
    if any(w.remainder_bits not in (None, chosen.remainder_bits) for w in chosen.weights):
        raise UsageError("fleet averages every weight with the plan's remainder_bits: remove the layers' own "
                         "remainder_bits from the plan (or give --remainder-bits)")
    return FleetTask(str(model), data, json.dumps(chosen.to_json(), sort_keys=True), devices, per_device,
                     classes_per_device, local_epochs, new_head, seed, input_size, local_steps, str(rate),
                     input_mapping)


def _server_lr(text) -> Fraction:
    """The server lr as a fraction a/b (a decimal or "a/b" text), within aggregate.check_rate's bounds."""

    try:
        rate = Fraction(str(text))
        check_rate(rate)
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"--server-lr {text}: give a positive fraction a/b (or a decimal) with a, b <= "
                         f"{MAX_RATE_TERM}, e.g. 1 or 10 or 3/2") from None
    return rate


def fleet(model, data: str, *, rounds: int = 10, test: str | None = None, state_dir: str | Path | None = None,
          engine: str = "flower", faults: dict | None = None, cpus: int = 2, **options) -> FleetResult:
    """Run ``rounds`` federated rounds (resuming from ``state_dir`` when it holds this run's progress); ``test``: a
    DATA spec the global model is scored on after every round; ``faults``: {(round, device): drop | corrupt | nan
    | foreign} (fault injection); ``options``: those of ``fleet_task``."""

    if engine not in FLEET_ENGINES:
        raise UsageError(f"fleet engine {engine!r}: choose one of {', '.join(FLEET_ENGINES)}")
    if rounds < 1:
        raise UsageError(f"--rounds {rounds} must be positive")
    task = fleet_task(model, data, rounds=rounds, **options)
    server = FleetServer(task, rounds, state_dir, _scorer(task, test) if test else None)
    t0 = time.time()
    if engine == "local":
        drive_local(server, faults)
    else:
        _check_flower()

        simulate(server, faults, cpus)
    return FleetResult(task, server.round, server.state, list(server.progress.history), dict(server.progress.counts),
                       round(time.time() - t0, 3), server.resumed_from)


def _check_flower() -> None:
    import importlib.util

    if importlib.util.find_spec("flwr") is None or importlib.util.find_spec("ray") is None:
        raise UsageError("--engine flower needs Flower and Ray: pip install 'tinytrain[fleet]' (or --engine local)")


def _scorer(task: FleetTask, test: str):
    built, ds = local(task), load_data(test)
    return Scorer(built.graph, built.step_graph, ds.x, ds.y)
