"""The field runtime as firmware on an emulated board: the cut model's step and tt_field.c built with the board's
cross compiler, a stream baked into the harness (codegen/templates/field_harness.c.j2), run under QEMU.

``qemu_field`` returns each call's result and instruction count and the whole runtime's bytes (tt_field_save), the
simulator's bit for bit (tests/field/test_field.py).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.codegen.context import environment
from tinytrain.codegen.state import state_layout, state_size
from tinytrain.field_runtime.emit import render_field
from tinytrain.csources import firmware_sources
from tinytrain.engines.qemu import ELF, QemuError, _need, _regions, emit_compile_dir
from tinytrain.field_runtime.anomaly import AnomalyProgram
from tinytrain.field_runtime.anomaly_host import anomaly_runtime_files
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.firmware import get_board
from tinytrain.firmware.emulator import run_to_end
from tinytrain.firmware.field import RAW_STACK
from tinytrain.firmware.fit import link_error
from tinytrain.firmware.project import render_firmware
from tinytrain.version import __version__

HARNESS = "src/tt_harness_qemu.c"
_CALL = re.compile(r"^tt: (learn|observe) (\d+) result (-?\d+) ticks (\d+)$")


@dataclass(frozen=True)
class QemuField:
    results: np.ndarray  # (N,) tt_learn's code or tt_observe's class
    insns: np.ndarray  # (N,) instructions of each call
    learned: np.ndarray  # (N,) bool: the call was tt_learn
    state: bytes  # tt_field_save after the stream
    restored: bytes | None = None  # with flash: tt_field_save after a reboot that restored the buffer from flash
    erases: int | None = None  # with flash: sector erases of the buffer's log and the state's ring
    statuses: list = field(default_factory=list)  # with checkpoints: tt_field_status after each call
    checkpoints: dict = field(default_factory=dict)  # sample index -> (tt_field_save bytes, test predictions)
    stack_bytes: int | None = None  # the painted stack's high-water mark over the run (tt_stack_used)


def flash_geometry(program: FieldProgram, program_bytes: int = 8) -> dict:
    """Simulated NOR regions (256 B sectors or more) just large enough for the buffer's log and for a ring of 2
    frames of the last good state."""
    record = -(-(16 + program.width) // program_bytes) * program_bytes
    sector = 256
    while sector < 4 * record:
        sector *= 2
    per = sector // record
    frame = -(-(32 + state_size(state_layout(program.tg))) // sector)
    return {"sector": sector, "sectors": -(-(program.cfg.replay + 2 * per) // per) + 1, "state_sectors": 2 * frame,
            "replay": program.cfg.replay}


def _rows(latents: np.ndarray) -> list[str]:
    return [", ".join(map(str, r)) for r in np.asarray(latents, np.int8).reshape(len(latents), -1)]


def harness(program: FieldProgram | AnomalyProgram, latents: np.ndarray, labels: np.ndarray, flash: dict | None = None,
            every: int = 0, test: np.ndarray | None = None, start: bytes | None = None, raw: bool = False) -> str:
    """The harness's C: the stream baked in; ``every`` > 0: the status after each call and, every ``every`` samples
    and at the end, the predictions of ``test`` (latents) and the whole runtime; ``start``: the model state it starts
    from (tt_field_start)."""
    return environment().get_template("field_harness.c.j2").render(
        version=__version__, n=len(latents), rows=_rows(latents),
        labels=", ".join(map(str, np.asarray(labels, int))), flash=flash, every=every,
        tests=_rows(test) if test is not None and len(test) else [],
        start=", ".join(map(str, start)) if start is not None else "", raw=raw,
        predict="tt_field_score" if isinstance(program, AnomalyProgram) else "tt_field_predict")


def qemu_field(program: FieldProgram | AnomalyProgram, latents: np.ndarray, labels: np.ndarray, board: str = "qemu-m4",
               timeout: int = 600, flash: bool = False, every: int = 0, test: np.ndarray | None = None,
               start: bytes | None = None, raw: bool = False) -> QemuField:
    """The stream through the board's field runtime (an AnomalyProgram's: ``latents`` are the model's inputs,
    labels 0 learn and -1 score, results the codes and scores); ``flash``: its buffer in a simulated flash
    (tt_flash_sim.c), restored by a reboot after the stream; ``every`` / ``test`` / ``start``: see ``harness``; ``raw``: ``latents``
    are the model's inputs, the board's frozen prefix computes the latents (tt_learn_input / tt_observe_input)."""
    b = get_board(board)
    _need(b.tools.prefix + "gcc", b.tools.package)
    qemu = _need(b.tools.qemu, b.tools.qemu_package)
    with tempfile.TemporaryDirectory(prefix="tinytrain-field-") as tmp:
        tmp = Path(tmp)
        emit_compile_dir(program.tg, tmp / "compile", 512 * 1024, b.flash_max, target=b.core)  # stream in flash
        files = render_firmware(tmp / "compile", board, stack_bytes=RAW_STACK if raw else None)
        geometry = flash_geometry(program) if flash else None
        files[HARNESS] = harness(program, latents, labels, geometry, every, test, start, raw).encode()
        if flash:
            files.update({f"src/{n}": (firmware_sources() / n).read_bytes() for n in ("tt_flash_sim.c", "tt_flash_sim.h")})
        runtime = anomaly_runtime_files(program) if isinstance(program, AnomalyProgram) else render_field(program)
        files.update({f"src/{k}": v.encode() for k, v in runtime.items()})
        for rel, data in files.items():
            (tmp / "fw" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "fw" / rel).write_bytes(data)
        r = subprocess.run(["make", "-s", ELF], cwd=tmp / "fw", capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise QemuError(link_error(r.stderr + r.stdout, b, _regions(tmp / "fw" / "tinytrain.ld")))
        cmd = ["timeout", "--kill-after=5", str(timeout), qemu, "-M", b.qemu.machine, *b.qemu.args, "-nographic",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel", str(tmp / "fw" / ELF)]
        out = run_to_end(cmd, tmp).stdout
    return parse(out)


def parse(text: str) -> QemuField:
    calls, state, tick, restored, erases = [], None, None, None, None
    statuses, checkpoints, at, classes, stack = [], {}, None, None, None
    for line in text.splitlines():
        if line.startswith("tt: status "):
            statuses.append(tuple(int(v) for v in line.split()[2:]))
        elif line.startswith("tt: checkpoint "):
            at, classes = int(line.split()[2]), np.zeros(0, np.int64)
        elif line.startswith("tt: classes"):
            classes = np.array([int(v) for v in line.split()[2:]], np.int64)
        elif line.startswith("tt: state "):
            checkpoints[at] = (bytes.fromhex(line[len("tt: state "):]), classes)
        m = _CALL.match(line)
        if m:
            calls.append((m.group(1) == "learn", int(m.group(3)), int(m.group(4))))
        elif line.startswith("tt: field "):
            state = bytes.fromhex(line[len("tt: field "):])
        elif line.startswith("tt: restored "):
            restored = bytes.fromhex(line[len("tt: restored "):])
        elif line.startswith("tt: stack "):
            stack = int(line[len("tt: stack "):])
        elif line.startswith("tt: erases "):
            erases = int(line[len("tt: erases "):])
        elif line.startswith("tt: tick "):
            num, den = line[len("tt: tick "):].split("/")
            tick = (int(num), int(den))
    if state is None or tick is None or "tt: done" not in text or "tt: error" in text:
        raise QemuError(f"the field firmware did not finish:\n{text[-2000:]}")
    c = np.array(calls, np.int64).reshape(-1, 3)
    return QemuField(c[:, 1], c[:, 2] * tick[0] // tick[1], c[:, 0].astype(bool), state, restored, erases, statuses,
                     checkpoints, stack)
