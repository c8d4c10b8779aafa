"""The noise floor of the contribution analysis, from repeated runs of the baseline.

A contribution is the difference of two fine-tunes' validation accuracies. Its noise is what changes when only
the run's randomness changes (sample order, rounding stream): the classifier-only baseline is fine-tuned
``repeats`` times with different seeds on the same rows, and the standard deviation of those accuracies is the
noise of one run; a gain (a difference of two runs) has sqrt(2) times it. Gains below ``z`` standard deviations
of a gain count as 0 in the gain model. The binomial standard error of the validation accuracy is reported beside
it: the part of the noise that more validation rows would shrink.

Choosing between two finalists adds the noise of the validation rows themselves: a plan that leads on these
images may trail on others. ``paired_se`` is the standard error of the difference of two plans' accuracies on the
same rows (from their per-image results), and ``margin`` the lead a searched plan needs over the best preset:
``z`` standard deviations of both noises together (halving.py). An accuracy that is the mean of n seeds' runs
(``--final-seeds``) has 1/sqrt(n) of a run's noise, so a gain of an n-seed mean over an m-seed mean has
run_sd * sqrt(1/n + 1/m) (``gain_sd_of``).
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
        return self.gain_sd_of(1, 1)

    @property
    def threshold(self) -> float:
        return self.z * self.gain_sd

    def gain_sd_of(self, seeds_a: int, seeds_b: int) -> float:
        """The run-to-run noise of a gain of one accuracy averaged over ``seeds_a`` runs over another averaged over
        ``seeds_b``."""
        return self.run_sd * math.sqrt(1 / seeds_a + 1 / seeds_b)

    def threshold_of(self, seeds_a: int, seeds_b: int) -> float:
        return self.z * self.gain_sd_of(seeds_a, seeds_b)

    @property
    def binomial_se(self) -> float:
        p = self.mean
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_val)

    def margin(self, paired_se: float, seeds_a: int = 1, seeds_b: int = 1) -> float:
        """The lead that counts: ``z`` x sqrt(gain_sd^2 + paired_se^2) (run-to-run and validation-row noise), for
        accuracies averaged over ``seeds_a`` and ``seeds_b`` runs."""
        return self.z * math.sqrt(self.gain_sd_of(seeds_a, seeds_b) ** 2 + paired_se ** 2)

    def to_json(self) -> dict:
        return {"repeats": len(self.accuracies), "accuracies": [round(a, 6) for a in self.accuracies],
                "run_sd": round(self.run_sd, 6), "gain_sd": round(self.gain_sd, 6), "z": self.z,
                "threshold": round(self.threshold, 6), "binomial_se": round(self.binomial_se, 6), "n_val": self.n_val}


def paired_se(a: list[bool] | list[float], b: list[bool] | list[float]) -> float:
    """Standard error of mean(a) - mean(b) for per-row results on the same rows: sd(a_i - b_i) / sqrt(n). Rows
    right / wrong (a classifier) or each row's score (an autoencoder: minus its reconstruction error)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("paired results need the same rows, at least two")
    d = [float(x) - float(y) for x, y in zip(a, b)]
    m = sum(d) / len(d)
    return math.sqrt(sum((v - m) ** 2 for v in d) / (len(d) - 1) / len(d))
