"""What eval reports beyond accuracy (issue 29): an autoencoder's reconstruction error per sample and the ROC AUC of
that error as an anomaly score (numpy only)."""

from __future__ import annotations

import numpy as np

from tinytrain.errors import UsageError
from tinytrain.ir import Graph
from tinytrain.ir import DType
from tinytrain.ops.mse import MseAttrs, loss_reference


def reconstruction_errors(graph: Graph, x: np.ndarray, out: np.ndarray, targets: np.ndarray | None = None
                          ) -> np.ndarray:
    """Per sample, the loss ``mse`` (ops/mse.py, float32) of the int8 output ``out`` against the int8 input ``x``
    (or against float ``targets`` of the output's shape)."""
    from dataclasses import replace


    o = graph.tensors[graph.outputs[0]]
    if targets is None:
        return loss_reference(MseAttrs(), [out.reshape(x.shape), x], [o, graph.tensors[graph.inputs[0]]], [])[0]
    t = replace(o, dtype=DType.FLOAT32, quant=None)
    return loss_reference(MseAttrs(), [out.reshape((len(out), *o.shape[1:])), targets], [o, t], [])[0]


def roc_auc(scores: np.ndarray, anomalous: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` (higher: more anomalous) for the 0/1 labels ``anomalous``: the
    probability that an anomalous sample scores above a normal one, ties counting one half (the Mann-Whitney U
    statistic over the mid-ranks)."""
    scores, anomalous = np.asarray(scores, np.float64), np.asarray(anomalous).astype(bool)
    n_pos, n_neg = int(anomalous.sum()), int((~anomalous).sum())
    if n_pos == 0 or n_neg == 0:
        raise UsageError(f"ROC AUC needs normal and anomalous samples; the labels have {n_neg} normal and "
                         f"{n_pos} anomalous")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = scores[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    mid = first + (counts + 1) / 2.0  # 1-based mid-rank of each run of ties
    ranks[order] = np.repeat(mid, counts)
    return float((ranks[anomalous].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def load_anomaly_labels(path, n: int) -> np.ndarray:
    """(N,) 0/1 labels from a .npy file (``eval --anomaly-labels``)."""
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise UsageError(f"{path}: cannot read the anomaly labels as .npy ({e})") from None
    if not isinstance(a, np.ndarray) or a.ndim != 1 or len(a) != n or not np.isin(a, (0, 1)).all():
        raise UsageError(f"{path}: anomaly labels must be ({n},) of 0 (normal) and 1 (anomalous), got "
                         f"{getattr(a, 'dtype', type(a).__name__)}{getattr(a, 'shape', '')}")
    return a.astype(np.int64)
