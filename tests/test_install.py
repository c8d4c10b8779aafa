"""A non-editable install works from any directory and ships the C side as package data."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_non_editable_install_runs_from_elsewhere(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(ROOT)], check=True, cwd=tmp_path)
    installed = site / "tinytrain"
    assert (installed / "cli.py").exists()
    sources = {p.relative_to(ROOT / "tinytrain") for p in (ROOT / "tinytrain").rglob("*")
               if p.suffix in (".py", ".j2", ".c", ".h", ".ld") and "__pycache__" not in p.parts}
    shipped = {p.relative_to(installed) for p in installed.rglob("*")
               if p.suffix in (".py", ".j2", ".c", ".h", ".ld") and "__pycache__" not in p.parts}
    assert sources <= shipped, f"not shipped in the wheel: {sorted(map(str, sources - shipped))}"
    env = dict(os.environ, PYTHONPATH=str(site))
    model = ROOT / "tests" / "bad_models" / "truncated.onnx"
    r = subprocess.run([sys.executable, "-m", "tinytrain.cli", "inspect", str(model)], cwd=tmp_path,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "onnx" in r.stderr.lower()
    r = subprocess.run([sys.executable, "-c", "import tinytrain, sys; print(tinytrain.__file__)"], cwd=tmp_path,
                       capture_output=True, text=True, env=env)
    assert r.stdout.strip().startswith(str(site))
