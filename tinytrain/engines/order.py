"""The batch-1 sample order of a run: which rows it trains on, one per step."""

from __future__ import annotations

import numpy as np


def sample_order(rows: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """``steps`` of ``rows``, in order: a new permutation of them each epoch (numpy's generator, seed ``seed``); the
    one order of ``train``, the plan search's fine-tunes, the fleet's rounds and ``stream``."""
    rows = np.asarray(rows)
    if steps <= 0:
        return rows[:0]
    rng = np.random.default_rng(seed)
    return rows[np.concatenate([rng.permutation(len(rows)) for _ in range(-(-steps // len(rows)))])[:steps]]
