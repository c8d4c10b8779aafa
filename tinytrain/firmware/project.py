"""``tinytrain firmware``: a compile output folder + a board -> a firmware project.

    PROJECT/Makefile          arm-none-eabi-gcc (riscv64-unknown-elf-gcc) build (+ `make run` on QEMU boards)
    PROJECT/tinytrain.ld      RAM = the compile's SRAM budget, FLASH = its flash budget, with ASSERTs
    PROJECT/platformio.ini    real boards: a PlatformIO project over the same sources (+ tinytrain_flags.py)
    PROJECT/src/              the compile's C (model, runtime) + startup, tick counter, harness, UART driver
    PROJECT/report.json       the compile's memory report, copied
    PROJECT/.tinytrain-manifest.json  the files above with their sha256 (tinytrain/outputs: a second run replaces
                              them and keeps the files the user added, e.g. src/main.c)

The firmware is bare metal on every board (no vendor framework): the same startup code and linker script,
so the SRAM budget is enforced by the linker everywhere and nothing else takes RAM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2

from tinytrain.codegen.context import MODEL_HEADER, MODEL_SOURCE
from tinytrain.csources import firmware_sources, firmware_templates
from tinytrain.errors import UsageError
from tinytrain.firmware.boards import Board, get_board
from tinytrain.firmware.field import HARNESS as FIELD_HARNESS, RAW_STACK, field_parts
from tinytrain.firmware.fit import check_flash, check_links
from tinytrain.cores import stack_reserve
from tinytrain.outputs import OutputDir, read_manifest
from tinytrain.sizes import format_size
from tinytrain.version import __version__

# Common to every board, with its toolchain's reset code and tick counter (Toolchain.startup); the harness and UART
# driver are added per board.
COMMON_SOURCES = ("tt_ticks.h",)
QEMU_SOURCES = ("tt_harness_qemu.c", "tt_samples.h")
SERIAL_SOURCES = ("tt_harness_serial.c", "tt_serial.h", "tt_frame.c", "tt_frame.h")
# --save-every: the persistent state (firmware/c/tt_persist.h) and the board's flash driver (Board.flash.driver).
FIELD_FLASH_SOURCES = ("tt_flash_port.h",)  # firmware --field, --replay-storage flash (tt_flash.h is the field's)
PERSIST_SOURCES = ("tt_flash.h", "tt_flash_port.h", "tt_persist.c", "tt_persist.h", "tt_autosave.c", "tt_autosave.h")
# What a training build's compile output holds in persist/ for the user's own firmware: the slots and the flash
# interface a board implements (docs/guide/integration.md "Persistence and flash slots").
PERSIST_API = ("tt_persist.c", "tt_persist.h", "tt_flash.h", "tt_flash_port.h")
PERSIST_HEADER_BYTES = 32  # firmware/c/tt_persist.h TT_PERSIST_HEADER_BYTES
DEFAULT_BAUD = 115200
# The stack reserved is the one the memory report counts for the board's core (tinytrain/cores.py stack_reserve,
# measured: benchmarks/results/stack.md, cores.md); the minimum heap is fit.py's.

_TRAINING_API = re.compile(r"\btt_train_step\s*\(")
_STATE_BYTES = re.compile(r"#define TT_STATE_BYTES (\d+)")


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(firmware_templates()),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


def _sources(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in _compile_files(folder) if p.suffix in (".c", ".h")}


def read_compile_dir(compile_dir: Path) -> tuple[dict, dict[str, bytes]]:
    """(report.json, C sources by name) of a `tinytrain compile` output folder, or a UsageError saying what is missing."""
    report_path = compile_dir / "report.json"
    if not report_path.is_file():
        raise UsageError(f"{compile_dir} is not a `tinytrain compile` output folder (no report.json); "
                         "run `tinytrain compile MODEL --sram ... -o DIR` first")
    try:
        report = json.loads(report_path.read_text())
        sizes = {k: int(report[k]) for k in ("sram_budget_bytes", "flash_budget_bytes", "arena_bytes",
                                            "peak_sram_bytes", "flash_bytes")}
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{report_path}: not a tinytrain memory report ({e})") from None
    report.update(sizes)
    sources = _sources(compile_dir)
    if MODEL_HEADER not in sources or MODEL_SOURCE not in sources:
        raise UsageError(f"{compile_dir} has no tinytrain_model.c / .h; run `tinytrain compile` again")
    return report, sources


def _compile_files(compile_dir: Path) -> list[Path]:
    """The files `tinytrain compile` wrote in ``compile_dir`` (its manifest's; without one, an older output: every
    file at the top): a user's own .c or .h beside them is not a source of the firmware."""

    manifest = read_manifest(compile_dir)
    if manifest is None:
        return sorted(p for p in compile_dir.iterdir() if p.is_file())
    return [compile_dir / rel for rel in sorted(manifest["files"]) if "/" not in rel]


def has_training_api(header: str) -> bool:
    return bool(_TRAINING_API.search(header))


