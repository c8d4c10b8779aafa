"""The README and the user guide (docs/, mkdocs.yml): the README is short, the guide builds with `mkdocs build
--strict`, and the code blocks do what they say.

Fenced-block convention (docs/index.md "Conventions of this guide"): ``python`` blocks run, a page's blocks in
order in one namespace, from the checkout; ``sh`` blocks run with bash in a scratch folder holding a link to the
checkout's ``models/`` and ``tinytrain`` on the PATH; ``json`` blocks on the plan-file page are parsed as plans; the
integration page's ``c`` block is compiled with arm-none-eabi-gcc against a generated project; ``text`` blocks are
synopses and output. A runnable block that follows ``<!-- not run: REASON -->`` is not run, and says why.

What the docs say is the program's: cli.md is tinytrain/cli_reference.py's output (the parser and the board table),
api.md's function table scripts/api_doc.py's (the signatures), a ``text`` block after ``<!-- output of: CMD -->`` is
what CMD prints (scripts/doc_outputs.py), each figure benchmarks/figures.json lists is its result file's, and the
zoo's descriptions are models/README.md's."""

import argparse
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from onnx_models import write_tiny_task
from tinytrain import cli_reference
from tinytrain.cli import build_parser
from tinytrain.cores import CORE_TARGETS
from tinytrain.firmware.boards import BOARDS

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


def test_cli_page_is_the_parsers_reference():
    """cli.md's synopsis, option tables and board list are python -m tinytrain.cli_reference's output for this
    parser and board table (its prose is the page's own): the page cannot disagree with the program."""
    page = (DOCS / "guide" / "cli.md").read_text()
    assert page == cli_reference.page(page), "docs/guide/cli.md is stale: run python -m tinytrain.cli_reference"
    sections = re.findall(r"^## tinytrain (\w+)$", page, re.M)
    assert sections == list(cli_reference.commands())
    for name in BOARDS:
        assert f"| `{name}` |" in page and name in page[page.index("## tinytrain firmware"):]
    assert all(f"`{t}`" in page for t in CORE_TARGETS)


def test_api_page_has_the_functions_signatures():
    """api.md's function table is scripts/api_doc.py's output: every public function with its signature as
    inspect reads it (a parameter added to the API appears; the page's descriptions stay)."""
    api_doc = runpy.run_path(str(ROOT / "scripts" / "api_doc.py"))
    page = (DOCS / "guide" / "api.md").read_text()
    assert page == api_doc["page"](page), "docs/guide/api.md is stale: run .venv/bin/python scripts/api_doc.py"
    assert set(api_doc["functions"]()) <= set(re.findall(r"^\| `(\w+)\(", page, re.M))


def test_cli_reference_tolerates_a_new_command_and_option():
    """A command or option added to the parser appears in the page with its help; the prose stays."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    s = sub.add_parser("frobnicate", help="a command added later")
    s.add_argument("--level", choices=("low", "high"), default="low", help="how much")
    sub.choices["compile"].add_argument("--brand-new", action="store_true", help="an option added later")
    page = (DOCS / "guide" / "cli.md").read_text()
    text = cli_reference.page(page, parser)
    assert "## tinytrain frobnicate\n\na command added later\n" in text
    assert "| `--level {low,high}` | low | how much |" in text
    assert "| `--brand-new` |  | an option added later |" in text
    assert "Writes the output folder all or nothing" in text  # compile's own prose is kept
    assert cli_reference.page(text, parser) == text


def test_cli_reference_check_refuses_conflict_markers(tmp_path, capsys):
    """A merge left in the page's prose fails --check (and a rewrite), naming the line; the page is untouched."""
    page = (DOCS / "guide" / "cli.md").read_text()
    head, rest = page.split("\n## tinytrain compile\n", 1)
    merged = head + "\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\n\n## tinytrain compile\n" + rest
    path = tmp_path / "cli.md"
    path.write_text(merged)
    for argv in (["--check"], []):
        assert cli_reference.regenerate(path, cli_reference.page(merged), argv, "CMD") == 1
        err = capsys.readouterr().err
        assert "git conflict marker '<<<<<<<'" in err and "resolve the merge" in err and err.count("\n") == 1
    assert path.read_text() == merged


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
@pytest.mark.cross
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


TASKS = {"fmnist10": "10-class Fashion-MNIST", "fmnist2-torso": "2-class Fashion-MNIST"}


def test_model_descriptions_match_the_zoo():
    """What the guide says each shipped model was trained on is models/README.md's task table (generated by
    models/build.py from its recipes); no page says a zoo model was trained on another data set."""
    zoo = (ROOT / "models" / "README.md").read_text()
    tasks = dict(re.findall(r"^\| ([\w.-]+) \| (fmnist[\w-]+) \|", zoo, re.M))
    assert len(tasks) == len(list((ROOT / "models").glob("*.onnx"))) >= 5
    page = (DOCS / "guide" / "getting-started.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.-]+)`.*\| (\d+-class Fashion-MNIST)", page, re.M))
    assert rows == {name: TASKS[task] for name, task in tasks.items()}
    for p in (README, *PAGES):
        text = " ".join(p.read_text().split())
        for name in tasks:
            assert not re.search(rf"{re.escape(name)}[^.]{{0,80}}trained on (VWW|Visual Wake Words)", text), p.name


FIGURES = json.loads((ROOT / "benchmarks" / "figures.json").read_text())


