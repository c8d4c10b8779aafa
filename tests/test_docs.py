"""The README and the user guide (docs/, mkdocs.yml): the README is short, the guide builds with `mkdocs build
--strict`, and the code blocks do what they say.

Fenced-block convention (docs/index.md "Conventions of this guide"): ``python`` blocks run, a page's blocks in
order in one namespace, from the checkout; ``sh`` blocks run with bash in a scratch folder holding a link to the
checkout's ``models/`` and ``tinytrain`` on the PATH; ``json`` blocks on the plan-file page are parsed as plans; the
integration page's ``c`` block is compiled with arm-none-eabi-gcc against a generated project; ``text`` blocks are
synopses and output. A runnable block that follows ``<!-- not run: REASON -->`` is not run, and says why."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from onnx_models import write_tiny_task
from tinytrain.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
ZOO_MODEL = ROOT / "models" / "mbv1-0.25-vww.onnx"
LANGS = {"python", "sh", "json", "c", "text"}
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")
ARM_GCC = shutil.which("arm-none-eabi-gcc")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    not_run: str | None  # the stated reason, or None: the block is checked


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, each with the not-run reason of the comment right before it."""
    lines = page.read_text().splitlines()
    found, k = [], 0
    while k < len(lines):
        if lines[k].startswith("```"):
            end = next(j for j in range(k + 1, len(lines)) if lines[j].startswith("```"))
            before = NOT_RUN.fullmatch(lines[k - 1].strip()) if k else None
            found.append(Block(page, k + 1, lines[k][3:].strip(), "\n".join(lines[k + 1:end]) + "\n",
                               before.group(1) if before else None))
            k = end
        k += 1
    return found


def checked(lang: str, pages=(README, *PAGES)) -> list[Block]:
    return [b for p in pages for b in blocks(p) if b.lang == lang and b.not_run is None]


def _id(b: Block) -> str:
    return f"{b.page.relative_to(ROOT)}:{b.line}"


# ---- the README ----------------------------------------------------------------------------------------------

def test_readme_is_short_with_the_two_commands_and_a_quick_start():
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024
    assert "make demo" in text and "make test" in text
    assert [b.text.split()[:2] for b in _quick_start(README)] == [["tinytrain", "compile"], ["tinytrain", "train"],
                                                                   ["tinytrain", "firmware"]]


def _slug(heading: str) -> str:
    from markdown.extensions.toc import slugify

    return slugify(heading.strip("# "), "-")


def test_readme_links_lead_to_pages_and_headings():
    links = re.findall(r"\]\(([^)#]+\.md)(?:#([^)]+))?\)", README.read_text())
    assert len(links) > 20
    for path, anchor in links:
        target = ROOT / path
        assert target.is_file(), path
        if anchor:
            headings = [_slug(h) for h in re.findall(r"^#+ .*$", target.read_text(), re.M)]
            assert anchor in headings, f"{path}#{anchor}"


# ---- the guide -----------------------------------------------------------------------------------------------

def test_every_block_is_checked_or_says_why():
    for page in (README, *PAGES):
        for b in blocks(page):
            assert b.lang in LANGS, f"{_id(b)}: a fenced block names one of {sorted(LANGS)}"
            if b.not_run is not None:
                assert b.lang in ("python", "sh", "c") and len(b.not_run) > 10, _id(b)
    assert len(checked("python")) >= 2 and len(checked("sh")) >= 3 and len(checked("json")) >= 3


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[dev]')")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "guide" / "integration" / "index.html").is_file()
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(str(p.relative_to(DOCS)) in nav for p in PAGES)  # strict fails on a page left out, too


def _documented_options(section: str) -> set[str]:
    rows = re.findall(r"^\| `([^`]+)` \|", section, re.M)
    names = set()
    for row in rows:  # `MODEL`, `--sram SRAM`, `-o, --output OUTPUT`: the positional or the option strings
        first, *rest = row.replace(",", " ").split()
        names |= {first} | {name for name in rest if name.startswith("-")}
    return names


def _argparse_options(parser: argparse.ArgumentParser) -> set[str]:
    names = set()
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or a.help == argparse.SUPPRESS:
            continue
        names |= set(a.option_strings) if a.option_strings else {a.dest.upper()}
    return names


