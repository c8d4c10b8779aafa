"""What a run trains and scores on: the samples as the model's int8 inputs, their labels or float targets, the
anomaly labels of an autoencoder's data, each checked against the model and the loss; and how an engine's int8
outputs are scored against them (an accuracy, or a mean reconstruction error)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinytrain.data import dataset_from_arrays, load_dataset, model_inputs
from tinytrain.errors import UsageError, param
from tinytrain.ir import Graph
from tinytrain.metrics import load_anomaly_labels, reconstruction_errors

LOSSES = ("xent", "mse")  # softmax cross-entropy against labels; mean squared error (reconstruction or targets)


@dataclass(frozen=True)
class Samples:
    """A run's samples: int8 model inputs ``x`` (N, ...), labels ``y`` (an mse run's are zeros, which its loss never
    reads; every engine takes one per step) and, for an mse loss against given targets, each sample's float32
    target of the output's shape (None: xent, or the reconstruction of ``x``)."""

    x: np.ndarray
    y: np.ndarray
    targets: np.ndarray | None = None


def load_data(data):
    """The Dataset of a DATA spec, or of a pair / triple of arrays (x, y[, anomaly]; y may be None)."""

    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise UsageError(f"data: give (x, y) or (x, y, anomaly), not {len(data)} arrays")
        return dataset_from_arrays(*data)
    return load_dataset(data)


def _shapes(graph: Graph) -> tuple[tuple, tuple]:
    return tuple(graph.tensors[graph.inputs[0]].shape), tuple(graph.tensors[graph.outputs[0]].shape)


def default_loss(graph: Graph, ds) -> str:
    """mse for data without targets on a model whose output has its input's shape (an autoencoder), else xent."""
    x_shape, out_shape = _shapes(graph)
    return "mse" if ds.y is None and x_shape == out_shape else "xent"


def check_loss(loss: str) -> str:
    if loss not in LOSSES:
        raise UsageError(f"{param('loss', loss)}: choose one of {', '.join(LOSSES)}")
    return loss


def targets_of(graph: Graph, ds, loss: str) -> np.ndarray | None:
    """The dataset's y checked against the model and the loss: class labels indexing the model's outputs (xent);
    float targets of the output's shape, or None for the reconstruction of the input (mse)."""
    x_shape, out_shape = _shapes(graph)
    if check_loss(loss) == "mse":
        if ds.labelled:
            raise UsageError(f"{ds.source}: y holds class labels, but {param('loss', 'mse')} needs float targets of "
                             f"the output's shape {out_shape[1:]} or no y (reconstruction); drop y (labels on an "
                             "autoencoder)")
        if ds.y is None and x_shape != out_shape:
            raise UsageError(f"{ds.source}: {param('loss', 'mse')} without targets y reconstructs the input, but the "
                             f"model's output {out_shape} is not its input's shape {x_shape}; give float targets y")
        if ds.y is not None and tuple(ds.y.shape[1:]) != out_shape[1:]:
            raise UsageError(f"{ds.source}: the targets y are {tuple(ds.y.shape)}, the model's output is "
                             f"(N, {', '.join(map(str, out_shape[1:]))})")
        return ds.y
    if ds.y is None or not ds.labelled:
        raise UsageError(f"{ds.source}: {'no labels y' if ds.y is None else 'y holds float targets'}; a classifier "
                         f"trains on integer class labels (an autoencoder or regression: {param('loss', 'mse')})")
    n_out = out_shape[-1]
    if ds.y.max() >= n_out:
        raise UsageError(f"{ds.source}: labels go up to {ds.y.max()} but the model has {n_out} outputs; "
                         f"train a new classifier with {param('new_head', ds.y.max() + 1)}")
    return ds.y


def prepared(graph: Graph, ds, loss: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(the samples as the model's int8 inputs, their labels or targets: ``targets_of``) of a Dataset."""

    if len(ds) == 0:
        raise UsageError(f"{ds.source}: no samples")
    y = targets_of(graph, ds, loss)
    return model_inputs(graph, ds.x), y


def training_samples(graph: Graph, ds, loss: str) -> Samples:
    """The Samples of a training run: an mse run's labels are zeros (the loss reads none), its targets y or None."""
    x, y = prepared(graph, ds, loss)
    if loss == "xent":
        return Samples(x, y)
    return Samples(x, np.zeros(len(x), np.int64), y)


def check_classifier(graph: Graph, loss: str) -> None:
    logits = graph.tensors[graph.outputs[0]].shape
    if loss == "xent" and any(d != 1 for d in logits[1:-1]):
        raise UsageError(f"{graph.name}: the output {logits} is not class logits (1, C); training needs a classifier "
                         f"(an autoencoder: {param('loss', 'mse')})")


def anomaly_labels(ds, labels, loss: str) -> np.ndarray | None:
    """The 0/1 anomaly label per sample an autoencoder's error is scored against: ``labels`` (a .npy file or an
    array), else the dataset's own (mse only)."""
    if labels is None:
        return ds.anomaly if loss == "mse" else None
    if loss != "mse":
        raise UsageError(f"{param('anomaly_labels')} score the reconstruction error of an autoencoder: use "
                         f"{param('loss', 'mse')}")
    if isinstance(labels, (str, Path)):
        return load_anomaly_labels(labels, len(ds))

    return dataset_from_arrays(ds.x, None, labels, ds.source).anomaly


def scorer(graph: Graph, loss: str, samples: Samples):
    """score(int8 outputs of rows, rows): the accuracy of a classifier (argmax against the labels), or the mean
    reconstruction error (metrics.reconstruction_errors) of an autoencoder (against the targets, when given)."""
    if loss == "mse":
        t = samples.targets
        return lambda out, rows: float(reconstruction_errors(
            graph, samples.x[rows], out, None if t is None else t[rows]).mean())
    return lambda out, rows: float((out.reshape(len(rows), -1).argmax(axis=1) == samples.y[rows]).mean())
