"""A fleet device: load the global state into the compiled training step, train on the local shard, send the state.

``local_train`` is the whole client: host C (engine_c.CTrainer, the code ``tinytrain train --engine c`` runs),
``tt_state_load`` of the global state bytes, batch-1 SGD over the device's own rows in the order of
``engines.order.sample_order`` (seed: ``FleetTask.order_seed``), ``tt_state_save``. The reply carries the state bytes, their
sha256 (checked by the server: a state corrupted on the way is rejected), the sample count and the mean loss.
The same round runs on a QEMU board through the semihosting harness (``board``) or on a board over the serial
protocol (``port``: gateway.SerialDevice). ``FlowerDevice`` wraps it as a Flower client; ``faults`` injects the
failures the tests and the study exercise.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from tinytrain.engines.order import sample_order
from tinytrain.federated.gateway import SerialDevice
from tinytrain.federated.task import FleetTask, local

FAULTS = ("drop", "corrupt", "nan", "foreign")


@dataclass(frozen=True)
class Reply:
    device: int
    state: bytes
    sha256: str
    samples: int
    loss: float


def local_train(task: FleetTask, device: int, global_state: bytes, round_: int, board: str | None = None,
                port: str | None = None) -> Reply:
    """``board``: a QEMU board name (engine_qemu: the same step as firmware, loaded with the global state through
    the harness's state file); ``port``: a board's serial port (pyserial URL; the serial protocol's L, T and S)
    instead of the host C engine."""

    built = local(task)
    x, y = built.device_data(device)
    order = sample_order(np.arange(len(y)), task.steps_per_round, task.order_seed(round_))
    with _engine(built, board, port) as trainer:
        trainer.load_state_bytes(global_state)
        losses = trainer.train(x, y, order)
        state = trainer.state_bytes()
    finite = losses[np.isfinite(losses)]
    return Reply(device, state, hashlib.sha256(state).hexdigest(), int(len(y)),
                 float(finite.mean()) if len(finite) else float("nan"))


@contextmanager
def _engine(built, board: str | None, port: str | None):
    """The training step a round runs on: a serial board (connected for the round), a QEMU board, the host C."""
    if port is not None:
        with SerialDevice(port) as device:
            yield device
        return
    if board is not None:
        yield built.board(board)
        return
    built.trainer.reset()
    yield built.trainer


def inject(reply: Reply, fault: str) -> Reply:
    """The reply as a faulty device would send it: ``corrupt`` (a byte flipped after its checksum), ``nan`` (a
    diverged device: NaN loss, and NaN in its float state if it has one), ``foreign`` (another layout's state)."""
    data = bytearray(reply.state)
    if fault == "corrupt":
        data[len(data) // 2] ^= 0x5A
        return Reply(reply.device, bytes(data), reply.sha256, reply.samples, reply.loss)
    if fault == "nan":
        return Reply(reply.device, reply.state, reply.sha256, reply.samples, float("nan"))
    if fault == "foreign":
        data[8:12] = bytes(b ^ 0xFF for b in data[8:12])
        data = bytes(data)
        return Reply(reply.device, data, hashlib.sha256(data).hexdigest(), reply.samples, reply.loss)
    raise ValueError(f"fault {fault!r}: choose one of {', '.join(FAULTS)}")


def run_device(task: FleetTask, device: int, global_state: bytes, round_: int, faults: dict,
               board: str | None = None, port: str | None = None) -> Reply:
    """local_train with the fault ``faults[(round, device)]`` (if any) applied; ``drop`` raises (the device is gone)."""
    fault = faults.get((round_, device))
    if fault == "drop":
        raise ConnectionError(f"device {device} dropped out of round {round_}")
    reply = local_train(task, device, global_state, round_, board, port)
    return inject(reply, fault) if fault else reply
