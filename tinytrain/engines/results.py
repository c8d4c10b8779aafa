"""The typed results of ``train`` and ``evaluate`` (api.py): a training run, an evaluation, and the scoring of a
forward pass's int8 outputs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinytrain.ir import Graph
from tinytrain.metrics import reconstruction_errors, roc_auc
from tinytrain.simulator import TrainState, with_state
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan
from tinytrain.training.spec import StepSpec


@dataclass(frozen=True)
class TrainResult:
    """A training run: per-step losses, the trained state, accuracies (held-out ones with ``held_out``)."""

    graph: Graph = field(repr=False)   # the model (with its new head)
    spec: StepSpec                     # the step trained: plan, lrs, schedule, the update's arithmetic
    engine: str
    steps: int                         # the run's steps (a run resumed from a board's flash: with those it skipped)
    losses: np.ndarray = field(repr=False)  # float32 per step run here; NaN / Inf: a step the guard did not apply
    state: TrainState = field(repr=False)
    seconds: float
    train_accuracy: float              # loss mse: the mean reconstruction error (metrics.py) instead
    final_loss: float | None           # mean loss of the last epoch's steps (at most len(train rows))
    n_train: int
    held_out: dict = field(default_factory=dict)  # n_held_out, held_out, split_seed, accuracy_before / _after
    engine_info: dict = field(default_factory=dict)  # build_seconds; qemu: board, insns_per_step

    @property
    def plan(self) -> Plan:
        return self.spec.plan

    @property
    def config(self) -> UpdateConfig:
        return self.spec.config

    @property
    def accuracy_after(self) -> float | None:
        return self.held_out.get("accuracy_after")

    def trained_model(self) -> Graph:
        """The model with the trained weights and biases (``tinytrain.export_onnx`` writes it as ONNX)."""
        return with_state(self.graph, self.state)

    def to_json(self) -> dict:
        """The JSON line of ``tinytrain train --json``."""
        return {"final_loss": self.final_loss, "steps": self.steps, "seconds": self.seconds, "engine": self.engine,
                "plan": self.spec.to_json(), "rounding": self.config.rounding.value, "qas": self.config.qas,
                "loss": self.plan.loss,
                ("train_accuracy" if self.plan.loss == "xent" else "train_error"): self.train_accuracy,
                "nonfinite_steps": int(self.state.nonfinite),
                **self.engine_info, **self.held_out}


@dataclass(frozen=True)
class EvalResult:
    """Accuracy of a classifier, or (loss mse) an autoencoder's reconstruction error per sample (``errors``, their
    mean in ``accuracy``'s place: ``error``) and the ROC AUC of that error against anomaly labels, if given."""

    accuracy: float | None
    n: int
    held_out: float | None = None
    split_seed: int | None = None
    errors: np.ndarray | None = field(default=None, repr=False)  # (n,) float32 per-sample reconstruction error
    auc: float | None = None
    n_anomalous: int | None = None

    @property
    def error(self) -> float | None:
        return None if self.errors is None else float(self.errors.mean())

    def to_json(self) -> dict:
        """The JSON line of ``tinytrain eval --json``."""
        if self.errors is None:
            d = {"accuracy": self.accuracy, "n": self.n}
        else:
            e = self.errors.astype(np.float64)
            d = {"loss": "mse", "reconstruction_error": self.error, "n": self.n,
                 "errors_summary": {"min": float(e.min()), "median": float(np.median(e)),
                                    "p90": float(np.percentile(e, 90)), "max": float(e.max())},
                 "errors": [float(v) for v in e]}
            if self.auc is not None:
                d.update(roc_auc=self.auc, n_anomalous=self.n_anomalous)
        if self.held_out is not None:
            d.update(held_out=self.held_out, split_seed=self.split_seed)
        return d


def score_outputs(graph: Graph, loss: str, x: np.ndarray, out: np.ndarray, y: np.ndarray,
                  targets: np.ndarray | None = None, anomaly: np.ndarray | None = None, **split) -> EvalResult:
    """eval's result of the int8 outputs ``out`` of the samples ``x`` (any engine's, or a board's over serial): the
    accuracy of argmax against ``y`` (xent), or (mse) the reconstruction error per sample (against ``targets`` when
    given) and its ROC AUC against ``anomaly``; ``split``: the EvalResult's held_out / split_seed."""
    if loss == "mse":
        errors = reconstruction_errors(graph, x, out, targets)
        auc = None if anomaly is None else roc_auc(errors, anomaly)
        return EvalResult(None, int(len(x)), **split, errors=errors, auc=auc,
                          n_anomalous=None if anomaly is None else int(anomaly.sum()))
    acc = float((out.reshape(len(y), -1).argmax(axis=1) == y).mean())
    return EvalResult(acc, int(len(y)), **split)
