"""`tinytrain field` and `compile --replay` on the zoo's MobileNetV1-0.25 (96x96) with a small random stream: the
result, the simulator == host C through the command, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinytrain.cli import main

MODEL = str(Path(__file__).resolve().parents[2] / "models" / "mbv1-0.25-vww.onnx")
FLAGS = ["--max-classes", "3", "--replay", "8", "--guard", "4", "--guard-every", "3", "--imprint", "2",
         "--drift-warmup", "4", "--checkpoints", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("field")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (24, 96, 96, 3)).astype(np.uint8)
    y = np.array([0, 1, -1, 2] * 6)
    np.savez(d / "stream.npz", x=x, y=y)
    np.savez(d / "test.npz", x=x[:6], y=np.array([0, 1, 2, 0, 1, 2]))
    np.savez(d / "high.npz", x=x[:4], y=np.array([0, 1, 3, 0]))
    np.savez(d / "kind.npz", x=rng.normal(size=(4, 7)).astype(np.float32), y=np.zeros(4, np.int64))
    np.savez(d / "noy.npz", x=x[:4])
    (d / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    return d


def test_field_json_and_engines_agree(files, tmp_path, capsys):
    out = {}
    for engine in ("c", "sim"):
        path = tmp_path / f"{engine}.json"
        assert main(["field", MODEL, "--stream", str(files / "stream.npz"), "--test", str(files / "test.npz"),
                     *FLAGS, "--engine", engine, "--json", str(path)]) == 0
        out[engine] = json.loads(path.read_text())
    assert "drift alarms at samples" in capsys.readouterr().out
    c, sim = out["c"], out["sim"]
    assert c["labelled"] == 18 and len(c["checkpoints"]) == 2 and c["classes_seen"] == [0, 1, 2]
    for key in ("checkpoints", "drift_alarms", "status", "buffer", "guard", "memory"):
        assert c[key] == sim[key], key


@pytest.mark.slow
@pytest.mark.qemu
def test_field_on_qemu_equals_host_c(files, tmp_path):
    out = {}
    for engine in ("c", "qemu"):
        path = tmp_path / f"{engine}.json"
        assert main(["field", MODEL, "--stream", str(files / "stream.npz"), "--test", str(files / "test.npz"),
                     *FLAGS, "--engine", engine, "--json", str(path)]) == 0
        out[engine] = json.loads(path.read_text())
    for key in ("checkpoints", "drift_alarms", "status", "buffer", "guard", "classes_seen"):
        assert out["c"][key] == out["qemu"][key], key


@pytest.mark.parametrize("stream, says", [("bad.npz", "cannot read"), ("high.npz", "--max-classes 3"),
                                          ("kind.npz", "model's input takes"), ("noy.npz", "arrays 'x'"),
                                          ("missing.npz", "no such stream")])
def test_bad_stream(files, tmp_path, capsys, stream, says):
    out = tmp_path / "out.json"
    assert main(["field", MODEL, "--stream", str(files / stream), *FLAGS, "--json", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note:")]
    assert len(err) == 1 and says in err[0] and not out.exists()


def test_json_never_replaces_a_users_file(files, tmp_path):
    out = tmp_path / "mine.json"
    out.write_text('{"mine": 1}')
    assert main(["field", MODEL, "--stream", str(files / "stream.npz"), *FLAGS, "--json", str(out)]) == 2
    assert out.read_text() == '{"mine": 1}'


def test_compile_replay(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", MODEL, "--update", "last-k:1", "--new-head", "4", "--replay", "16", "--known-classes",
                 "2", "-o", str(out)]) == 0
    report = json.loads((out / "field" / "field.json").read_text())
    assert (out / "field" / "tt_field.c").is_file() and report["config"]["known"] == 2
    assert report["memory"]["buffer"] == 16 * (report["latent_bytes"] + 2) + 4 * 4 + 4
    assert "field runtime" in capsys.readouterr().out
    bad = tmp_path / "bad"
    assert main(["compile", MODEL, "--update", "last-k:1", "--replay", "16", "--known-classes", "3",
                 "-o", str(bad)]) == 2
    assert not bad.exists()


@pytest.mark.parametrize("marker, result", [("field-study-table", "field_study.md"), ("field-vww-table", "field_vww.md")])
def test_guide_table_is_the_study_s(marker, result):
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "guide" / "field-learning.md").read_text()
    block = guide.split(f"<!-- {marker} -->\n")[1].split(f"<!-- /{marker} -->")[0]
    result = (root / "benchmarks" / "results" / result).read_text()
    first = result[result.index("| scenario"):].split("\n\n")[0]
    table = first.splitlines()
    assert block.strip().splitlines() == table
