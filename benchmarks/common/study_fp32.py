"""The fp32 rows of a transfer study (transfer_study.py): the fp32 twin trained the device's way and fp32 full
fine-tuning, run in forked processes beside the device rows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from transfer_study import Recipe, Study, Task

FP32_LRS = (3e-4, 1e-3)  # Adam's lrs tried for fp32 full fine-tuning (PyTorch's default 1e-3 and a third of it)
FP32_EPOCHS = 10
# Adam's lr for fp32 full fine-tuning without --choose-fp32-lr: chosen on the validation split by the runs of
# 2026-11-27 and 2026-11-28 (validation accuracy, both runs the same: lr 0.0003 88.3 %, lr 0.001 88.9 %)
FP32_CHOSEN = {"lr": 1e-3, "validation": {"0.0003": 0.8833, "0.001": 0.8887},
               "source": "chosen on the validation split by earlier runs (--choose-fp32-lr re-chooses)"}


_FORKED: dict = {}  # the task, set before the fp32 workers fork: its arrays are shared, not pickled


def _fit_predict(rows: str, evaluate: str, recipe, seed: int) -> np.ndarray:
    """A forked worker's fp32 run: train on the ``rows`` ("fit" or "all") of the task, predict ``evaluate``
    ("validation" or "test"); one torch thread, seeded (common.fp32.fit_predict)."""
    from common.fp32 import fit_predict

    t = _FORKED["task"]
    train_rows = t.fit if rows == "fit" else np.arange(len(t.y))
    return fit_predict(t.graph, t.x, t.y, train_rows, t.x[t.val] if evaluate == "validation" else t.x_test, recipe,
                       seed)


class Fp32Rows:
    """The fp32 rows, started in ``study.workers`` forked processes (each one torch thread, so each run is the same
    whatever runs beside it) that work beside the device rows; ``collect`` waits for them:
    - the upper bound: every parameter of the fp32 twin, Adam on batches of 32 with a cosine lr schedule,
      ``FP32_EPOCHS`` epochs, at ``FP32_CHOSEN``'s lr, or with ``choose_lr`` at the lr of ``FP32_LRS`` that scores
      best on the validation split; trained on the whole training subset and scored on the test set (batch-1
      SGD with the device's recipe, 2 epochs, reached only 82.3 % here: an upper bound must not be held to the
      device's optimizer);
    - the twins trained the device's way: batch-1 SGD on the last k layers (weights and biases) for each k of
      ``twin_ks``, the recipe's lrs, schedule and epochs, on the whole training subset; scored on the test set."""

    def __init__(self, task: Task, recipe: Recipe, twin_ks: list[int], study: Study, choose_lr: bool) -> None:
        import multiprocessing as mp

        from common.fp32 import Fp32Recipe

        n_layers = sum(n.op in ("conv2d", "fully_connected") for n in task.graph.nodes)
        self.full = {lr: Fp32Recipe(n_layers, "adam", FP32_EPOCHS, lr, lr)
                     for lr in (FP32_LRS if choose_lr else (FP32_CHOSEN["lr"],))}
        self.twins = {k: Fp32Recipe(k, "sgd", recipe.epochs, recipe.lr, recipe.head_lr, recipe.schedule[0])
                      for k in twin_ks}
        self.task, self.seed, self.t0 = task, study.seed, time.time()
        _FORKED["task"] = task
        self.pool = mp.get_context("fork").Pool(study.workers)
        run = self.pool.apply_async
        self.val_jobs = {lr: run(_fit_predict, ("fit", "validation", r, study.seed))
                         for lr, r in self.full.items()} if choose_lr else {}
        self.test_jobs = {lr: run(_fit_predict, ("all", "test", r, study.seed))
                          for lr, r in self.full.items()} if not choose_lr else {}
        self.twin_jobs = {k: run(_fit_predict, ("all", "test", r, study.seed)) for k, r in self.twins.items()}

    def collect(self, log: list) -> dict[str, dict]:
        task = self.task
        if self.val_jobs:
            val = {f"{lr:g}": float((job.get() == task.y[task.val]).mean()) for lr, job in self.val_jobs.items()}
            best = max(self.full, key=lambda lr: val[f"{lr:g}"])
            pred, source = self.pool.apply_async(_fit_predict, ("all", "test", self.full[best], self.seed)).get(), \
                "chosen on the validation split by this run"
        else:
            best, val, source = FP32_CHOSEN["lr"], FP32_CHOSEN["validation"], FP32_CHOSEN["source"]
            pred = self.test_jobs[best].get()
        rows = {"fp32 full fine-tuning (PyTorch)": {"recipe": self.full[best].describe(), "validation": val,
                                                    "lr_source": source, "correct": pred == task.y_test}}
        for k, job in self.twin_jobs.items():
            device = "classifier-only" if k == 1 else f"last-k:{k}"
            rows[f"fp32 twin, {device} (device recipe)"] = {"recipe": self.twins[k].describe(),
                                                            "correct": job.get() == task.y_test, "device_row": device}
        self.pool.close()
        self.pool.join()
        log.append({"fp32": "torch: full fine-tuning and twins", "seconds": round(time.time() - self.t0, 1)})
        return rows
