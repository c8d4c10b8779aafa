"""The replay buffer and the guard set: labelled latents (the frozen prefix's output) kept in fixed slots.

Selection rule of the replay buffer, class-balanced reservoir sampling (Chrysakis & Moens 2020, CBRS): while slots
are free a sample takes the next one. A full buffer takes a sample of a class that holds fewer slots than the
largest class (the lowest class index among the largest) in place of a slot of that largest class, the j-th of its
slots in slot order, j drawn uniformly; a sample of a largest class replaces the r-th slot of its own class when
r < slots of its class, r drawn from 0 .. (samples of its class offered so far - 1), and is dropped otherwise. So
every class keeps a fair share and, within a class, the slots are a uniform sample of what it offered.
The guard set is a plain reservoir (Vitter's algorithm R) over the samples held back for it, drawing from its own
stream (``rng.guard_seed``: the guard does not change the replay draws).
Draws are ``Rng.below`` (xorshift32), in the order written here, identical in the C (codegen/templates/field.c.j2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.field_runtime.rng import Rng


@dataclass
class Slots:
    """``n`` slots of ``width``-byte int8 latents; label -1 marks a free slot; ``offered`` counts what was offered
    (per class for the replay buffer, one counter for the guard set)."""

    x: np.ndarray  # (n, width) int8
    y: np.ndarray  # (n,) int32
    filled: int
    offered: np.ndarray  # (classes,) or (1,) uint32

    @classmethod
    def empty(cls, n: int, width: int, counters: int) -> Slots:
        return cls(np.zeros((n, width), np.int8), np.full(n, -1, np.int32), 0, np.zeros(counters, np.int64))

    def put(self, slot: int, x: np.ndarray, label: int) -> None:
        self.x[slot], self.y[slot] = x, label

    def class_slots(self, c: int) -> np.ndarray:
        return np.flatnonzero(self.y[: self.filled] == c)


def _free_slot(buf: Slots, x: np.ndarray, label: int) -> int | None:
    """While the buffer has free slots, the sample takes the next one (its index); -1 for a buffer of no slots;
    None when it is full."""
    if len(buf.y) == 0:
        return -1
    if buf.filled < len(buf.y):
        buf.filled += 1
        buf.put(buf.filled - 1, x, label)
        return buf.filled - 1
    return None


def offer_replay(buf: Slots, rng: Rng, x: np.ndarray, label: int) -> int:
    """Offer a labelled latent to the replay buffer (the class-balanced rule); the slot it took, or -1."""
    buf.offered[label] += 1
    if (slot := _free_slot(buf, x, label)) is not None:
        return slot
    counts = np.bincount(buf.y, minlength=len(buf.offered))
    largest = int(np.argmax(counts))
    if counts[label] < counts[largest]:
        slot = int(buf.class_slots(largest)[rng.below(int(counts[largest]))])
    else:
        r = rng.below(int(buf.offered[label]))
        if r >= counts[label]:
            return -1
        slot = int(buf.class_slots(label)[r])
    buf.put(slot, x, label)
    return slot


def offer_guard(buf: Slots, rng: Rng, x: np.ndarray, label: int) -> int:
    """Offer a held-back latent to the guard set (reservoir sampling); the slot it took, or -1."""
    buf.offered[0] += 1
    if (slot := _free_slot(buf, x, label)) is not None:
        return slot
    n = len(buf.y)
    r = rng.below(int(buf.offered[0]))
    if r >= n:
        return -1
    buf.put(r, x, label)
    return r


def split_parts(parts, data: bytes) -> dict[str, np.ndarray]:
    """Saved runtime bytes cut into ``parts`` ((name, dtype, count) in order) by name."""
    out, at = {}, 0
    for name, dt, count in parts:
        out[name] = np.frombuffer(data, dt, count, at)
        at += out[name].nbytes
    return out
