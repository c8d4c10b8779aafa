"""The report's estimate of the step's time on a clock: the step's MACs times the instructions per MAC measured on its
core (tinytrain/cores.py ``Rate``), one instruction per cycle assumed.

It is an estimate, and says so: the rates are pooled over the shipped sparse plans with an fp32 backward under QEMU
(benchmarks/results/cores.json); a real board adds flash wait states and bus stalls (slower) or dual issue and caches
(the Cortex-M7: faster), and a step whose op mix differs from those plans' (an integer backward, a dense plan) has
other rates.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.cores import Rate, core_of
from tinytrain.describe import node_macs
from tinytrain.errors import UsageError
from tinytrain.ir import Graph

METHOD = ("the step's MACs times the instructions per MAC of its core (forward and backward apart), measured under "
          "QEMU -icount on the shipped sparse plans (benchmarks/results/cores.json), at one instruction per cycle: "
          "flash wait states, caches and dual issue make a real board differ")


@dataclass(frozen=True)
class TimeEstimate:
    """The estimated time of one step (training) or inference (``backward_macs`` 0) on ``core`` at ``clock_mhz``."""

    core: str
    clock_mhz: float
    forward_macs: int
    backward_macs: int
    rates: tuple[Rate, ...]

    def instructions(self, rate: Rate) -> int:
        return round(self.forward_macs * rate.forward + self.backward_macs * rate.backward)

    def milliseconds(self, rate: Rate) -> float:
        return self.instructions(rate) / (self.clock_mhz * 1e3)

    def text(self) -> str:
        what = "per step" if self.backward_macs else "per inference"
        if not self.rates:
            return f"  time       not estimated: no instructions measured on {self.core} yet"
        parts = [f"≈ {self._ms(r)} {what} ({r.variant}: {self.instructions(r) / 1e6:.1f}M instructions, rates of "
                 f"{r.board})" for r in self.rates]
        return (f"  time       {'; '.join(parts)} at {self.clock_mhz:g} MHz (estimate: MACs x measured instructions "
                "per MAC, 1 per cycle; --clock sets the clock)")

    def _ms(self, rate: Rate) -> str:
        ms = self.milliseconds(rate)
        return f"{ms / 1e3:.2f} s" if ms >= 1000 else f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"

    def to_json(self) -> dict:
        return {"core": self.core, "clock_mhz": self.clock_mhz, "forward_macs": self.forward_macs,
                "backward_macs": self.backward_macs, "method": METHOD, "estimates": [
                    {"variant": r.variant, "rates_measured_on": r.board, "instructions_per_forward_mac": r.forward,
                     "instructions_per_backward_mac": r.backward, "instructions": self.instructions(r),
                     "milliseconds": round(self.milliseconds(r), 3)} for r in self.rates]}


def check_clock(clock_mhz: float | None) -> None:
    if clock_mhz is not None and not 0 < clock_mhz < 1e5:
        raise UsageError(f"--clock {clock_mhz:g}: give the core's clock in MHz (above 0, for example 216)")


def estimate_time(graph: Graph, step: Graph, target: str, clock_mhz: float | None = None) -> TimeEstimate | None:
    """The estimate for ``step`` (``graph``'s training step, or ``graph`` itself: the inference) on ``target``'s core
    at ``clock_mhz`` (None: the core's reference clock); None for a host build."""
    core = core_of(target)
    if core is None:
        return None
    forward = sum(node_macs(graph, n) for n in graph.nodes)
    backward = 0 if step is graph else max(0, sum(node_macs(step, n) for n in step.nodes) - forward)
    return TimeEstimate(core.name, clock_mhz or core.clock_mhz, forward, backward, core.rates)
