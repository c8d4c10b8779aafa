"""Persistent learned state (docs/guide/field.md): the state in two flash slots with sequence
numbers and CRCs (firmware/c/tt_persist.c), checked on the same C as the firmware.

Power loss: power is cut at every erase and program operation of consecutive saves, before the operation and
in the middle of it (torn: a part of its bits changed), on a NOR simulator; every boot must load the previous
or the new state, byte for byte, never anything else.
"""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from tinytrain.csources import firmware_sources
from tinytrain.engines.host_c import CTrainer
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan, WeightUpdate
from tinytrain.training.train_graph import build_training_graph

PLAN = Plan(bias_last_k=4, weights=(WeightUpdate(0, 0.5), WeightUpdate(3, 0.25), WeightUpdate(5, 1.0)), lr=0.05)
PERSIST_SOURCES = ("tt_flash.h", "tt_persist.h", "tt_persist.c", "tt_flash_sim.h", "tt_flash_sim.c")
CFLAGS = ("-std=c99", "-O1", "-g", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
_LINE = re.compile(r"powerloss((?: \w+ \d+)+)")


def build_powerloss(out: Path, graph) -> Path:
    """The power-loss driver (tests/c/powerloss_main.c) linked with the graph's emitted step and tt_persist.c."""
    for name, text in CTrainer(graph).files.items():
        (out / name).write_text(text)
    c = firmware_sources()
    for name in PERSIST_SOURCES:
        (out / name).write_bytes(c.joinpath(name).read_bytes())
    shutil.copy(Path(__file__).parents[1] / "c" / "powerloss_main.c", out)
    cmd = ["gcc", *CFLAGS, "-o", "powerloss", "powerloss_main.c", "tinytrain_model.c", "tt_persist.c", "tt_flash_sim.c"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True, text=True)
    return out / "powerloss"


def run_powerloss(exe: Path, saves: int, steps: int, sector: int, unit: int) -> dict[str, int]:
    r = subprocess.run([str(exe), str(saves), str(steps), str(sector), str(unit), "final_state.bin"], cwd=exe.parent,
                       capture_output=True, text=True, timeout=600, check=False)
    m = _LINE.search(r.stdout)
    assert m, r.stdout + r.stderr
    words = m.group(1).split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])} | {"exit": r.returncode}


@pytest.fixture(scope="module")
def training_graph():
    g, _ = train_ops_model()
    return fuse_updates(build_training_graph(g, PLAN, UpdateConfig(momentum=0.9)))


@pytest.fixture(scope="module")
def powerloss(tmp_path_factory, training_graph):
    return build_powerloss(tmp_path_factory.mktemp("powerloss"), training_graph)


@pytest.mark.parametrize("sector,unit", [(256, 8), (1024, 4)])
def test_power_cut_at_every_operation_of_100_saves_never_corrupts(powerloss, training_graph, sector, unit):
    """... and training resumed from flash after every save ends byte for byte where uninterrupted training does."""
    from test_sanitize import lcg_samples

    r = run_powerloss(powerloss, saves=100, steps=2, sector=sector, unit=unit)
    assert r["exit"] == 0 and r["corrupt"] == 0 and r["violations"] == 0 and r["failed_saves"] == 0, r
    assert r["saves"] == 100
    assert r["cuts"] == r["erase_cuts"] + r["program_cuts"] == r["previous"] + r["new"]
    # every operation of every save, before and torn: at least one erase and several programs per save
    assert r["erase_cuts"] >= 2 * 100 and r["program_cuts"] >= 2 * 100 * 3
    assert r["previous"] > 0  # "new" only when a torn header program happens to complete (and after the clean save)
    x = training_graph.tensors[training_graph.inputs[0]]
    xs, ys = lcg_samples(200, x.nbytes, 5)
    host = CTrainer(training_graph)
    host.train(xs.reshape((200,) + tuple(x.shape[1:])), ys)
    assert (powerloss.parent / "final_state.bin").read_bytes() == host.state_bytes()


