"""Row-streamed execution of the frozen forward prefix: line buffers instead of whole tensors.

The tensors a step computes before the first one something needs whole (a saved activation the backward pass
reads, a graph output, the input of an op that cannot stream) never need to exist whole. A prefix of the schedule
whose ops declare ``OpDef.rows`` (output row r reads a window of input rows: convolutions, elementwise adds) can run
as one *region*, in sweeps over its nodes:
    until the region's last node has computed all its rows:
        for each node k of the region, in order:
            if k's inputs hold every row that k's next output row reads: compute that row

A tensor read only inside the region lives in a *line buffer* of ``rows`` rows holding rows [row0, row0 + rows);
when its producer is about to write a row that does not fit, the rows below the lowest one a reader still needs
(its next output row's window) are dropped and the rest moved to the front, so rows stay contiguous and the
kernels read a window as they read a whole tensor, offset by row0. A residual add's skip input is such a buffer
too (a delay line). A graph input read only in the region is a line buffer filled from a *row source* as its
readers need rows (``source``); tensors read after the region are whole (``rows == height``). ``rows`` is the
largest span a buffer ever holds while the schedule above runs at compile time (``sweeps``); the emitted C
(codegen/emit_stream.py) runs the same schedule, so it never needs more.

Which prefix streams is chosen by the peak of live bytes it gives (``stream_region``). The region recomputes nothing
and its outputs are bit-identical to layer-by-layer execution: the kernels' arithmetic is the same, only rows are
addressed relative to row0. The simulator still runs layer by layer: it is the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.ir import DType, Graph, Role
from tinytrain.memory.lifetimes import buffer_lifetimes
from tinytrain.ops import RowWindow
from tinytrain.ops import get_op


@dataclass(frozen=True)
class Reader:
    """Node ``step`` of the region reads a tensor through ``window`` (for ring tensors: when may rows go)."""

    step: int
    window: RowWindow


@dataclass(frozen=True)
class Ring:
    """The buffer of one activation of the region: ``rows`` rows of ``row_bytes`` (``rows == height``: whole)."""

    tensor: str
    rows: int
    height: int
    row_bytes: int
    readers: tuple[Reader, ...]  # in-region readers (their windows decide which rows are still needed)
    total: int                   # rows of it the region ever computes or reads (height for a whole tensor)
    source: bool = False         # a graph input read row by row from a row source as its readers need rows

    @property
    def whole(self) -> bool:
        return self.rows == self.height

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


@dataclass(frozen=True)
class StreamRegion:
    """Nodes ``0 .. steps - 1`` run row-streamed; ``buffers`` are every activation they read or write;
    ``windows[k]``: node k's activation inputs with the rows an output row reads; ``total[k]``: the rows of node
    k's output the region computes."""

    steps: int
    buffers: tuple[Ring, ...]
    windows: tuple[tuple[tuple[str, RowWindow], ...], ...]
    total: tuple[int, ...]

    def buffer(self, tensor: str) -> Ring:
        for b in self.buffers:
            if b.tensor == tensor:
                return b
        raise KeyError(tensor)

    @property
    def rings(self) -> tuple[Ring, ...]:
        """The buffers that are line buffers (not whole tensors)."""
        return tuple(b for b in self.buffers if not b.whole)


def _streamable(graph: Graph, k: int) -> bool:
    """Node k can join a region: its op streams, its activations are int8 NHWC, its output is needed whole by
    nobody (not a graph output, not saved for the backward pass)."""

    node = graph.nodes[k]
    op = get_op(node.op)
    if op.rows is None or op.view or op.writes or len(node.outputs) != 1:
        return False
    out = graph.tensors[node.outputs[0]]
    if out.dtype != DType.INT8 or len(out.shape) != 4 or out.role is Role.SAVED or out.name in graph.outputs:
        return False
    ins = [graph.tensors[i] if i else None for i in node.inputs]
    for i, t in enumerate(ins):
        if t is None or t.has_data:
            continue
        if t.dtype != DType.INT8 or len(t.shape) != 4 or op.rows(node.attrs, ins, [out], i) is None:
            return False
    return True


def streamable_prefix(graph: Graph) -> int:
    """The longest prefix of the schedule that can stream."""
    n = 0
    while n < len(graph.nodes) and _streamable(graph, n):
        n += 1
    return n


def stream_region(graph: Graph) -> StreamRegion | None:
    """The streamed region of ``graph``'s schedule: of the streamable prefixes, the one whose execution has the
    smallest peak of live bytes (ties: the fewest bytes in the region); None when no prefix lowers the peak."""
    best, best_key = None, (peak_live_bytes(graph, None), 0)
    for steps in range(2, streamable_prefix(graph) + 1):
        region = stream_prefix(graph, steps)
        if region is not None:
            key = (peak_live_bytes(graph, region), sum(b.nbytes for b in region.buffers))
            if key < best_key:
                best, best_key = region, key
    return best


