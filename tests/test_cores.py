"""The core table (tinytrain/cores.py): a core is named there and in its boards, nowhere else in the package, so a new
core is one row plus its firmware (issue 42 item 5)."""

import re
from pathlib import Path

import tinytrain
from tinytrain.codegen.context import arm_dsp, fpv5, has_fpu
from tinytrain.cores import CORE_TARGETS, CORES, stack_reserve
from tinytrain.firmware.boards import BOARDS

PACKAGE = Path(tinytrain.__file__).parent
# A core's name as code spells it: cortex-m4, cortex-m0plus, riscv32 (not qemu-system-riscv32, a QEMU binary, nor
# a board's name such as qemu-m0plus: those are the firmware's).
CORE_NAME = re.compile(r"cortex-m\d+\w*|(?<![\w-])(?:m0plus|riscv32)\b")
WHERE_CORES_LIVE = {"cores.py", "firmware/boards.py"}


def places_naming_a_core() -> dict[str, list[str]]:
    """Every file of the package (source, templates, C) that names a core -> the names, in order."""
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix not in {".py", ".j2", ".c", ".h", ".md"}:
            continue
        names = CORE_NAME.findall(path.read_text(encoding="utf-8", errors="replace"))
        if names:
            found[path.relative_to(PACKAGE).as_posix()] = names
    return found


def test_a_core_is_named_only_in_the_core_table_and_the_boards():
    places = places_naming_a_core()
    assert set(places) == WHERE_CORES_LIVE, {p: n for p, n in places.items() if p not in WHERE_CORES_LIVE}
    assert set(places["cores.py"]) >= set(CORE_TARGETS)


def test_every_core_has_a_board_and_every_board_flag_starts_with_its_cores():
    assert {b.core for b in BOARDS.values()} == set(CORES)
    for board in BOARDS.values():
        core = CORES[board.core]
        assert board.cpu_flags[: len(core.cpu_flags)] == core.cpu_flags, board.name


def test_codegen_and_the_report_read_the_table():
    for core in CORES.values():
        assert (arm_dsp(core.name), has_fpu(core.name), fpv5(core.name)) == (core.dsp, core.fpu, core.fpv5)
        assert stack_reserve(core.name) == core.stack_bytes
    assert not arm_dsp("") and not has_fpu("") and not fpv5("")
