"""The importer and data-loader fuzzer (benchmarks/fuzz_importers.py) on a few hundred cases: every mutated model or
dataset is accepted, or rejected with one line and exit 2 — no crash, traceback or hang. The 10,000-case run and its
counts are in docs/guide/field.md."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fuzzer_finds_no_crash_traceback_or_hang(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_importers.py"), "--cases", "400", "--seed", "11",
                        "--failures", str(tmp_path / "failures")], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0, r.stdout[-3000:]
    assert result["cases"] == 400 and result["accepted"] + result["rejected"] == 400
    assert result["crash"] == result["traceback"] == result["hang"] == result["malformed"] == 0
    assert set(result["by_kind"]) == {"onnx", "tflite", "npz", "folder"}
