"""The data contract is explicit (tinytrain/input_mapping.py, docs/guide/data.md): the input mapping is given,
carried by the model (ONNX metadata written by convert and train -o, TFLite normalization metadata) or read off
the input quantization where its range says it, else refused; the C header states it with the class names."""

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest

from conftest import shared_file
from onnx_models import write_tiny_task
from tinytrain.cli import main
from tinytrain.errors import UsageError
from tinytrain.frontends import load_model
from tinytrain.input_mapping import KEY, NAMED, from_model, parse

CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_tiny_task(tmp_path_factory.mktemp("contract"))


def test_convert_writes_the_mapping_into_the_onnx_metadata_and_train_keeps_it(task, tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["convert", str(task / "tiny.onnx"), "--input-mapping", "imagenet", "-o", str(out)]) == 0
    assert "input mapping (pixel / 255 - ImageNet mean) / ImageNet std in its metadata" in capsys.readouterr().out
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(props[KEY])["name"] == "imagenet" and from_model(load_model(out)) == NAMED["imagenet"]
    assert main(["train", str(out), "--data", str(task / "tiny.npz"), "--new-head", "2", "--steps", "2",
                 "-o", str(tmp_path / "t.onnx")]) == 0
    assert from_model(load_model(tmp_path / "t.onnx")) == NAMED["imagenet"]


def test_a_model_whose_input_quantization_is_doubtful_is_refused_until_the_mapping_is_given(task, tmp_path, capsys):
    model = onnx.load(str(task / "tiny.onnx"))
    del model.metadata_props[:]  # the tiny model's input range, [-1.95, 2.03], is no mapping's
    onnx.save(model, str(tmp_path / "bare.onnx"))
    argv = ["eval", str(tmp_path / "bare.onnx"), "--data", str(task / "tiny.npz")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "range [-1.953, 2.031]) does not say how pixels become its input; give " \
        "--input-mapping unit (p/255)" in err
    assert main(argv + ["--input-mapping", "unit"]) == 0
    assert main(["eval", str(task / "tiny.onnx"), "--data", str(task / "tiny.npz")]) == 0
    given, carried = capsys.readouterr().out.splitlines()[-2:]
    assert given == carried and given.startswith("accuracy ")  # the tiny model carries pixel / 255


def test_the_commands_state_what_they_assumed(task, tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 8, 8, 3), np.uint8), y=[0, 1, 0, 1], classes=["cat", "dog"])
    assert main(["eval", str(task / "tiny.onnx"), "--data", str(tmp_path / "d.npz"), "--new-head", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"note: {tmp_path / 'd.npz'}: 2 classes: 0 cat, 1 dog",
                       "note: images resized from 8x8 to 16x16 (bilinear, aspect ratio kept) for the model's 16x16x3 "
                       "input"]


def test_tflite_normalization_metadata_is_the_models_mapping():
    g = load_model(shared_file("models/mobilenet_v1_0.25_128_quant.tflite"))  # TF Hub: mean 127.5, std 127.5
    m = from_model(g)
    assert m.scale == (float(1 / np.float32(127.5)),) and m.offset == (-1.0,)


@pytest.mark.skipif(CC is None, reason="no host C compiler")
def test_the_header_states_the_data_contract(task, tmp_path, capsys):
    assert main(["compile", str(task / "tiny.onnx"), "--sram", "64k", "--update", "last-k:1", "--new-head", "2",
                 "--classes", 'face,no "face"', "--input-mapping", "0.5,0.25,0.125:-1,-2,-3",
                 "-o", str(tmp_path / "b")]) == 0
    header = (tmp_path / "b" / "tinytrain_model.h").read_text()
    for line in ("#define TT_PIXEL_CHANNELS 3", "#define TT_PIXEL_SCALE { 5.e-01f, 2.5e-01f, 1.25e-01f }",
                 "#define TT_PIXEL_OFFSET { -1.e+00f, -2.e+00f, -3.e+00f }", "#define TT_CLASS_COUNT 2",
                 '#define TT_CLASS_NAMES { "face", "no \\"face\\"" }', "#define TT_INPUT_SCALE 1.5625e-02f"):
        assert line in header, line
    program = tmp_path / "use.c"
    program.write_text('#include "tinytrain_model.h"\nstatic const float s[TT_PIXEL_CHANNELS] = TT_PIXEL_SCALE;\n'
                       "static const char *names[TT_CLASS_COUNT] = TT_CLASS_NAMES;\n"
                       "int main(void) { return (int)(s[0] * TT_INPUT_SCALE * TT_LOGITS_SCALE) + (names[1][3] != '\"'); }\n")
    r = subprocess.run([CC, "-std=c99", "-Wall", "-Werror", "-fsyntax-only", "-I", str(tmp_path / "b"), str(program)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert main(["compile", str(task / "tiny.onnx"), "--update", "last-k:1", "--new-head", "2", "--classes", "a",
                 "-o", str(tmp_path / "c")]) == 2
    assert "--classes: 1 names (a) for the model's 2 outputs" in capsys.readouterr().err


def test_parse_names_the_choices():
    assert parse("symmetric") is NAMED["symmetric"]


def test_a_mistyped_mapping_gets_did_you_mean():
    with pytest.raises(UsageError, match="SCALES:OFFSETS per channel; did you mean imagenet"):
        parse("imagenett")
