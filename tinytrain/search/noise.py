"""The noise floor of the contribution analysis, from repeated runs of the baseline.

A contribution is the difference of two fine-tunes' validation accuracies. Its noise is what changes when only
the run's randomness changes (sample order, rounding stream): the classifier-only baseline is fine-tuned
``repeats`` times with different seeds on the same rows, and the standard deviation of those accuracies is the
noise of one run; a gain (a difference of two runs) has sqrt(2) times it. Gains below ``z`` standard deviations
of a gain count as 0 in the gain model. The binomial standard error of the validation accuracy is reported beside
it: the part of the noise that more validation rows would shrink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseFloor:
    accuracies: tuple[float, ...]  # the baseline's validation accuracy, one per seed
    n_val: int
    z: float

    def __post_init__(self) -> None:
        if len(self.accuracies) < 2:
            raise ValueError("a noise floor needs at least two repeated runs")

    @property
    def mean(self) -> float:
        return sum(self.accuracies) / len(self.accuracies)

    @property
    def run_sd(self) -> float:
        """Sample standard deviation of the repeated runs' accuracies."""
        m = self.mean
        return math.sqrt(sum((a - m) ** 2 for a in self.accuracies) / (len(self.accuracies) - 1))

    @property
    def gain_sd(self) -> float:
        return math.sqrt(2) * self.run_sd

    @property
    def threshold(self) -> float:
        return self.z * self.gain_sd

    @property
    def binomial_se(self) -> float:
        p = self.mean
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_val)

    def to_json(self) -> dict:
        return {"repeats": len(self.accuracies), "accuracies": [round(a, 6) for a in self.accuracies],
                "run_sd": round(self.run_sd, 6), "gain_sd": round(self.gain_sd, 6), "z": self.z,
                "threshold": round(self.threshold, 6), "binomial_se": round(self.binomial_se, 6), "n_val": self.n_val}
