"""Successive halving: rank the finalists by training them, with the device's arithmetic, on the validation rows.

Rung j of R trains every surviving candidate for ``full_steps * fraction^(R-1-j)`` batch-1 steps (the last rung:
the whole recipe; ``fraction`` 0.5: each rung half the next) and scores it on the validation rows; the better half
(rounded up) goes on. A rung's lr schedule is the recipe's compressed to its steps, so a deep plan, which starts
slower, is not dropped for a slow start when the first rung is long enough (Fashion-MNIST study: the first rung's
Spearman correlation with the full-length ranking 0.78 at half the steps, 0.90 at three quarters, at 256 KB). The
reference plan (classifier-only) is measured at every rung, whether it survives or not, so each measured gain is
taken against it at the same number of steps. The winner is the best candidate of the last rung (ties: the
smaller peak SRAM, then the earlier candidate — presets come first), except that a candidate that is not a preset
has to beat the best preset of the last rung by more than ``margin`` (a number, or ``margin(candidate, preset)``:
noise.py's run-to-run and paired validation-row noise): otherwise the preset wins — a ranking within the noise of
the validation rows must not replace the obvious plan by a searched one.
``measure(names, steps)`` -> {name: accuracy} runs the fine-tunes (in parallel, cached: measure.py); a name it leaves
out (the time limit) is out of the ranking, and that rung is the last.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tinytrain.errors import UsageError


@dataclass(frozen=True)
class Rung:
    steps: int
    accuracy: dict[str, float]  # every candidate measured at this rung (and the reference)
    kept: tuple[str, ...]  # the candidates that go on (the last rung: its ranking)


def rung_steps(n_candidates: int, full_steps: int, max_rungs: int = 2, min_steps: int = 1,
               fraction: float = 0.5) -> list[int]:
    """Steps per rung: one rung per halving down to 2 candidates (at most ``max_rungs``), the last at full_steps,
    each other ``fraction`` of the next."""
    rungs = max(1, min(max_rungs, math.ceil(math.log2(max(n_candidates, 2)))))
    return [max(min_steps, round(full_steps * fraction ** (rungs - 1 - j))) for j in range(rungs)]


def successive_halving(names: list[str], reference: str, measure, full_steps: int, size, max_rungs: int = 2,
                       min_steps: int = 1, presets: frozenset[str] = frozenset(),
                       margin: float | Callable[[str, str], float] = 0.0, fraction: float = 0.5
                       ) -> tuple[str, list[Rung]]:
    """(the winner, the rungs). ``names`` in priority order; ``size(name)`` breaks ties (peak SRAM); ``presets``
    (the reference among them) win unless another candidate beats the best of them by more than ``margin``;
    ``fraction``: a rung's steps as a fraction of the next one's."""
    alive = list(names)
    rungs = []
    steps_list = rung_steps(len(alive), full_steps, max_rungs, min_steps, fraction)
    for j, steps in enumerate(steps_list):
        wanted = alive + ([reference] if reference not in alive else [])
        acc = measure(wanted, steps)
        if reference not in acc:
            raise UsageError(f"--time-limit ran out before the finalists' {steps}-step rung measured the "
                             f"reference plan ({reference}); give more time")
        cut = any(n not in acc for n in wanted)  # the time limit: this rung is the last, of those it measured
        ranked = sorted((n for n in alive if n in acc), key=lambda n: (-acc[n], size(n), names.index(n)))
        if not ranked:
            break  # none of the survivors measured: the previous rung's ranking stands
        last = j == len(steps_list) - 1 or cut
        kept = tuple(ranked if last else ranked[: math.ceil(len(ranked) / 2)])
        rungs.append(Rung(steps, {n: acc[n] for n in wanted if n in acc}, kept))
        alive = list(kept)
        if cut:
            break
    winner = alive[0]
    if presets and winner not in presets:
        final = rungs[-1].accuracy
        best_preset = min((n for n in final if n in presets or n == reference),
                          key=lambda n: (-final[n], size(n), names.index(n) if n in names else -1))
        needed = margin(winner, best_preset) if callable(margin) else margin
        if final[winner] - final[best_preset] <= needed:
            winner = best_preset
    return winner, rungs
