"""The fleet's server side without the transport: screen the round's replies, aggregate the accepted ones,
persist the new global state, score it. ``strategy.py`` calls it from Flower; ``drive_local`` runs the same rounds
in-process (tests, and ``--engine local``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tinytrain.codegen.state import pack
from tinytrain.codegen.state import unpack
from tinytrain.federated import checkpoint
from tinytrain.federated.aggregate import aggregate
from tinytrain.federated.client import Reply, run_device
from tinytrain.federated.screen import VERDICTS, screen
from tinytrain.federated.task import FleetTask, local
from tinytrain.simulator import TrainState, init_state


class FleetServer:
    """The global state of a run and its counters; resumes from ``state_dir`` when it holds this task's progress."""

    def __init__(self, task: FleetTask, rounds: int, state_dir: str | Path | None = None,
                 score: Callable[[TrainState], float] | None = None) -> None:
        self.task, self.rounds, self.score = task, rounds, score
        self.built = local(task)
        self.state_dir = Path(state_dir) if state_dir is not None else None
        found = checkpoint.load(self.state_dir, task) if self.state_dir is not None else None
        self.progress = found or checkpoint.Progress(0, pack(self.built.step_graph, init_state(self.built.step_graph)),
                                                     {k: 0 for k in (*VERDICTS, "dropped")}, [])
        self.resumed_from = found.round if found else None

    @property
    def round(self) -> int:
        return self.progress.round

    @property
    def state(self) -> bytes:
        return self.progress.state

    def finish_round(self, replies: list[Reply], dropped: int) -> bytes:
        """Screen, aggregate (accepted replies in device order), persist and score round ``self.round + 1``."""

        t0 = time.time()
        counts = {k: 0 for k in (*VERDICTS, "dropped")}
        counts["dropped"] = dropped
        accepted = []
        for reply in sorted(replies, key=lambda r: r.device):
            verdict, state = screen(self.built, reply)
            counts[verdict.verdict] += 1
            if state is not None:
                accepted.append((reply, state))
        if accepted:
            states = [s for _, s in accepted]
            new = aggregate(self.built.layout, states, [r.samples for r, _ in accepted], max(s.step for s in states),
                            unpack(self.built.step_graph, self.state), self.task.plan.remainder_bits, self.task.rate)
            self.progress.state = pack(self.built.step_graph, new)
        record = {"round": self.round + 1, **counts, "bytes_per_device": len(self.state),
                  "mean_loss": _mean([r.loss for r, _ in accepted]), "aggregate_seconds": round(time.time() - t0, 3)}
        if self.score is not None:
            record["accuracy"] = self.score(unpack(self.built.step_graph, self.state))
        self.progress.round += 1
        self.progress.history.append(record)
        self.progress.counts = {k: self.progress.counts.get(k, 0) + counts[k] for k in counts}
        if self.state_dir is not None:
            checkpoint.save(self.state_dir, self.task, self.progress)
        return self.state


def _mean(values: list[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def drive_local(server: FleetServer, faults: dict | None = None, stop_after: int | None = None) -> None:
    """The remaining rounds in this process: every device trains on the global state in turn (no Flower).
    ``stop_after``: return after that round (a server killed right after persisting it)."""
    faults = faults or {}
    while server.round < server.rounds and (stop_after is None or server.round < stop_after):
        rnd, replies, dropped = server.round + 1, [], 0
        for device in range(server.task.devices):
            try:
                replies.append(run_device(server.task, device, server.state, rnd, faults))
            except ConnectionError:
                dropped += 1
        server.finish_round(replies, dropped)
