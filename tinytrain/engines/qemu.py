"""The QEMU engine: the firmware of a compiled model, built with the board's cross compiler (arm-none-eabi-gcc,
riscv64-unknown-elf-gcc) and run on an emulated Cortex-M or RISC-V core.

    compile folder (tinytrain compile, or emit_compile_dir here)  ->  firmware project (tinytrain.firmware)
      ->  make (cross gcc, RAM region = the SRAM budget)  ->  qemu-system-arm / -riscv32 under timeout
      ->  parse the harness's output: per-step losses and instruction counts, logits, accuracy, state

The harness (firmware/c/tt_harness_qemu.c) reads samples and writes results through semihosting files in a
scratch folder, so the engine compares with ``--engine c`` byte for byte: same C, different compiler and CPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.codegen.flash import render_within_flash
from tinytrain.codegen.options import EmitOptions
from tinytrain.codegen.project import is_training_graph
from tinytrain.codegen.state import pack, state_layout, state_size, unpack
from tinytrain.cores import DEFAULT_CORE
from tinytrain.errors import TinyTrainError
from tinytrain.firmware import BOARDS, get_board, samples, write_firmware
from tinytrain.firmware.emulator import run_to_end
from tinytrain.firmware.fit import link_error
from tinytrain.firmware.persist import newest
from tinytrain.ir import Graph
from tinytrain.memory.report import check_budget, memory_report
from tinytrain.training.device_step import device_schedule
from tinytrain.version import __version__

DEFAULT_TIMEOUT = 600  # seconds of host time for one QEMU run
ELF = "firmware.elf"

_LINE = re.compile(r"^tt: (\w+) ?(.*)$")
_STEP = re.compile(r"(\d+) label (-?\d+) loss 0x([0-9a-f]{8}) (\S+) insns (\d+)$")
_PREDICT = re.compile(r"(\d+) label (-?\d+) class (\d+) insns (\d+)$")


class QemuError(TinyTrainError):
    """The cross toolchain or QEMU is missing, the firmware does not link, or the run failed."""


@dataclass(frozen=True)
class QemuRun:
    """What one firmware run printed and wrote."""

    losses: np.ndarray            # (steps,) float32, bit-exact (parsed from the printed bits)
    step_insns: np.ndarray        # (steps,) int64 instructions per training step
    logits: np.ndarray            # (tests, outputs) int8
    predict_insns: np.ndarray     # (tests,) int64 instructions per inference
    state: bytes | None           # tt_state_save() after training (training firmware only)
    stack_bytes: int              # high-water mark of the stack over the run
    stdout: str = field(repr=False)
    skipped: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (steps,) not applied: non-finite loss


@dataclass(frozen=True)
class Firmware:
    project: Path
    elf: Path
    board: str
    flash_bytes: int   # .isr_vector + .text + .data load image (what the flash holds)
    ram_bytes: int     # stack + .data + .bss + minimum heap (what the RAM region holds)


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise QemuError(f"{tool} not found; install the Debian package {package} (scripts/setup.sh does)")
    return path


def emit_compile_dir(graph: Graph, out: str | Path, sram_budget: int, flash_budget: int, *,
                     target: str = DEFAULT_CORE, reorder: bool = True, stream: bool = True) -> dict:
    """What `tinytrain compile` writes into ``out`` (C project + report.json) for a forward graph or a training
    graph, scheduled and planned as ``host_c.CTrainer`` does (``device_schedule``, in-place memory plan), so the firmware
    runs the very C the host engine runs; ``stream``: the streamed prefix (memory/stream.py), else every tensor
    whole. Raises BudgetError, before any linker runs, when it does not fit.
    Returns the report as JSON."""

    training = is_training_graph(graph)
    step = device_schedule(graph) if training and reorder else graph
    report = memory_report(step, sram_budget, flash_budget, target=target, stream=stream)
    check_budget(report, step)
    options, files, flash = render_within_flash(step, report, EmitOptions(target))
    report = report.with_emitted_flash(flash.constant_bytes, flash.code_bytes)
    check_budget(report, step)  # the flash of the emitted C
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_bytes(text.encode("utf-8"))
    data = {"tinytrain_version": __version__, "model": graph.name, "model_sha256": graph.source_sha256,
            "mode": "training" if training else "inference", **report.to_json(options.plain)}
    (out / "report.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def build(compile_dir: str | Path, board: str, project: str | Path, timeout: int = 600, save_every: int = 0,
          **options) -> Firmware:
    """Write the firmware project of ``compile_dir`` for ``board`` into ``project`` and link it (``save_every`` > 0:
    with the persistent state, saved every that many samples; ``options``: those of ``write_firmware``, e.g.
    ``stack_bytes``)."""
    tools = get_board(board).tools
    _need(tools.prefix + "gcc", tools.package)
    project = Path(project)
    write_firmware(compile_dir, board, project, save_every=save_every, **options)
    r = subprocess.run(["make", "-s", ELF], cwd=project, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise QemuError(link_error(r.stderr + r.stdout, get_board(board), _regions(project / "tinytrain.ld")))
    return Firmware(project, project / ELF, board, *section_sizes(project / ELF, tools.prefix))


def _regions(linker_script: Path) -> dict[str, int]:
    """The LENGTH of each MEMORY region of a generated linker script (RAM, FLASH)."""
    text = linker_script.read_text() if linker_script.is_file() else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+) \(\w+\)\s*: ORIGIN = \w+, LENGTH = (\d+)",
                                                             text, re.M)}


def section_sizes(elf: str | Path, prefix: str = "arm-none-eabi-") -> tuple[int, int]:
    """(flash bytes, RAM bytes) of a linked firmware, from its section headers (``prefix``: the toolchain's)."""
    r = subprocess.run([_need(prefix + "size", "binutils-" + prefix.rstrip("-")), "-A", str(elf)],
                       capture_output=True, text=True, check=True)
    sizes = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+", r.stdout, re.M)}
    flash = sum(sizes.get(s, 0) for s in (".isr_vector", ".text", ".ARM.extab", ".ARM.exidx", ".data", ".tdata"))
    ram = sum(sizes.get(s, 0) for s in (".stack", ".data", ".tdata", ".tbss_space", ".bss", ".heap"))
    return flash, ram


def run(firmware: Firmware | str | Path, board: str, train: tuple[np.ndarray, np.ndarray] | None = None,
        test: tuple[np.ndarray, np.ndarray] | None = None, state_in: bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT, work_dir: str | Path | None = None, flash: str | Path | None = None,
        stop_after_saves: int | None = None, targets: np.ndarray | None = None, progress=None) -> QemuRun | None:
    """Run the firmware on the board's QEMU machine: resume from ``state_in`` (tt_state_save bytes) if given,
    train on ``train`` (one sample per step, in order), then predict ``test``. Images are int8 (N, ...) in the
    model's input form, labels (N,) integers. ``flash``: the board's flash file (firmware built with save_every),
    kept between runs: the firmware resumes from the newest state there and skips the samples it had consumed.
    ``stop_after_saves``: cut the board's power (kill QEMU) right after that many saves; returns None then.
    ``targets``: the training samples' float targets (a model whose mse loss reads them: tt_targets.bin);
    ``progress(1)``: called as each training step's record arrives."""
    b = get_board(board)
    if b.qemu is None:
        raise QemuError(f"{board} is not a QEMU board; use one of {', '.join(n for n, q in BOARDS.items() if q.qemu)}")
    qemu = _need(b.tools.qemu, b.tools.qemu_package)
    elf = Path(firmware.elf if isinstance(firmware, Firmware) else firmware).resolve()
    with tempfile.TemporaryDirectory(prefix="tinytrain-qemu-", dir=work_dir) as tmp:
        tmp = Path(tmp)
        if train is not None:
            samples.write(tmp / "tt_train.bin", *train)
        if targets is not None:
            (tmp / "tt_targets.bin").write_bytes(np.ascontiguousarray(targets, "<f4").tobytes())
        if test is not None:
            samples.write(tmp / "tt_test.bin", *test)
        if state_in is not None:
            (tmp / "tt_state_in.bin").write_bytes(state_in)
        if flash is not None and Path(flash).exists():
            shutil.copy(flash, tmp / "tt_flash.bin")
        cmd = ["timeout", "--kill-after=5", str(int(timeout)), qemu, "-M", b.qemu.machine, *b.qemu.args,
               "-nographic",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
        try:
            if stop_after_saves is not None:
                _run_until_saves(cmd, tmp, stop_after_saves)
                return None
            r = run_to_end(cmd, tmp, _step_lines(progress))
        finally:
            if flash is not None and (tmp / "tt_flash.bin").exists():
                shutil.copy(tmp / "tt_flash.bin", flash)
        if r.returncode == 124 or r.returncode == 137:
            raise QemuError(f"QEMU did not finish in {timeout:.0f} s ({b.qemu.machine}); its last line: "
                            f"{_last_line(r.stdout)}")
        if r.returncode != 0 or "tt: done" not in r.stdout:
            raise QemuError(f"the firmware exited with status {r.returncode} on {b.qemu.machine}"
                            f"{_status_meaning(r.returncode)}; its last line: {_last_line(r.stdout + r.stderr)}")
        out = parse_output(r.stdout)
        logits = np.zeros((0, 0), np.int8)
        if test is not None and len(test[1]):
            raw = np.fromfile(tmp / "tt_logits.bin", np.int8)
            logits = raw.reshape(len(test[1]), -1)
        state = (tmp / "tt_state.bin").read_bytes() if (tmp / "tt_state.bin").exists() else None
    return QemuRun(out["losses"], out["step_insns"], logits, out["predict_insns"], state, out["stack_bytes"], r.stdout,
                   out["skipped"])


def _step_lines(progress):
    """``run_to_end``'s ``on_line``: ``progress(1)`` for each training step the harness reports."""
    if progress is None:
        return None

    def on_line(line: str) -> None:
        if line.startswith("tt: step "):
            progress(1)
    return on_line


def _run_until_saves(cmd: list[str], cwd: Path, saves: int) -> None:
    """Run QEMU until the firmware has reported ``saves`` saves to its flash, then kill it (a power cut). A run that
    ends first is one line: how many saves it made and the firmware's last line (or QEMU's)."""
    try:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, errors="replace")
    except OSError as e:
        raise QemuError(f"cannot run {cmd[0]}: {e.strerror or e}") from None
    seen, tail = 0, []
    try:
        for line in p.stdout:
            tail = (tail + [line])[-20:]
            seen += line.startswith("tt: flash saved")
            if seen >= saves:
                return
        status = p.wait()
        why = " (timed out)" if status in (124, 137) else _status_meaning(status)
        raise QemuError(f"the firmware ended after {seen} of {saves} flash saves, exit status {status}{why}; its "
                        f"last line: {_last_line(''.join(tail))}")
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def _last_line(output: str) -> str:
    """The harness's error line (``tt: error ...``), else the last line of its output, for a one-line error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if line.startswith("tt: error")), lines[-1] if lines else "none")


def _status_meaning(status: int) -> str:
    if status >= 64 + 2:
        return f" (fault: exception {status - 64}, see firmware/c/tt_startup.c)"
    return {1: " (semihosting exit failure)", 2: " (a sample or state file was unreadable)"}.get(status, "")


def parse_output(text: str) -> dict:
    """The harness's records (format in firmware/c/tt_harness_qemu.c) as arrays."""
    bits, step_insns, predict_insns, skipped, stack, first = [], [], [], [], 0, 0
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        kind, rest = m.groups()
        if kind == "flash" and rest.startswith("resumed"):
            first = int(rest.split("position ")[1].split()[0])  # the samples before it were consumed already
        elif kind == "step":
            s = _STEP.match(rest)
            if not s or int(s.group(1)) != first + len(bits):
                raise QemuError(f"unexpected harness line: {line!r}")
            bits.append(int(s.group(3), 16))
            skipped.append(s.group(4) == "skipped")
            step_insns.append(int(s.group(5)))
        elif kind == "predict":
            p = _PREDICT.match(rest)
            if not p or int(p.group(1)) != len(predict_insns):
                raise QemuError(f"unexpected harness line: {line!r}")
            predict_insns.append(int(p.group(4)))
        elif kind == "stack":
            stack = int(rest.split()[0])
        elif kind == "error":
            raise QemuError(f"the firmware reported: {rest}")
    return {"losses": np.array(bits, np.uint32).view(np.float32), "step_insns": np.array(step_insns, np.int64),
            "predict_insns": np.array(predict_insns, np.int64), "stack_bytes": stack,
            "skipped": np.array(skipped, bool)}


class QemuTrainer:
    """``host_c.CTrainer``'s interface on a QEMU board: the training graph's firmware, built once, run once
    per call. The state lives on the host between runs (saved by the firmware, loaded again by the next run),
    so train / predict / state behave as on the host engine. ``step_insns`` and ``predict_insns`` collect the
    instruction counts of every run."""

    def __init__(self, graph: Graph, board: str = "qemu-m7", sram_budget: int = 256 * 1024,
                 flash_budget: int = 1024 * 1024, timeout: float = DEFAULT_TIMEOUT, save_every: int = 0,
                 flash: str | Path | None = None) -> None:
        self.graph = graph
        self.board = board
        self.timeout = timeout
        self._dir = tempfile.TemporaryDirectory(prefix="tinytrain-firmware-")
        root = Path(self._dir.name)
        b = get_board(board)
        self.report = emit_compile_dir(graph, root / "compile", sram_budget, flash_budget, target=b.core)
        self.firmware = build(root / "compile", board, root / "project", save_every=save_every)
        self.flash = flash  # the board's flash file (save_every > 0): kept between runs, resumed from
        self._state: bytes | None = None
        self._x_bytes = graph.tensors[graph.inputs[0]].nbytes
        self.step_insns: list[int] = []
        self.predict_insns: list[int] = []
        self.nonfinite = 0  # steps the non-finite guard did not apply, over every run

    def _run(self, **kw) -> QemuRun:
        r = run(self.firmware, self.board, state_in=self._state, timeout=self.timeout, flash=self.flash, **kw)
        self.step_insns += r.step_insns.tolist()
        self.predict_insns += r.predict_insns.tolist()
        return r

    def train(self, xs: np.ndarray, labels: np.ndarray, order=None, stop_after_saves: int | None = None,
              targets: np.ndarray | None = None, progress=None) -> np.ndarray:
        """Batch-1 SGD over ``xs[order]``; the per-step losses (float32), bit for bit those of the device. With a
        flash file, the steps the state there had consumed are skipped (their losses are not returned).
        ``stop_after_saves``: cut the power after that many saves (the state is then the newest in the flash file;
        no losses are returned). ``targets``, ``progress``: as ``host_c.CTrainer.train``'s."""
        order = np.arange(len(xs)) if order is None else np.asarray(order)
        train = (np.ascontiguousarray(xs[order]), np.asarray(labels)[order])
        targets = None if targets is None else np.asarray(targets, np.float32)[order]
        if stop_after_saves is not None:
            if self.flash is None:
                raise ValueError("stop_after_saves needs a flash file")
            run(self.firmware, self.board, train=train, timeout=self.timeout, flash=self.flash,
                stop_after_saves=stop_after_saves, targets=targets)
            saved = newest(Path(self.flash).read_bytes(), state_size(state_layout(self.graph)))
            self._state = saved.state if saved else None
            return np.zeros(0, np.float32)
        r = self._run(train=train, targets=targets, progress=progress)
        self._state = r.state
        self.nonfinite += int(r.skipped.sum())
        return r.losses

    def predict(self, xs: np.ndarray) -> np.ndarray:
        """int8 logits (N, classes) with the current state."""
        xs = np.ascontiguousarray(xs)
        return self._run(test=(xs, np.zeros(len(xs), np.int32))).logits

    def load_state(self, state) -> None:
        """The next run starts from this ``simulator.TrainState``."""

        self.load_state_bytes(pack(self.graph, state))

    def load_state_bytes(self, data: bytes) -> None:
        """The next run starts from this state (``tt_state_load`` by the harness, which checks its header)."""
        self._state = bytes(data)

    def state_bytes(self) -> bytes:
        if self._state is None:
            self._state = self._run().state
        return self._state

    def state(self):
        state = unpack(self.graph, self.state_bytes())
        state.nonfinite = self.nonfinite
        return state