needs_qemu = pytest.mark.qemu


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("board", ["qemu-m4", "qemu-m7", "qemu-m55"])
def test_qemu_training_stopped_by_a_power_cut_resumes_to_the_uninterrupted_state(board, tmp_path):
    """A QEMU board with the state saved every 3 samples to its flash file: QEMU killed right after the 2nd save, run
    again on the same flash (it resumes at sample 6), killed after 1 more save, run to the end: the final state is
    byte for byte the host C's uninterrupted training, and so is the state in the flash file."""
    from tinytrain.codegen.state import state_layout, state_size
    from tinytrain.engines.qemu import QemuTrainer
    from tinytrain.firmware.persist import newest

    g, _ = train_ops_model()
    tg = build_training_graph(g, PLAN, UpdateConfig(momentum=0.9))
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (14, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    y = rng.integers(0, 5, 14)
    c = CTrainer(tg)
    c_losses = c.train(x, y)
    flash = tmp_path / "flash.bin"
    q = QemuTrainer(tg, board=board, sram_budget=96 * 1024, save_every=3, flash=flash)
    q.train(x, y, stop_after_saves=2)
    assert newest(flash.read_bytes(), state_size(state_layout(tg))).position == 6
    q.train(x, y, stop_after_saves=1)
    assert newest(flash.read_bytes(), state_size(state_layout(tg))).position == 9
    losses = q.train(x, y)
    assert np.array_equal(losses.view(np.uint32), c_losses[9:].view(np.uint32))
    assert q.state_bytes() == c.state_bytes()
    saved = newest(flash.read_bytes(), state_size(state_layout(tg)))
    assert saved.position == 14 and saved.state == c.state_bytes()



@pytest.mark.cross
@pytest.mark.parametrize("board", ["disco_f746ng", "nucleo_f767zi", "nano33ble"])
def test_real_board_firmware_with_persistence_links_its_flash_driver_below_the_slots(board, tmp_path):
    """--save-every on the PlatformIO boards: the STM32F7 / nRF52840 flash driver, tt_persist.c and the serial harness
    compile with -Wall -Wextra -Werror and link; the program ends below the two slots at the end of flash."""
    from tinytrain.cli import main
    from tinytrain.engines.qemu import emit_compile_dir
    from tinytrain.firmware import BOARDS

    g, _ = train_ops_model()
    emit_compile_dir(build_training_graph(g, PLAN), tmp_path / "compile", 96 * 1024, 4 * 1024 * 1024)
    project = tmp_path / board
    assert main(["firmware", str(tmp_path / "compile"), "--board", board, "--save-every", "16", "-o", str(project)]) == 0
    b = BOARDS[board]
    assert (project / "src" / b.flash.driver).exists() and (project / "src" / "tt_persist.c").exists()
    r = subprocess.run(["make", "-s"], cwd=project, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    nm = subprocess.run(["arm-none-eabi-nm", str(project / "firmware.elf")], capture_output=True, text=True,
                        check=True).stdout
    assert " T tt_flash_open" in nm and " T tt_persist_save" in nm and " T tt_autosave_boot" in nm
    board_h = (project / "src" / "tt_board.h").read_text()
    origin = int(re.search(r"TT_FLASH_REGION_ORIGIN (0x[0-9A-F]+)u", board_h).group(1), 16)
    region = int(re.search(r"TT_FLASH_REGION_BYTES (\d+)u", board_h).group(1))
    assert origin + region == b.flash_origin + b.flash_max
    ld = (project / "tinytrain.ld").read_text()
    length = int(re.search(r"FLASH \(rx\)\s+: ORIGIN = 0x[0-9A-F]+, LENGTH = (\d+)", ld).group(1))
    assert b.flash_origin + length <= origin


@pytest.mark.slow
@needs_qemu
def test_cli_train_on_qemu_stops_and_resumes_to_the_uninterrupted_state(tmp_path, capsys):
    """`tinytrain train --engine qemu --flash F --save-every 3 --stop-after-saves 2` (power cut after sample 6), then
    the same command without the stop: its --state-out is byte for byte that of `--engine c` without interruption."""
    import json

    from tinytrain.cli import main

    model = str(Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.integers(0, 256, (10, 96, 96, 3)).astype(np.uint8), y=rng.integers(0, 2, 10))
    common = ["train", model, "--data", str(tmp_path / "d.npz"), "--update", "last-k:2", "--steps", "10", "--json"]
    flash = ["--engine", "qemu", "--flash", str(tmp_path / "flash.bin"), "--save-every", "3"]
    assert main(common + flash + ["--stop-after-saves", "2"]) == 0
    assert "stopped the board after 2 saves" in capsys.readouterr().out
    assert main(common + flash + ["--state-out", str(tmp_path / "qemu.npz")]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(common + ["--engine", "c", "--state-out", str(tmp_path / "c.npz")]) == 0
    assert (tmp_path / "qemu.npz").read_bytes() == (tmp_path / "c.npz").read_bytes()
    assert resumed["steps"] == 10 and resumed["nonfinite_steps"] == 0


def test_state_streams_in_chunks_and_a_refused_or_broken_stream_is_reported(training_graph):
    """tt_state_save_to hands a sink the tt_state_save bytes in chunks of TT_STATE_CHUNK_BYTES (the last shorter);
    tt_state_load_from reads them back from a source in the same chunks. A foreign header is refused on the first
    chunk (-1, nothing changed); a source that fails after it returns -2 and leaves the step counter alone."""
    import ctypes

    from test_sanitize import lcg_samples

    sink_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint32)
    source_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint32)
    c = CTrainer(training_graph)
    lib = c._lib
    lib.tt_state_save_to.argtypes = lib.tt_state_load_from.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    x = training_graph.tensors[training_graph.inputs[0]]
    xs, ys = lcg_samples(3, x.nbytes, 5)
    c.train(xs.reshape((3,) + tuple(x.shape[1:])), ys)
    want = c.state_bytes()
    chunks: list[bytes] = []
    sink = sink_t(lambda _, p, n: chunks.append(ctypes.string_at(p, n)) or 0)
    assert lib.tt_state_save_to(ctypes.cast(sink, ctypes.c_void_p), None) == 0
    assert b"".join(chunks) == want and len(want) > 2 * 256
    assert [len(k) for k in chunks[:-1]] == [256] * (len(chunks) - 1) and 0 < len(chunks[-1]) <= 256

    def source_of(data: bytes, fail_at: int | None = None):
        at = [0]

        def read(_, p, n):
            if fail_at is not None and at[0] >= fail_at:
                return 1
            ctypes.memmove(p, data[at[0]:at[0] + n], n)
            at[0] += n
            return 0
        return source_t(read)

    c.reset()
    foreign = bytearray(want)
    foreign[8] ^= 1  # another layout fingerprint
    src = source_of(bytes(foreign))
    assert lib.tt_state_load_from(ctypes.cast(src, ctypes.c_void_p), None) == -1 and c.state_bytes() != want
    assert lib.tt_step_count() == 0
    src = source_of(want, fail_at=256)
    assert lib.tt_state_load_from(ctypes.cast(src, ctypes.c_void_p), None) == -2 and lib.tt_step_count() == 0
    src = source_of(want)
    assert lib.tt_state_load_from(ctypes.cast(src, ctypes.c_void_p), None) == 0 and c.state_bytes() == want


def _linked_constants(elf: Path, board: str) -> int:
    """The bytes of the emitted C's constant arrays (tt_ objects) in a linked firmware's flash."""
    from tinytrain.firmware import BOARDS

    b = BOARDS[board]
    out = subprocess.run(["arm-none-eabi-readelf", "-sW", str(elf)], capture_output=True, text=True, check=True).stdout
    rows = [f for f in (line.split() for line in out.splitlines()) if len(f) >= 8 and f[3] == "OBJECT"]
    return sum(int(f[2]) for f in rows
               if f[7].startswith("tt_") and b.flash_origin <= int(f[1], 16) < b.flash_origin + b.flash_max)


SHIPPED_PLANS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "models" / "plans").glob("*.json"))


