"""Whether the search's short measurements can be trusted: the rank correlation of each rung with full length.

Successive halving (halving.py) drops finalists on short runs. The last phase of ``tinytrain plan`` trains every
finalist for the whole recipe on the validation rows (the reference ranking) and reports, per rung, Spearman's
rank correlation between the rung's accuracies and the reference accuracies of the same finalists: near 1, the
short runs ranked as the full ones do; low, a rung's drops were noise or a slow start. Ties get average ranks.
"""

from __future__ import annotations

import math


def ranks(values: list[float]) -> list[float]:
    """1-based ranks of ``values`` (ascending), ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho of paired values (the Pearson correlation of their ranks); None for fewer than 3 pairs or
    when either side is constant (no ranking to compare)."""
    if len(a) != len(b):
        raise ValueError("spearman: the two rankings must have the same items")
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    sab = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    saa, sbb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    if saa == 0 or sbb == 0:
        return None
    return sab / math.sqrt(saa * sbb)


def rung_agreement(rungs: list[tuple[int, dict[str, float]]], full: dict[str, float]) -> list[dict]:
    """Per rung ((steps, {finalist: accuracy})): how many finalists it measured and the Spearman correlation of
    their accuracies with ``full`` (the reference accuracies, every finalist at full length)."""
    out = []
    for steps, acc in rungs:
        names = [n for n in acc if n in full]
        rho = spearman([acc[n] for n in names], [full[n] for n in names])
        out.append({"steps": steps, "finalists": len(names), "spearman": None if rho is None else round(rho, 4)})
    return out
