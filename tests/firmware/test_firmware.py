"""`tinytrain firmware` without an emulator: the generated projects (linker script = the budgets, deterministic,
PlatformIO config valid offline, sources build for each real board's core), the sample file format, and the
serial protocol — the host side against the board's own C (tt_harness_serial.c built for the host) over a pty."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from tinytrain.cli import main
from tinytrain.csources import firmware_sources
from tinytrain.engines.host_c import CTrainer
from tinytrain.engines.qemu import emit_compile_dir
from tinytrain.firmware import BOARDS, render_firmware, samples
from tinytrain.firmware import protocol as proto
from tinytrain.training.sparse import Plan, WeightUpdate
from tinytrain.training.train_graph import build_training_graph

REAL_BOARDS = [name for name, b in BOARDS.items() if b.pio]
PLAN = Plan(bias_last_k=4, weights=(WeightUpdate(3, 0.25), WeightUpdate(5, 1.0)), lr=0.05)


@pytest.fixture(scope="module")
def tiny():
    """A small model with every training kernel, its training graph, and a compile folder of that graph."""
    g, _ = train_ops_model()
    return g, build_training_graph(g, PLAN)


@pytest.fixture(scope="module")
def compile_dir(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("compile")
    emit_compile_dir(tiny[1], out, 30 * 1024, 256 * 1024)  # fits every board (the smallest has 32 KB)
    return out


def _images(g, n, seed=0):
    shape = g.tensors[g.inputs[0]].shape[1:]
    return np.random.default_rng(seed).integers(-128, 128, (n, *shape)).astype(np.int8)


def test_linker_script_regions_are_the_compile_budgets(compile_dir):
    report = json.loads((compile_dir / "report.json").read_text())
    for name, board in BOARDS.items():
        ld = render_firmware(compile_dir, name)["tinytrain.ld"].decode()
        ram = re.search(r"RAM\s+\(rwx\) : ORIGIN = (0x[0-9A-F]+), LENGTH = (\d+)", ld)
        flash = re.search(r"FLASH \(rx\)  : ORIGIN = (0x[0-9A-F]+), LENGTH = (\d+)", ld)
        assert int(ram.group(1), 16) == board.ram_origin and int(ram.group(2)) == report["sram_budget_bytes"]
        assert int(flash.group(1), 16) == board.flash_origin
        assert int(flash.group(2)) == min(report["flash_budget_bytes"], board.flash_max)
        assert "SIZEOF(.bss) >= _tt_arena_bytes" in ld and f"_tt_arena_bytes = {report['arena_bytes']};" in ld


def test_projects_are_deterministic_and_carry_the_training_api(compile_dir):
    for name in BOARDS:
        a, b = render_firmware(compile_dir, name), render_firmware(compile_dir, name)
        assert a == b
        assert b"#define TT_HAS_TRAINING 1" in a["src/tt_board.h"]
        assert ("platformio.ini" in a) == (name in REAL_BOARDS)


def test_budget_larger_than_the_board_is_refused(tiny, tmp_path, capsys):
    emit_compile_dir(tiny[1], tmp_path / "c", 512 * 1024, 1024 * 1024)
    assert main(["firmware", str(tmp_path / "c"), "--board", "nano33ble", "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "more than nano33ble has" in err[0] and not (tmp_path / "p").exists()


def test_not_a_compile_folder_is_one_line(tmp_path, capsys):
    assert main(["firmware", str(tmp_path), "--board", "qemu-m7", "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tinytrain compile" in err[0]


def test_sample_file_layout():
    x = np.arange(-6, 6, dtype=np.int8).reshape(3, 2, 2)
    data = samples.encode(x, np.array([2, 0, 1]))
    assert data[:16] == b"TTDS" + struct.pack("<III", 1, 3, 4)
    assert data[16:28] == x.tobytes() and data[28:] == struct.pack("<3i", 2, 0, 1)
    images, labels = samples.decode(data)
    assert images.tobytes() == x.tobytes() and labels.tolist() == [2, 0, 1]
    with pytest.raises(ValueError):
        samples.decode(data[:-1])


def test_frames_layout_and_resynchronization():
    req = proto.request(b"T", b"\x01\x02\x03", label=7)
    assert req[:2] == b"Tt" and req[2:9] == b"T" + struct.pack("<Ih", 3, 7) and req[9:12] == b"\x01\x02\x03"
    assert struct.unpack("<I", req[12:])[0] == zlib.crc32(req[2:12])
    stream = b"noise tTtt tT" + proto.reply(b"P", b"payload")  # stray magics not followed by a command
    r = proto.read_reply(_reader(stream))
    assert r == proto.Reply(b"P", b"payload")
    bad = bytearray(proto.reply(b"P", b"payload"))
    bad[-5] ^= 1
    with pytest.raises(proto.ProtocolError, match="CRC"):
        proto.read_reply(_reader(bytes(bad)))
    with pytest.raises(proto.ProtocolError, match="board answered: nope"):
        proto.read_reply(_reader(proto.reply(b"E", b"nope")))
    with pytest.raises(proto.ProtocolError, match="timeout"):
        proto.read_reply(_reader(b"tTP"))


def _reader(data: bytes):
    pos = [0]

    def read(n):
        chunk = data[pos[0]:pos[0] + n]
        pos[0] += len(chunk)
        return chunk
    return read


@pytest.fixture(scope="module")
def host_board(compile_dir, tmp_path_factory):
    return _host_board(compile_dir, tmp_path_factory.mktemp("host_board"))


def _host_board(compile_dir: Path, out: Path) -> Path:
    """The serial harness and frame code of the real boards, built for the host with the model's C."""
    out.mkdir(parents=True, exist_ok=True)
    files = render_firmware(compile_dir, "disco_f746ng")
    for rel, data in files.items():
        if rel.startswith("src/") and not rel.endswith(("tt_startup.c", "tt_ticks.c", "tt_uart_stm32.c")):
            (out / Path(rel).name).write_bytes(data)
    here = firmware_sources() / "tt_uart_posix.c"
    shutil.copy(here, out)
    exe = out / "board"
    subprocess.run(["gcc", "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-O1", "-ffp-contract=off", "-Wall", "-Wextra",
                    "-Werror", "-I.", "tt_harness_serial.c", "tt_frame.c", "tt_uart_posix.c", "tinytrain_model.c",
                    "-lm", "-o", str(exe)], cwd=out, check=True)
    return exe


