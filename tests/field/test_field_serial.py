"""The field runtime behind a board's serial harness (codegen/templates/field_serial.c.j2, firmware/protocol.py's
T / P / R / D / Q / S frames of latents or raw samples), driven call by call through board.SerialField: built for the host on a
pty (the real boards' frame code, tt_uart_posix.c) and for the netduinoplus2 on QEMU (its USART over TCP); every
result, status, drift report, test prediction and the final tt_field_save bytes are the simulator's."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from test_field import CFG, stream
from test_field_cli import FLAGS, MODEL, files  # noqa: F401 (a fixture)
from test_firmware import _pty_board
from test_firmware_netduino import _qemu
from ir_builders import tiny_mobilenet
from tinytrain.cli import main
from tinytrain.csources import firmware_sources
from tinytrain.field_runtime.api import field as tinytrain_field, field_model
from tinytrain.field_runtime.board import SerialField, serial_firmware
from tinytrain.field_runtime.program import field_program
from tinytrain.field_runtime.run import run_stream
from tinytrain.field_runtime.runtime import FieldRuntime, split_state
from tinytrain.field_runtime.step import SimStep
from tinytrain.firmware import protocol as proto
from tinytrain.training.sparse import preset

MOBILENET_V2 = MODEL.replace("mbv1-0.25-vww", "mbv2-w0.35")
HOST_SOURCES = ("tt_harness_serial.c", "tt_frame.c", "tt_uart_posix.c", "tinytrain_model.c", "tt_field.c",
                "tt_field_flash.c", "tt_prefix.c", "tt_field_input.c")


@pytest.fixture(scope="module")
def program():
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    return field_program(g, preset("last-k:1", g, lr=0.05), CFG)


def _compare(program, port) -> None:
    """A stream call by call, then through run_stream with the test latents: the board's answers are the sim's."""
    xs, ys, labelled = stream(program, 60)
    labels = np.where(labelled, ys, -1)
    board = SerialField(program, proto.Board(port))
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    for x, y in zip(xs[:30], labels[:30]):
        mine = sim.learn(x, int(y)) if y >= 0 else sim.observe(x)
        theirs = board.learn(x, int(y)) if y >= 0 else board.observe(x)
        assert mine == theirs and sim.status() == board.status()
    assert board.board.drift() == (sim.status()["active"], sim.status()["since"] & 0xFFFFFFFF)
    assert board.learn(xs[0], program.classes) == sim.learn(xs[0], program.classes)  # a bad label: refused
    assert board.state_bytes() == sim.state_bytes()
    test = (xs[:12], ys[:12])
    a = run_stream(program, xs[30:], labels[30:], test, engine="sim", every=10, rt=sim)
    b = run_stream(program, xs[30:], labels[30:], test, engine="sim", every=10, rt=board)
    drop = ("seconds",)
    assert {k: v for k, v in a.to_json().items() if k not in drop} == {k: v for k, v in b.to_json().items()
                                                                       if k not in drop}
    assert b.state == a.state


def _host_board(program, tmp_path, raw: bool = True):
    """The field serial firmware's sources built for the host (the "UART" a pty, tt_uart_posix.c); ``raw``: its
    frames carry the model's inputs (the board's frozen prefix computes the latents), else the latents."""
    files = serial_firmware(program, "disco_f746ng", tmp_path / "work", raw=raw)
    return _host_build({rel[4:]: data for rel, data in files.items() if rel.startswith("src/")}, tmp_path / "board")


def _host_build(sources: dict[str, bytes], out, more: tuple[str, ...] = ()):
    """A serial firmware's sources (name -> bytes) built for the host, its UART a pty (tt_uart_posix.c); ``more``:
    the other C files of ``sources`` to build."""
    out.mkdir()
    for name, data in sources.items():
        (out / name).write_bytes(data)
    shutil.copy(firmware_sources() / "tt_uart_posix.c", out)
    subprocess.run(["gcc", "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-O1", "-ffp-contract=off", "-Wall", "-Wextra",
                    "-Werror", "-I.", *HOST_SOURCES, *more, "-lm", "-o", "board"]
                   + ["-Wno-int-to-pointer-cast"] * bool(more), cwd=out, check=True)  # a board's mapped flash address
    return out / "board"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_field_runtime_over_a_pty_equals_the_simulator(program, tmp_path):
    serial = pytest.importorskip("serial")
    with _pty_board(_host_board(program, tmp_path, raw=False)) as pty, serial.Serial(pty.port, timeout=10) as port:
        _compare(program, port)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_tinytrain_stream_field_equals_tinytrain_field_sim(files, tmp_path, capsys):
    """`tinytrain stream MODEL --port PORT --field STREAM.npz` to a board given raw samples (the model's inputs; its
    frozen prefix computes the latents): the report and JSON of `tinytrain field --engine sim` with the same
    options; a board without a field runtime is refused in one line."""
    pytest.importorskip("serial")
    program = field_model(MODEL, max_classes=3, replay=8, replay_k=2, guard=4, guard_every=3, imprint=2,
                          drift_warmup=4)
    args = ["--stream", str(files / "stream.npz"), "--test", str(files / "test.npz"), *FLAGS]
    assert main(["field", MODEL, *args, "--engine", "sim", "--json", str(tmp_path / "sim.json")]) == 0
    with _pty_board(_host_board(program, tmp_path)) as pty:
        flags = [a if a != "--stream" else "--field" for a in args]
        assert main(["stream", MODEL, "--port", pty.port, "--timeout", "10", *flags, "--field-json",
                     str(tmp_path / "board.json")]) == 0
        capsys.readouterr()
        other = [a if a != "8" else "16" for a in flags]  # --replay 16 on a board compiled with --replay 8
        assert main(["stream", MODEL, "--port", pty.port, "--timeout", "10", *other]) == 2  # was a ValueError, exit 3
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "was compiled with --replay 8" in err
    assert main(["stream", MODEL, "--port", "nowhere"]) == 2  # neither --data nor --field
    assert "--data DATA" in capsys.readouterr().err
    sim, board = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("sim", "board"))
    assert board["engine"] == "board disco_f746ng"
    assert {k: v for k, v in sim.items() if k not in ("engine", "seconds")} == \
        {k: v for k, v in board.items() if k not in ("engine", "seconds")}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_stream_field_takes_the_compiled_options_from_the_board(files, tmp_path, capsys):
    """compile --replay (with its own --lr), firmware --field, the project's sources built for the host: `stream
    --field` with no field option reports what `tinytrain field --engine sim` does with the compile's options (the
    board's info carries them); an option that contradicts the firmware, or another model, is one line, exit 2."""
    pytest.importorskip("serial")
    build, project = tmp_path / "build", tmp_path / "project"
    fixed = FLAGS[:-2] + ["--lr", "0.05"]  # without --checkpoints
    assert main(["compile", MODEL, "--update", "last-k:1", *fixed, "-o", str(build)]) == 0
    assert main(["firmware", str(build), "--board", "disco_f746ng", "--field", "-o", str(project)]) == 0
    sources = {p.name: p.read_bytes() for p in (project / "src").iterdir()}
    run = ["--test", str(files / "test.npz"), "--checkpoints", "2"]
    assert main(["field", MODEL, "--stream", str(files / "stream.npz"), *run, *fixed, "--engine", "sim", "--json",
                 str(tmp_path / "sim.json")]) == 0
    capsys.readouterr()
    with _pty_board(_host_build(sources, tmp_path / "board")) as pty:
        stream = ["stream", MODEL, "--port", pty.port, "--timeout", "10", "--field", str(files / "stream.npz")]
        assert main([*stream, *run, "--field-json", str(tmp_path / "board.json")]) == 0
        for wrong, says in ((["--lr", "0.01"], "--lr 0.01: the firmware on"), (["--replay", "9"], "--replay 8"),
                            (["--plan", str(build)], "not a plan file")):
            assert main([*stream, *wrong, "--field-json", str(tmp_path / "no.json")]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and says in err[0], err
        assert main([*stream[:1], MOBILENET_V2, *stream[2:]]) == 2  # another model (its input: its own message)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not the model of the board's firmware" in err[0], err
    assert not (tmp_path / "no.json").exists()
    sim, board = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("sim", "board"))
    assert {k: v for k, v in sim.items() if k not in ("engine", "seconds")} == \
        {k: v for k, v in board.items() if k not in ("engine", "seconds")}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_serial_firmware_with_flash_storage_resumes_after_a_reboot(files, tmp_path, monkeypatch, capsys):
    """compile --replay-storage flash, firmware --field for the nano33ble (its last flash sectors), the project's
    sources built for the host with the file-backed flash of the QEMU boards (tt_flash_semihost.c's NOR rules, on
    tt_flash.bin) in place of the nRF52840 driver: after a stream the board's tt_field_save is the simulator's; the
    board restarted on the same flash image holds the buffer and the last good state (the model's state becomes
    it) the simulator ended with. A board without a flash driver is refused in one line."""
    serial = pytest.importorskip("serial")
    build, project = tmp_path / "build", tmp_path / "project"
    fixed = FLAGS[:-2]  # without --checkpoints
    assert main(["compile", MODEL, "--update", "last-k:1", *fixed, "--replay-storage", "flash", "-o", str(build)]) == 0
    assert main(["firmware", str(build), "--board", "mps2-an385", "--field", "-o", str(tmp_path / "no")]) == 2
    assert "no flash driver" in capsys.readouterr().err and not (tmp_path / "no").exists()
    assert main(["firmware", str(build), "--board", "nano33ble", "--field", "-o", str(project)]) == 0
    sources = {p.name: p.read_bytes() for p in (project / "src").iterdir() if p.name != "tt_flash_nrf52840.c"}
    sources["tt_flash_semihost.c"] = (firmware_sources() / "tt_flash_semihost.c").read_bytes()
    exe = _host_build(sources, tmp_path / "board", ("tt_flash_semihost.c",))
    monkeypatch.chdir(exe.parent)  # the flash image: tt_flash.bin beside it
    opts = dict(max_classes=3, replay=8, guard=4, guard_every=3, imprint=2, drift_warmup=4)
    stream = str(files / "stream.npz")
    sim = tinytrain_field(MODEL, stream, engine="sim", **opts)
    with _pty_board(exe) as pty, serial.Serial(pty.port, timeout=10) as port:
        board = proto.Board(port)
        assert board.info["storage"] == "flash"
        ran = tinytrain_field(MODEL, stream, engine="board", runtime=lambda p: SerialField(p, board), **opts)
    assert ran.state == sim.state and (exe.parent / "tt_flash.bin").stat().st_size == 20480
    with _pty_board(exe) as pty, serial.Serial(pty.port, timeout=10) as port:  # the reboot
        restored = proto.Board(port).state()
    program = field_model(MODEL, **opts)
    mine, back = split_state(program, sim.state), split_state(program, restored)
    for part in ("buffer_filled", "buffer_x", "buffer_y"):
        assert np.array_equal(mine[part], back[part]), part
    assert int(mine["buffer_filled"][0]) == 8
    assert np.array_equal(back["good"], mine["good"]) and np.array_equal(back["state"], mine["good"])


@pytest.mark.slow
@pytest.mark.qemu
def test_field_runtime_over_qemu_netduinoplus2_serial_equals_the_simulator(program, tmp_path):
    serial = pytest.importorskip("serial")
    files = serial_firmware(program, "netduinoplus2", tmp_path / "work", raw=False)
    project = tmp_path / "project"
    for rel, data in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_bytes(data)
    r = subprocess.run(["make", "-s"], cwd=project, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with _qemu(project) as url, serial.serial_for_url(url, timeout=60) as port:
        _compare(program, port)
