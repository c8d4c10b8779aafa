"""A training run on any engine: the sample order, the steps, and the scores before and after (``train``'s work)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tinytrain.engines.order import sample_order
from tinytrain.errors import UsageError, param
from tinytrain.simulator import TrainState


@dataclass(frozen=True)
class Run:
    losses: np.ndarray        # float32 per step; NaN / Inf: a step the non-finite guard did not apply
    state: TrainState
    seconds: float            # the steps' wall time (the engine's build not included)
    train_score: float        # the measure on the training rows after the run
    final_loss: float | None  # mean finite loss of the last epoch's steps (at most len(rows))
    held_out: dict            # metric_before / metric_after on the held-out rows (none without them)


def run_training(trainer, measure, rows: np.ndarray, held: np.ndarray | None, steps: int, seed: int,
                 progress=None, metric: str = "accuracy") -> Run:
    """``steps`` batch-1 steps of ``trainer`` over ``rows`` (a new permutation each epoch, seed ``seed``),
    ``measure(outputs, rows)`` of the device's outputs on the training rows after, and on the ``held`` rows before
    and after (``metric``_before / _after)."""
    scores = {}
    if held is not None:
        scores[f"{metric}_before"] = measure(trainer.outputs(held), held)
    t0 = time.time()
    losses, state = trainer.train(sample_order(rows, steps, seed), progress)
    seconds = round(time.time() - t0, 3)
    tail = losses[-min(len(losses), len(rows)):]
    tail = tail[np.isfinite(tail)]
    if held is not None:
        scores[f"{metric}_after"] = measure(trainer.outputs(held), held)
    return Run(losses, state, seconds, measure(trainer.outputs(rows), rows),
               float(tail.mean()) if len(tail) else None, scores)


def check_persist_arguments(engine: str, flash, save_every: int, stop_after_saves: int) -> None:
    """The board's flash file options: qemu only, the file and the save interval together."""
    if (flash or save_every or stop_after_saves) and engine != "qemu":
        raise UsageError(f"{param('flash')}, {param('save_every')} and {param('stop_after_saves')} need "
                         f"{param('engine', 'qemu')}")
    if bool(flash) != (save_every > 0):
        raise UsageError(f"give {param('flash', 'FILE')} and {param('save_every', 'N')} (N > 0) together")
    if stop_after_saves < 0 or (stop_after_saves and not flash):
        raise UsageError(f"{param('stop_after_saves', 'K')} needs {param('flash')} and a positive K")