class _pty_board:
    """The host-built board on the master side of a pty; the slave's path is the "serial port"."""

    def __init__(self, exe: Path) -> None:
        self.master, self.slave = os.openpty()
        self.port = os.ttyname(self.slave)
        self.proc = subprocess.Popen([str(exe)], env={**os.environ, "TT_SERIAL_FD": str(self.master)},
                                     pass_fds=(self.master,))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.slave)
        self.proc.terminate()
        self.proc.wait(timeout=10)
        os.close(self.master)


def test_stream_protocol_over_a_pty_trains_like_the_host_engine(tiny, host_board, tmp_path):
    serial = pytest.importorskip("serial")
    g, tg = tiny
    x, y = _images(g, 6), np.array([0, 1, 2, 3, 4, 0])
    with _pty_board(host_board) as pty:
        port = serial.Serial(pty.port, timeout=10)
        board = proto.Board(port)
        assert board.training and board.input_bytes == x[0].nbytes and board.output_bytes == 5
        losses = [board.train(x[i], int(y[i]))[0] for i in range(len(x))]
        # a corrupted frame is refused with an error reply, and the board resynchronizes on the next magic
        frame = bytearray(proto.request(b"T", x[0].tobytes(), 1))
        frame[20] ^= 0xFF
        port.write(b"garbage TT" + bytes(frame))
        with pytest.raises(proto.ProtocolError, match="CRC mismatch"):
            proto.read_reply(port.read)
        with pytest.raises(proto.ProtocolError, match="input size"):
            board._call(b"T", b"\x00" * 3, 0)
        classes = [board.predict(x[i])[0] for i in range(len(x))]
        logits = np.frombuffer(board.predict(x[0])[2], np.int8)
        state = board.state()
        port.close()
    host = CTrainer(tg)
    want = host.train(x, y)
    assert np.array_equal(np.array(losses, np.float32).view(np.uint32), want.view(np.uint32))
    assert state == host.state_bytes()
    assert classes == host.predict(x).argmax(axis=1).tolist()
    assert np.array_equal(logits, host.predict(x[:1])[0])


