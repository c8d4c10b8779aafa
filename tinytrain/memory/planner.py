"""Arena planners behind one small interface (after tflite-micro's MicroMemoryPlanner).

``add_buffer(size, first_use, last_use)`` registers a buffer alive over the inclusive step range;
``offset(buffer_id)`` and ``total_size()`` give the plan. Two buffers whose lifetimes intersect never
overlap in memory. Offsets are multiples of ``alignment``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Buffer:
    size: int
    first_use: int
    last_use: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first_use <= other.last_use and other.first_use <= self.last_use


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class _Planner:
    def __init__(self, alignment: int = 16) -> None:
        self.alignment = alignment
        self.buffers: list[Buffer] = []
        self._offsets: list[int] | None = None

    def add_buffer(self, size: int, first_use: int, last_use: int) -> int:
        if size < 0 or first_use > last_use:
            raise ValueError(f"bad buffer: size {size}, lifetime [{first_use}, {last_use}]")
        self.buffers.append(Buffer(size, first_use, last_use))
        self._offsets = None
        return len(self.buffers) - 1

    def offset(self, buffer_id: int) -> int:
        if self._offsets is None:
            self._offsets = self._plan()
        return self._offsets[buffer_id]

    def total_size(self) -> int:
        if not self.buffers:
            return 0
        return max(self.offset(i) + _align(b.size, self.alignment) for i, b in enumerate(self.buffers))

    def max_live_bytes(self) -> int:
        """The lower bound any plan must reach: the largest sum of aligned sizes alive at one step."""
        steps = {b.first_use for b in self.buffers}
        return max((sum(_align(b.size, self.alignment) for b in self.buffers if b.first_use <= s <= b.last_use)
                    for s in steps), default=0)

    def _plan(self) -> list[int]:
        raise NotImplementedError


class LinearPlanner(_Planner):
    """Every buffer after the previous one: no reuse. The reference for 'without planning'."""

    def _plan(self) -> list[int]:
        offsets, end = [], 0
        for b in self.buffers:
            offsets.append(end)
            end += _align(b.size, self.alignment)
        return offsets


class GreedyBySizePlanner(_Planner):
    """Largest buffers first, each at the lowest offset where it fits among the time-overlapping ones."""

    def _plan(self) -> list[int]:
        order = sorted(range(len(self.buffers)), key=lambda i: (-self.buffers[i].size, self.buffers[i].first_use, i))
        offsets: list[int | None] = [None] * len(self.buffers)
        placed: list[int] = []
        for i in order:
            b = self.buffers[i]
            size = _align(b.size, self.alignment)
            busy = sorted((offsets[j], offsets[j] + _align(self.buffers[j].size, self.alignment))
                          for j in placed if self.buffers[j].overlaps_in_time(b))
            candidate = 0
            for start, end in busy:
                if candidate + size <= start:
                    break
                candidate = max(candidate, end)
            offsets[i] = candidate
            placed.append(i)
        return [int(o) for o in offsets]


PLANNERS = {"greedy": GreedyBySizePlanner, "linear": LinearPlanner}
