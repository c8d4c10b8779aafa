"""Drift statistics from every observed sample, in integers: a standardized feature-mean shift at the cut and a
confidence EMA.

Per channel k of the latent, m[k] (1/256 LSB) follows the sample's value: m <- m + asr(256 x - m, shift) (the first
sample sets m = 256 x); the prediction's margin (top-1 minus top-2 output over the seen classes) follows the same
EMA (``conf``). A (re)start runs three phases, counted by ``t`` (samples since it): over the first ``drift_warmup``
samples each channel's spread s[k] (1/256 LSB) is the running mean of |256 x - m| over them, s <- s + (|256 x - m|
- s) / n rounded to nearest (n: the deviations so far; an EMA would weigh only its last 2^shift samples, and one
warm-up's quiet end then set a spread too narrow for the rest: vww-light's 8th stream order); at t = ``drift_warmup``
the reference r = m is taken; over the next ``drift_warmup`` samples the score D is calibrated (its largest value,
``dmax``) and the threshold is max(drift_factor x dmax, drift_min). The score is the mean squared standardized
shift, D = floor(sum z^2 / (16 channels)) with z[k] = floor(256 |m - r| / max(s, 256)) (1/4096 of a spread squared;
the spread is at least 1 LSB): a diagonal chi-square statistic, so channels that move little against their own spread
weigh little and a shift spread over many channels adds up against the noise (a plain mean |m - r| let class-
dependent wide channels drown the keyword model's room shift). From then on D above the threshold raises an alarm
(``since``: the sample it was raised at, ``alarms`` counts them) that lasts ``drift_rebase`` samples; then the
detector restarts (t = 0, spreads and dmax anew): the drift is the new normal, with its own spreads and threshold.
``asr`` is the arithmetic shift right (floor division by 2^shift), written out in the C for negative values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.field_runtime.config import FieldConfig

SPREAD_FLOOR = 256  # 1 LSB: a channel's spread is never taken below one quantization step


@dataclass
class Drift:
    m: np.ndarray  # (channels,) int32, 1/256 LSB
    r: np.ndarray  # (channels,) int32
    s: np.ndarray  # (channels,) int32, 1/256 LSB: the warm-up's mean absolute deviation, anew after each restart
    conf: int = 0
    conf_ref: int = 0
    seen: int = 0  # samples observed
    dmax: int = 0
    threshold: int = 0
    score: int = 0
    active: int = 0
    since: int = -1
    alarms: int = 0
    t: int = 0  # samples since the detector's (re)start

    @classmethod
    def empty(cls, channels: int) -> Drift:
        return cls(*(np.zeros(channels, np.int64) for _ in range(3)))


def observe_drift(d: Drift, cfg: FieldConfig, x: np.ndarray, margin: int) -> None:
    """Update ``d`` with one sample's latent ``x`` (int8) and its prediction's margin."""
    v = x.astype(np.int64) * 256
    w = cfg.drift_warmup
    if d.seen == 0:
        d.m, d.conf = v, margin * 256
    else:
        if d.t < w:  # the running mean of the warm-up's n deviations (a first start's first sample has none)
            n = d.t + (d.seen > d.t)
            d.s = d.s + (2 * (np.abs(v - d.m) - d.s) + n) // (2 * n)  # rounded to nearest: no drift downwards
        d.m = d.m + ((v - d.m) >> cfg.drift_shift)
        d.conf = d.conf + ((margin * 256 - d.conf) >> cfg.drift_shift)
    d.seen += 1
    d.t += 1
    if d.t == w:
        d.r, d.conf_ref = d.m.copy(), d.conf
    if d.t <= w:
        return
    z = (np.abs(d.m - d.r) * 256) // np.maximum(d.s, SPREAD_FLOOR)
    d.score = int((z * z).sum() // (16 * len(d.m)))
    if d.t <= 2 * w:
        d.dmax = max(d.dmax, d.score)
        if d.t == 2 * w:
            d.threshold = max(cfg.drift_factor * d.dmax, cfg.drift_min)
        return
    if d.active and d.seen - d.since >= cfg.drift_rebase:
        d.active, d.r, d.conf_ref = 0, d.m.copy(), d.conf
        d.t, d.s, d.dmax = 0, np.zeros_like(d.s), 0
    elif not d.active and d.score > d.threshold:
        d.active, d.since, d.alarms = 1, d.seen, d.alarms + 1
