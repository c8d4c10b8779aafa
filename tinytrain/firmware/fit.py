"""Does a compiled step link on a board: the RAM and flash its firmware needs, against what the linker script gives.

The linker script's RAM region is the compile's SRAM budget (firmware/templates/tinytrain.ld.j2) and holds the stack,
``.data``, ``.bss`` (the arena, the trainable copies, the runtime's and the harness's statics) and a minimum heap.
The memory report counts the step (arena, trainable copies, optimizer state, runtime statics) and a stack; the
firmware adds its board's stack reserve, the heap the harness's C library needs (newlib's stdio on the semihosting
boards) and the harness's and C library's own statics. The harnesses read every sample row by row into the step's
line buffers (firmware/c/tt_harness_*.c): no image buffer. ``firmware`` refuses, in one line, a step whose firmware
would not link; ``link_error`` turns a linker overflow that still happens into one line with the numbers;
``compile --board`` refuses such a step before it writes anything (``check_board``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinytrain.errors import BudgetError, UsageError
from tinytrain.firmware.boards import BOARDS, Board
from tinytrain.cores import stack_reserve
from tinytrain.sizes import format_size

# Minimum heap in the RAM region (bytes): newlib's stdio (FILE structures of the sample files) on QEMU; the serial
# harness allocates nothing. Keyed by "is a QEMU board".
HEAP_BYTES = {True: 2048, False: 0}
# The statics of the harness and its C library beyond the report's runtime estimate, plus the linker's alignment of
# the sections: measured on every board with a step compiled at exactly the budget fit.py computes
# (benchmarks/firmware_links.py -> benchmarks/results/firmware_links.md; tests/firmware/test_firmware_links.py): the reserve
# below leaves 448-452 B unused on the Arm QEMU boards (newlib's open-file table, impure data, monitor handles),
# 692-696 B on RISC-V (picolibc), 268-364 B on the serial boards.
HARNESS_BYTES = {True: 512, False: 128}


@dataclass(frozen=True)
class RamNeed:
    """What a board's firmware keeps in its RAM region, in bytes."""

    board: str
    step: int       # the memory report's peak SRAM without its stack: arena, trainable copies, optimizer, runtime
    stack: int      # the board's stack reserve (or firmware --stack)
    heap: int       # the minimum heap of the linker script
    harness: int    # the harness's and C library's statics, section alignment
    region: int     # the RAM region: the compile's SRAM budget
    board_ram: int  # what the board has

    @property
    def total(self) -> int:
        return self.step + self.stack + self.heap + self.harness

    @property
    def links(self) -> bool:
        return self.total <= self.region


def ram_need(report: dict, board: Board, stack_bytes: int | None = None, heap_bytes: int | None = None) -> RamNeed:
    """The RAM the firmware of ``report`` (report.json of a compile) needs on ``board``."""
    qemu = board.qemu is not None
    return RamNeed(board.name, int(report["peak_sram_bytes"]) - int(report.get("stack_bytes", 0)),
                   stack_reserve(board.core) if stack_bytes is None else stack_bytes,
                   HEAP_BYTES[qemu] if heap_bytes is None else heap_bytes, HARNESS_BYTES[qemu],
                   int(report["sram_budget_bytes"]), board.ram_max)


def _fix(need: RamNeed, training: bool) -> str:
    smaller = "a smaller --update or --plan" if training else "a smaller model or input size"
    if need.total <= need.board_ram:
        return f"use {smaller}, or --sram {-(-need.total // 1024)}k or more ({need.board} has " \
               f"{format_size(need.board_ram)})"
    return f"use {smaller}, or a board with more than {format_size(need.total)} of SRAM"


def check_links(report: dict, board: Board, stack_bytes: int | None = None, heap_bytes: int | None = None) -> RamNeed:
    """The RAM need of the firmware, or a one-line BudgetError when it would not link: the numbers and the fix."""
    need = ram_need(report, board, stack_bytes, heap_bytes)
    if not need.links:
        training = bool(report.get("trainable"))
        raise BudgetError(
            f"does not link on {board.name}: its firmware needs {format_size(need.total)} of RAM (the step "
            f"{format_size(need.step)} + stack {format_size(need.stack)} + the harness's heap and statics "
            f"{format_size(need.heap + need.harness)}), {format_size(need.total - need.region)} more than the "
            f"{format_size(need.region)} SRAM budget; {_fix(need, training)}")
    return need


