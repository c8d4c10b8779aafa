"""`stream --port qemu:PROJECT` ended by SIGTERM (`timeout`, a service manager): the emulator's process group ends
with it (it was left polling the UART at 63 % of a core until QEMU's own 600 s timeout). The project's `make run`
here is a shell that says it waits and sleeps, as QEMU's -serial server does: the process-group handling of
tinytrain/firmware/emulator.py is what is checked; tests/firmware/test_firmware_netduino.py runs the real QEMU."""

import os
import signal
import subprocess
import sys
import time

import pytest

CHILD = """
import sys, time
from tinytrain.firmware.emulator import emulated
with emulated(sys.argv[1]):
    print("up", flush=True)
    time.sleep(60)
"""


def _ends_soon(pid: int) -> None:
    """The process ``pid`` (the emulator) ends within 5 s, else it is killed and the test fails."""
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the emulator outlived the command")


@pytest.mark.skipif(sys.platform != "linux", reason="process groups of Linux")
def test_sigterm_of_the_command_ends_the_emulator(tmp_path):
    (tmp_path / "Makefile").write_text("run: firmware.bin\n\t@echo $$$$ > group.pid; "
                                       "echo waiting for connection; exec sleep 60\nfirmware.bin:\n\ttouch firmware.bin\n")
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    pid = int((tmp_path / "group.pid").read_text())
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM
    _ends_soon(pid)


RUN = """
import signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal (pytest-xdist workers ignore it)
from tinytrain.firmware.emulator import run_to_end
run_to_end(["timeout", "--kill-after=5", "60", "sh", "-c", "echo $$ > child.pid; echo up; exec sleep 60"],
           Path(sys.argv[1]), lambda line: print(line, end="", flush=True))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="process groups of Linux")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_semihosting_run_under_timeout_ends_with_the_command(sig, tmp_path):
    """`train --engine qemu` ended by `timeout` or Ctrl-C: QEMU (here a sleep under GNU timeout, as qemu.py runs
    QEMU) was left running: subprocess.run SIGKILLs `timeout`, which then cannot pass anything on."""
    p = subprocess.Popen([sys.executable, "-c", RUN, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "up"
    pid = int((tmp_path / "child.pid").read_text())
    p.send_signal(sig)
    p.wait(timeout=20)
    _ends_soon(pid)


MAIN = """
import tempfile, time
import tinytrain.cli as cli

def work(argv):
    with tempfile.TemporaryDirectory(prefix="tinytrain-test-") as tmp:
        print(tmp, flush=True)
        time.sleep(60)

cli._main = work
raise SystemExit(cli.main([]))
"""


def test_sigterm_of_any_command_removes_its_temporary_folders():
    """`timeout 5 tinytrain train ... --engine qemu` stopped while building the firmware left
    /tmp/tinytrain-firmware-XXXX and /tmp/tinytrain-qemu-XXXX behind (Python's default SIGTERM skips finally)."""
    p = subprocess.Popen([sys.executable, "-c", MAIN], stdout=subprocess.PIPE, text=True)
    tmp = p.stdout.readline().strip()
    assert os.path.isdir(tmp)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM
    assert not os.path.exists(tmp)