def persist_region_bytes(state_bytes: int, sector_bytes: int) -> int:
    """Flash bytes of the two slots of a state (firmware/c/tt_persist.c tt_persist_region_bytes)."""
    return 2 * -(-(PERSIST_HEADER_BYTES + state_bytes) // sector_bytes) * sector_bytes


def _persist(b: Board, header: str, training: bool, save_every: int) -> dict | None:
    """The tt_board.h values of the persistent state, or None without --save-every."""
    if save_every <= 0:
        return None
    if not training:
        raise UsageError("--save-every needs a training build (compile with --plan or --update)")
    if b.flash is None:
        raise UsageError(f"{b.name} has no flash driver for the persistent state")
    region = persist_region_bytes(int(_STATE_BYTES.search(header).group(1)), b.flash.sector_bytes)
    sectors = region // b.flash.sector_bytes
    if b.qemu is None and (region > b.flash_max // 2 or sectors > b.flash.last_sector):
        raise UsageError(f"the training state needs {format_size(region)} of {b.name}'s flash for its two slots; "
                         "that leaves too little for the program")
    return {"save_every": save_every, "region_bytes": region, "sector_bytes": b.flash.sector_bytes,
            "program_bytes": b.flash.program_bytes, "origin": b.flash_origin + b.flash_max - region,
            "first_sector": b.flash.last_sector - sectors + 1}


def render_firmware(compile_dir: str | Path, board: str | Board, *, baud: int = DEFAULT_BAUD,
                    stack_bytes: int | None = None, heap_bytes: int | None = None,
                    save_every: int = 0, field: bool = False) -> dict[str, bytes]:
    """Relative path -> bytes of the firmware project (deterministic: same inputs, same bytes). ``save_every`` > 0:
    the training state is saved to the board's flash every that many samples and loaded at boot
    (firmware/c/tt_persist.h). ``stack_bytes``: the reserve of the board's core (tinytrain/cores.py) unless given.
    ``field``: the field runtime's serial firmware given raw samples (firmware/field.py; its measured stack)."""
    b = board if isinstance(board, Board) else get_board(board)
    report, sources = read_compile_dir(Path(compile_dir))
    harness, field_flash = None, None
    if field:
        if save_every:
            raise UsageError("--field: the field runtime keeps its own state; --save-every is for the plain step")
        report, field_sources, field_flash = field_parts(Path(compile_dir), b, report, sources, _sources)
        harness, sources = field_sources.pop(FIELD_HARNESS), field_sources
        stack_bytes = RAW_STACK if stack_bytes is None else stack_bytes
    stack_bytes = stack_reserve(b.core) if stack_bytes is None else stack_bytes
    sram, flash_budget = report["sram_budget_bytes"], report["flash_budget_bytes"]
    if sram > b.ram_max:
        raise UsageError(f"the compile's SRAM budget {format_size(sram)} is more than {b.name} has "
                         f"({format_size(b.ram_max)}); compile again with --sram {b.ram_max // 1024}k or less")
    flash = min(flash_budget, b.flash_max)
    flash_note = "" if flash == flash_budget else (
        f"; the budget was {flash_budget}, more than the {b.flash_max} bytes {b.name} gives the application")
    training = has_training_api(sources[MODEL_HEADER].decode("utf-8"))
    persist = field_flash or _persist(b, sources[MODEL_HEADER].decode("utf-8"), training, save_every)
    if persist and b.qemu is None and flash > persist["origin"] - b.flash_origin:
        flash = persist["origin"] - b.flash_origin
        flash_note += f"; the last {persist['region_bytes']} bytes hold the persistent training state"
    check_flash(report, b, flash)
    heap = check_links(report, b, stack_bytes, heap_bytes).heap
    env = _environment()
    ctx = {"version": __version__, "board": b, "sram_bytes": sram, "flash_bytes": flash, "flash_note": flash_note,
           "arena_bytes": report["arena_bytes"], "stack_bytes": stack_bytes, "heap_bytes": heap,
           "training": training, "baud": baud, "model": report.get("model", "?"),
           "model_sha256": report.get("model_sha256", "?"), "persist": persist}
    files: dict[str, bytes] = {f"src/{name}": data for name, data in sources.items()}
    c = firmware_sources()
    own = b.tools.startup + COMMON_SOURCES + (QEMU_SOURCES if b.qemu else SERIAL_SOURCES + (b.uart_driver,))
    if persist:  # the field runtime's flash: its own stores (tt_field_flash.c) on the board's driver
        own += (FIELD_FLASH_SOURCES if field_flash else PERSIST_SOURCES) + (b.flash.driver,)
    for name in own:
        files[f"src/{name}"] = c.joinpath(name).read_bytes()
    if harness is not None:
        files[f"src/{FIELD_HARNESS}"] = harness
    files["src/tt_board.h"] = env.get_template("tt_board.h.j2").render(**ctx).encode()
    files["tinytrain.ld"] = env.get_template(b.tools.linker_script).render(**ctx).encode()
    files["Makefile"] = env.get_template("Makefile.j2").render(**ctx).encode()
    if b.pio:
        files["platformio.ini"] = env.get_template("platformio.ini.j2").render(**ctx).encode()
        files["tinytrain_flags.py"] = env.get_template("tinytrain_flags.py.j2").render(**ctx).encode()
    files["report.json"] = (Path(compile_dir) / "report.json").read_bytes()
    return files


def write_firmware(compile_dir: str | Path, board: str | Board, out_dir: str | Path, *, force: bool = False,
                   **options) -> list[Path]:
    """Write the firmware project of ``compile_dir`` for ``board`` into ``out_dir`` (``tinytrain firmware -o``: an
    earlier project is replaced, the files tinytrain did not write there are kept); return the files written."""

    target = OutputDir(out_dir, "firmware", force=force, inputs=(compile_dir,))
    files = render_firmware(compile_dir, board, **options)
    write_project(files, target)
    return [Path(out_dir) / rel for rel in files]


def write_project(files: dict[str, bytes], target) -> None:
    """Write ``files`` (relative path -> bytes) through ``target``, an ``outputs.OutputDir``: all or nothing."""
    with target as stage:
        for rel, data in files.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(data)
