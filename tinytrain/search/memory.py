"""Peak SRAM of a plan's training step, as ``tinytrain compile --plan`` reports it, cached.

A plan's memory is the real thing, not a formula: ``training.device_step.device_step`` (the step compile
plans) -> ``memory.report.memory_report`` (greedy planner, in-place outputs: compile's
defaults), and its ``peak_sram_bytes`` (arena + trainable SRAM copies + optimizer state + runtime + stack
estimate; the optimizer state includes the trained weights' remainders, ``remainder_bytes``, so a plan's
remainder bits are part of its figure and of its key). One evaluation takes tens of milliseconds; the search asks for thousands, mostly repeated, so results
are kept in memory and, with ``path``, in a JSON file shared by every ``tinytrain plan`` run on the same model
(keyed by the model's sha256, head and update configuration; budget independent), valid for the sources that
decide the figure (``MEMORY_SOURCES``): a file written by another memory model is not reused.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

from tinytrain.errors import PlanError
from tinytrain.ir import Graph
from tinytrain.memory.report import memory_report
from tinytrain.search.measure import source_fingerprint
from tinytrain.training.device_step import device_step
from tinytrain.training.finite import gradient_bounds
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan

MEMORY_SOURCES = ("ops", "training", "memory")
UNTRAINABLE = 1 << 62  # the "peak" of a plan no engine runs: over every budget
_PREFETCH: list = []  # MemoryOracle.prefetch: the oracle and the plans its forked workers evaluate


def plan_key(plan: Plan) -> str:
    """What decides a plan's memory: its updates and its remainder bits (their bytes: memory/footprint.py
    ``remainder_bytes``, part of the optimizer state the peak counts)."""
    return f"b{plan.bias_last_k}" + "".join(
        f"|w{w.conv}:{w.ratio:g}" + ("" if w.remainder_bits is None else f"r{w.remainder_bits}")
        for w in plan.weights) + f"|r{plan.remainder_bits}"


def peak_sram(graph: Graph, plan: Plan, config: UpdateConfig = UpdateConfig(), planner: str = "greedy") -> int:
    """``tinytrain compile --plan``'s peak_sram_bytes for this plan (budget-independent); ``UNTRAINABLE`` for a plan
    no engine runs, its gradients not proven finite by a finite loss (training/finite.py: monotone too, a plan
    updating more has larger bounds)."""

    step = device_step(graph, plan, config)
    try:
        gradient_bounds(step)
    except PlanError:
        return UNTRAINABLE
    return memory_report(step, 1 << 62, 1 << 62, planner=planner).peak_sram_bytes


class MemoryOracle:
    """``oracle(plan)`` -> peak SRAM bytes, computed once per plan (and per cache file)."""

    def __init__(self, graph: Graph, config: UpdateConfig = UpdateConfig(), path: Path | None = None,
                 planner: str = "greedy") -> None:
        self.graph, self.config, self.path, self.planner = graph, config, path, planner
        self.evaluations = 0  # computed in this process (not from a cache)
        self._dirty = 0
        self._model = source_fingerprint(MEMORY_SOURCES)
        self.values: dict[str, int] = self._stored()

    def _stored(self) -> dict[str, int]:
        """The cache file's figures; none when it is absent, damaged or written by another memory model."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if data["memory_model"] != self._model:
                return {}
            return {k: int(v) for k, v in data["peak_sram_bytes"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # a damaged cache is recomputed, never trusted

    def __call__(self, plan: Plan) -> int:
        key = plan_key(plan)
        v = self.values.get(key)
        if v is None:
            v = self.values[key] = peak_sram(self.graph, plan, self.config, self.planner)
            self.evaluations += 1
            self._dirty += 1
            if self._dirty >= 200:
                self.save()
        return v

    def prefetch(self, plans: list[Plan], workers: int, deadline: float | None = None, done=None) -> None:
        """The figures of ``plans`` not known yet, evaluated by ``workers`` forked processes (the same numbers as
        one by one: ``peak_sram`` is a pure function of the plan); ``done(n)`` as they come, stopped at
        ``deadline`` (the rest are evaluated when asked for)."""
        missing = {plan_key(p): p for p in plans if plan_key(p) not in self.values}
        if workers <= 1 or len(missing) < 2:
            return
        _PREFETCH[:] = [self, list(missing.values())]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for key, v in zip(missing, pool.imap(_peak_of, range(len(missing)))):
                self.values[key] = v
                self.evaluations += 1
                self._dirty += 1
                if done is not None:
                    done(1)
                if deadline is not None and time.time() > deadline:
                    break
        _PREFETCH.clear()

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        merged = {**self._stored(), **self.values}  # with what another run may have written meanwhile
        tmp.write_text(json.dumps({"memory_model": self._model, "peak_sram_bytes": merged}, sort_keys=True))
        os.replace(tmp, self.path)
        self._dirty = 0


def _peak_of(i: int) -> int:
    """A prefetch worker's task: the figure of the i-th plan."""
    oracle, plans = _PREFETCH
    return peak_sram(oracle.graph, plans[i], oracle.config, oracle.planner)


class MonotoneFits:
    """``fits(choice)`` for the searches: the true check (``oracle(plan) <= budget``), answered without an
    evaluation when a known result decides it under monotone memory — a choice that updates no more than
    (k and every ratio <=) a known fitting one fits, one that updates at least as much as a known
    non-fitting one does not. The plan finally chosen is always checked with the true evaluation."""

    def __init__(self, oracle, budget: int, to_plan) -> None:
        self.oracle, self.budget, self.to_plan = oracle, budget, to_plan
        self.fitting: list = []
        self.failing: list = []
        self.inferred = 0

    @staticmethod
    def _le(a, b) -> bool:
        """a updates no more than b (and keeps no more remainder bits)."""
        rb = dict(b.weights)
        return a.k <= b.k and a.bits <= b.bits and all(r <= rb.get(i, 0.0) for i, r in a.weights)

    def __call__(self, choice) -> bool:
        if any(self._le(choice, f) for f in self.fitting):
            self.inferred += 1
            return True
        if any(self._le(f, choice) for f in self.failing):
            self.inferred += 1
            return False
        ok = self.oracle(self.to_plan(choice)) <= self.budget
        (self.fitting if ok else self.failing).append(choice)
        return ok