def _figure(entry: dict) -> str:
    """A quoted figure's text as its result file gives it: each value at its key path, times ``scale``, through
    ``expr`` (of the values v) if given, into ``format``."""
    data = json.loads((ROOT / "benchmarks" / "results" / entry["file"]).read_text())
    values = []
    for path in entry["values"]:
        node = data
        for key in path:
            node = node[key]
        values.append(node * entry.get("scale", 1))
    if "expr" in entry:
        values = eval(entry["expr"], {"min": min, "max": max}, {"v": values})  # noqa: S307 - our own table
    text = entry["format"].format(*values)
    return re.sub(r"-(?=\d)", "−", text) if "−" in entry["text"] else text  # the guide's minus sign


@pytest.mark.parametrize("entry", FIGURES, ids=lambda e: f"{e['page']}:{e['text'][:40]}")
def test_a_quoted_figure_is_its_result_files(entry):
    """Every figure benchmarks/figures.json lists is on its page, and is what its result file holds (rounded as
    quoted): a re-run that changes a result fails here until the page says the new figure."""
    page = " ".join((ROOT / entry["page"]).read_text().split())
    assert entry["text"] in page, f"{entry['page']} no longer quotes {entry['text']!r}"
    assert _figure(entry) == entry["text"], (f"{entry['file']} now gives {_figure(entry)!r}: say it on "
                                             f"{entry['page']} and in benchmarks/figures.json")


def test_every_result_file_names_its_command():
    """benchmarks/results: each .md names the command that produced it (a benchmark script that exists, or a
    tinytrain command) and each .json records it under "command" (or its "meta")."""
    results = ROOT / "benchmarks" / "results"
    for md in sorted(results.glob("*.md")):
        scripts = re.findall(r"benchmarks/(\w+)\.py", md.read_text())
        assert scripts, f"{md.name} names no command"
        assert all((ROOT / "benchmarks" / f"{s}.py").is_file() for s in scripts[:1]), md.name
    for js in sorted(results.glob("*.json")):
        data = json.loads(js.read_text())
        meta = data.get("meta", {}) if isinstance(data.get("meta"), dict) else {}
        assert {"command", "commands"} & (set(data) | set(meta)), f"{js.name} records no command"


def test_benchmarks_are_few_scripts_on_one_shared_module():
    """benchmarks/: at most 20 scripts (one per question), each taking its paths from benchmarks/common (no ROOT
    of its own)."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) <= 20, [s.name for s in scripts]
    for script in scripts:
        text = script.read_text()
        assert not re.search(r"^ROOT = ", text, re.M), f"{script.name} defines its own ROOT (use common.ROOT)"


def test_every_script_the_docs_name_exists():
    """A benchmark or script the README, the guide or models/ names is in the checkout (merged or retired ones are
    renamed everywhere)."""
    pages = (README, *PAGES, ROOT / "models" / "README.md", ROOT / "models" / "plans" / "README.md")
    for page in pages:
        for path in set(re.findall(r"\b((?:benchmarks|scripts)/[\w/]+\.py)\b", page.read_text())):
            assert (ROOT / path).is_file(), f"{page.relative_to(ROOT)} names {path}"


DOC_OUTPUTS = runpy.run_path(str(ROOT / "scripts" / "doc_outputs.py"))
MAIN_PAGES = (README, DOCS / "guide" / "getting-started.md", DOCS / "guide" / "memory-report.md")


def test_main_pages_show_only_checked_output():
    """Every text block of the README and the main guide pages is an output block (its command named, checked by
    the test below); every output block's command is shown on its page, and the quick start shows its outputs."""
    for page in MAIN_PAGES:
        marked = {o.line for o in DOC_OUTPUTS["outputs"](page)}
        assert all(b.line + 1 in marked for b in blocks(page) if b.lang == "text"), page.name
        flat = " ".join(page.read_text().split())
        assert all(o.command.startswith("cat ") or o.command in flat for o in DOC_OUTPUTS["outputs"](page))
    assert len(DOC_OUTPUTS["outputs"](README)) >= 1


@pytest.mark.slow
def test_output_blocks_are_what_the_program_prints(tmp_path):
    """Each block after <!-- output of: COMMAND --> is what COMMAND prints now, numbers included (times aside);
    `python scripts/doc_outputs.py` rewrites them."""
    if not ZOO_MODEL.exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    results = DOC_OUTPUTS["printed"](tmp_path)
    assert len(results) >= 4
    norm = DOC_OUTPUTS["normalise"]
    for o, now in results:
        assert norm(now) == norm(o.text), (f"{o.page.relative_to(ROOT)}:{o.line}: {o.command} prints\n{now}\n"
                                           "(if the change is meant: .venv/bin/python scripts/doc_outputs.py)")


def _quick_start(page: Path) -> list[Block]:
    """The checked sh blocks of the page's "Quick start" section."""
    lines = page.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("## Quick start"))
    end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
    return [b for b in checked("sh", [page]) if start < b.line <= end]


def test_getting_started_has_the_readme_quick_start():
    assert [b.text for b in _quick_start(DOCS / "guide" / "getting-started.md")] == \
        [b.text for b in _quick_start(README)]


@pytest.mark.slow
@pytest.mark.cross
def test_shell_blocks_run(tmp_path):
    """Every checked sh block of the README and the guide, each text once (the getting-started page repeats the
    README's quick start), in page order, in one scratch folder."""
    if not ZOO_MODEL.exists():
        pytest.skip(f"{ZOO_MODEL} is not built (python -m models.build)")
    env = DOC_OUTPUTS["scratch"](tmp_path)
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
