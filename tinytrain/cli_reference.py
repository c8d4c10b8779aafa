"""docs/guide/cli.md from the argument parser and the board and core tables, so that the page cannot disagree with
the program: the synopsis, every command's options (names, choices, defaults, help), the boards ``firmware`` knows
and the cores ``compile --target`` takes are generated; the prose between them is the page's own and is kept.

    python -m tinytrain.cli_reference            # rewrites docs/guide/cli.md
    python -m tinytrain.cli_reference --check    # exit 1 if the page differs (tests/test_docs.py checks it too)

A page is: the head (its prose, with the generated blocks between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``), then one ``## tinytrain COMMAND`` section per command in the parser's order: its help,
its option table, then the section's own prose (kept from the page; a new command starts with none).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tinytrain.cli import build_parser
from tinytrain.cores import CORE_TARGETS
from tinytrain.firmware.boards import BOARDS, Board

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "cli.md"
GENERATED = re.compile(r"(<!-- generated: (\w+) -->\n).*?(<!-- end generated -->)", re.S)
SECTION = re.compile(r"^## tinytrain (\w+)\n", re.M)
CONFLICT = re.compile(r"^(<{7}|={7}|>{7})(?: |$)", re.M)


def commands(parser: argparse.ArgumentParser | None = None) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Every command's parser and one-line help, in the order ``tinytrain --help`` lists them."""
    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    helps = {c.dest: c.help or "" for c in sub._choices_actions}  # noqa: SLF001
    return {name: (p, helps.get(name, "")) for name, p in sub.choices.items()}


def _linked(text: str) -> str:
    """A help string's file references as the guide's links; ``|`` escaped for a table cell."""
    text = re.sub(r"docs/guide/([\w-]+\.md)", r"[\1](\1)", text)
    text = re.sub(r"docs/design\.md", "[design](../design.md)", text)
    return text.replace("|", "\\|")


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions  # noqa: SLF001
            if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]  # noqa: SLF001


def _name(a: argparse.Action) -> str:
    if not a.option_strings:
        return a.metavar or a.dest.upper()
    if a.nargs == 0:
        return ", ".join(a.option_strings)
    if a.metavar is not None:
        value = a.metavar
    elif a.choices is not None:
        value = "{" + ",".join(map(str, a.choices)) + "}"
    else:
        value = a.dest.upper()
    return ", ".join(a.option_strings) + " " + value


def _default(a: argparse.Action) -> str:
    if a.nargs == 0 or a.default is None or a.default is argparse.SUPPRESS:
        return ""
    return str(a.default)


def _what(a: argparse.Action) -> str:
    parts = [a.help or ""]
    if a.choices is not None and (a.metavar is not None or not a.help):  # choices a metavar hides, or no help
        parts.append("one of " + ", ".join(map(str, a.choices)))
    if a.required and a.option_strings:
        parts.append("required")
    return _linked("; ".join(p for p in parts if p))


def option_table(parser: argparse.ArgumentParser) -> str:
    rows = [f"| `{_name(a).replace('|', chr(92) + '|')}` | {_default(a)} | {_what(a)} |" for a in _visible(parser)]
    return "| option | default | what |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def synopsis(parsers: dict[str, tuple[argparse.ArgumentParser, str]]) -> str:
    """One line per command: its positionals and required options, then its help."""
    lines = []
    for name, (parser, help_) in parsers.items():
        words = [_name(a) for a in _visible(parser) if not a.option_strings]
        words += [f"{a.option_strings[0]} {a.metavar or a.dest.upper()}" for a in _visible(parser)
                  if a.option_strings and a.required]
        lines.append((f"tinytrain {name} " + " ".join(words) + " [options]", help_))
    width = max(len(s) for s, _ in lines) + 2
    return "```text\n" + "".join(f"{s.ljust(width)}# {h}\n" for s, h in lines) + "```\n"


def _runs(board: Board) -> str:
    if board.qemu:
        return f"QEMU board (`-M {board.qemu.machine}`): semihosting harness"
    if board.emulator:
        return f"serial harness; QEMU emulates it (`-M {board.emulator}`): `stream --port qemu:PROJECT`"
    return f"serial harness; a real board, PlatformIO `{board.pio.board}`" if board.pio else "serial harness"


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MB" if n % (1024 * 1024) == 0 else f"{n // 1024} KB"


def boards_table() -> str:
    rows = [f"| `{b.name}` | {b.core} | {_runs(b)} | {_size(b.ram_max)} | {_size(b.flash_max)} |"
            for b in BOARDS.values()]
    return ("| board | core | runs | SRAM | flash |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"{len(BOARDS)} boards, {sum(1 for b in BOARDS.values() if b.qemu)} of them QEMU boards; "
            f"`compile --target` takes {len(CORE_TARGETS)} cores: " + ", ".join(f"`{t}`" for t in CORE_TARGETS)
            + ".\n")


def _blocks(parsers: dict[str, tuple[argparse.ArgumentParser, str]]) -> dict[str, str]:
    return {"synopsis": synopsis(parsers), "boards": boards_table()}


def page(current: str, parser: argparse.ArgumentParser | None = None) -> str:
    """The page for this parser, keeping ``current``'s prose (its head and each command section's tail)."""
    parsers = commands(parser)
    blocks = _blocks(parsers)
    found = list(SECTION.finditer(current))
    head = current[:found[0].start()] if found else current
    head = GENERATED.sub(lambda m: m.group(1) + blocks.get(m.group(2), "") + m.group(3), head)
    tails = {}
    for k, m in enumerate(found):
        body = current[m.end():found[k + 1].start() if k + 1 < len(found) else len(current)]
        table = re.search(r"^\|---.*?\n(?!\|)", body, re.M | re.S)
        tails[m.group(1)] = body[table.end():].strip("\n") if table else ""
    sections = []
    for name, (sub, help_) in parsers.items():
        tail = tails.get(name, "")
        sections.append(f"## tinytrain {name}\n\n{help_}\n\n{option_table(sub)}" + (f"\n{tail}\n" if tail else ""))
    return head.rstrip("\n") + "\n\n" + "\n".join(sections)


def regenerate(page_path: Path, text: str, argv: list[str], command: str) -> int:
    """A generated page's command line: write ``text`` to ``page_path``, or with --check say (exit 1) when the page
    differs from it, naming ``command`` to run. The docs' generators (this module, scripts/api_doc.py,
    scripts/ops_doc.py) share it. A page with git conflict markers is refused either way: its kept prose would
    carry them."""
    current = page_path.read_text() if page_path.exists() else ""
    if marker := CONFLICT.search(current):
        line = current.count("\n", 0, marker.start()) + 1
        print(f"{page_path}:{line}: git conflict marker {marker.group(1)!r}: resolve the merge, then run {command}",
              file=sys.stderr)
        return 1
    if "--check" in argv:
        if current != text:
            print(f"{page_path} is stale: run {command}", file=sys.stderr)
            return 1
        return 0
    page_path.write_text(text)
    return 0


def main(argv: list[str]) -> int:
    return regenerate(PAGE, page(PAGE.read_text()), argv, "python -m tinytrain.cli_reference")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