# Every shipped plan on qemu-m55 (its code and weights in the AN547's SRAM, data in a 256 KB region of its DTCM);
# benchmarks/exactness.py --on qemu runs them all on qemu-m4 / m7 / m55 (benchmarks/results/).
@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("plan", SHIPPED_PLANS)
def test_shipped_plan_saves_and_resumes_on_qemu_at_256k_without_a_state_copy(plan, tmp_path):
    """A shipped plan (the proxyless one: a 78648-byte state, no room for a copy at 256 KB) at --sram 256k, its
    state saved to flash every 2 samples: power cut after the 1st save, run again to the end. The resumed losses,
    tt_state.bin and the newest state in flash are byte for byte the host C's uninterrupted training; the run's stack
    high-water mark, streaming included, is within the measured reservation (memory/report.py). The report's flash is
    what the firmware links: its constants are the constant arrays in the firmware's flash (their symbols' sizes) and
    its figure, with the code estimate, is within 5 % of the linked flash (codegen/flash.py)."""
    from tinytrain.codegen.state import state_layout, state_size
    from tinytrain.data import model_inputs
    from tinytrain.engines.qemu import QemuTrainer, run
    from tinytrain.firmware.persist import newest
    from tinytrain.frontends import load_model
    from tinytrain.cores import STACK_MEASURED_BYTES
    from tinytrain.training.sparse import load_plan

    root = Path(__file__).resolve().parents[2]
    g = load_model(root / "models" / f"{plan.rsplit('-', 1)[0]}.onnx")
    tg = build_training_graph(g, load_plan(root / "models" / "plans" / f"{plan}.json"))
    n = state_size(state_layout(tg))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (4, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, 10, 4)
    flash, board = tmp_path / "flash.bin", "qemu-m55"
    q = QemuTrainer(tg, board=board, sram_budget=256 * 1024, save_every=2, flash=flash)
    assert q.firmware.ram_bytes <= 256 * 1024
    constants = q.report["weights_flash_bytes"]
    assert constants <= _linked_constants(q.firmware.elf, board) <= constants + 1024
    assert abs(q.report["flash_bytes"] - q.firmware.flash_bytes) <= 0.05 * q.firmware.flash_bytes
    q.train(x, y, stop_after_saves=1)
    assert newest(flash.read_bytes(), n).position == 2
    r = run(q.firmware, board, train=(x, y), flash=flash)
    c = CTrainer(tg)
    want = c.train(x, y)
    assert n == 78648 or plan != "proxyless-w0.3-sparse"  # 56760 B + 4-bit remainders
    assert "tt: flash resumed sequence 1 position 2 step 2" in r.stdout
    assert np.array_equal(r.losses.view(np.uint32), want[2:].view(np.uint32))
    assert r.state == c.state_bytes() == newest(flash.read_bytes(), n).state
    assert 0 < r.stack_bytes <= STACK_MEASURED_BYTES
