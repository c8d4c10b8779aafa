"""Deployment on localhost with Flower's SuperLink and SuperNodes: ``flower-superlink``, two ``flower-supernode``
gateways (one serving device 0 on the host C step, one serving device 1 on an emulated mps2-an385 board over the
serial protocol: each round L loads the global state, T trains each sample, S reads the state back) and
``flwr run`` of the fleet's Flower App (tinytrain/federated/app.py). The persisted global state after 2 rounds
equals the in-process rounds byte for byte (the board's C computes what the host C does). Every process is killed
at the end, on free ports, time-bounded."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "models" / "mbv1-0.25-vww.onnx")
BIN = Path(sys.executable).parent


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_for_port(port: int, proc: subprocess.Popen, seconds: float) -> None:
    """Until the process listens on ``port`` (a loaded machine starts Flower's processes slowly)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on port {port} after {seconds:.0f} s (exit code {proc.poll()})")


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Flower's superexec, serverapp and clientapp children), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _kill_all(procs: list[subprocess.Popen]) -> None:
    pids = [q for p in procs for q in _descendants(p.pid)] + [p.pid for p in procs]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(2)
    for p in procs:
        p.wait(10)


@contextmanager
def _serial_board(project: Path, port: int):
    """The board's firmware on QEMU with its UART on 127.0.0.1:``port`` (QEMU waits for the gateway to connect)."""
    p = subprocess.Popen(["make", "-s", "run", f"PORT={port}", "TIMEOUT=900"], cwd=project, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        line = p.stdout.readline()
        assert "waiting for connection" in line, line + p.stdout.read()
        yield
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
        p.stdout.close()


@pytest.mark.slow
def test_superlink_and_two_supernodes_on_localhost_one_on_a_serial_qemu_board(tmp_path):
    pytest.importorskip("flwr", reason="flwr is not installed (pip install -e '.[fleet]')")
    pytest.importorskip("serial", reason="pyserial is not installed (pip install -e '.[board]')")
    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("qemu-system-arm / arm-none-eabi-gcc are not installed (scripts/setup.sh)")
    if not (BIN / "flower-superlink").exists():
        pytest.skip("flower-superlink is not beside this Python (pip install -e '.[fleet]')")
    from tinytrain.federated import fleet_task
    from tinytrain.federated.app import APP_DIR
    from tinytrain.federated.gateway import firmware
    from tinytrain.federated.server import FleetServer, drive_local

    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(2), 6)
    x = np.clip(rng.normal(60 + 100 * y[:, None, None, None], 20, (12, 96, 96, 3)), 0, 255).astype(np.uint8)
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    task = fleet_task(MODEL, str(tmp_path / "pool.npz"), devices=2, per_device=4, classes_per_device=1, seed=0,
                      rounds=2, local_steps=2)  # 2 samples a round: QEMU's UART moves an image in about 4 s
    link, node0, node1, uart = _free_ports(4)
    home = tmp_path / "flwr"
    home.mkdir()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "fleet"\n\n[superlink.fleet]\n'
                                      f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "TINYTRAIN_CACHE": str(tmp_path / "cache"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    log = open(tmp_path / "flower.log", "w")
    kw = dict(env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    procs = [subprocess.Popen([str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                               "--host", "127.0.0.1", "--port", str(link)], **kw)]
    serial_node = f'devices="1" transport="serial" port="socket://127.0.0.1:{uart}"'
    for port, config in ((node0, 'devices="0"'), (node1, serial_node)):
        procs.append(subprocess.Popen([str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                                       "--host", "127.0.0.1", "--port", str(port), "--node-config", config], **kw))
    run_config = (f'model="{MODEL}" data="{tmp_path / "pool.npz"}" devices=2 per-device=4 classes-per-device=1 '
                  f'local-steps=2 rounds=2 nodes=2 wait-seconds=120.0 state-dir="{tmp_path / "run"}"')
    try:
        project = firmware(task, "mps2-an385", tmp_path / "board")  # while Flower's processes start
        for port, proc in zip((link, node0, node1), procs):
            _wait_for_port(port, proc, 300)
        with _serial_board(project, uart):
            done = subprocess.run([str(BIN / "flwr"), "run", str(APP_DIR), "fleet", "--stream", "--run-config",
                                   run_config], timeout=900, **kw)
        assert done.returncode == 0, (tmp_path / "flower.log").read_text()[-3000:]
        end = time.monotonic() + 60  # the stream may end just before the ServerApp's last write
        while not (tmp_path / "run" / "global-r2.tts").exists() and time.monotonic() < end:
            time.sleep(1)
    finally:
        _kill_all(procs)
        log.close()
    assert not [q for p in procs for q in _descendants(p.pid)]
    local = FleetServer(task, 2)
    drive_local(local)
    deployed = sorted((tmp_path / "run").glob("global-r*.tts"))
    assert [p.name for p in deployed] == ["global-r2.tts"] and deployed[0].read_bytes() == local.state


def test_node_config_selects_the_serial_transport():
    """transport="serial" pairs each served device with its port; a missing port or an unknown transport is one line."""
    from tinytrain.errors import UsageError
    from tinytrain.federated.gateway import device_ports

    assert device_ports({"devices": "0"}, [0]) == {}
    config = {"transport": "serial", "port": "socket://127.0.0.1:5555, /dev/ttyACM0"}
    assert device_ports(config, [2, 3]) == {2: "socket://127.0.0.1:5555", 3: "/dev/ttyACM0"}
    with pytest.raises(UsageError, match="serves 2 device.s. with 1 port"):
        device_ports({"transport": "serial", "port": "/dev/ttyACM0"}, [2, 3])
    with pytest.raises(UsageError, match="transport='usb'"):
        device_ports({"transport": "usb"}, [0])
