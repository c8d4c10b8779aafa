"""Deployment on localhost: the fleet's server and two gateways as separate processes over Flower's gRPC
transport, one gateway driving a QEMU board (the training step as firmware on qemu-m7). The result equals the
in-process rounds byte for byte (the board's C computes what the host C does)."""

import multiprocessing as mp
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "models" / "mbv1-0.25-vww.onnx")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(task, address, state_dir):
    from tinytrain.federated.deploy import serve
    from tinytrain.federated.server import FleetServer

    serve(FleetServer(task, 2, state_dir), address)


def _join(task, device, address, board):
    from tinytrain.federated.deploy import join

    join(task, device, address, board=board)


@pytest.mark.slow
def test_server_and_two_gateways_on_localhost_one_on_a_qemu_board(tmp_path, monkeypatch):
    pytest.importorskip("flwr", reason="flwr is not installed (pip install -e '.[fleet]')")
    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("qemu-system-arm / arm-none-eabi-gcc are not installed (scripts/setup.sh)")
    monkeypatch.setenv("TINYTRAIN_CACHE", str(tmp_path / "cache"))
    from tinytrain.federated import fleet_task
    from tinytrain.federated.server import FleetServer, drive_local

    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(2), 6)
    x = np.clip(rng.normal(60 + 100 * y[:, None, None, None], 20, (12, 96, 96, 3)), 0, 255).astype(np.uint8)
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    task = fleet_task(MODEL, str(tmp_path / "pool.npz"), devices=2, per_device=4, classes_per_device=1, seed=0)
    address = f"127.0.0.1:{_free_port()}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_serve, args=(task, address, tmp_path / "run")),
             ctx.Process(target=_join, args=(task, 0, address, None)),
             ctx.Process(target=_join, args=(task, 1, address, "qemu-m7"))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(900)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    local = FleetServer(task, 2)
    drive_local(local)
    deployed = sorted((tmp_path / "run").glob("global-r*.tts"))
    assert [p.name for p in deployed] == ["global-r2.tts"] and deployed[0].read_bytes() == local.state