def peak_live_bytes(graph: Graph, region: StreamRegion | None) -> int:
    """The most bytes of arena buffers (lifetimes.buffer_lifetimes) alive at one step, with ``region`` streamed."""

    delta = [0] * (len(graph.nodes) + 1)
    for u in buffer_lifetimes(graph, region):
        delta[u.first_use] += u.size
        delta[u.last_use + 1] -= u.size
    live, peak = 0, 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def stream_prefix(graph: Graph, steps: int) -> StreamRegion | None:
    """Nodes 0 .. steps - 1 streamed (a streamable prefix of the schedule), or None if that keeps every tensor whole."""

    nodes = graph.nodes[:steps]
    produced = {node.outputs[0]: k for k, node in enumerate(nodes)}
    windows = []
    for node in nodes:
        op = get_op(node.op)
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        out = [graph.tensors[node.outputs[0]]]
        windows.append(tuple((name, op.rows(node.attrs, ins, out, i)) for i, name in enumerate(node.inputs)
                             if name and not graph.tensors[name].has_data))
    readers: dict[str, list[Reader]] = {}
    for k, ws in enumerate(windows):
        for name, w in ws:
            readers.setdefault(name, []).append(Reader(k, w))
    read_later = {i for node in graph.nodes[steps:] for i in node.inputs if i} | set(graph.outputs)
    sources = {t for t in readers if t in graph.inputs and t not in read_later}
    whole = {t for t in readers if t not in produced and t not in sources} | {t for t in produced if t in read_later}
    height = {t: graph.tensors[t].shape[1] for t in list(produced) + list(readers)}

    # Rows of each output ever computed (backwards from the readers' windows; all of a whole tensor).
    total = [0] * steps
    for k in reversed(range(steps)):
        t = nodes[k].outputs[0]
        total[k] = height[t] if t in whole else max(
            (min(height[t], rd.window.end(total[rd.step] - 1)) for rd in readers.get(t, []) if total[rd.step]),
            default=0)

    # Run the schedule: a ring must hold, when its producer writes row p, rows [lowest still needed, p]. A node
    # reading a source first pulls the source rows its next output row reads.
    span = {t: 1 for t in list(produced) + list(sources)}
    done = [0] * steps
    pulled = {t: 0 for t in sources}
    for k in sweeps(windows, produced, total):
        for t, w in windows[k]:
            while t in sources and pulled[t] < min(height[t], w.end(done[k])):
                q = pulled[t]
                span[t] = max(span[t], q + 1 - low_water(readers[t], done, total, q))
                pulled[t] += 1
        t, p = nodes[k].outputs[0], done[k]
        span[t] = max(span[t], p + 1 - low_water(readers.get(t, []), done, total, p))
        done[k] += 1

    buffers = []
    for t in list(readers) + [t for t in produced if t not in readers]:
        rows = height[t] if t in whole else min(height[t], span[t])
        computed = pulled[t] if t in sources else height[t] if t in whole else total[produced[t]]
        buffers.append(Ring(t, rows, height[t], graph.tensors[t].nbytes // height[t], tuple(readers.get(t, [])),
                            computed, t in sources))
    if all(b.whole for b in buffers):
        return None
    return StreamRegion(steps, tuple(buffers), tuple(windows), tuple(total))


def low_water(readers: list[Reader], done: list[int], total: list[int], p: int) -> int:
    """The lowest row of a tensor its readers still need when its producer is about to write row p (at most p):
    each unfinished reader's next output row reads from its window's first row on."""
    return min([max(0, rd.window.first(done[rd.step])) for rd in readers if done[rd.step] < total[rd.step]] + [p])


def sweeps(windows, produced: dict[str, int], total: list[int]):
    """The schedule, as the node step of each row computed: sweeps over the region's nodes in order, each computing
    its next row when its inputs hold the rows that row's window reads, until the last node is done."""
    steps = len(windows)
    inputs = [[(produced[t], w) for t, w in ws if t in produced] for ws in windows]
    done = [0] * steps
    while done[-1] < total[-1]:
        progress = False
        for k in range(steps):
            if done[k] < total[k] and all(done[j] >= min(total[j], w.end(done[k])) for j, w in inputs[k]):
                yield k
                done[k] += 1
                progress = True
        if not progress:
            raise AssertionError("streamed region stalled")  # cannot happen: the first node reads whole tensors
