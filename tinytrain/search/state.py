"""What the plan search's phases share (run.py): its options and result, the run's model, data and oracles, and
phase 1's contributions."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.ir import Graph
from tinytrain.outputs import write_files
from tinytrain.search.exact import MAX_NODES
from tinytrain.search.measure import add_features, new_cuts
from tinytrain.search.phases import Clock
from tinytrain.training.sparse import Plan
from tinytrain.training.spec import StepSpec

DEFAULT_LR = 0.01


@dataclass(frozen=True)
class SearchOptions:
    """Everything ``tinytrain plan`` takes besides the model and the data (its options, same defaults)."""

    sram_bytes: int = 256 * 1024
    new_head: int | None = None
    seed: int = 0                    # new-head init, sample order, rounding, search
    held_out: float | None = None
    split_seed: int = 0
    val: float = 0.25
    lr: float = DEFAULT_LR
    bias_lr: float | None = None
    head_lr: float | None = None
    epochs: int = 2                  # the finalists' recipe
    lr_schedule: str | None = "cosine"  # (None too) every fine-tune's and rung's lrs follow a cosine over its own
    warmup: float = 0.0              # steps, the plan's over --epochs of the data (the warm-up fraction); "constant"
    ft_epochs: int = 1
    ft_steps: int | None = None
    qas: bool = True
    rounding: str = "stochastic"
    bias_k: tuple[int, ...] | None = None
    noise_floor: float = 2.0
    repeats: int = 3
    proposals: int = 4
    max_rungs: int = 2
    rung_fraction: float = 0.75      # a rung's steps as a fraction of the next one's (halving.py)
    other_bits: tuple[int, ...] = (0, 8)  # remainder bits besides the default the finalists may keep
    rank_check: bool = True          # train every finalist at full length: the reference ranking of the rungs
    final_seeds: int = 1             # seeds of each last-rung finalist at full length: its accuracy is their mean
    workers: int = 1                 # local: fine-tune processes; ray: CPUs of a local Ray instance
    executor: str = "local"          # "local" or "ray" (search/executors.py)
    address: str | None = None       # ray: the cluster to connect to (default: this process's or a local one)
    time_limit: float | None = None
    search_seconds_min: float = 20.0  # the proposals' searches get at least this much of a --time-limit
    exact_nodes: int = MAX_NODES     # the branch and bound's node budget (each of its runs)
    population: int = 100
    generations: int = 30
    cache: str | None = None
    use_cache: bool = True
    progress: bool = False
    loss: str = "xent"               # "mse": an autoencoder, scored by minus its validation reconstruction error
    anomaly: bool = False            # mse, y the 0/1 anomaly labels: fit on the normal rows, scored by the ROC AUC


@dataclass(frozen=True)
class SearchResult:
    plan: Plan     # the best measured finalist
    report: dict   # PLAN.search.json
    spec: StepSpec | None = None  # PLAN.json: the plan with the recipe it was measured with, bound to its model

    def write(self, out: str | Path) -> Path:
        """PLAN.json (version 1) at ``out`` and PLAN.search.json beside it, both or neither (tinytrain/outputs);
        returns the latter."""

        out = Path(out)
        details = search_report_path(out)
        spec = self.spec or StepSpec(self.plan)
        write_files({out: (json.dumps(spec.to_json(), indent=1) + "\n").encode(),
                     details: (json.dumps(self.report, indent=1) + "\n").encode()}, {out: "plan", details: "search"})
        return details


def search_report_path(plan: Path) -> Path:
    """PLAN.search.json, beside PLAN.json."""
    return plan.with_name(plan.stem + ".search.json")


def predicted(choice, bias: dict, weight: dict) -> float | None:
    """The additive model's gain of a plan from the raw (unfloored) contributions; None if one is unmeasured."""
    if choice.k not in bias or any((i, r) not in weight for i, r in choice.weights):
        return None
    return bias[choice.k] + sum(weight[(i, r)] for i, r in choice.weights)


@dataclass(frozen=True)
class Run:
    """What the search's phases share: the model, data, options, split, fine-tune recipe, memory oracle, caches."""

    graph: Graph
    x: np.ndarray
    y: np.ndarray
    opts: SearchOptions
    source: dict
    clock: Clock  # the start, the --time-limit and the phases' records
    executor: Any
    space: Any
    rows: np.ndarray
    train_rows: np.ndarray
    val_rows: np.ndarray
    ft: Any
    mem: Any
    cache: Any

    def plan_of(self, choice) -> Plan:
        return replace(self.space.plan(choice, self.ft.lr, self.ft.bias_lr, self.ft.head_lr), loss=self.ft.loss)

    def fits_plan(self, plan) -> bool:
        return self.mem(plan) <= self.opts.sram_bytes


@dataclass(frozen=True)
class Contributions:
    """Phase 1's results: the options, their measured gains over the baseline and the noise floor."""

    options: list
    skipped: int
    base: Plan
    base_acc: float
    bias: dict
    weight: dict
    gains: Any
    noise: Any
    tasks: list
    todo: list
    measured_now: list
    complete: bool
    job: Any


def frozen_features(run: Run, job: dict, plans: list) -> dict:
    """``job`` with the frozen features the fine-tunes of ``plans`` need (measure.add_features), as a phase."""
    cuts = new_cuts(job, plans)
    if cuts:
        with run.clock.phase("frozen features (the C forward below each cut)", len(cuts)) as phase:
            add_features(job, plans, phase)
    return job
