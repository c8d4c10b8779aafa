"""A gateway's board over the serial protocol: what a SuperNode with ``transport="serial"`` trains a device on.

``SerialDevice`` has the interface ``client.local_train`` uses of the host C step (``load_state_bytes``, ``train``,
``state_bytes``), spoken over tinytrain/firmware/protocol.py to the serial harness: L loads the round's global state
(streamed into ``tt_state_load_from``), one T per sample in the round's order, S reads the state back. The board runs
the firmware of the task's own training step (``firmware``: the compile of ``local(task).step_graph`` for the board,
linked), so its state bytes are the host C step's. A connection is opened per round and closed after it: a board
whose gateway restarts is simply spoken to again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinytrain.engines.qemu import build, emit_compile_dir
from tinytrain.errors import UsageError
from tinytrain.federated.task import FleetTask, local
from tinytrain.firmware import get_board
from tinytrain.firmware.protocol import Board, ProtocolError

TRANSPORTS = ("host", "serial")


class SerialDevice:
    """A board running the serial harness at the pyserial URL ``port`` (``/dev/ttyACM0``, ``socket://HOST:N``)."""

    def __init__(self, port: str, timeout: float = 60.0) -> None:
        try:
            import serial
        except ImportError as e:
            raise UsageError("the serial transport needs pyserial (pip install -e '.[board]')") from e
        try:
            self._port = serial.serial_for_url(port, timeout=timeout)
        except (serial.SerialException, ValueError) as e:
            raise ProtocolError(f"cannot open the board's port {port}: {e}") from e
        try:
            self.board = Board(self._port)
        except BaseException:
            self._port.close()
            raise

    def __enter__(self) -> SerialDevice:
        return self

    def __exit__(self, *exc) -> None:
        self._port.close()

    def load_state_bytes(self, data: bytes) -> None:
        self.board.load_state(data)

    def train(self, xs: np.ndarray, labels: np.ndarray, order) -> np.ndarray:
        """One T per sample of ``xs[order]``; the losses (float32), bit for bit the device's."""
        return np.array([self.board.train(np.ascontiguousarray(xs[i]), int(labels[i]))[0] for i in order], np.float32)

    def state_bytes(self) -> bytes:
        return self.board.state()


def device_ports(node_config, devices: list[int]) -> dict[int, str]:
    """The serial port of each device a SuperNode serves: node config ``transport="serial"`` and ``port`` (one
    pyserial URL per device of ``devices``, comma-separated); {} for ``transport="host"`` (the default)."""
    transport = str(node_config.get("transport", "host"))
    if transport not in TRANSPORTS:
        raise UsageError(f"node config transport={transport!r}: choose one of {', '.join(TRANSPORTS)}")
    if transport == "host":
        return {}
    ports = [p.strip() for p in str(node_config.get("port", "")).split(",") if p.strip()]
    if len(ports) != len(devices):
        raise UsageError(f'node config transport="serial" serves {len(devices)} device(s) with {len(ports)} port(s): '
                         'give port="URL[,URL...]", one pyserial URL per device')
    return dict(zip(devices, ports))


def firmware(task: FleetTask, board: str, project: str | Path, sram: int = 256 * 1024,
             flash: int = 1024 * 1024) -> Path:
    """Build the serial-harness firmware of the task's training step for ``board`` (a serial board: netduinoplus2,
    mps2-an385, ...) in ``project`` (``make run PORT=N`` there runs an emulated one); returns the project folder."""

    b = get_board(board)
    if b.qemu is not None:
        raise UsageError(f"{board} runs the semihosting harness; the serial transport needs a board with a UART "
                         "(netduinoplus2, mps2-an385 or a real board)")
    project = Path(project)
    emit_compile_dir(local(task).step_graph, project / "compile", min(sram, b.ram_max), min(flash, b.flash_max),
                     target=b.core)
    return build(project / "compile", board, project / "board").project
