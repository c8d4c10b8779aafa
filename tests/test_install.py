"""A wheel (non-editable) and an editable install work from any directory and carry the C side.

The C half of the product is the top-level ``codegen/`` (kernel templates, runtime headers) and ``firmware/``
(board support) folders; the wheel ships them inside the package as ``tinytrain/_c/`` (pyproject.toml), and
``tinytrain.csources`` finds them either way. A fresh venv gets the dependencies from this interpreter's
site-packages through a ``.pth`` line (nothing is downloaded) and tinytrain itself from the install under test.
"""

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
C_FOLDERS = ("codegen", "firmware")
MODEL = ROOT / "models" / "mbv1-0.25-vww.onnx"


def _tree(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _fresh_venv(path: Path) -> Path:
    """A venv at ``path`` whose dependencies are this interpreter's (a .pth line); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "tinytrain_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _environment(cwd: Path) -> dict[str, str]:
    """This environment without PYTHONPATH (a checkout there would shadow the install under test)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "TINYTRAIN_CACHE": str(cwd / "cache")}


def _pip(*args: str, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, cwd=cwd, capture_output=True,
                   env=_environment(cwd))


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, env=_environment(cwd))


def _where(python: Path, cwd: Path) -> tuple[Path, Path, Path]:
    """(the tinytrain package, its codegen folder, its firmware folder) as ``python`` sees them from ``cwd``."""
    r = _run(python, "-c", "import tinytrain; from tinytrain.csources import c_folder; "
             "print(tinytrain.__file__); print(c_folder('codegen')); print(c_folder('firmware'))", cwd=cwd)
    assert r.returncode == 0, r.stderr
    package, codegen, firmware = r.stdout.split("\n")[:3]
    return Path(package).parent, Path(codegen), Path(firmware)


def _compile_train_firmware(python: Path, cwd: Path, make: bool) -> None:
    """compile (training step), train --engine c, and a QEMU firmware project (built with ``make``), all in cwd."""
    tinytrain = ("-m", "tinytrain.cli")
    x = np.random.default_rng(0).integers(0, 256, (4, 96, 96, 3)).astype(np.uint8)
    np.savez(cwd / "d.npz", x=x, y=np.array([0, 1, 0, 1]))
    r = _run(python, *tinytrain, "compile", str(MODEL), "--sram", "256k", "--update", "last-k:2", "-o", "build",
             cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert (cwd / "build" / "tinytrain_model.c").is_file() and (cwd / "build" / "tt_float.h").is_file()
    r = _run(python, *tinytrain, "train", str(MODEL), "--data", "d.npz", "--update", "last-k:2", "--steps", "2",
             "--engine", "c", "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert '"engine": "c"' in r.stdout.strip().splitlines()[-1]
    r = _run(python, *tinytrain, "firmware", "build", "--board", "qemu-m7", "-o", "fw", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert (cwd / "fw" / "src" / "tt_harness_qemu.c").is_file() and (cwd / "fw" / "tinytrain.ld").is_file()
    if make:
        subprocess.run(["make", "-s", "-C", "fw"], check=True, cwd=cwd, capture_output=True)
        assert (cwd / "fw" / "firmware.elf").is_file()


def test_pyproject_lists_every_package():
    """The wheel's package list (explicit, because of the C folders' mapping) names every package under tinytrain/."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tinytrain").rglob("__init__.py")}
    c = {f"tinytrain._c.{name}" for name in C_FOLDERS}
    assert listed == found | c
    assert config["package-dir"] == {f"tinytrain._c.{name}": name for name in C_FOLDERS}


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_compiles_trains_and_builds_firmware_from_elsewhere(tmp_path):
    if not MODEL.is_file():
        pytest.skip(f"{MODEL} is not built")
    _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("tinytrain-*.whl")
    python = _fresh_venv(tmp_path / "venv")
    _pip("--python", str(python), "install", "-q", "--no-deps", str(wheel), cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    package, codegen, firmware = _where(python, work)
    assert package.is_relative_to(tmp_path / "venv")
    assert (codegen, firmware) == (package / "_c" / "codegen", package / "_c" / "firmware")
    for name, installed in zip(C_FOLDERS, (codegen, firmware)):
        assert _tree(installed) == _tree(ROOT / name), f"{name}/ differs from the wheel's copy"
    sources = {p for p in _tree(ROOT / "tinytrain") if p.suffix == ".py"}
    shipped = {p for p in _tree(package) if p.suffix == ".py"}
    assert sources == shipped, f"not shipped in the wheel: {sorted(map(str, sources - shipped))}"
    r = _run(python, "-m", "tinytrain.cli", "inspect", str(ROOT / "tests" / "bad_models" / "truncated.onnx"), cwd=work)
    assert r.returncode == 2 and "onnx" in r.stderr.lower()
    _compile_train_firmware(python, work, make=True)


@pytest.mark.slow
def test_editable_install_reads_the_checkouts_c_folders(tmp_path):
    if not MODEL.is_file():
        pytest.skip(f"{MODEL} is not built")
    python = _fresh_venv(tmp_path / "venv")
    _pip("--python", str(python), "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(ROOT),
         cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    package, codegen, firmware = _where(python, work)
    assert (package, codegen, firmware) == (ROOT / "tinytrain", ROOT / "codegen", ROOT / "firmware")
    _compile_train_firmware(python, work, make=False)