def check_flash(report: dict, board: Board, available: int) -> None:
    """A one-line BudgetError when the step's flash (weights and tables + the code estimate) is more than the
    ``available`` flash of ``board``."""
    need = int(report["flash_bytes"])
    if need > available:
        raise BudgetError(
            f"does not link on {board.name}: weights and code need about {format_size(need)} of flash, "
            f"{format_size(need - available)} more than the {format_size(available)} it gives the application; "
            "use a smaller model or a board with more flash")


def check_board(report: dict, board: Board) -> RamNeed:
    """What ``firmware --board`` would refuse, checked on a compile's report before anything is written (``compile
    --board``): the core, the SRAM budget against the board's SRAM, the flash and the RAM the firmware needs; each a
    one-line error with the numbers and the fix. The RAM need otherwise."""
    if report.get("target") != board.core:
        raise UsageError(f"{board.name} is a {board.core} board, the step is compiled for "
                         f"{report.get('target') or 'a host'}; compile with --target {board.core} or without --target")
    sram = int(report["sram_budget_bytes"])
    if sram > board.ram_max:
        raise BudgetError(f"does not link on {board.name}: the SRAM budget {format_size(sram)} is more than it has "
                          f"({format_size(board.ram_max)}); compile again with --sram {board.ram_max // 1024}k or less")
    check_flash(report, board, min(int(report["flash_budget_bytes"]), board.flash_max))
    return check_links(report, board)


def boards_of(target: str) -> list[Board]:
    """The boards ``firmware`` knows whose core is ``target``."""
    return [b for b in BOARDS.values() if b.core == target]


def board_links(report: dict) -> list[RamNeed]:
    """The RAM need of the firmware on each board of the report's target whose SRAM holds its budget (report.json's
    ``firmware``; none for a host target)."""
    return [ram_need(report, b) for b in boards_of(report.get("target", ""))
            if b.ram_max >= report["sram_budget_bytes"]]


def links_json(report: dict) -> list[dict]:
    return [{"board": n.board, "ram_bytes": n.total, "links": n.links} for n in board_links(report)]


def links_text(report: dict) -> str | None:
    """The report's line: on which boards of its target the firmware links at its SRAM budget, with the RAM it needs
    there (the step, the board's stack, the harness's heap and statics); None without such a board."""
    needs = board_links(report)
    if not needs:
        return None
    ok = [f"{n.board} ({format_size(n.total)})" for n in needs if n.links]
    bad = [f"{n.board} (needs {format_size(n.total)})" for n in needs if not n.links]
    parts = ([f"links on {', '.join(ok)}"] if ok else []) + ([f"does NOT link on {', '.join(bad)}"] if bad else [])
    return f"  firmware     RAM with stack and harness: {'; '.join(parts)}"


_OVERFLOW = re.compile(r"region [`']?(\w+)'? overflowed by (\d+) bytes?")
_ASSERT = re.compile(r"tinytrain: ([^\n]+)")


def link_error(output: str, board: Board, region: dict[str, int]) -> str:
    """One line for a failed link of ``board``'s firmware from the linker's ``output`` (no path, no dump):
    the region that overflowed and by how much (``region``: the RAM / FLASH lengths of the linker script)."""
    overflow = _OVERFLOW.search(output)
    if overflow:
        name, by = overflow.group(1), int(overflow.group(2))
        length = region.get(name)
        of = f" of {format_size(length)} (needs {format_size(length + by)})" if length else ""
        fix = ("a smaller --update or --plan, or a larger --sram" if name == "RAM"
               else "a smaller model, or a board with more flash")
        return f"the firmware for {board.name} does not link: {name} overflowed by {by} bytes{of}; use {fix}"
    asserted = _ASSERT.search(output)
    if asserted:
        return f"the firmware for {board.name} does not link: {asserted.group(1).strip()}"
    errors = [line.split("error:", 1)[1].strip() for line in output.splitlines() if "error:" in line]
    first = errors[0] if errors else (output.strip().splitlines() or ["no output"])[-1]
    return f"the firmware for {board.name} does not build: {first[:300]}"
