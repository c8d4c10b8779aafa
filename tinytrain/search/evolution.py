"""Evolutionary search of a plan, as published (MCUNetV3 §3.2; the evolution of MCUNet / Once-for-All).

A genome is a ``Choice``: one gene for k (the measured bias depths) and one per layer with measured weight
options (ratio 0 or a measured ratio). Fitness is the gain model's sum of contributions; a genome whose true
peak SRAM (the ``fits`` oracle) is over the budget is not admitted to the population. Each generation keeps
the best ``parent_ratio`` of the population as parents and refills it with mutants (each gene resampled with
probability ``mutate_prob``) for ``mutate_ratio`` of it and uniform crossovers of two parents for the rest.
Defaults: population 100, parents 25 %, mutation 50 % / p = 0.1 — MCUNet's. Deterministic for a seed.
"""

from __future__ import annotations

import random
import time

from tinytrain.search.space import Choice, Gains

MAX_TRIES = 10  # random draws before a genome is repaired (updates dropped until it fits)


def _genes(gains: Gains) -> tuple[list[int], dict[int, list[float]]]:
    return sorted(gains.bias), {i: [0.0] + gains.options(i) for i in gains.layers}


def _choice(k: int, ratios: dict[int, float]) -> Choice:
    return Choice(k, tuple((i, r) for i, r in sorted(ratios.items()) if r > 0))


class _Breeder:
    """The genetic operators over the search space, each returning a genome that ``fits`` (drawn with ``rng``)."""

    def __init__(self, gains: Gains, fits, rng: random.Random, mutate_prob: float):
        self.fits, self.rng, self.mutate_prob = fits, rng, mutate_prob
        self.ks, self.options = _genes(gains)

    def repair(self, k: int, ratios: dict[int, float]) -> Choice:
        ks, rng = self.ks, self.rng
        c = _choice(k, ratios)
        while not self.fits(c):  # drop a random update (or shallow the biases) until it fits; the baseline fits
            nonzero = [i for i, r in ratios.items() if r > 0]
            if nonzero and (k == ks[0] or rng.random() < 0.5):
                ratios[rng.choice(nonzero)] = 0.0
            elif k != ks[0]:
                k = ks[max(0, ks.index(k) - 1)]
            else:
                break
            c = _choice(k, ratios)
        return c

    def sample(self) -> Choice:
        rng = self.rng
        for _ in range(MAX_TRIES):
            p_on = rng.random()  # a random density per draw: shallow and deep plans both get sampled
            k = rng.choice(self.ks)
            ratios = {i: (rng.choice(opts[1:]) if rng.random() < p_on and len(opts) > 1 else 0.0)
                      for i, opts in self.options.items()}
            c = _choice(k, ratios)
            if self.fits(c):
                return c
        return self.repair(k, ratios)

    def mutate(self, c: Choice) -> Choice:
        rng = self.rng
        for _ in range(MAX_TRIES):
            k = rng.choice(self.ks) if rng.random() < self.mutate_prob else c.k
            ratios = dict.fromkeys(self.options, 0.0) | dict(c.weights)
            for i, opts in self.options.items():
                if rng.random() < self.mutate_prob:
                    ratios[i] = rng.choice(opts)
            m = _choice(k, ratios)
            if self.fits(m):
                return m
        return c

    def crossover(self, a: Choice, b: Choice) -> Choice:
        rng = self.rng
        for _ in range(MAX_TRIES):
            k = rng.choice((a.k, b.k))
            ra, rb = dict(a.weights), dict(b.weights)
            ratios = {i: rng.choice((ra.get(i, 0.0), rb.get(i, 0.0))) for i in self.options}
            m = _choice(k, ratios)
            if self.fits(m):
                return m
        return a


def evolve(gains: Gains, fits, *, population: int = 100, generations: int = 30, parent_ratio: float = 0.25,
           mutate_ratio: float = 0.5, mutate_prob: float = 0.1, seed: int = 0, deadline: float | None = None,
           progress=None) -> dict:
    """Best feasible Choice found: {"choice", "score", "generations", "history" (best score per generation),
    "population" (the last population, distinct, best first)}."""
    rng = random.Random(seed)
    breed = _Breeder(gains, fits, rng, mutate_prob)
    pop = [Choice(breed.ks[0])] + [breed.sample() for _ in range(population - 1)]
    history = []
    n_parents = max(2, int(round(population * parent_ratio)))
    n_mutants = int(round(population * mutate_ratio))
    done = 0
    for _ in range(generations):
        pop = sorted(set(pop), key=lambda c: (-gains.score(c), c.key()))
        history.append(gains.score(pop[0]))
        if deadline is not None and time.time() > deadline:
            break
        parents = pop[:n_parents]
        children = [breed.mutate(rng.choice(parents)) for _ in range(n_mutants)]
        children += [breed.crossover(*rng.sample(parents, 2)) if len(parents) > 1 else breed.mutate(parents[0])
                     for _ in range(population - n_parents - n_mutants)]
        pop = parents + children
        done += 1
        if progress is not None:
            progress.update(1)
    pop = sorted(set(pop), key=lambda c: (-gains.score(c), c.key()))
    return {"choice": pop[0], "score": gains.score(pop[0]), "generations": done, "history": history,
            "population": pop}
