"""The corpus of bad models: each gives one error line naming the problem, exit code 2, no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from tinytrain.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "bad_models"))
from make_corpus import CASES, all_cases, qdq_conv, tflite_conv  # noqa: E402

CORPUS = Path(__file__).parents[1] / "bad_models"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_model_gives_one_clear_line(name, tmp_path, capsys):
    command, words = CASES[name]
    out = tmp_path / "out"
    argv = [command, str(CORPUS / name)] + (["--sram", "256k", "-o", str(out)] if command == "compile" else [])
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("tinytrain: error: ") and words.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in captured.err and not out.exists()


@pytest.mark.parametrize("name", ["unsupported_op.onnx", "unsupported_op.tflite"])
def test_an_unsupported_op_says_what_to_do(name, capsys):
    """Not only the node and the supported ops: the fix (replace it before quantizing, or add the op)."""
    assert main(["inspect", str(CORPUS / name)]) == 2
    line = capsys.readouterr().err.strip()
    assert "replace it in the model by supported ops" in line and "docs/guide/adding-an-op.md" in line, line


def test_corpus_is_what_the_script_writes():
    files = all_cases()
    assert len(files) >= 50 and set(files) == set(CASES)
    for name, data in files.items():
        assert (CORPUS / name).read_bytes() == data, f"{name} is stale: run tests/bad_models/make_corpus.py"


def test_the_good_variants_load(tmp_path):
    """The corpus generator's unbroken models import fine, so each bad file fails for its one defect."""
    (tmp_path / "good.onnx").write_bytes(qdq_conv().SerializeToString())
    (tmp_path / "good.tflite").write_bytes(tflite_conv())
    assert main(["inspect", str(tmp_path / "good.onnx")]) == 0
    assert main(["inspect", str(tmp_path / "good.tflite")]) == 0


def test_exit_code_and_stderr_from_a_real_process(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tinytrain.cli", "inspect", str(CORPUS / "truncated.tflite")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


@pytest.mark.parametrize("op", ["LeakyRelu", "Sigmoid"])
def test_an_activation_reading_a_float_conv_output_names_nncf_and_the_fix(op, tmp_path, capsys):
    """Conv -> LeakyRelu -> QuantizeLinear (NNCF's fused pattern, no QuantizeLinear after the Conv): not "quantize
    the whole model" (it is quantized), but which output lacks a quantizer and what writes one."""
    (tmp_path / "m.onnx").write_bytes(qdq_conv(middle_op=op).SerializeToString())
    assert main(["inspect", str(tmp_path / "m.onnx")]) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and f"{op} " in line and "float output of Conv" in line, line
    assert "NNCF fuses" in line and "quantize that output too" in line, line
