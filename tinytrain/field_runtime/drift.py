"""Drift statistics from every observed sample, in integers: a feature-mean shift at the cut and a confidence EMA.

Per channel k of the latent, m[k] (1/256 LSB) follows the sample's value: m <- m + asr(256 x - m, shift) (the first
sample sets m = 256 x); the prediction's margin (top-1 minus top-2 output over the seen classes) follows the same
EMA (``conf``). After ``drift_warmup`` samples the reference r = m is taken; over the next ``drift_warmup`` samples the
shift D = floor(sum |m - r| / channels) is calibrated (its largest value, ``dmax``), and the threshold is
max(drift_factor x dmax, drift_min). From then on D above the threshold raises an alarm (``since``: the sample it
was raised at, ``alarms`` counts them) that lasts ``drift_rebase`` samples; then the reference is taken anew.
``asr`` is the arithmetic shift right (floor division by 2^shift), written out in the C for negative values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.field_runtime.config import FieldConfig


@dataclass
class Drift:
    m: np.ndarray  # (channels,) int32, 1/256 LSB
    r: np.ndarray  # (channels,) int32
    conf: int = 0
    conf_ref: int = 0
    seen: int = 0  # samples observed
    dmax: int = 0
    threshold: int = 0
    score: int = 0
    active: int = 0
    since: int = -1
    alarms: int = 0

    @classmethod
    def empty(cls, channels: int) -> Drift:
        return cls(np.zeros(channels, np.int64), np.zeros(channels, np.int64))


def observe_drift(d: Drift, cfg: FieldConfig, x: np.ndarray, margin: int) -> None:
    """Update ``d`` with one sample's latent ``x`` (int8) and its prediction's margin."""
    v = x.astype(np.int64) * 256
    if d.seen == 0:
        d.m, d.conf = v, margin * 256
    else:
        d.m = d.m + ((v - d.m) >> cfg.drift_shift)
        d.conf = d.conf + ((margin * 256 - d.conf) >> cfg.drift_shift)
    d.seen += 1
    w = cfg.drift_warmup
    if d.seen == w:
        d.r, d.conf_ref = d.m.copy(), d.conf
    if d.seen <= w:
        return
    d.score = int(np.abs(d.m - d.r).sum()) // len(d.m)
    if d.seen <= 2 * w:
        d.dmax = max(d.dmax, d.score)
        if d.seen == 2 * w:
            d.threshold = max(cfg.drift_factor * d.dmax, cfg.drift_min)
        return
    if d.active and d.seen - d.since >= cfg.drift_rebase:
        d.active, d.r, d.conf_ref = 0, d.m.copy(), d.conf
    elif not d.active and d.score > d.threshold:
        d.active, d.since, d.alarms = 1, d.seen, d.alarms + 1
