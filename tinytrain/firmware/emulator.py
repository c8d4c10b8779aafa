"""A serial board's firmware on QEMU for the length of one command (``tinytrain stream --port qemu:PROJECT``).

The serial harness waits for its next frame forever, as a real board does, and QEMU has no way to end when the
host closes the TCP connection: a ``make run PORT=N`` started by hand keeps QEMU busy polling the emulated UART
(63 % of a core) until its ``timeout`` (600 s). ``emulated`` starts ``make run`` of the project itself, in a
process group of its own, on a free local port, yields the pyserial URL once QEMU waits for the connection, and
ends the group (SIGTERM, then SIGKILL) when the command ends, however it ends (a SIGTERM or SIGHUP of the
command too).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

from tinytrain.errors import UsageError

PREFIX = "qemu:"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def emulated(project: str | Path):
    """Run ``project`` (a `tinytrain firmware` project of an emulated serial board, built) under QEMU; yields
    ``socket://127.0.0.1:N``."""
    project = Path(project)
    if not (project / "Makefile").is_file() or "run: firmware.bin" not in (project / "Makefile").read_text():
        raise UsageError(f"--port {PREFIX}{project}: not the firmware project of a board QEMU emulates over a serial "
                         "port (tinytrain firmware BUILD --board netduinoplus2 -o PROJECT)")
    port = _free_port()
    ends = ending_on_signals()
    p = subprocess.Popen(["make", "-s", "run", f"PORT={port}"], cwd=project, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        line = p.stdout.readline()
        if "waiting for connection" not in line:
            raise UsageError(f"QEMU did not start for {project}: {(line + p.stdout.read(2000)).strip()[-300:]}; "
                             f"build it first (make -C {project})")
        yield f"socket://127.0.0.1:{port}"
    finally:
        stop(p)
        restore_signals(ends)


def ending_on_signals() -> dict:
    """SIGTERM / SIGHUP (`timeout`, a closed terminal) end the command through its ``finally`` blocks, so that QEMU
    is stopped (Python's default ends the process at once, and QEMU polled on until its 600 s timeout); returns the
    handlers to restore. Only the main thread can set handlers: elsewhere, none are set."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def end(signum, _frame):
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, end) for sig in (signal.SIGTERM, signal.SIGHUP)}


def restore_signals(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def run_to_end(cmd: list[str], cwd: Path, on_line=None) -> subprocess.CompletedProcess:
    """Run ``cmd`` (QEMU under GNU ``timeout``), its standard error with its output, ``on_line(line)`` for each
    line; however the command ends (an error, Ctrl-C, SIGTERM), the process is sent SIGTERM, which ``timeout``
    passes to QEMU (a SIGKILL of ``timeout``, subprocess.run's, left QEMU running)."""
    ends = ending_on_signals()
    lines = []
    try:
        with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, errors="replace") as p:
            try:
                for line in p.stdout:
                    lines.append(line)
                    if on_line is not None:
                        on_line(line)
            finally:
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
    finally:
        restore_signals(ends)
    return subprocess.CompletedProcess(cmd, p.returncode, "".join(lines), "")


def stop(p: subprocess.Popen) -> None:
    """End the process group of ``p`` (make, timeout, QEMU): SIGTERM, then SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
            p.wait(timeout=wait)
            break
        except ProcessLookupError:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    p.stdout.close()
