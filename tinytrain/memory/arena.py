"""The arena layout of a schedule: where each buffer lives and when (docs/design.md §5).

``arena_layout`` plans the arena of a graph executed in node order (lifetimes, in-place pairs, a planner, the
streamed region); the result, an ``ArenaLayout``, is what the code generator reads (offsets, sizes, the arena's
size) and what the footprint and the reports count. Planning never edits the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.ir import Graph
from tinytrain.memory.inplace import SLACK, InPlace, choose
from tinytrain.memory.lifetimes import BufferUse, buffer_lifetimes, scratch_requests
from tinytrain.memory.planner import ALIGNMENT, PLANNERS, align
from tinytrain.memory.stream import StreamRegion, stream_region


@dataclass(frozen=True)
class PlannedBuffer:
    use: BufferUse
    offset: int


@dataclass(frozen=True)
class ArenaLayout:
    """The arena: ``buffers`` are the graph's tensors (a view shares its buffer's offset), kernel scratch is in
    ``scratch``; ``arena_bytes`` its size, ``max_live_bytes`` the largest live set, at ``peak_step``. Steps index
    ``graph.nodes``."""

    arena_bytes: int
    max_live_bytes: int
    peak_step: int
    buffers: tuple[PlannedBuffer, ...]
    planner: str
    scratch: tuple[PlannedBuffer, ...] = ()
    inplace: tuple[InPlace, ...] = ()
    stream: StreamRegion | None = None  # the row-streamed region of the schedule (memory/stream.py), if any

    @property
    def n_steps(self) -> int:
        return 1 + max((b.use.last_use for b in self.buffers + self.scratch), default=0)

    def alive_at(self, step: int) -> list[PlannedBuffer]:
        alive = [b for b in self.buffers + self.scratch if b.use.first_use <= step <= b.use.last_use]
        return sorted(alive, key=lambda b: (-b.use.size, b.use.tensor))

    def live_by_role(self) -> list[dict[str, int]]:
        """Per step, arena bytes alive by buffer role. An in-place output and the input it overwrites share
        bytes; the shared bytes count once, for the newer buffer."""
        result = []
        for step in range(self.n_steps):
            alive = sorted(self.alive_at(step), key=lambda b: -b.use.first_use)
            counted: list[tuple[int, int]] = []
            roles: dict[str, int] = {}
            for b in alive:
                lo, hi = b.offset, b.offset + align(b.use.size)
                own = hi - lo - sum(max(0, min(hi, e) - max(lo, s)) for s, e in counted)
                counted.append((lo, hi))
                roles[b.use.role] = roles.get(b.use.role, 0) + own
            result.append(roles)
        return result

    def buffers_json(self) -> list[dict]:
        ties = {p.output: p for p in self.inplace}

        def entry(b: PlannedBuffer) -> dict:
            d = {"tensor": b.use.tensor, "role": b.use.role, "size": b.use.size, "offset": b.offset,
                 "first_use": b.use.first_use, "last_use": b.use.last_use}
            if b.use.views:
                d["views"] = list(b.use.views)
            if b.use.tensor in ties:
                d["overwrites"] = ties[b.use.tensor].input
            return d

        return [entry(b) for b in self.buffers + self.scratch]

    def stream_json(self) -> dict | None:
        return None if self.stream is None else {
            "steps": self.stream.steps,
            "line_buffers": [{"tensor": b.tensor, "rows": b.rows, "height": b.height, "row_bytes": b.row_bytes}
                             for b in self.stream.rings]}


def arena_layout(graph: Graph, planner: str = "greedy", inplace: bool = True,
                 stream: bool | StreamRegion = True) -> ArenaLayout:
    """Plan the arena of ``graph`` executed in node order, with in-place outputs where ops allow it. Works for a
    forward graph and for a (reordered) training step.

    With ``stream`` the schedule's streamable prefix runs row by row in line buffers (memory/stream.py chooses which,
    or ``stream`` is the region to use).
    With ``inplace`` the arena is also planned with gradient chains as compact as the others (``memory.inplace``:
    ``GRADIENT_SLACK``), without in-place outputs, and with only the pairs at the crowded steps (where at least
    half the largest live set is alive without in-place), and the smallest plan is kept: a chain of in-place buffers
    is placed as one rigid unit, which can cost more than it saves where memory is not tight."""
    region = stream if isinstance(stream, StreamRegion) else stream_region(graph) if stream else None
    uses = buffer_lifetimes(graph, region)
    scratch = scratch_requests(graph, region)

    def arena(pairs: list[InPlace]):
        p = PLANNERS[planner](alignment=ALIGNMENT)
        ids = {u.tensor: p.add_buffer(u.size, u.first_use, u.last_use) for u in uses + scratch}
        for pair in pairs:
            p.tie(ids[pair.output], ids[pair.input], -pair.delta)
        return p, ids

    first = region.steps if region else 0
    pairs = choose(graph, uses, ALIGNMENT, first_step=first) if inplace else []
    p, ids = arena(pairs)
    if pairs:
        alone, alone_ids = arena([])
        crowd = alone.live_profile(list(range(len(graph.nodes))))
        compact = choose(graph, uses, ALIGNMENT, gradient_slack=SLACK, first_step=first)  # gradient chains too
        crowded = [q for q in pairs if 2 * crowd[q.step] >= max(crowd)]
        for option in (compact, [], crowded):  # ties keep the earlier plan, except that none beats some pairs
            planned_option = (alone, alone_ids) if not option else arena(option)
            size = planned_option[0].total_size()
            if size < p.total_size() or (size == p.total_size() and not option):
                (p, ids), pairs = planned_option, option
    planned = tuple(PlannedBuffer(u, p.offset(ids[u.tensor])) for u in uses)
    planned_scratch = tuple(PlannedBuffer(u, p.offset(ids[u.tensor])) for u in scratch)
    steps = range(max(len(graph.nodes), 1))
    live = p.live_profile(list(steps))
    peak_step = max(steps, key=lambda s: (live[s], -s))
    return ArenaLayout(p.total_size(), max(live, default=0), peak_step, planned, planner, planned_scratch,
                       tuple(pairs), region)