def test_cli_page_documents_every_command_and_option():
    page = (DOCS / "guide" / "cli.md").read_text()
    sections = dict(re.findall(r"^## tinytrain (\w+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sections) == set(sub.choices)
    for name, parser in sub.choices.items():
        assert _documented_options(sections[name]) == _argparse_options(parser), name


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory) -> Path:
    """A training project of the tiny test model, as `tinytrain compile` writes it."""
    d = tmp_path_factory.mktemp("docs")
    model = write_tiny_task(d) / "tiny.onnx"
    from tinytrain.cli import main

    assert main(["compile", str(model), "--sram", "64k", "--update", "last-k:2", "--new-head", "2",
                 "-o", str(d / "build")]) == 0
    return d / "build"


def test_memory_report_page_names_every_report_json_key(tiny_build):
    page = (DOCS / "guide" / "memory-report.md").read_text()
    table = page[page.index("## report.json"):page.index("## memory_timeline.png")]
    documented = {k for row in re.findall(r"^\| (.+?) \|", table, re.M) for k in re.findall(r"`(\w+)`", row)}
    report = json.loads((tiny_build / "report.json").read_text())
    assert set(report) == documented - {"key"}
    assert all(f"`{k}`" in table for k in report["nonfinite_guard"])


def test_integration_page_names_the_whole_generated_api(tiny_build):
    header = (tiny_build / "tinytrain_model.h").read_text()
    names = set(re.findall(r"\b(tt_\w+)\(", header)) | set(re.findall(r"#define (TT_\w+)", header))
    names -= {"TINYTRAIN_MODEL_H"}
    assert len(names) > 20
    page = (DOCS / "guide" / "integration.md").read_text()
    assert {n for n in names if n not in page} == set()


def test_json_blocks_are_plans():
    from tinytrain.training.sparse import FIELDS, SPEC_FIELDS
    from tinytrain.training.spec import parse_spec

    plans = [parse_spec(json.loads(b.text), _id(b)).plan for b in checked("json")]  # every JSON block is a plan
    assert len(plans) >= 4 and any(p.lr_schedule is not None for p in plans)
    page = (DOCS / "guide" / "plan-files.md").read_text()
    assert all(f"| `{f}` |" in page for f in FIELDS + SPEC_FIELDS)


# What the integration example leaves to the board: a camera, a label, a display, the flash region (failing here).
BOARD_STUBS = """#include <stdint.h>
#include "tt_flash.h"
static uint8_t frame_row[4096];
void camera_capture(void) {}
const uint8_t *camera_row(int row) { (void)row; return frame_row; }
int user_label(void) { return -1; }
void show_class(int cls, int8_t score) { (void)cls; (void)score; }
static int flash_erase(const tt_flash *f, uint32_t o) { (void)f; (void)o; return -1; }
static int flash_program(const tt_flash *f, uint32_t o, const uint8_t *d, uint32_t n)
{ (void)f; (void)o; (void)d; (void)n; return -1; }
static int flash_read(const tt_flash *f, uint32_t o, uint8_t *d, uint32_t n)
{ (void)f; (void)o; (void)d; (void)n; return -1; }
const tt_flash board_flash = {4096, 1024, 4, flash_erase, flash_program, flash_read, 0};
"""


@pytest.mark.slow
@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc is not installed (scripts/setup.sh)")
def test_integration_example_compiles_for_cortex_m(tiny_build, tmp_path):
    """The integration page's C, compiled for a Cortex-M4F and a Cortex-M7 against a generated project, then
    linked with the project's C, the output's persist/tt_persist.c and the board's functions stubbed: every tt_* call
    resolves."""
    (c_block,) = checked("c", [DOCS / "guide" / "integration.md"])
    (tmp_path / "example.c").write_text(c_block.text)
    (tmp_path / "board.c").write_text(BOARD_STUBS)
    flags = ["-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-mthumb", "-mfloat-abi=hard",
             "-I", str(tiny_build), "-I", str(tiny_build / "persist")]
    m4, m7 = ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"], ["-mcpu=cortex-m7", "-mfpu=fpv5-sp-d16"]
    sources = [tmp_path / "board.c", tiny_build / "tinytrain_model.c", tiny_build / "persist" / "tt_persist.c"]
    for args in ([*m4, "-c", str(tmp_path / "example.c"), "-o", str(tmp_path / "example.o")],
                 [*m7, str(tmp_path / "example.c"), *map(str, sources), "--specs=nosys.specs", "-Wl,--gc-sections",
                  "-o", str(tmp_path / "app.elf")]):
        r = subprocess.run([ARM_GCC, *flags, *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "example.o").stat().st_size > 0 and (tmp_path / "app.elf").stat().st_size > 0


# ---- running the blocks --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if checked("python", [p])], ids=lambda p: p.name)
def test_python_blocks_run(page, monkeypatch, capsys):
    if not ZOO_MODEL.exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for b in checked("python", [page]):
        exec(compile(b.text, _id(b), "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    if page.name == "api.md":
        assert out[0].startswith("peak SRAM ") and " -> " in out[1] and out[2].startswith("does not fit: ")
        assert out[3].startswith("[") and "'tinytrain_model.h'" in out[3]


def _quick_start(page: Path) -> list[Block]:
    """The checked sh blocks of the page's "Quick start" section."""
    lines = page.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("## Quick start"))
    end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
    return [b for b in checked("sh", [page]) if start < b.line <= end]


def test_getting_started_has_the_readme_quick_start():
    assert [b.text for b in _quick_start(DOCS / "guide" / "getting-started.md")] == \
        [b.text for b in _quick_start(README)]


def _shell(tmp_path: Path) -> dict:
    """A scratch folder like the checkout (models/ linked) with `tinytrain` on the PATH running this checkout."""
    (tmp_path / "models").symlink_to(ROOT / "models")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "tinytrain"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinytrain.cli "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc is not installed (scripts/setup.sh)")
def test_shell_blocks_run(tmp_path):
    """Every checked sh block of the README and the guide, each text once (the getting-started page repeats the
    README's quick start), in page order, in one scratch folder."""
    if not ZOO_MODEL.exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    env = _shell(tmp_path)
    seen, out = set(), ""
    for b in checked("sh"):
        if b.text in seen:
            continue
        seen.add(b.text)
        r = subprocess.run(["bash", "-e", "-c", b.text], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"{_id(b)}:\n{b.text}\n{r.stderr[-2000:]}"
        out += r.stdout
    assert (tmp_path / "fw" / "firmware.elf").is_file()
    # the printed output the guide shows is what the quick start prints
    report = (tmp_path / "build" / "report.txt").read_text()
    assert report in [b.text for b in blocks(DOCS / "guide" / "memory-report.md")]
    held_out = [line for line in out.splitlines() if line.startswith("held-out accuracy")]
    assert len(held_out) == 2 and all(line in (DOCS / "guide" / "getting-started.md").read_text() for line in held_out)