def test_dropped_bytes_time_out_and_the_board_resynchronizes(tiny, host_board):
    """Five image bytes of a train request lost on the line: the board waits for them, so the host times out; the board
    takes them from the next request, answers it "CRC mismatch" and resynchronizes on the magic after it. Neither
    broken request changes the state, and the samples the board acknowledged train it exactly like the host engine.
    Then a train frame whose CRC is corrupted and a frame of an unknown command: refused, nothing changed."""
    serial = pytest.importorskip("serial")
    g, tg = tiny
    x, y = _images(g, 5, seed=3), np.array([0, 1, 2, 3, 4])
    lost = proto.request(b"T", x[1].tobytes(), int(y[1]))
    following = proto.request(b"T", x[2].tobytes(), int(y[2]))
    assert b"Tt" not in following[2:], "the rest of the request the board skips must hold no magic"
    with _pty_board(host_board) as pty:
        port = serial.Serial(pty.port, timeout=10)
        board = proto.Board(port)
        losses = [board.train(x[0], int(y[0]))[0]]
        port.write(lost[:20] + lost[25:])
        port.timeout = 0.5
        with pytest.raises(proto.ProtocolError, match="timeout waiting for a reply"):
            proto.read_reply(port.read)
        port.timeout = 10
        port.write(following)
        with pytest.raises(proto.ProtocolError, match="CRC mismatch"):
            proto.read_reply(port.read)
        corrupted = bytearray(proto.request(b"T", x[3].tobytes(), int(y[3])))
        corrupted[-1] ^= 0x01
        port.write(bytes(corrupted) + proto.REQUEST_MAGIC + b"X" + bytes(6))
        with pytest.raises(proto.ProtocolError, match="CRC mismatch"):
            proto.read_reply(port.read)
        with pytest.raises(proto.ProtocolError, match="unknown command"):
            proto.read_reply(port.read)
        losses += [board.train(x[k], int(y[k]))[0] for k in (1, 2, 3, 4)]
        state = board.state()
        port.close()
    host = CTrainer(tg)
    want = host.train(x, y)
    assert np.array_equal(np.array(losses, np.float32).view(np.uint32), want.view(np.uint32))
    assert state == host.state_bytes()


