"""The finalists of ``tinytrain plan``: the presets that fit the budget and the gain model's proposals.

Presets (always candidates, so the search is never worse than the obvious plan it can measure):
``classifier-only`` (the last layer), ``bias-only (last K)`` (the classifier + the biases of the deepest last K
layers that fit, every layer's if they do), ``last-k:N`` (weights and biases of the last N layers) for every N that fits, and
for each ratio r < 1 the deepest ``last-k:N at r`` (the biases of the last N layers and the weights of the first
r of each one's output channels, MCUNetV3's sparse update of many layers: where trained int8 copies and their
remainders keep the dense last-k:N shallow, a fraction of the channels reaches deeper). Proposals: the exact search's plan and the best distinct plans of the evolutionary search's last population.
Each name is also an ``--update`` preset of the same plan (training/sparse.py ``preset``).
Memory is monotone in k and N (memory.py), so the deepest fitting preset is found by bisection. Remainder bits
other than the default add the deepest last-k:N that fits with them (0 bits: deeper plans fit; 8: finer steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.search.space import Choice, Space
from tinytrain.search.space import WEIGHT_RATIOS
from tinytrain.training.sparse import DEFAULT_REMAINDER_BITS


@dataclass(frozen=True)
class Candidate:
    name: str  # "classifier-only", "bias-only", "last-k:3", "exact", "evolution #2", ...
    choice: Choice
    preset: bool


def deepest_fitting(fits, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with fits(n), given fits(lo) and monotone fits."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def presets(space: Space, fits, bits: int = DEFAULT_REMAINDER_BITS) -> list[Candidate]:
    """The presets that fit (``fits(choice)``; the classifier alone must fit), shallow to deep, their weights
    keeping ``bits`` remainder bits (other than the default: named with " @rBITS")."""
    n, tag = space.n_layers, "" if bits == DEFAULT_REMAINDER_BITS else f" @r{bits}"
    out = [Candidate("classifier-only" + tag, space.last_k(1, bits), True)]
    k = deepest_fitting(lambda k: fits(Choice(k, bits=bits)), 1, n)
    if k > 1:
        out.append(Candidate(f"bias-only (last {k})" + tag, Choice(k, bits=bits), True))
    deepest = deepest_fitting(lambda m: fits(space.last_k(m, bits)), 1, n)
    out += [Candidate(f"last-k:{m}{tag}", space.last_k(m, bits), True)
            for m in range(2, deepest + 1) if fits(space.last_k(m, bits))]
    return out


def sparse_presets(space: Space, fits) -> list[Candidate]:
    """For each ratio r < 1 (largest first), ``last-k:N at r`` for the deepest N that fits, when N is deeper than
    the deepest dense ``last-k`` that fits (memory is monotone in N at a fixed r)."""
    dense = deepest_fitting(lambda m: fits(space.last_k(m)), 1, space.n_layers)
    out = []
    for r in sorted((r for r in WEIGHT_RATIOS if r < 1), reverse=True):
        m = deepest_fitting(lambda m: fits(space.last_k(m, ratio=r)), 1, space.n_layers)
        if m > dense:
            out.append(Candidate(f"last-k:{m} at 1/{round(1 / r)}", space.last_k(m, ratio=r), True))
    return out


def finalists(preset_list: list[Candidate], proposals: list[Candidate]) -> list[Candidate]:
    """Presets then proposals, each plan once (a proposal equal to a preset keeps the preset's name)."""
    seen, out = set(), []
    for c in preset_list + proposals:
        if c.choice.key() not in seen:
            seen.add(c.choice.key())
            out.append(c)
    return out
