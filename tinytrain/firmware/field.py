"""``tinytrain firmware DIR --board B --field``: the field runtime's serial firmware from a ``compile --replay N``
output folder (its ``field/``: the cut model's step, tt_field.c, the frozen prefix tt_prefix.c, tt_field_input.c).

The board's main is the field runtime's serial harness (codegen/templates/field_serial.c.j2) given raw samples: each
frame carries the model's int8 input, the board's prefix computes the latent (``tinytrain stream --field``). Its RAM
is counted from the memory reports before anything is written (fits => links): the compile's step without its stack
(an upper bound of the cut model's step, which skips the prefix's forward), the runtime's statics (field.json
``sram``), the harness's copy of the saved runtime (``save``, the S reply), the prefix's arena and latent, and the
field stack (field_runtime/qemu.py RAW_STACK, measured: benchmarks/results/stack_field.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tinytrain.codegen.context import environment
from tinytrain.cores import STACK_MARGIN_BYTES
from tinytrain.errors import UsageError
from tinytrain.firmware.boards import Board
from tinytrain.firmware.protocol import PROTOCOL_VERSION, info_text
from tinytrain.version import __version__

FIELD_DIR = "field"
# The stack of a firmware given raw samples: the largest painted high-water mark of tt_learn_input / tt_observe_input
# (the prefix's forward, learning, replay, imprints, guard, the buffer in flash), 11,684 B for MobileNetV1-0.25 96x96
# on qemu-m4 and qemu-m7 (benchmarks/stack.py --field -> benchmarks/results/stack_field.md), + the step's margin,
# rounded up to 64 B: 12,224 B.
RAW_STACK_MEASURED_BYTES = 11684
RAW_STACK = -(-(RAW_STACK_MEASURED_BYTES + STACK_MARGIN_BYTES) // 64) * 64
HARNESS = "tt_harness_serial.c"
FIELD_CODE_BYTES = 32 * 1024  # flash of tt_field.c, tt_field_flash.c and the harness, beyond the compile's estimate
_INPUT_BYTES = re.compile(rb"#define TT_FIELD_INPUT_BYTES (\d+)")


def field_region(board: Board, info: dict) -> dict | None:
    """With ``compile --replay-storage flash``: the board's flash region (its last sectors) for the buffer's log
    (the slots plus two sectors of records, tt_field_flash.c) and the last good state's ring (two frames), as
    tt_board.h's persistent-region values (``log_bytes``: the log's part); None with sram."""
    if info.get("options", {}).get("storage") != "flash":
        return None
    if board.flash is None:
        raise UsageError(f"--replay-storage flash: {board.name} has no flash driver here (docs/guide/boards.md); "
                         "compile with --replay-storage sram for it, or build for a board with one (nano33ble)")
    sector, program = board.flash.sector_bytes, board.flash.program_bytes
    width, slots, state = info["latent_bytes"], info["config"]["replay"], info["memory"]["states"] // 2
    per = sector // (-(-(16 + width) // program) * program)
    log = (-(-slots // per) + 2) * sector if slots else 0
    region = log + 2 * -(-(32 + state) // sector) * sector
    sectors = region // sector
    if region > board.flash_max // 2 or sectors > board.flash.last_sector:
        raise UsageError(f"the buffer's log and the state's ring need {region} B of {board.name}'s flash "
                         f"({sectors} sectors of {sector} B: the slots plus two sectors of records, two state "
                         "frames); that leaves too little for the program: compile with --replay-storage sram")
    return {"save_every": 0, "region_bytes": region, "log_bytes": log, "sector_bytes": sector,
            "program_bytes": program, "origin": board.flash_origin + board.flash_max - region,
            "first_sector": board.flash.last_sector - sectors + 1}


def field_parts(compile_dir: Path, board: Board, report: dict, sources: dict[str, bytes],
                read_sources) -> tuple[dict, dict[str, bytes], dict | None]:
    """(the report the firmware's RAM and flash are checked against, the C sources, the flash region of
    ``field_region`` or None) of the field firmware."""
    if board.qemu is not None:
        raise UsageError(f"--field builds the serial firmware of the field runtime; {board.name} runs the semihosting "
                         "harness: use a serial board (netduinoplus2 or mps2-an385 run it on QEMU), or run the stream "
                         f"on {board.name} with `tinytrain field MODEL --stream S.npz --engine qemu --board {board.name}`")
    folder = compile_dir / FIELD_DIR
    if not (folder / "field.json").is_file():
        raise UsageError(f"--field: {compile_dir} has no field runtime (no {FIELD_DIR}/field.json); compile with "
                         "--update last-k:1 --replay N")
    info = json.loads((folder / "field.json").read_text())
    field_sources = read_sources(folder)
    found = _INPUT_BYTES.search(field_sources.get("tt_field_input.h", b""))
    if found is None:
        raise UsageError(f"{folder} has no tt_field_input.h (the frozen prefix); run `tinytrain compile --replay` again")
    m = info["memory"]
    need = dict(report)
    need["peak_sram_bytes"] = report["peak_sram_bytes"] + m["sram"] + m["save"] + m["prefix_arena"]
    need["flash_bytes"] = report["flash_bytes"] + m["prefix_weights"] + FIELD_CODE_BYTES
    region = field_region(board, info)
    harness = environment().get_template("field_serial.c.j2").render(
        version=__version__, protocol=PROTOCOL_VERSION, width=info["latent_bytes"], classes=info["classes"],
        save_bytes=m["save"], raw=True, input_bytes=int(found.group(1)), flash=region,
        options=info_text(info.get("options", {}))).encode()
    return need, {**field_sources, HARNESS: harness}, region
