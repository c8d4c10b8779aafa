"""fits => links (issue 40 item 2): for every board `tinytrain firmware` knows, a step compiled to a budget with no
margin beyond what its firmware needs (tinytrain/firmware/fit.py: the step, the board's stack, the harness's heap
and statics) links in that RAM region; one byte less is refused by `firmware` in one line, before any linker. One
small training step per core (compile is per target), one link per board; one QEMU run (qemu-m7) at that budget
trains bit for bit as the host engine. A linker overflow that still happens is one line with the numbers."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from test_firmware import _host_board, _pty_board
from tinytrain.api import load_model
from tinytrain.cli import main
from tinytrain.engines import qemu as engine_qemu
from tinytrain.engines.host_c import CTrainer
from tinytrain.errors import BudgetError
from tinytrain.firmware import BOARDS, fit, get_board
from tinytrain.firmware import protocol as proto
from tinytrain.firmware.fit import check_flash, link_error, links_text, ram_need
from tinytrain.training.resolve import resolve_plan
from tinytrain.training.sparse import Plan, WeightUpdate
from tinytrain.training.train_graph import build_training_graph

KB = 1024
PLAN = Plan(bias_last_k=4, weights=(WeightUpdate(3, 0.25), WeightUpdate(5, 1.0)), lr=0.05)
CORES = sorted({b.core for b in BOARDS.values()})


def _toolchain(board: str):
    gcc = BOARDS[board].tools.prefix + "gcc"
    if shutil.which(gcc) is None:
        pytest.skip(f"{gcc} is not installed (scripts/setup.sh)")


@pytest.fixture(scope="module")
def step():
    g, _ = train_ops_model()
    return g, build_training_graph(g, PLAN)


@pytest.fixture(scope="module")
def reports(step, tmp_path_factory):
    """Per core: the report of the step compiled with room to spare (the RAM it needs does not depend on the budget)."""
    out = {}
    for core in CORES:
        d = tmp_path_factory.mktemp(f"probe-{core}")
        out[core] = engine_qemu.emit_compile_dir(step[1], d, 64 * KB, 128 * KB, target=core)
    return out


def _tight(step, reports, board: str, tmp_path, less: int = 0):
    """The step compiled for ``board`` at exactly the RAM its firmware needs (minus ``less`` bytes)."""
    b = BOARDS[board]
    need = ram_need(reports[b.core], b).total
    assert need <= b.ram_max, f"the test step does not fit {board}"
    d = tmp_path / f"compile-{need - less}"
    engine_qemu.emit_compile_dir(step[1], d, need - less, min(128 * KB, b.flash_max), target=b.core)
    return d, need


@pytest.mark.parametrize("board", list(BOARDS))
def test_a_step_at_the_exact_budget_links_and_one_byte_less_is_refused_in_one_line(board, step, reports, tmp_path,
                                                                                   capsys):
    _toolchain(board)
    compile_dir, need = _tight(step, reports, board, tmp_path)
    fw = engine_qemu.build(compile_dir, board, tmp_path / "project")
    assert fw.ram_bytes <= need  # what the linker placed in the RAM region (stack, data, bss, minimum heap)
    short, _ = _tight(step, reports, board, tmp_path, less=1)
    assert main(["firmware", str(short), "--board", board, "-o", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"does not link on {board}" in err[0] and "1 B more than" in err[0], err
    assert "--sram" in err[0] and not (tmp_path / "refused").exists()


def test_harness_reserve_is_measured_not_guessed(step, reports, tmp_path):
    """The reserve of fit.py covers what the linker places, with less than 1 KB of slack on a QEMU board and a
    serial board (the numbers are the board's, not a blanket margin)."""
    for board in ("qemu-m7", "disco_f746ng"):
        _toolchain(board)
        compile_dir, need = _tight(step, reports, board, tmp_path / board)
        fw = engine_qemu.build(compile_dir, board, tmp_path / board / "project")
        assert 0 <= need - fw.ram_bytes < KB, (board, need, fw.ram_bytes)


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm (scripts/setup.sh)")
def test_the_exact_budget_trains_on_qemu_like_the_host(step, reports, tmp_path):
    """The harness reads the samples row by row into the step's input: at the exact budget (no room for an image
    buffer) the firmware trains and predicts as the host engine, bit for bit."""
    _toolchain("qemu-m7")
    compile_dir, _ = _tight(step, reports, "qemu-m7", tmp_path)
    fw = engine_qemu.build(compile_dir, "qemu-m7", tmp_path / "project")
    g, tg = step
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (6, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, 5, 6)
    r = engine_qemu.run(fw, "qemu-m7", train=(x[:4], y[:4]), test=(x[4:], y[4:]))
    host = CTrainer(tg)
    assert np.array_equal(np.asarray(r.losses, np.float32).view(np.uint32),
                          np.asarray(host.train(x[:4], y[:4]), np.float32).view(np.uint32))
    assert r.state == host.state_bytes() and np.array_equal(r.logits, host.predict(x[4:]))


def test_a_linker_overflow_is_one_line_with_the_numbers():
    ld = ("/usr/lib/gcc/arm-none-eabi/12.2.1/../../../arm-none-eabi/bin/ld: /tmp/tinytrain-firmware-x/project/"
          "firmware.elf section `.bss' will not fit in region `RAM'\n"
          "/usr/lib/gcc/arm-none-eabi/12.2.1/../../../arm-none-eabi/bin/ld: region `RAM' overflowed by 18288 bytes\n"
          "collect2: error: ld returned 1 exit status\nmake: *** [Makefile:20: firmware.elf] Error 1\n")
    line = link_error(ld, get_board("qemu-m7"), {"RAM": 32768, "FLASH": 1 << 20})
    assert "\n" not in line and "/tmp" not in line
    assert line.startswith("the firmware for qemu-m7 does not link: RAM overflowed by 18288 bytes of 32.0 KB")
    assert "--sram" in line


def test_train_engine_qemu_refuses_a_step_that_cannot_link_in_one_line(step, tmp_path):
    """`train --engine qemu` builds the firmware at its --sram: a budget the step fits but its firmware does not is
    one line with the numbers (QemuTrainer -> firmware's check), no temporary path."""
    _toolchain("qemu-m7")
    report = engine_qemu.emit_compile_dir(step[1], tmp_path / "c", 64 * KB, 128 * KB)
    budget = report["peak_sram_bytes"] + 64  # the step fits; its harness's heap does not
    with pytest.raises(BudgetError) as e:
        engine_qemu.QemuTrainer(step[1], "qemu-m7", sram_budget=budget, flash_budget=128 * KB)
    assert "\n" not in str(e.value) and "does not link on qemu-m7" in str(e.value) and "tinytrain-" not in str(e.value)


def test_the_report_says_on_which_boards_the_firmware_links(step, tmp_path):
    report = engine_qemu.emit_compile_dir(step[1], tmp_path / "c", 64 * KB, 128 * KB, target="cortex-m4")
    text = links_text(report)
    assert all(name in text for name, b in BOARDS.items() if b.core == "cortex-m4") and "qemu-m7" not in text
    assert "does NOT link" not in text


def test_a_link_that_overflows_anyway_is_one_line_from_build(step, reports, tmp_path, monkeypatch):
    """With fit.py's check blinded (a harness that needs more than it counts), the linker's overflow comes back from
    engines/qemu.build as one line with the region and the bytes, no linker dump, no temporary path."""

    _toolchain("qemu-m7")
    compile_dir, _ = _tight(step, reports, "qemu-m7", tmp_path, less=600)
    monkeypatch.setattr(fit, "HARNESS_BYTES", {True: -4096, False: -4096})
    with pytest.raises(engine_qemu.QemuError) as e:
        engine_qemu.build(compile_dir, "qemu-m7", tmp_path / "project")
    message = str(e.value)
    assert "\n" not in message and str(tmp_path) not in message and "collect2" not in message
    assert "does not link" in message and ("RAM overflowed by" in message or "exceed the SRAM budget" in message)


@pytest.mark.slow
def test_the_serial_harness_streams_rows_and_a_bad_crc_leaves_a_streamed_step_untouched(tmp_path):
    """MobileNetV1-0.25 at 96x96 (its input read row by row into line buffers): the serial harness, built for the
    host, takes each image from the UART row by row into the forward pass; a frame whose image or CRC was corrupted
    on the line is answered E before the backward (the CRC is read with the last row, the step jumps out), so the
    board's losses and state are the host engine's on the good frames only."""
    serial = pytest.importorskip("serial")

    model = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"
    if not model.exists():
        pytest.skip(f"{model} is not built (python -m models.build)")
    g = load_model(model, new_head=2)
    tg = build_training_graph(g, resolve_plan(g, update="last-k:1"))
    report = engine_qemu.emit_compile_dir(tg, tmp_path / "c", 256 * KB, 1024 * KB)
    assert report["streamed"] is not None
    exe = _host_board(tmp_path / "c", tmp_path / "board")
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (4, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    y = np.array([0, 1, 1, 0])
    with _pty_board(exe) as pty:
        port = serial.Serial(pty.port, timeout=30)
        board = proto.Board(port)
        losses = [board.train(x[0], 0)[0], board.train(x[1], 1)[0]]
        for where in (20, -1):  # an image byte of an early row; the CRC itself
            frame = bytearray(proto.request(b"T", x[2].tobytes(), 1))
            frame[where] ^= 0x10
            port.write(bytes(frame))
            with pytest.raises(proto.ProtocolError, match="CRC mismatch: the step was not applied"):
                proto.read_reply(port.read)
        losses += [board.train(x[2], 1)[0], board.train(x[3], 0)[0]]
        logits = np.frombuffer(board.predict(x[0])[2], np.int8)
        state = board.state()
        port.close()
    host = CTrainer(tg)
    assert np.array_equal(np.array(losses, np.float32).view(np.uint32), host.train(x, y).view(np.uint32))
    assert state == host.state_bytes() and np.array_equal(logits, host.predict(x[:1])[0])


def test_a_step_larger_than_the_boards_flash_is_refused_in_one_line(step, tmp_path, capsys):
    """A 1 MB flash budget on a 128 KB board: the RAM fits, the weights and code do not; one line, nothing written."""

    board = get_board("nucleo_g071rb")
    with pytest.raises(BudgetError) as e:
        check_flash({"flash_bytes": 200 * KB}, board, board.flash_max)
    assert "\n" not in str(e.value) and "200.0 KB of flash" in str(e.value) and "72.0 KB more" in str(e.value)
    engine_qemu.emit_compile_dir(step[1], tmp_path / "c", 30 * KB, 1024 * KB, target=board.core)
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    check_flash(report, board, board.flash_max)  # the test step's own flash fits the board


MODEL = Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx"


def test_compile_board_refuses_a_step_that_would_not_link_there_before_writing(tmp_path, capsys):
    """`compile --board B` (target: B's core): a step that fits its --sram and links on B says so; one whose firmware
    needs more RAM than the budget (20.8 KB step, 23.3 KB with the stack and the harness, at --sram 22k) is refused in
    one line with the numbers and the fix, exit 2, nothing written; so is a --target that is not B's core."""
    args = [str(MODEL), "--new-head", "2", "--update", "last-k:1", "--board", "qemu-m7"]
    assert main(["compile", *args, "--sram", "32k", "-o", str(tmp_path / "fits")]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "fits" / "report.json").read_text())
    need = ram_need(report, BOARDS["qemu-m7"]).total
    assert report["target"] == "cortex-m7" and f"links on qemu-m7: its firmware needs {need / KB:.1f} KB" in out

    assert main(["compile", *args, "--sram", "22k", "-o", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("tinytrain: error: does not link on qemu-m7: its firmware needs 23.3 KB")
    assert "--sram 24k or more" in err and not (tmp_path / "refused").exists()
    assert main(["compile", *args, "--target", "cortex-m4", "--sram", "32k", "-o", str(tmp_path / "core")]) == 2
    assert "qemu-m7 is a cortex-m7 board" in capsys.readouterr().err and not (tmp_path / "core").exists()
