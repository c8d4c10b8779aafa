"""Bad datasets (docs/guide/field.md): wrong dtype or shape, labels outside the head, empty sets,
damaged .npz files, truncated or non-image files in a class folder — each is one line on stderr, exit code 2, for
`train` and `eval` alike, and nothing is written."""

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from tinytrain.cli import main

sys.path.insert(0, str(Path(__file__).parent / "bad_models"))
from make_corpus import qdq_conv  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
Y = np.array([0, 1, 0, 1, 0, 1])
MODEL = Path(__file__).resolve().parents[1] / "models" / "mbv1-0.25-vww.onnx"  # 2 classes


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _png(h=8, w=8) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


GOOD = _npz(x=X, y=Y)
NPZ_CASES = {
    "float_images": (_npz(x=X.astype(np.float32), y=Y), "features x are float32"),
    "float64_gray_images": (_npz(x=X[..., 0].astype(np.float64), y=Y), "images are uint8 (N,H,W[,C])"),
    "int8_images": (_npz(x=X.astype(np.int8), y=Y), "features x are int8"),
    "five_dims": (_npz(x=X.reshape(6, 4, 2, 8, 3), y=Y), "uint8"),
    "flat_images": (_npz(x=X.reshape(6, -1), y=Y), "uint8"),
    "fewer_labels": (_npz(x=X, y=Y[:4]), "y has 4"),
    "float_labels": (_npz(x=X, y=Y.astype(np.float32)), "integer class labels"),
    "label_past_the_head": (_npz(x=X, y=np.array([0, 1, 0, 1, 0, 2])), "--new-head"),
    "negative_label": (_npz(x=X, y=np.array([0, 1, -1, 1, 0, 1])), "class indices"),
    "unlabelled_stream": (_npz(x=X, y=np.array([0, -1, 1, -1, 0, 1])), "unlabelled sample of a field stream"),
    "huge_label": (_npz(x=X, y=np.array([0, 1, 2 ** 40, 1, 0, 1])), "class indices"),
    "empty_set": (_npz(x=X[:0], y=Y[:0]), "no samples"),
    "no_labels": (_npz(x=X), "no labels y"),
    "two_channels": (_npz(x=X[..., :2], y=Y), "channels"),
    "truncated_npz": (GOOD[: len(GOOD) // 2], "cannot read"),
    "bad_crc_npz": (GOOD[:200] + bytes([GOOD[200] ^ 0xFF]) + GOOD[201:], "cannot read"),
    "text_file": (b"x,y\n1,2\n", "cannot read as .npz: not a numpy file; DATA is an .npz of arrays x, y"),
    "empty_file": (b"", "cannot read"),
}
FOLDER_CASES = {
    "truncated_png": ({"a/0.png": _png(), "b/0.png": _png()[:40]}, "cannot decode"),
    "not_an_image": ({"a/0.png": _png(), "b/0.png": b"hello, not a picture\n"}, "cannot decode"),
    "empty_png": ({"a/0.png": _png(), "b/0.png": b""}, "cannot decode"),
    "no_images": ({"a/notes.txt": b"nothing", "b/": b""}, "no images"),
    "no_class_folders": ({"0.png": _png()}, "holds images but no class folders"),
    "a_folder_of_wav": ({"yes/0.wav": b"RIFF", "no/0.wav": b"RIFF"}, "holds audio files, not images; tinytrain "
                        "trains on features of audio: compute them (tinytrain.audio.mfcc"),
    "empty_class_folder": ({"a/0.png": _png(), "b/0.png": _png(), "c/": b""}, "class folder c holds no"),
}


@pytest.fixture(scope="module")
def model():
    return MODEL


def _one_line(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinytrain: error: "), err
    return err[0]


@pytest.mark.parametrize("name", sorted(NPZ_CASES))
@pytest.mark.parametrize("command", ["train", "eval"])
def test_bad_npz_is_one_line(name, command, model, tmp_path, capsys):
    data, words = NPZ_CASES[name]
    (tmp_path / "d.npz").write_bytes(data)
    out = tmp_path / "trained.onnx"
    argv = [command, str(model), "--data", str(tmp_path / "d.npz")] + (["-o", str(out)] if command == "train" else [])
    assert words.lower() in _one_line(argv, capsys).lower()
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(FOLDER_CASES))
def test_bad_class_folder_is_one_line(name, model, tmp_path, capsys):
    files, words = FOLDER_CASES[name]
    for rel, data in files.items():
        path = tmp_path / "data" / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    assert words.lower() in _one_line(["eval", str(model), "--data", str(tmp_path / "data")], capsys).lower()


@pytest.mark.parametrize("name, says", [("0.png", "one image, not a dataset; give the folder that holds one "
                                                   "sub-folder of images per class (here perhaps"),
                                        ("0.wav", "an audio file, not a dataset; tinytrain trains on features")])
def test_one_image_or_one_wav_as_data_says_what_it_is(name, says, model, tmp_path, capsys):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / name).write_bytes(_png() if name.endswith(".png") else b"RIFF....WAVE")
    assert says in _one_line(["train", str(model), "--data", str(tmp_path / "photos" / "cat" / name)], capsys)


def test_the_good_set_trains(model, tmp_path):
    (tmp_path / "d.npz").write_bytes(GOOD)
    assert main(["eval", str(model), "--data", str(tmp_path / "d.npz")]) == 0
    assert main(["train", str(model), "--data", str(tmp_path / "d.npz"), "--steps", "2"]) == 0


def test_training_a_model_without_class_logits_is_one_line(tmp_path, capsys):
    """A convolution's (1,8,8,4) output is not a classifier's logits: train says so (eval still scores argmax)."""
    (tmp_path / "conv.onnx").write_bytes(qdq_conv().SerializeToString())
    (tmp_path / "d.npz").write_bytes(GOOD)
    assert "logits" in _one_line(["train", str(tmp_path / "conv.onnx"), "--data", str(tmp_path / "d.npz")], capsys)
