"""Exact search over the separable gain model with the true memory check: depth-first branch and bound.

Maximize Δb[k] + Σ_i Δw[i, r_i] subject to peak_sram(plan) <= budget, peak_sram from the real schedule and
planner (the ``fits`` oracle, cached). The one assumption is that memory is monotone: updating more (a deeper
k, a larger ratio, one more layer) never lowers the peak. It holds for the training step's buffers (every
extra update adds a gradient, a saved activation or a trainable copy and removes nothing) up to the
planners' heuristics. Under it:

- an option whose gain is not above that of a smaller option of the same variable (k = 1 / ratio 0
  included, gain 0) is dominated and dropped;
- a partial plan that does not fit has no fitting completion: its subtree is pruned;
- a subtree whose gain so far + the best remaining gain of every undecided variable is not above the best
  plan found is pruned.

Variables: k first (it decides how deep the backward pass goes), then layers by decreasing best gain;
options by decreasing gain, so the first leaf is the greedy plan. The search is exhaustive when it ends
before ``deadline`` and within ``max_nodes`` nodes (``proven_optimal``; its progress counts nodes against that
budget); otherwise it returns the best plan found.
"""

from __future__ import annotations

import time

from tinytrain.search.space import Choice, Gains

EPS = 1e-12
MAX_NODES = 20_000  # the default node budget (``tinytrain plan --exact-nodes``)


def _undominated(options: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(size, gain) options (ascending size, the free option (0, 0) among them) whose gain beats every
    smaller one, by decreasing gain."""
    keep, best = [], -float("inf")
    for size, gain in sorted(options):
        if gain > best + EPS:
            keep.append((size, gain))
            best = gain
    return sorted(keep, key=lambda o: (-o[1], o[0]))


def branch_and_bound(gains: Gains, fits, deadline: float | None = None, progress=None,
                     max_nodes: int = MAX_NODES) -> dict:
    ks = _undominated([(float(k), g) for k, g in gains.bias.items()])
    layer_opts = {i: _undominated([(0.0, 0.0)] + [(r, gains.weight[(i, r)]) for r in gains.options(i)])
                  for i in gains.layers}
    layer_opts = {i: o for i, o in layer_opts.items() if len(o) > 1}  # layers with a positive gain
    order = sorted(layer_opts, key=lambda i: (-layer_opts[i][0][1], i))
    variables = [("k", ks)] + [(i, layer_opts[i]) for i in order]
    best_rest = [0.0] * (len(variables) + 1)
    for j in range(len(variables) - 1, -1, -1):
        best_rest[j] = best_rest[j + 1] + max(0.0, variables[j][1][0][1])

    k0 = min(gains.bias)
    best = {"choice": Choice(k0), "score": gains.bias[k0]}
    stats = {"nodes": 0, "complete": True, "stopped": None}

    def choice_of(k: int, ratios: dict[int, float]) -> Choice:
        return Choice(k, tuple((i, r) for i, r in sorted(ratios.items()) if r > 0))

    def dfs(j: int, k: int, ratios: dict[int, float], score: float) -> None:
        if score + best_rest[j] <= best["score"] + EPS:
            return
        if j == len(variables):
            best.update(choice=choice_of(k, ratios), score=score)
            return
        if stats["nodes"] >= max_nodes or deadline is not None and time.time() > deadline:
            stats.update(complete=False, stopped="node budget" if stats["nodes"] >= max_nodes else "time limit")
            return
        stats["nodes"] += 1
        if progress is not None:
            progress.update(1)
        var, opts = variables[j]
        for size, gain in opts:
            if var == "k":
                nk, nr = int(size), ratios
            else:
                nk, nr = k, {**ratios, var: size}
            if size > 0 and not (var == "k" and int(size) == k0) and not fits(choice_of(nk, nr)):
                continue  # monotone memory: nothing below fits either
            dfs(j + 1, nk, nr, score + gain)

    if fits(Choice(k0)):
        dfs(0, k0, {}, 0.0)
    return {"choice": best["choice"], "score": best["score"], "proven_optimal": stats["complete"],
            "nodes": stats["nodes"], "variables": len(variables), "stopped": stats["stopped"]}
