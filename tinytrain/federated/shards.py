"""The devices' local data: which training rows each simulated device holds (docs/guide/fleet.md).

``non_iid``: each device sees ``classes`` classes only (the classes of device d start at class d * classes modulo
the number of classes, so a fleet of devices >= n_classes / classes covers every class), ``per_device`` rows drawn
without replacement from those classes, as evenly as the rows allow; ``iid``: ``per_device`` rows from all
classes. No row is on two devices. Deterministic in ``seed``.
"""

from __future__ import annotations

import numpy as np

from tinytrain.errors import UsageError


def device_classes(device: int, classes: int, n_classes: int) -> list[int]:
    return [(device * classes + k) % n_classes for k in range(classes)]


def make_shards(y: np.ndarray, devices: int, per_device: int, classes: int | None, seed: int = 0) -> list[np.ndarray]:
    """Row indices of ``y`` per device (sorted): ``classes`` classes each (non-IID), or all (``classes`` None)."""
    if devices < 1 or per_device < 1:
        raise UsageError(f"--devices {devices} and --per-device {per_device} must be positive")
    n_classes = int(y.max()) + 1
    if classes is not None and not 1 <= classes <= n_classes:
        raise UsageError(f"--classes-per-device {classes}: the data has {n_classes} classes")
    rng = np.random.default_rng(seed)
    pools = {c: list(rng.permutation(np.flatnonzero(y == c))) for c in range(n_classes)}
    shards = []
    for d in range(devices):
        mine = device_classes(d, classes, n_classes) if classes is not None else list(range(n_classes))
        counts = [per_device // len(mine) + (k < per_device % len(mine)) for k in range(len(mine))]
        rows = []
        for c, k in zip(mine, counts):
            if len(pools[c]) < k:
                raise UsageError(f"class {c} has too few rows for {devices} devices of {per_device} samples; give "
                                 "more data, fewer devices or a smaller --per-device")
            rows += [pools[c].pop() for _ in range(k)]
        shards.append(np.sort(np.asarray(rows, np.int64)))
    return shards