def test_load_state_command_streams_a_state_into_the_board_and_refuses_a_foreign_one(tiny, host_board):
    """L: a state trained on the host engine, loaded into the board, trains on exactly as on the host; a state of
    another layout (its fingerprint changed) or of another size is refused in one line and changes nothing; a
    state corrupted on the line (CRC) puts the board back to tt_init's state."""
    serial = pytest.importorskip("serial")
    g, tg = tiny
    x, y = _images(g, 4, seed=5), np.array([1, 2, 3, 4])
    host = CTrainer(tg)
    host.train(x[:2], y[:2])
    trained = host.state_bytes()
    foreign = bytearray(trained)
    foreign[8] ^= 0xFF
    corrupted = bytearray(proto.request(b"L", trained))
    corrupted[9 + len(trained) // 2] ^= 0x01
    with _pty_board(host_board) as pty:
        port = serial.Serial(pty.port, timeout=10)
        board = proto.Board(port)
        fresh = board.state()
        board.load_state(trained)
        assert board.state() == trained
        with pytest.raises(proto.ProtocolError, match="fingerprint is not this model's: not loaded"):
            board.load_state(bytes(foreign))
        with pytest.raises(proto.ProtocolError, match="state of 3 bytes"):
            board.load_state(b"abc")
        assert board.state() == trained
        losses = [board.train(x[i], int(y[i]))[0] for i in (2, 3)]
        after = board.state()
        port.write(bytes(corrupted))
        with pytest.raises(proto.ProtocolError, match="CRC mismatch: state not loaded"):
            proto.read_reply(port.read)
        reset = board.state()
        port.close()
    assert np.array_equal(np.array(losses, np.float32).view(np.uint32), host.train(x[2:], y[2:]).view(np.uint32))
    assert after == host.state_bytes() and reset == fresh == CTrainer(tg).state_bytes()


# What readelf -A says of each real board's core: the architecture and the float unit and ABI (None: soft float).
ATTRIBUTES = {"cortex-m4": ("Tag_CPU_arch: v7E-M", "Tag_FP_arch: VFPv4"),
              "cortex-m7": ("Tag_CPU_arch: v7E-M", "Tag_FP_arch: FPv5"),
              "cortex-m33": ("Tag_CPU_arch: v8-M.mainline", "Tag_FP_arch: FPv5/FP-D16 for ARMv8"),
              "cortex-m0plus": ("Tag_CPU_arch: v6S-M", None),
              "riscv32": ('Tag_RISCV_arch: "rv32i2p1_m2p0_a2p1_c2p0', None)}


@pytest.mark.parametrize("board", REAL_BOARDS)
def test_platformio_project_is_valid_offline_and_its_sources_build(board, tiny, tmp_path):
    """Each real board's project: `make` with the Debian cross compiler builds it for the board's core and memory
    map (the first code at the flash origin, RAM at the board's SRAM), and PlatformIO reads its config offline."""
    b = BOARDS[board]
    if shutil.which(b.tools.prefix + "gcc") is None:
        pytest.skip(f"{b.tools.prefix}gcc is not installed (scripts/setup.sh installs {b.tools.package})")
    compile_dir, project = tmp_path / "compile", tmp_path / board
    emit_compile_dir(tiny[1], compile_dir, min(96 * 1024, b.ram_max), 256 * 1024, target=b.core)
    assert main(["firmware", str(compile_dir), "--board", board, "-o", str(project)]) == 0
    r = subprocess.run(["make", "-s"], cwd=project, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    readelf = b.tools.prefix + "readelf"
    attrs = subprocess.run([readelf, "-A", str(project / "firmware.elf")], capture_output=True, text=True,
                           check=True).stdout
    arch, fpu = ATTRIBUTES[b.core]
    assert arch in attrs and (fpu is None or fpu in attrs and "Tag_ABI_VFP_args: VFP registers" in attrs)
    assert f"CPU = {b.cpu_flags[0]} " in (project / "Makefile").read_text()
    sections = subprocess.run([readelf, "-S", str(project / "firmware.elf")], capture_output=True, text=True,
                              check=True).stdout
    first = ".isr_vector" if b.toolchain == "arm" else ".text"  # the vector table / _start at the flash origin
    assert re.search(rf"{re.escape(first)}\s+PROGBITS\s+{b.flash_origin:08x}", sections)
    assert re.search(rf"\.stack\s+NOBITS\s+{b.ram_origin:08x}", sections)
    pio = shutil.which("pio") or str(Path(sys.executable).with_name("pio"))
    if not Path(pio).exists():
        pytest.skip("PlatformIO is not installed (pip install platformio; it is in the dev extra)")
    r = subprocess.run([pio, "project", "config", "--json-output"], cwd=project, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PLATFORMIO_NO_ANSI": "1",
                                         "PLATFORMIO_SETTING_ENABLE_TELEMETRY": "No",
                                         "PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL": "3650"})
    assert r.returncode == 0, r.stderr
    config = dict(json.loads(r.stdout))
    env = dict(config[f"env:{board}"])
    assert env["platform"] == b.pio.platform and env["board"] == b.pio.board
    assert env["board_build.ldscript"] == "tinytrain.ld" and "-ffp-contract=off" in " ".join(env["build_flags"])


def test_stream_command_trains_an_autoencoder_like_train_engine_c(tmp_path, capsys):
    """`tinytrain stream` of an autoencoder (float features, no y, --loss mse by default) against the board's C over a
    pty: the train steps send each sample with a dummy label (the loss reads the input), the reconstruction errors
    come from the output bytes of the P replies. Same losses, state, held-out errors and ROC AUC as `train --engine c`
    and `eval`; float targets are refused in one line."""
    pytest.importorskip("serial")
    from codegen_graphs import GraphBuilder
    from tinytrain.codegen.state import unpack
    from tinytrain.export_onnx import graph_to_onnx, save_onnx
    from tinytrain.frontends import load_model
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan, preset

    b = GraphBuilder(3, "fc_ae")
    save_onnx(graph_to_onnx(b.build(b.fully_connected(b.fully_connected(b.input((1, 16)), 8), 16))),
              tmp_path / "ae.onnx")
    g = load_model(tmp_path / "ae.onnx")
    rng = np.random.default_rng(0)
    anomaly = np.arange(10) % 2
    x = np.clip(rng.normal(0, 0.3, (10, 16)) * (1 + 3 * anomaly[:, None]), -2, 2.4).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, anomaly=anomaly)
    plan = replace(preset("full", g, lr=0.02), loss="mse").to_json()
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    tg = build_training_graph(g, parse_plan(plan), UpdateConfig(seed=0))  # train's defaults
    emit_compile_dir(tg, tmp_path / "compile", 64 * 1024, 256 * 1024)
    exe = _host_board(tmp_path / "compile", tmp_path / "board")
    common = [str(tmp_path / "ae.onnx"), "--data", str(tmp_path / "d.npz"), "--steps", "14", "--held-out", "0.4"]
    with _pty_board(exe) as pty:
        assert main(["stream", *common, "--json", "--port", pty.port, "--state-out", str(tmp_path / "s.bin")]) == 0
    streamed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", *common, "--json", "--plan", str(tmp_path / "plan.json"), "--engine", "c",
                 "--state-out", str(tmp_path / "s.npz")]) == 0
    host = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["eval", *common[:-4], "--held-out", "0.4", "--state", str(tmp_path / "s.npz"), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert streamed["loss"] == "mse" and streamed["steps"] == 14 and streamed["final_loss"] == host["final_loss"]
    assert streamed["reconstruction_error"] == host["error_after"] == evaluated["reconstruction_error"]
    assert streamed["errors"] == evaluated["errors"] and streamed["n"] == host["n_held_out"] == 4
    assert streamed["roc_auc"] == evaluated["roc_auc"] and streamed["n_anomalous"] == evaluated["n_anomalous"]
    state = unpack(tg, (tmp_path / "s.bin").read_bytes())
    with np.load(tmp_path / "s.npz") as trained:
        assert state.step == 14 and all(np.array_equal(v, trained[k]) for k, v in state.tensors.items())
    np.savez(tmp_path / "t.npz", x=x, y=x)  # float targets: not over serial
    assert main(["stream", common[0], "--data", str(tmp_path / "t.npz"), "--loss", "mse", "--port", "/dev/null"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "float targets y do not go over the serial protocol" in err[0]


@pytest.mark.slow
def test_stream_command_on_the_vww_model_matches_train_engine_c(tmp_path, capsys):
    """`tinytrain stream` end to end against the board's C over a pty: same losses as `train --engine c`."""
    pytest.importorskip("serial")
    from conftest import shared_file
    from tinytrain.frontends import load_model
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import parse_plan

    model = shared_file("models/vww_96_int8.tflite")
    data = np.load(shared_file("data/vww96/vww96_dev800.npz"))
    np.savez(tmp_path / "d.npz", x=data["x"][:10], y=data["y"][:10])
    plan = {"version": 1, "bias_last_k": 6, "weights": [{"conv": 27, "ratio": 1.0}], "channels": "first", "lr": 0.01}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    config = UpdateConfig(momentum=0.0, rounding=Rounding.STOCHASTIC, qas=True, seed=0)  # train's defaults
    tg = build_training_graph(load_model(model), parse_plan(plan), config)
    emit_compile_dir(tg, tmp_path / "compile", 256 * 1024, 1024 * 1024)
    exe = _host_board(tmp_path / "compile", tmp_path / "board")
    common = [str(model), "--data", str(tmp_path / "d.npz"), "--steps", "12", "--held-out", "0.3", "--json"]
    with _pty_board(exe) as pty:
        assert main(["stream", *common, "--port", pty.port, "--state-out", str(tmp_path / "s.bin")]) == 0
    streamed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["train", *common, "--plan", str(tmp_path / "plan.json"), "--engine", "c"]) == 0
    host = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert streamed["steps"] == 12 and streamed["final_loss"] == host["final_loss"]
    assert streamed["accuracy"] == host["accuracy_after"] and streamed["n"] == host["n_held_out"]
    state = (tmp_path / "s.bin").read_bytes()
    assert state[:4] == b"TTS1" and struct.unpack_from("<I", state, 12)[0] == 12


def test_every_board_core_is_a_core_build_with_the_device_kernels(tiny, tmp_path):
    """A core without the DSP extension (M3, M0+, RISC-V) is a core build, not a host one (no stack VLAs, no host
    kernels): TT_ARM_DSP 1, the DSP instructions' C models; the DSP cores use the instructions; "" is a host."""
    from tinytrain.codegen.context import arm_dsp, dsp_kernels, host_build
    from tinytrain.cores import CORE_TARGETS

    assert {b.core for b in BOARDS.values()} == set(CORE_TARGETS)
    assert host_build("") and not dsp_kernels("")
    assert all(dsp_kernels(t) and not host_build(t) for t in CORE_TARGETS)
    assert {t for t in CORE_TARGETS if arm_dsp(t)} == {"cortex-m4", "cortex-m7", "cortex-m55", "cortex-m33"}
    emit_compile_dir(tiny[1], tmp_path / "m3", 30 * 1024, 256 * 1024, target="cortex-m3")
    src = (tmp_path / "m3" / "tinytrain_model.c").read_text()
    assert "#define TT_ARM_DSP 1" in src and "exact C models" in src and "_host(" not in src
