"""No command loses a file (tinytrain/outputs): a sentinel placed in every shape of -o — the current folder, a
non-empty folder, a file, an earlier output, the model's own folder — survives every command that writes, each
refusal is one line and exit code 2, and nothing is left behind (no partial output, no temporary)."""

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from onnx_models import write_tiny_task
from tinytrain.cli import main
from tinytrain.outputs import MANIFEST, OutputDir, read_manifest
from tinytrain.search import run as search_run
from tinytrain.search.state import SearchResult
from tinytrain.training.sparse import preset
from tinytrain.errors import UsageError

SENTINEL = b"the user's own file\n"


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    """model/tiny.onnx, model/tiny.npz, model/x.npy (an int8 input batch) and build/ (a compile output)."""
    root = tmp_path_factory.mktemp("outputs")
    (root / "model").mkdir()
    model = write_tiny_task(root / "model")
    np.save(model / "x.npy", np.zeros((2, 16, 16, 3), np.int8))
    assert main(["compile", str(model / "tiny.onnx"), "--sram", "64k", "--update", "last-k:1", "--new-head", "2",
                 "-o", str(root / "build")]) == 0
    return root


def _fake_search(graph, x, y, opts, names):  # the plan search's result, without the minutes of search
    return SearchResult(preset("last-k:1", graph), {"chosen": "last-k:1", "finalists": [], "options": {}})


# command -> (argv of the command writing OUT, what OUT is); M the model, D the data, B a compile output
COMMANDS = {
    "compile": ("compile M --sram 64k --update last-k:1 --new-head 2 -o OUT", "folder"),
    "firmware": ("firmware B --board qemu-m7 -o OUT", "folder"),
    "convert": ("convert M -o OUT", "file"),
    "run": ("run M --input X --output OUT", "file"),
    "train -o": ("train M --data D --new-head 2 --steps 2 -o OUT", "file"),
    "train --state-out": ("train M --data D --new-head 2 --steps 2 --state-out OUT", "file"),
    "plan": ("plan M --data D --sram 64k --new-head 2 --json -o OUT", "file"),
    "fleet": ("fleet M --data D --new-head 2 --devices 2 --per-device 4 --rounds 1 --engine local "
              "--classes-per-device 0 --state-out OUT", "file"),
    "fleet --state-dir": ("fleet M --data D --new-head 2 --devices 2 --per-device 4 --rounds 1 --engine local "
                          "--classes-per-device 0 --state-dir OUT", "folder"),
}
FILE_NAMES = {"convert": "c.onnx", "run": "y.npy", "train -o": "t.onnx", "train --state-out": "s.npz",
              "plan": "p.json", "fleet": "g.tts"}


def _argv(command: str, task: Path, out: str) -> list[str]:
    words = {"M": str(task / "model" / "tiny.onnx"), "D": str(task / "model" / "tiny.npz"),
             "X": str(task / "model" / "x.npy"), "B": str(task / "build"), "OUT": out}
    return [words.get(w, w) for w in COMMANDS[command][0].split()]


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if ".tinytrain-" in p.name and p.name != MANIFEST]


