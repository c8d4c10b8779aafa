"""The guide's journeys end to end, as a user types them (issue 40, must show): their own model, their own images
in a folder, their own plan file; compile -> train -> eval -> firmware -> one QEMU run; the same from Python. Then the
mistakes a user makes in the first hour: each ends in one line on stderr and exit code 2 (0 for a closed pipe), no
traceback, nothing of theirs touched, nothing half-written."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinytrain
from onnx_models import write_tiny_task
from tinytrain.cli import main

ROOT = Path(__file__).resolve().parents[1]
ARM_GCC = shutil.which("arm-none-eabi-gcc")
QEMU = shutil.which("qemu-system-arm")
SENTINEL = b"the user's own file\n"
# the user's plan for the tiny model: the biases of the last 2 layers, half of conv6's output channels, the head
PLAN = {"version": 1, "bias_last_k": 2, "weights": [{"conv": 9, "ratio": 0.5}, {"conv": 10, "ratio": 1.0}],
        "lr": 0.02}


def _photos(folder: Path, n: int = 12) -> Path:
    """A folder of PNG images, one sub-folder per class, as a user's camera leaves them: dark and bright scenes."""
    from PIL import Image

    rng = np.random.default_rng(1)
    for label, (name, level) in enumerate((("dark", 60), ("bright", 190))):
        (folder / name).mkdir(parents=True)
        for k in range(n):
            pixels = np.clip(rng.normal(level, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / name / f"img{k:02d}.png")
    return folder


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> Path:
    """A user's working folder: their model (tiny.onnx, tiny.npz), a photos/ tree, a plan file."""
    home = tmp_path_factory.mktemp("journey")
    write_tiny_task(home)
    _photos(home / "photos")
    (home / "plan.json").write_text(json.dumps(PLAN))
    return home


def tt(*argv: str) -> int:
    return main([str(a) for a in argv])


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_compile_train_eval_with_own_images_and_own_plan(user, monkeypatch, capsys):
    """compile (the plan fits) -> train on the photos folder with the plan, a quarter held out -> eval of the trained
    state on the same held-out rows reports the accuracy train reported."""
    monkeypatch.chdir(user)
    assert tt("compile", "tiny.onnx", "--sram", "64k", "--new-head", "2", "--plan", "plan.json", "-o", "build") == 0
    out = capsys.readouterr().out
    assert "(fits)" in out and (user / "build" / "tinytrain_model.c").is_file()
    assert tt("train", "tiny.onnx", "--data", "photos", "--new-head", "2", "--plan", "plan.json", "--held-out",
              "0.25", "--epochs", "2", "--engine", "c", "--state-out", "state.npz", "--json") == 0
    trained = _json(capsys)
    assert trained["steps"] == 2 * 18 and trained["n_held_out"] == 6
    assert tt("eval", "tiny.onnx", "--data", "photos", "--new-head", "2", "--held-out", "0.25", "--state",
              "state.npz", "--json") == 0
    assert _json(capsys)["accuracy"] == trained["accuracy_after"]


def test_the_python_api_computes_what_the_cli_does(user, monkeypatch, capsys):
    """The API guide's journey on the user's .npz: compile, train, evaluate; the CLI's train gives the same loss."""
    monkeypatch.chdir(user)
    compiled = tinytrain.compile("tiny.onnx", sram="64k", plan="plan.json", new_head=2)
    assert compiled.report.fits and "tinytrain_model.h" in compiled.files
    result = tinytrain.train("tiny.onnx", "tiny.npz", plan="plan.json", new_head=2, steps=20, engine="sim")
    evaluated = tinytrain.evaluate("tiny.onnx", "tiny.npz", state=result.state, new_head=2, engine="sim")
    assert 0.0 <= evaluated.accuracy <= 1.0
    assert tt("train", "tiny.onnx", "--data", "tiny.npz", "--new-head", "2", "--plan", "plan.json", "--steps", "20",
              "--engine", "sim", "--json") == 0
    assert _json(capsys)["final_loss"] == result.final_loss


@pytest.mark.slow
@pytest.mark.skipif(ARM_GCC is None or QEMU is None, reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_firmware_and_one_qemu_run_meet_the_host(user, monkeypatch, capsys):
    """firmware of the compile output builds with make; train --engine qemu runs the same step on the emulated
    Cortex-M7 and ends on the host C's loss and state, to the bit."""
    monkeypatch.chdir(user)
    assert tt("compile", "tiny.onnx", "--sram", "64k", "--new-head", "2", "--plan", "plan.json", "-o", "fwbuild") == 0
    assert tt("firmware", "fwbuild", "--board", "qemu-m7", "-o", "fw") == 0
    capsys.readouterr()
    r = subprocess.run(["make", "-C", "fw"], capture_output=True, text=True)
    assert r.returncode == 0 and (user / "fw" / "firmware.elf").is_file(), r.stderr[-2000:]
    # by hand (docs/guide/firmware.md "Running a QEMU board by hand"): the sample files, make run, the board's outputs
    assert tt("samples", "tiny.onnx", "--data", "photos", "--new-head", "2", "--held-out", "0.25", "--steps", "6",
              "-o", "fw") == 0
    with open(user / "run.txt", "w") as log:
        assert subprocess.run(["make", "-C", "fw", "run"], stdout=log, stderr=subprocess.PIPE).returncode == 0
    capsys.readouterr()
    assert tt("samples", "tiny.onnx", "--new-head", "2", "--read", "fw", "--log", "run.txt", "--json") == 0
    board = _json(capsys)
    assert tt("eval", "tiny.onnx", "--data", "photos", "--new-head", "2", "--held-out", "0.25", "--state",
              "fw/tt_state.bin", "--plan", "plan.json", "--json") == 0
    assert _json(capsys)["accuracy"] == board["accuracy"]
    runs = {}
    for engine in ("c", "qemu"):
        assert tt("train", "tiny.onnx", "--data", "photos", "--new-head", "2", "--plan", "plan.json", "--steps", "6",
                  "--engine", engine, "--state-out", f"{engine}.npz", "--json") == 0
        runs[engine] = _json(capsys)
    assert runs["qemu"]["final_loss"] == runs["c"]["final_loss"]
    c, q = np.load(user / "c.npz"), np.load(user / "qemu.npz")
    assert sorted(c.files) == sorted(q.files) and all(np.array_equal(c[k], q[k]) for k in c.files)


def test_samples_and_stream_take_the_seed_of_the_step_the_board_runs(user, tmp_path, monkeypatch, capsys):
    """samples --plan (a plan file, or the compile output it was built into) orders the samples with the plan's
    seed, as `train --plan` does; --seed still wins; stream takes the same --plan / --seed."""
    from tinytrain.cli import build_parser

    monkeypatch.chdir(user)
    (tmp_path / "seeded.json").write_text(json.dumps({**PLAN, "seed": 3}))
    assert tt("compile", "tiny.onnx", "--sram", "64k", "--new-head", "2", "--plan", tmp_path / "seeded.json",
              "-o", tmp_path / "build") == 0
    runs = {}
    for name, extra in (("file", ["--plan", tmp_path / "seeded.json"]), ("build", ["--plan", tmp_path / "build"]),
                        ("seed 3", ["--seed", "3"]), ("seed 0", []),
                        ("file, seed 0", ["--plan", tmp_path / "seeded.json", "--seed", "0"])):
        (tmp_path / f"s-{name}").mkdir()
        assert tt("samples", "tiny.onnx", "--data", "tiny.npz", "--new-head", "2", "--steps", "9", *extra,
                  "-o", tmp_path / f"s-{name}") == 0
        runs[name] = (tmp_path / f"s-{name}" / "tt_train.bin").read_bytes()
    assert runs["file"] == runs["build"] == runs["seed 3"] != runs["seed 0"] == runs["file, seed 0"]
    args = build_parser().parse_args(["stream", "tiny.onnx", "--port", "x", "--data", "tiny.npz", "--plan",
                                      str(tmp_path / "build")])
    from tinytrain.cli_samples import step_seed

    assert step_seed(args) == 3
    capsys.readouterr()


def test_a_power_cut_run_that_ends_early_is_one_line(tmp_path):
    """The QEMU run cut after N flash saves (engines/qemu.py _run_until_saves): a firmware that ends first, or a
    missing emulator, is one line naming what happened, not a multi-line dump."""
    from tinytrain.engines.qemu import QemuError, _run_until_saves

    script = "echo 'tt: flash saved 1'; echo 'tt: error the flash is full'; exit 3"
    with pytest.raises(QemuError) as e:
        _run_until_saves(["sh", "-c", script], tmp_path, 2)
    assert "\n" not in str(e.value) and "after 1 of 2 flash saves" in str(e.value) and "flash is full" in str(e.value)
    with pytest.raises(QemuError, match="cannot run"):
        _run_until_saves([str(tmp_path / "no-such-qemu")], tmp_path, 1)


# ---- the mistakes a user makes -------------------------------------------------------------------------------

# name -> argv (M: the model, D: the .npz, P: the photos folder). Run in the user's folder holding a sentinel file.
MISTAKES = {
    "missing model": "compile nosuch.onnx --sram 64k -o out",
    "model is an image": "inspect photos/dark/img00.png",
    "model is a folder": "inspect photos",
    "missing data": "train M --data nosuch.npz --new-head 2 --steps 2",
    "data is a text file": "train M --data notes.txt --new-head 2 --steps 2",
    "data folder without classes": "train M --data photos/dark --new-head 2 --steps 2",
    "npz without x": "eval M --data bad.npz --new-head 2",
    "labels and images of other counts": "train M --data wrong_count.npz --new-head 2 --steps 2",
    "features of the wrong shape": "train M --data features.npz --new-head 2 --steps 2",
    "-o .": "compile M --sram 64k --update last-k:1 --new-head 2 -o .",
    "-o a non-empty folder": "compile M --sram 64k --update last-k:1 --new-head 2 -o mine",
    "-o a file": "compile M --sram 64k --update last-k:1 --new-head 2 -o notes.txt",
    "-o the model's folder": "compile model/tiny.onnx --sram 64k --update last-k:1 --new-head 2 -o model",
    "train -o onto the model": "train M --data D --new-head 2 --steps 2 -o tiny.onnx",
    "a typo in a command": "compil M -o out",
    "a typo in an option": "compile M --sram 64k --udpate last-k:1 -o out",
    "a typo in a choice": "compile M --sram 64k --update last-k:1 --target cortex-m8 -o out",
    "a bad preset": "compile M --sram 64k --update last-kk:1 -o out",
    "a bad size": "compile M --sram 64kk --update last-k:1 -o out",
    "a plan for another model": "compile M --sram 64k --plan big_plan.json -o out",
    "not a plan": "compile M --sram 64k --plan notes.txt -o out",
    "over budget": "compile M --sram 1k --update full --new-head 2 -o out",
    "firmware of a folder that is no compile output": "firmware photos --board qemu-m7 -o fw",
    "an unknown board": "firmware build --board qemu-m8 -o fw",
    "-o inside a file": "compile M --sram 64k --update last-k:1 --new-head 2 -o notes.txt/out",
    "a state that is no state": "eval M --data D --new-head 2 --state notes.txt",
    "both --plan and --update": "train M --data D --new-head 2 --plan plan.json --update last-k:1 --steps 2",
    "both --epochs and --steps": "train M --data D --new-head 2 --epochs 1 --steps 3",
    "--sram on a host engine": "train M --data D --new-head 2 --steps 2 --engine sim --sram 32k",
    "a held-out fraction of 1": "train M --data D --new-head 2 --held-out 1.0",
    "a new head of 0 classes": "compile M --sram 64k --new-head 0 --update last-k:1 -o out",
    "labels beyond the head": "train M --data D --new-head 1 --steps 2",
    "an empty model": "inspect empty.onnx",
    "a truncated model": "compile truncated.onnx --sram 64k -o out",
    "an SRAM of 0": "compile M --sram 0 --update last-k:1 --new-head 2 -o out",
    "an SRAM of 12q": "plan M --data D --new-head 2 --sram 12q -o p.json",
    "an SRAM of 32 (the k forgotten)": "compile M --sram 32 --update last-k:1 --new-head 2 -o out",
    "a plan's SRAM of 64 (the k forgotten)": "plan M --data D --new-head 2 --sram 64 -o p.json",
    "a flash of 1 (the m forgotten)": "compile M --sram 64k --flash 1 --update last-k:1 --new-head 2 -o out",
    "a negative lr": "train M --data D --new-head 2 --lr -1 --update last-k:1 --steps 2",
    "0 epochs": "train M --data D --new-head 2 --epochs 0 --update last-k:1",
    "an empty .npz": "train M --data empty.npz --new-head 2 --steps 2",
    "a bias depth the model has not": "plan M --data D --new-head 2 --bias-k 1,999 -o p.json",
    "plan -o onto the model": "plan M --data D --new-head 2 -o tiny.onnx",
    "samples --plan of a folder that is no compile output": "samples M --data D --new-head 2 --plan mine -o mine",
    "convert -o a .txt": "convert M -o model.txt",
    "train -o a .npz": "train M --data D --new-head 2 --steps 2 -o trained.npz",
    "train --state-out a .onnx": "train M --data D --new-head 2 --steps 2 --state-out state.onnx",
    "run --output a .txt": "run M --input features.npz --output y.txt",
    "plan -o a .txt": "plan M --data D --new-head 2 -o plan.txt",
    "stream --state-out a .npz": "stream M --port socket://127.0.0.1:9 --data D --state-out s.npz",
    "samples -o a file": "samples M --data D --new-head 2 -o notes.txt",
    "a non-ASCII folder of the user's as -o": "compile M --sram 64k --update last-k:1 --new-head 2 -o dossier_é",
}


@pytest.fixture()
def desk(user, tmp_path) -> Path:
    """The user's folder as it is after an hour: their files, each a sentinel, and a model in a folder of its own."""
    d = tmp_path / "desk"
    d.mkdir()
    for name in ("tiny.onnx", "tiny.npz", "plan.json"):
        shutil.copy(user / name, d / name)
    shutil.copytree(user / "photos", d / "photos")
    (d / "model").mkdir()
    shutil.copy(user / "tiny.onnx", d / "model" / "tiny.onnx")
    (d / "model" / "notes.txt").write_bytes(SENTINEL)
    (d / "mine").mkdir()
    (d / "mine" / "notes.txt").write_bytes(SENTINEL)
    (d / "notes.txt").write_bytes(SENTINEL)
    (d / "empty.onnx").write_bytes(b"")
    (d / "empty.npz").write_bytes(b"")
    (d / "truncated.onnx").write_bytes((user / "tiny.onnx").read_bytes()[:3000])
    (d / "dossier_é").mkdir()
    (d / "dossier_é" / "modèle.txt").write_bytes(SENTINEL)
    np.savez(d / "bad.npz", images=np.zeros((2, 16, 16, 3), np.uint8))
    np.savez(d / "wrong_count.npz", x=np.zeros((4, 16, 16, 3), np.uint8), y=np.array([0, 1, 0]))
    np.savez(d / "features.npz", x=np.zeros((4, 7), np.float32), y=np.array([0, 1, 0, 1]))
    (d / "big_plan.json").write_text(json.dumps({"version": 1, "bias_last_k": 1, "weights": [{"conv": 40,
                                                                                              "ratio": 1.0}]}))
    return d


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# Known, reported, owned elsewhere (tinytrain/cli_train.py): strict, so the mark must go when they are fixed.
@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_one_line_exit_2_and_touches_nothing(mistake, desk, monkeypatch, capsys):
    monkeypatch.chdir(desk)
    words = {"M": "tiny.onnx", "D": "tiny.npz", "P": "photos"}
    argv = [words.get(w, w) for w in MISTAKES[mistake].split()]
    before = _snapshot(desk)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"{mistake}: exit {code}: {err}"
    assert err.count("\n") == 1 and err.startswith("tinytrain: error: ") and "Traceback" not in err, err
    assert _snapshot(desk) == before, f"{mistake}: a file was added, changed or removed"
    if mistake.startswith("a typo"):
        assert "did you mean" in err, err


def test_an_output_folder_that_is_not_writable_is_refused_before_the_work(desk, monkeypatch, capsys):
    """plan -o into a read-only folder: refused at once (not after the search), one line; as does any file output
    (outputs/files.py check_file; os.access is patched: the tests may run as root, who may write anywhere)."""
    import tinytrain.outputs.files as files

    monkeypatch.chdir(desk)
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: False if Path(p).name == "mine" else real(p, mode))
    before = _snapshot(desk)
    assert main(["plan", "tiny.onnx", "--data", "tiny.npz", "--new-head", "2", "-o", "mine/p.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mine is not writable" in err and _snapshot(desk) == before, err


def _shell(home: Path) -> dict:
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "tinytrain"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinytrain.cli "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_as_typed_in_a_shell_a_closed_pipe_is_quiet_and_an_error_has_no_traceback(desk):
    """`tinytrain ... | head -1` ends quietly with exit 0 and its output complete; a mistake typed in a shell is
    one line and exit 2 from the real process (no traceback from the interpreter's exit)."""
    env = _shell(desk)
    r = subprocess.run(["bash", "-o", "pipefail", "-c",
                        "tinytrain compile tiny.onnx --sram 64k --update last-k:1 --new-head 2 -o piped | head -1"],
                       cwd=desk, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("memory report for") and r.stderr == "", r.stderr
    assert (desk / "piped" / "report.txt").is_file()
    r = subprocess.run(["bash", "-c", "tinytrain train tiny.onnx --data nosuch.npz --steps 2"], cwd=desk, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stdout == "", r.stderr


FIELD_MODEL = str(Path(__file__).resolve().parents[1] / "models" / "mbv1-0.25-vww.onnx")
FIELD_FLAGS = ["--max-classes", "3", "--replay", "8", "--guard", "4", "--guard-every", "3", "--imprint", "2",
               "--drift-warmup", "4"]


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.skipif(ARM_GCC is None or QEMU is None, reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_learning_in_the_field_compile_firmware_qemu_stream(tmp_path, capsys):
    """The guide's journey (docs/guide/field-learning.md "From compile to a board"): compile --replay, firmware
    --field for the mps2-an385 (QEMU, its UART), make, then stream --field with raw samples and no field option (the
    board's info has the compile's): the report of `tinytrain field --engine sim` with the compile's options, bit
    for bit; the user's main.c survives a second run."""
    pytest.importorskip("serial")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (16, 96, 96, 3)).astype(np.uint8)
    np.savez(tmp_path / "stream.npz", x=x, y=np.array([0, 1, -1, 2] * 4))
    np.savez(tmp_path / "test.npz", x=x[:4], y=np.array([0, 1, 2, 0]))
    build, project = tmp_path / "build", tmp_path / "project"
    assert tt("compile", FIELD_MODEL, "--update", "last-k:1", "--new-head", "3", *FIELD_FLAGS, "--sram", "256k",
              "-o", str(build)) == 0
    assert tt("firmware", str(build), "--board", "mps2-an385", "--field", "-o", str(project)) == 0
    assert "stream MODEL --port socket://" in capsys.readouterr().out
    r = subprocess.run(["make", "-s", "-C", str(project)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    run = ["--test", str(tmp_path / "test.npz"), "--checkpoints", "2"]
    assert tt("field", FIELD_MODEL, "--stream", str(tmp_path / "stream.npz"), *run, *FIELD_FLAGS, "--engine", "sim",
              "--json", str(tmp_path / "sim.json")) == 0
    # stream takes the compile's field options from the board's info: none repeated
    assert tt("stream", FIELD_MODEL, "--port", f"qemu:{project}", "--field", str(tmp_path / "stream.npz"), *run,
              "--field-json", str(tmp_path / "board.json")) == 0
    sim, board = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("sim", "board"))
    assert board["engine"] == "board mps2-an385"
    assert {k: v for k, v in sim.items() if k not in ("engine", "seconds")} == \
        {k: v for k, v in board.items() if k not in ("engine", "seconds")}
    (project / "src" / "main.c").write_text("/* mine */\n")
    assert tt("firmware", str(build), "--board", "mps2-an385", "--field", "-o", str(project)) == 0
    assert (project / "src" / "main.c").read_text() == "/* mine */\n"


def test_firmware_field_refusals_are_one_line(tmp_path, capsys):
    """firmware --field: a semihosting board, a compile without --replay and a budget the field firmware does not
    link in (its RAM counted before writing) are each refused in one line, nothing written."""
    build, plain, small = tmp_path / "build", tmp_path / "plain", tmp_path / "small"
    assert tt("compile", FIELD_MODEL, "--update", "last-k:1", "--new-head", "3", *FIELD_FLAGS, "-o", str(build)) == 0
    assert tt("compile", FIELD_MODEL, "--update", "last-k:1", "-o", str(plain)) == 0
    assert tt("compile", FIELD_MODEL, "--update", "last-k:1", "--new-head", "3", *FIELD_FLAGS, "--sram", "48k",
              "-o", str(small)) == 0
    capsys.readouterr()
    for build_dir, board, says in ((build, "qemu-m4", "use a serial board"), (plain, "mps2-an385", "--replay N"),
                                   (small, "mps2-an385", "does not link on mps2-an385")):
        assert tt("firmware", str(build_dir), "--board", board, "--field", "-o", str(tmp_path / "no")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
        assert not (tmp_path / "no").exists()


def test_samples_into_a_compile_output_is_refused_naming_the_firmware_step(user, tmp_path, capsys):
    """`samples -o build` (the compile output, not its firmware project) wrote tt_train.bin where no harness reads
    it; it is refused, naming `tinytrain firmware`, and the folder is untouched."""
    build = tmp_path / "build"
    assert tt("compile", user / "tiny.onnx", "--sram", "64k", "--update", "last-k:1", "--new-head", "2",
              "-o", build) == 0
    before = _snapshot(build)
    capsys.readouterr()
    assert tt("samples", user / "tiny.onnx", "--data", user / "tiny.npz", "--new-head", "2", "-o", build) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a `tinytrain compile` output, not a firmware project" in err, err
    assert "tinytrain firmware" in err and _snapshot(build) == before
