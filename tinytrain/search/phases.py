"""The plan search's phases as a user sees them: each one a progress bar with a known total ("i / N", elapsed time)
on stderr, one line when it ends (what it did of its total, wall and CPU seconds, what the time limit cut short), and
the same in PLAN.search.json's ``phases``. The whole run's ``--time-limit`` is one deadline every phase obeys
(``Clock``): a phase that hits it stops, says what it left out, and the next ones do what is left in the time."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import asdict, dataclass, field

from tqdm import tqdm


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the fine-tune workers and their compilers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class PhaseRecord:
    """One phase's line of PLAN.search.json ``phases``."""

    name: str
    total: int
    done: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    cut_short: str | None = None  # what the time limit (or a budget) left undone, in words


@dataclass
class Clock:
    """The run's start, its ``--time-limit`` deadline (None: none), and the phases recorded so far."""

    start: float
    limit: float | None
    progress: bool = False
    records: list[PhaseRecord] = field(default_factory=list)

    @property
    def deadline(self) -> float | None:
        return None if self.limit is None else self.start + self.limit

    def at(self, fraction: float) -> float | None:
        """The time ``fraction`` of the limit after the start (None without a limit)."""
        return None if self.limit is None else self.start + fraction * self.limit

    def out_of_time(self) -> bool:
        return self.limit is not None and time.time() > self.start + self.limit

    def phase(self, name: str, total: int) -> Phase:
        return Phase(self, PhaseRecord(name, total))

    def skip(self, name: str, why: str) -> None:
        """A phase not run at all (the time limit was reached before it)."""
        self.records.append(PhaseRecord(name, 0, cut_short=why))
        if self.progress:
            print(f"plan: {name}: {why}", file=sys.stderr)

    def cut_short(self) -> list[str]:
        return [f"{r.name}: {r.cut_short}" for r in self.records if r.cut_short]

    def to_json(self) -> list[dict]:
        return [asdict(r) for r in self.records]


class Phase:
    """A context manager: the bar while the phase runs (``update(n)``), its record and its line when it ends."""

    def __init__(self, clock: Clock, record: PhaseRecord) -> None:
        self.clock, self.record = clock, record
        self.bar = None
        self.t0 = self.cpu0 = 0.0

    def __enter__(self) -> Phase:
        self.t0, self.cpu0 = time.time(), cpu_seconds()
        self.bar = tqdm(total=self.record.total, desc=self.record.name, file=sys.stderr,
                        disable=not self.clock.progress or not sys.stderr.isatty(), leave=False, mininterval=0.5)
        return self

    def update(self, n: int = 1) -> None:
        self.record.done += n
        self.bar.update(n)

    def cut(self, what: str) -> None:
        self.record.cut_short = what

    def __exit__(self, *exc) -> None:
        self.bar.close()
        r = self.record
        r.seconds, r.cpu_seconds = round(time.time() - self.t0, 2), round(cpu_seconds() - self.cpu0, 2)
        self.clock.records.append(r)
        if self.clock.progress and exc[0] is None:
            print(f"plan: {r.name}: {r.done} / {r.total} in {r.seconds:.1f} s (CPU {r.cpu_seconds:.1f} s)"
                  + (f"; cut short: {r.cut_short}" if r.cut_short else ""), file=sys.stderr)
