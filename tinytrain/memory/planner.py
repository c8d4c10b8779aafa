"""Arena planners behind one small interface (after tflite-micro's MicroMemoryPlanner).

``add_buffer(size, first_use, last_use)`` registers a buffer alive over the inclusive step range;
``offset(buffer_id)`` and ``total_size()`` give the plan. Two buffers whose lifetimes intersect never
overlap in memory, unless ``tie`` fixed their distance: ``tie(b, a, delta)`` asks for
``offset(b) == offset(a) + delta`` (an in-place output placed relative to the input it overwrites, see
memory/inplace.py). Tied buffers form a group placed as one rigid unit. Offsets are multiples of
``alignment``; every size is rounded up to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Buffer:
    size: int
    first_use: int
    last_use: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first_use <= other.last_use and other.first_use <= self.last_use


ALIGNMENT = 16  # bytes: every arena buffer starts and ends on a multiple (fp32 tensors and SIMD loads are aligned)


def align(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return (n + alignment - 1) // alignment * alignment


class _Planner:
    def __init__(self, alignment: int = ALIGNMENT) -> None:
        self.alignment = alignment
        self.buffers: list[Buffer] = []
        self._parent: list[int] = []   # union-find over ties
        self._rel: list[int] = []      # offset relative to the parent
        self._offsets: list[int] | None = None

    def add_buffer(self, size: int, first_use: int, last_use: int) -> int:
        if size < 0 or first_use > last_use:
            raise ValueError(f"bad buffer: size {size}, lifetime [{first_use}, {last_use}]")
        self.buffers.append(Buffer(size, first_use, last_use))
        self._parent.append(len(self.buffers) - 1)
        self._rel.append(0)
        self._offsets = None
        return len(self.buffers) - 1

    def tie(self, buffer_id: int, to: int, delta: int) -> None:
        """Place ``buffer_id`` at ``offset(to) + delta`` (delta a multiple of the alignment)."""
        if delta % self.alignment:
            raise ValueError(f"tie delta {delta} is not a multiple of the alignment {self.alignment}")
        rb, ob = self._find(buffer_id)
        rt, ot = self._find(to)
        if rb == rt:
            if ob != ot + delta:
                raise ValueError(f"buffers {buffer_id} and {to} are already tied at another distance")
            return
        # offset(x) = offset(root) + rel: make rb a child of rt with offset(rb) = offset(rt) + ot + delta - ob
        self._parent[rb] = rt
        self._rel[rb] = ot + delta - ob
        self._offsets = None

    def _find(self, i: int) -> tuple[int, int]:
        """(root, offset of i relative to its root)."""
        rel = 0
        while self._parent[i] != i:
            rel += self._rel[i]
            i = self._parent[i]
        return i, rel

    def groups(self) -> list[list[tuple[int, int]]]:
        """Tied buffers as groups of (buffer id, relative offset), the smallest relative offset 0."""
        by_root: dict[int, list[tuple[int, int]]] = {}
        for i in range(len(self.buffers)):
            root, rel = self._find(i)
            by_root.setdefault(root, []).append((i, rel))
        result = []
        for members in by_root.values():
            low = min(rel for _, rel in members)
            result.append([(i, rel - low) for i, rel in members])
        return result

    def offset(self, buffer_id: int) -> int:
        if self._offsets is None:
            self._offsets = self._plan()
        return self._offsets[buffer_id]

    def total_size(self) -> int:
        if not self.buffers:
            return 0
        return max(self.offset(i) + align(b.size, self.alignment) for i, b in enumerate(self.buffers))

    def live_bytes(self, step: int) -> int:
        """Bytes alive at ``step``: aligned sizes summed, a group counting the union of its live members."""
        return self.live_profile([step])[0]

    def max_live_bytes(self) -> int:
        """The lower bound any plan must reach: the largest number of bytes alive at one step."""
        return max(self.live_profile(sorted({b.first_use for b in self.buffers})), default=0)

    def live_profile(self, steps: list[int]) -> list[int]:
        al = self.alignment
        steps_a = np.asarray(steps, np.int64)
        total = np.zeros(len(steps_a), np.int64)
        for group in self.groups():
            if len(group) == 1:
                b = self.buffers[group[0][0]]
                total += np.where((steps_a >= b.first_use) & (steps_a <= b.last_use), align(b.size, al), 0)
                continue
            for k, step in enumerate(steps):
                spans = sorted((rel, rel + align(self.buffers[i].size, al)) for i, rel in group
                               if self.buffers[i].first_use <= step <= self.buffers[i].last_use)
                end = None
                for start, stop in spans:
                    if end is None or start >= end:
                        total[k] += stop - start
                        end = stop
                    elif stop > end:
                        total[k] += stop - end
                        end = stop
        return [int(v) for v in total]

    def _plan(self) -> list[int]:
        raise NotImplementedError


class LinearPlanner(_Planner):
    """Every buffer (every tied group) after the previous one: no reuse. The reference for 'without planning'."""

    def _plan(self) -> list[int]:
        offsets, end = [0] * len(self.buffers), 0
        for group in sorted(self.groups(), key=lambda g: min(i for i, _ in g)):
            for i, rel in group:
                offsets[i] = end + rel
            end += max(rel + align(self.buffers[i].size, self.alignment) for i, rel in group)
        return offsets


class GreedyBySizePlanner(_Planner):
    """Largest first, each at the lowest offset where it fits among the time-overlapping ones placed before.

    A tied group is placed as one unit, ordered by its largest member. The greedy placement is run over a
    few orders (size; size x lifetime; lifetime then size; first use then size; extent) and then over up to
    ``tries`` seeded perturbations of the size order, stopping as soon as the arena equals the largest
    live set (it cannot be smaller); the smallest arena wins. Deterministic.
    """

    tries = 60
    seed = 0

    def _plan(self) -> list[int]:
        al = self.alignment
        groups = self.groups()
        n = len(self.buffers)
        sizes = np.array([align(b.size, al) for b in self.buffers], np.int64)
        firsts = np.array([b.first_use for b in self.buffers], np.int64)
        lasts = np.array([b.last_use for b in self.buffers], np.int64)
        g_size = np.array([max(sizes[i] for i, _ in g) for g in groups], np.int64)
        g_first = np.array([min(firsts[i] for i, _ in g) for g in groups], np.int64)
        g_span = np.array([max(lasts[i] for i, _ in g) for g in groups], np.int64) - g_first + 1
        keys = np.arange(len(groups))
        g_extent = np.array([max(rel + sizes[i] for i, rel in g) for g in groups], np.int64)
        orders = [np.lexsort((keys, g_first, -g_size)), np.lexsort((keys, g_first, -g_size * g_span)),
                  np.lexsort((keys, -g_span, -g_size)), np.lexsort((keys, -g_size, g_first)),
                  np.lexsort((keys, g_first, -g_extent))]
        bound = self.max_live_bytes()
        rng = np.random.default_rng(self.seed)
        best: tuple[int, np.ndarray] | None = None
        for attempt in range(len(orders) + self.tries):
            if attempt < len(orders):
                order = orders[attempt]
            else:
                spread = 0.3 if attempt % 2 else 0.9  # mild and strong perturbations, alternately
                order = np.lexsort((keys, g_first, -g_size * rng.uniform(1 - spread, 1 + spread, len(groups))))
            offsets = self._place(groups, order, sizes, firsts, lasts)
            total = int((offsets + sizes).max()) if n else 0
            if best is None or total < best[0]:
                best = (total, offsets)
            if best[0] <= bound:
                break
        return [int(o) for o in best[1]]

    @staticmethod
    def _place(groups, order, sizes, firsts, lasts) -> np.ndarray:
        offsets = np.zeros(len(sizes), np.int64)
        placed = np.zeros(len(sizes), bool)
        for k in order:
            group = groups[k]
            lows, highs = [], []  # open intervals (low, high) of base offsets that would collide
            for i, rel in group:
                if sizes[i] == 0:
                    continue
                hit = placed & (firsts <= lasts[i]) & (lasts >= firsts[i]) & (sizes > 0)
                if hit.any():
                    lows.append(offsets[hit] - rel - sizes[i])
                    highs.append(offsets[hit] + sizes[hit] - rel)
            base = 0
            if lows:
                low, high = np.concatenate(lows), np.concatenate(highs)
                by_low = np.argsort(low, kind="stable")
                for a, b in zip(low[by_low].tolist(), high[by_low].tolist()):
                    if base <= a:
                        break
                    base = max(base, b)
            for i, rel in group:
                offsets[i] = base + rel
                placed[i] = True
        return offsets


PLANNERS = {"greedy": GreedyBySizePlanner, "linear": LinearPlanner}
