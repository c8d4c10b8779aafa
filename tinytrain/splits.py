"""Stratified subsets and splits of labelled rows: the same rows on every machine for a seed (the held-out split
``train``, ``eval``, ``plan`` and the harnesses share)."""

from __future__ import annotations

import numpy as np

from tinytrain.errors import UsageError


def stratified_subset(y: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of n rows with the class balance of y (largest remainders decide the rounding)."""
    classes, counts = np.unique(y, return_counts=True)
    share = counts * n / len(y)
    take = np.floor(share).astype(int)
    take[np.argsort(-(share - take), kind="stable")[: n - take.sum()]] += 1
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[:k] for c, k in zip(classes, take)]))


def stratified_split(y: np.ndarray, held_out: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (train, held-out) index arrays with the same class balance in both."""
    if not 0 < held_out < 1:
        raise UsageError(f"held-out fraction must be between 0 and 1, got {held_out}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        k = int(round(len(idx) * held_out))
        test.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def held_out_split(y: np.ndarray, held_out: float | None, split_seed: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """(train rows, held-out rows) of a stratified ``held_out`` fraction, or None. ``y``: class labels (N,) to
    stratify by, or float targets (N, ...) (one stratum)."""
    if held_out is None:
        return None
    if not np.issubdtype(y.dtype, np.integer):
        y = np.zeros(len(y), np.int64)
    train_rows, test_rows = stratified_split(y, held_out, split_seed)
    if len(train_rows) == 0 or len(test_rows) == 0:
        raise UsageError(f"--held-out {held_out} of {len(y)} samples leaves {len(train_rows)} to train on and "
                         f"{len(test_rows)} held out; both must be non-empty")
    return train_rows, test_rows
