"""The finalists of ``tinytrain plan``: the presets that fit the budget and the gain model's proposals.

Presets (always candidates, so the search is never worse than the obvious plan it can measure):
``classifier-only`` (the last layer), ``bias-only`` (the classifier + the biases of every layer, or of the
deepest last k that fits), ``last-k:N`` (weights and biases of the last N layers) for every N that fits.
Proposals: the exact search's plan and the best distinct plans of the evolutionary search's last population.
Memory is monotone in k and N (memory.py), so the deepest fitting preset is found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.search.space import Choice, Space


@dataclass(frozen=True)
class Candidate:
    name: str  # "classifier-only", "bias-only", "last-k:3", "exact", "evolution #2", ...
    choice: Choice
    preset: bool


def _deepest(fits, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with fits(n), given fits(lo) and monotone fits."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def presets(space: Space, fits) -> list[Candidate]:
    """The presets that fit (``fits(choice)``; the classifier alone must fit), shallow to deep."""
    n = space.n_layers
    out = [Candidate("classifier-only", space.last_k(1), True)]
    k = _deepest(lambda k: fits(Choice(k)), 1, n)
    if k > 1:
        out.append(Candidate("bias-only" if k == n else f"bias-only (last {k})", Choice(k), True))
    deepest = _deepest(lambda m: fits(space.last_k(m)), 1, n)
    out += [Candidate(f"last-k:{m}", space.last_k(m), True) for m in range(2, deepest + 1) if fits(space.last_k(m))]
    return out


def finalists(preset_list: list[Candidate], proposals: list[Candidate]) -> list[Candidate]:
    """Presets then proposals, each plan once (a proposal equal to a preset keeps the preset's name)."""
    seen, out = set(), []
    for c in preset_list + proposals:
        if c.choice.key() not in seen:
            seen.add(c.choice.key())
            out.append(c)
    return out