@pytest.fixture
def user(tmp_path, monkeypatch, task):
    """A working folder holding the user's files: sentinel.txt, own/ (a folder with a file), and a copy of nothing
    else; the current folder."""
    (tmp_path / "sentinel.txt").write_bytes(SENTINEL)
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "notes.txt").write_bytes(SENTINEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(search_run, "search", _fake_search)
    return tmp_path


def _refused(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tinytrain: error: "), err
    return err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("shape", [".", "own", "sentinel.txt", "model"])
def test_every_shape_of_an_existing_output_that_is_not_ours_is_refused(command, shape, user, task, capsys):
    out = str(task / "model") if shape == "model" else shape
    before = {**_snapshot(user), **{f"model/{k}": v for k, v in _snapshot(task / "model").items()}}
    _refused(_argv(command, task, out), capsys)
    after = {**_snapshot(user), **{f"model/{k}": v for k, v in _snapshot(task / "model").items()}}
    assert after == before and not _leftovers(user) and not _leftovers(task)


@pytest.mark.parametrize("command", [c for c, (_, kind) in COMMANDS.items() if kind == "file"])
def test_a_file_output_replaces_its_earlier_output_and_never_an_input(command, user, task, capsys):
    name = FILE_NAMES[command]
    assert main(_argv(command, task, name)) == 0
    first = (user / name).read_bytes()
    assert main(_argv(command, task, name)) == 0  # the earlier output is replaced
    assert (user / name).stat().st_size == len(first)
    model = task / "model"
    before = _snapshot(model)
    for input_file in ("tiny.onnx", "tiny.npz") + (("x.npy",) if command == "run" else ()):
        _refused(_argv(command, task, str(model / input_file)), capsys)
    assert _snapshot(model) == before and (user / "sentinel.txt").read_bytes() == SENTINEL
    assert not _leftovers(user) and not _leftovers(task)


@pytest.mark.parametrize("command", [c for c, (_, kind) in COMMANDS.items() if kind == "folder"])
def test_an_earlier_output_is_replaced_and_the_files_the_user_added_survive(command, user, task, capsys):
    assert main(_argv(command, task, "out")) == 0
    ours = set(_snapshot(user / "out"))
    (user / "out" / "main.c").write_bytes(SENTINEL)  # the user's own file in the output
    if command == "firmware":
        (user / "out" / "src" / "main.c").write_bytes(SENTINEL)
    assert main(_argv(command, task, "out")) == 0
    files = _snapshot(user / "out")
    assert (user / "out" / "main.c").read_bytes() == SENTINEL and ours <= set(files)
    if command == "firmware":
        assert (user / "out" / "src" / "main.c").read_bytes() == SENTINEL
    assert not _leftovers(user)


@pytest.mark.parametrize("command", ["compile", "firmware"])
def test_a_file_of_ours_the_user_changed_is_not_replaced(command, user, task, capsys):
    assert main(_argv(command, task, "out")) == 0
    report = user / "out" / "report.json"
    report.write_bytes(SENTINEL)
    before = _snapshot(user)
    err = _refused(_argv(command, task, "out"), capsys)
    assert "out/report.json was changed since tinytrain wrote it" in err and _snapshot(user) == before


@pytest.mark.parametrize("where", ["own", "."])
def test_force_writes_beside_the_users_files_and_never_over_one(where, user, task, capsys):
    argv = _argv("compile", task, where)
    before = _snapshot(user)
    assert main(argv + ["--force"]) == 0
    after = _snapshot(user)
    assert all(after[k] == v for k, v in before.items())
    prefix = "" if where == "." else "own/"
    assert f"{prefix}report.json" in after and f"{prefix}{MANIFEST}" in after
    assert main(argv) == 0  # now an earlier output: replaced in place, the user's files kept
    assert all(_snapshot(user)[k] == v for k, v in before.items())
    (user / "clash").mkdir()
    (user / "clash" / "report.json").write_bytes(SENTINEL)  # a user's file of one of our names: never replaced
    err = _refused(_argv("compile", task, "clash") + ["--force"], capsys)
    assert "clash/report.json exists and tinytrain did not write it" in err
    assert (user / "clash" / "report.json").read_bytes() == SENTINEL and os.listdir(user / "clash") == ["report.json"]
    assert not _leftovers(user)


def test_the_output_of_another_command_and_an_input_folder_are_refused(user, task, capsys):
    assert "-o " + str(task / "build") + " is an input of this command" in _refused(_argv("firmware", task, str(
        task / "build")), capsys)
    assert main(_argv("compile", task, "build2")) == 0
    assert "is the output of `tinytrain compile`, not of `tinytrain firmware`" in \
        _refused(_argv("firmware", task, "build2"), capsys)
    assert main(_argv("firmware", task, "fw")) == 0
    assert "is the output of `tinytrain firmware`, not of `tinytrain compile`" in \
        _refused(_argv("compile", task, "fw"), capsys)


def test_an_error_during_the_work_leaves_nothing_and_creates_no_parent(user, task, capsys):
    argv = _argv("compile", task, "a/b/c")
    argv[argv.index("64k")] = "1k"  # over budget: refused after the output was checked
    _refused(argv, capsys)
    assert not (user / "a").exists() and not _leftovers(user)


def test_a_failure_while_writing_leaves_an_earlier_output_as_it_was(user, task):
    assert main(_argv("compile", task, "out")) == 0
    before = _snapshot(user)
    with pytest.raises(RuntimeError):
        with OutputDir(user / "out", "compile") as stage:
            (stage / "report.json").write_text("half")
            raise RuntimeError("the work failed")
    assert _snapshot(user) == before and not _leftovers(user)


def test_the_manifest_lists_every_file_written_with_its_sha256(task):
    manifest = read_manifest(task / "build")
    assert manifest["command"] == "compile"
    files = _snapshot(task / "build")
    assert {k: v for k, v in files.items() if k != MANIFEST} == manifest["files"]


def test_firmware_reads_only_the_compiles_own_sources(user, task):
    build = user / "build"
    assert main(_argv("compile", task, str(build))) == 0
    (build / "extra.c").write_text("#error not a source of the firmware\n")
    assert main(["firmware", str(build), "--board", "qemu-m7", "-o", "fw"]) == 0
    assert not (user / "fw" / "src" / "extra.c").exists()


def test_a_missing_manifest_entry_or_a_bad_manifest_is_one_line(user, task, capsys):
    (user / "own" / MANIFEST).write_text("{not json")
    _refused(_argv("compile", task, "own"), capsys)
    (user / "own" / MANIFEST).write_text(json.dumps({"command": "compile", "files": {"../sentinel.txt": "0"}}))
    with pytest.raises(UsageError, match="outside the folder"):
        OutputDir(user / "own", "compile")
    assert (user / "sentinel.txt").read_bytes() == SENTINEL
