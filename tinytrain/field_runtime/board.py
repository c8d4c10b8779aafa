"""A QEMU board's field runtime behind the ``FieldRuntime`` calls: the stream runs on the board first (qemu.py), then
``learn`` / ``observe`` / ``status`` / ``predict`` / ``state_bytes`` read back, call by call, what it printed."""

from __future__ import annotations

import numpy as np

from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.qemu import QemuField, qemu_field
from tinytrain.field_runtime.runtime import STATUS


class BoardField:
    def __init__(self, program: FieldProgram, latents: np.ndarray, labels: np.ndarray, test: np.ndarray,
                 every: int, board: str = "qemu-m4") -> None:
        self.program, self.i = program, -1
        self.run: QemuField = qemu_field(program, latents, labels, board, every=every, test=test)

    def _next(self) -> int:
        self.i += 1
        return int(self.run.results[self.i])

    def learn(self, latent: np.ndarray, label: int) -> int:
        return self._next()

    def observe(self, latent: np.ndarray) -> int:
        return self._next()

    def status(self) -> dict:
        return dict(zip(STATUS, self.run.statuses[self.i]))

    def predict(self, latents: np.ndarray) -> np.ndarray:
        """The board's predictions of the test latents at this checkpoint (the ones it was given)."""
        return self.run.checkpoints[self.i][1]

    def state_bytes(self) -> bytes:
        return self.run.checkpoints[self.i][0] if self.i in self.run.checkpoints else self.run.state
