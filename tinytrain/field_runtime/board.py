"""A board's field runtime behind the ``FieldRuntime`` calls: ``BoardField``, a QEMU board the stream was baked into
(qemu.py: it runs first, then ``learn`` / ``observe`` / ``status`` / ``predict`` / ``state_bytes`` read back, call
by call, what it printed); ``SerialField``, a board running the field runtime's serial harness, each call a frame
of firmware/protocol.py; ``serial_firmware``, that firmware's project."""

from __future__ import annotations

import numpy as np

from pathlib import Path

from tinytrain.codegen.context import environment
from tinytrain.engines.qemu import emit_compile_dir
from tinytrain.errors import UsageError
from tinytrain.field_runtime.emit import field_memory, render_field
from tinytrain.field_runtime.options import board_options, check_fingerprint, program_options
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.qemu import QemuField, qemu_field
from tinytrain.firmware.field import RAW_STACK
from tinytrain.field_runtime.status import STATUS
from tinytrain.firmware import get_board
from tinytrain.firmware.project import render_firmware
from tinytrain.firmware.protocol import PROTOCOL_VERSION, Board, info_text
from tinytrain.version import __version__

SERIAL_HARNESS = "src/tt_harness_serial.c"


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

    def scores(self, xs: np.ndarray) -> np.ndarray:
        """An autoencoder's runtime: the board's scores of the test inputs at this checkpoint (the ones it was
        given; tt_field_score)."""
        return self.run.checkpoints[self.i][1]

    def state_bytes(self) -> bytes:
        return self.run.checkpoints[self.i][0] if self.i in self.run.checkpoints else self.run.state


class SerialField:
    """The field runtime of a board over its serial port (``Board``: a firmware of ``serial_firmware``). ``raw``
    (the board's info says raw=1): it takes the model's input and computes the latent itself (its frozen prefix), so
    ``learn`` / ``observe`` / ``predict`` are given the model's int8 inputs; else the latents. A board whose info
    names another state layout than ``program``'s (options.py's fingerprint) is refused."""

    def __init__(self, program: FieldProgram, board: Board, model: str = "the model") -> None:
        self.raw = board.info.get("raw") == "1"
        want = program.input_bytes if self.raw else program.width
        if board.info.get("field") != "1":
            raise UsageError(f"the board on the port runs no field runtime ({board.info}); build it with "
                             "`tinytrain firmware BUILD --board B --field` from `tinytrain compile MODEL --replay N`")
        if board.input_bytes != want:
            raise UsageError(f"{model} is not the model of the board's firmware (it takes {board.input_bytes}-byte "
                             f"samples, {model} {want}): give the model it was compiled from")
        check_fingerprint(program, board_options(board.info), model)
        self.program, self.board = program, board

    def start(self, state: bytes) -> None:
        raise UsageError("a board's field runtime starts from its firmware's model: give no start state")

    def learn(self, latent: np.ndarray, label: int) -> int:
        return self.board.learn(np.ascontiguousarray(latent, np.int8), label)

    def observe(self, latent: np.ndarray) -> int:
        return self.board.observe(np.ascontiguousarray(latent, np.int8))[0]

    def status(self) -> dict:
        return dict(zip(STATUS, self.board.field_status()))

    def predict(self, latents: np.ndarray) -> np.ndarray:
        xs = np.ascontiguousarray(latents, np.int8)
        return np.array([self.board.field_predict(x) for x in xs], np.int64)

    def state_bytes(self) -> bytes:
        return self.board.state()


def serial_firmware(program: FieldProgram, board: str, work: Path, raw: bool = True) -> dict[str, bytes]:
    """Relative path -> bytes of a firmware project for ``board`` (a serial board) running ``program``'s field
    runtime behind the serial harness of codegen/templates/field_serial.c.j2 (``work``: a scratch folder); ``raw``:
    the frames carry the model's input and the board's frozen prefix computes the latent, else the latent."""
    b = get_board(board)
    emit_compile_dir(program.tg, work / "compile", b.ram_max, b.flash_max, target=b.core)
    files = render_firmware(work / "compile", b, stack_bytes=RAW_STACK if raw else None)
    if SERIAL_HARNESS not in files:
        raise UsageError(f"{board} has no serial harness (a semihosting QEMU board: use qemu_field)")
    files[SERIAL_HARNESS] = environment().get_template("field_serial.c.j2").render(
        version=__version__, protocol=PROTOCOL_VERSION, width=program.width, classes=program.classes,
        save_bytes=field_memory(program).save, raw=raw, input_bytes=program.input_bytes, flash=None,
        options=info_text(program_options(program))).encode()
    files.update({f"src/{k}": v.encode() for k, v in render_field(program).items()})
    return files
