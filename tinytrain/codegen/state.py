"""The byte layout of a training state, shared by the emitted C (``tt_state_save`` / ``tt_state_load``)
and the host (``pack`` / ``unpack``), so a device state, a host-C state and a simulator state compare
byte for byte.

Layout, all integers little-endian whatever the target:
    offset 0   4 bytes  magic "TTS1"
    offset 4   uint32   format version (2: weight remainders may follow their parameter; a version-1 state is refused)
    offset 8   uint32   layout fingerprint: the first 4 bytes (little-endian) of the sha256 of the lines
                        "name dtype shape" of the tensors below, so a state of another model or plan is refused
    offset 12  uint32   step counter (steps taken; the stochastic rounding's position)
    offset 16  the tensors the training step updates, in the order of their update nodes' ``stream`` numbers
               (the plan's parameter order, whatever the schedule), parameter before momentum before remainder; of a weight
               whose plan updates only some output channels, only those rows (the others never change):
               each one's elements in C order, int8 as 1 byte, int32 as 4 bytes two's complement,
               float32 (momentum) as 4 bytes IEEE-754; a remainder (ops/sgd_update.py) as int8; no padding.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

from tinytrain.ir import Graph
from tinytrain.ops import get_op
from tinytrain.simulator import TrainState

MAGIC = b"TTS1"
VERSION = 2
HEADER_BYTES = 16
_KINDS = {np.dtype(np.int8): "i8", np.dtype(np.int32): "i32", np.dtype(np.float32): "f32"}
_LE = {"i8": "<i1", "i32": "<i4", "f32": "<f4"}
_NATIVE = {"i8": np.int8, "i32": np.int32, "f32": np.float32}


@dataclass(frozen=True)
class StateEntry:
    """One tensor of the state: ``shape`` is what the state holds, rows ``row0`` .. of the full tensor."""

    name: str
    shape: tuple[int, ...]
    kind: str  # i8 | i32 | f32
    row0: int = 0
    full_rows: int = 0  # rows of the whole tensor (== shape[0] when the state holds all of it)

    @property
    def partial(self) -> bool:
        return self.shape[0] != self.full_rows

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(_LE[self.kind]).itemsize


def _written(graph: Graph) -> list[tuple[str, tuple[int, ...] | None]]:
    """(tensor, channels the update writes or None) for what update nodes write, ordered by (stream, input
    position): independent of the schedule. Momentum buffers have the selected channels' shape already."""

    keyed = []
    for k, node in enumerate(graph.nodes):
        for w in get_op(node.op).writes:
            if w < len(node.inputs) and node.inputs[w]:
                channels = getattr(node.attrs, "channels", None) if w == 0 else None
                keyed.append(((getattr(node.attrs, "stream", k), w), node.inputs[w], channels))
    return [(name, channels) for _, name, channels in sorted(keyed)]


def state_tensors(graph: Graph) -> list[str]:
    return [name for name, _ in _written(graph)]


def state_layout(graph: Graph) -> list[StateEntry]:
    entries = []
    for name, channels in _written(graph):
        t = graph.tensors[name]
        if t.dtype.np not in _KINDS:
            raise ValueError(f"state tensor {name} is {t.dtype.value}; a state holds int8, int32 and float32")
        row0, n = 0, t.shape[0]
        if channels is not None:
            row0, n = channels[0], len(channels)
            if tuple(channels) != tuple(range(row0, row0 + n)):
                raise ValueError(f"{name}: the updated channels {channels} are not a contiguous range")
        entries.append(StateEntry(name, (n,) + tuple(t.shape[1:]), _KINDS[t.dtype.np], row0, t.shape[0]))
    return entries


def fingerprint(layout: list[StateEntry]) -> int:
    text = "".join(f"{e.name} {e.kind} {'x'.join(map(str, e.shape))} {e.row0}/{e.full_rows}\n" for e in layout)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "little")


def state_size(layout: list[StateEntry]) -> int:
    return HEADER_BYTES + sum(e.nbytes for e in layout)


def pack(graph: Graph, state) -> bytes:
    """The state file bytes of a ``simulator.TrainState``."""
    layout = state_layout(graph)
    parts = [MAGIC, struct.pack("<III", VERSION, fingerprint(layout), state.step & 0xFFFFFFFF)]
    for e in layout:
        a = np.asarray(state.tensors[e.name])
        if a.shape != (e.full_rows,) + e.shape[1:]:
            raise ValueError(f"state tensor {e.name} has shape {a.shape}, the graph says {(e.full_rows,) + e.shape[1:]}")
        a = a[e.row0 : e.row0 + e.shape[0]]
        parts.append(np.ascontiguousarray(a, _LE[e.kind]).tobytes())
    return b"".join(parts)


def unpack(graph: Graph, data: bytes):
    """A ``simulator.TrainState`` from state file bytes; ValueError if they belong to another layout."""

    layout = state_layout(graph)
    if len(data) != state_size(layout) or data[:4] != MAGIC:
        raise ValueError(f"not a tinytrain state of this model ({len(data)} bytes, expected {state_size(layout)})")
    version, fp, step = struct.unpack_from("<III", data, 4)
    if version != VERSION:
        raise ValueError(f"state version {version} was written by another tinytrain (this one reads version {VERSION}, "
                         "with weight remainders); train again from the model")
    if fp != fingerprint(layout):
        raise ValueError(f"state version {version} / layout {fp:08x} do not match this model and plan "
                         f"(version {VERSION}, layout {fingerprint(layout):08x})")
    tensors, at = {}, HEADER_BYTES
    for e in layout:
        dtype = np.dtype(_LE[e.kind])
        rows = np.frombuffer(data, dtype, int(np.prod(e.shape)), at).reshape(e.shape).astype(_NATIVE[e.kind])
        if e.partial:  # the rows the plan never updates are the graph's
            full = graph.tensors[e.name].data.copy()
            full[e.row0 : e.row0 + e.shape[0]] = rows
            rows = full
        tensors[e.name] = rows
        at += e.nbytes
    return TrainState(tensors, step)
