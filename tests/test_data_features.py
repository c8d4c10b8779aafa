"""DATA beyond images (issue 29): features of any input rank, int8 or float32, labels / targets / none, and the
one-line refusals of bad data (docs/guide/data.md)."""

import numpy as np
import pytest

from tinytrain.input_mapping import with_mapping
from tinytrain.api import model_data
from tinytrain.data import load_dataset, model_inputs
from tinytrain.errors import UsageError
from tinytrain.ir import DType, Graph, QuantParams, Role, Tensor

SCALE, ZP = 0.05, 3


def io_graph(in_shape, out_shape=None):
    """A graph that is only an input and an output tensor: enough for the input pipeline and the targets."""
    q = QuantParams.per_tensor(SCALE, ZP)
    t = {"x": Tensor("x", in_shape, DType.INT8, Role.INPUT, q)}
    if out_shape is None:
        return Graph("g", t, (), ("x",), ("x",))
    t["out"] = Tensor("out", out_shape, DType.INT8, Role.OUTPUT, q)
    return Graph("g", t, (), ("x",), ("out",))


@pytest.mark.parametrize("shape", [(1, 16), (1, 49, 10, 1), (1, 6, 5, 3)])
def test_float_and_int8_features_of_each_rank(tmp_path, shape):
    rng = np.random.default_rng(0)
    q = rng.integers(-128, 128, (7, *shape[1:])).astype(np.int8)
    real = ((q.astype(np.float32) - ZP) * np.float32(SCALE)).astype(np.float32)
    g = io_graph(shape)
    for x in (q, real, real.astype(np.float64)):
        np.savez(tmp_path / "d.npz", x=x, y=np.arange(7) % 2)
        ds = load_dataset(tmp_path / "d.npz")
        assert ds.labelled and ds.y.tolist() == [0, 1, 0, 1, 0, 1, 0]
        assert np.array_equal(model_inputs(g, ds.x), q)  # int8 as is; float quantized back exactly


def test_float_features_round_half_to_even_like_images():
    g = io_graph((1, 4))
    x = np.array([[0.0, 0.025, 0.075, -0.3]], np.float32)  # /0.05: 0, 0.5, 1.5, -6 -> 0, 0, 2, -6
    assert model_inputs(g, x).tolist() == [[ZP + 0, ZP + 0, ZP + 2, ZP - 6]]


def test_uint8_images_keep_working(tmp_path):
    np.savez(tmp_path / "img.npz", x=np.full((2, 4, 4), 255, np.uint8), y=np.array([0, 1]))
    ds = load_dataset(tmp_path / "img.npz")
    assert ds.x.shape == (2, 4, 4, 1)
    g = with_mapping(io_graph((1, 4, 4, 1)), "unit")
    assert model_inputs(g, ds.x).dtype == np.int8


def test_reconstruction_and_float_targets(tmp_path):
    x = np.zeros((3, 8), np.float32)
    np.savez(tmp_path / "ae.npz", x=x, anomaly=np.array([0, 1, 0]))
    ds = load_dataset(tmp_path / "ae.npz")
    assert ds.y is None and ds.anomaly.tolist() == [0, 1, 0]
    xq, y = model_data(io_graph((1, 8), (1, 8)), tmp_path / "ae.npz", loss="mse")
    assert y is None and xq.shape == (3, 8)
    t = np.ones((3, 2), np.float32)
    xq, y = model_data(io_graph((1, 8), (1, 2)), (x, t), loss="mse")
    assert np.array_equal(y, t)


@pytest.mark.parametrize("x, y, loss, out, match", [
    (np.zeros((3, 9), np.float32), None, "mse", (1, 8), r"features x are float32\(3, 9\).*\(N, 8\)"),
    (np.zeros((3, 8), np.int16), None, "mse", (1, 8), "x must be uint8 images"),
    (np.zeros((3, 8), np.uint8), None, "mse", (1, 8), r"uint8 images \(N,H,W\[,C\]\) or int8 / float32 features"),
    (np.full((3, 8), 1e3, np.float32), None, "mse", (1, 8), r"24 of 24 feature values lie outside .*\[-6.55, 6.2\]"),
    (np.full((3, 8), np.nan, np.float32), None, "mse", (1, 8), "NaN"),
    (np.zeros((3, 8), np.float32), None, "mse", (1, 2), "not its input's shape"),
    (np.zeros((3, 8), np.float32), np.array([0, 1, 0]), "mse", (1, 8), "labels on an autoencoder"),
    (np.zeros((3, 8), np.float32), np.ones((3, 3), np.float32), "mse", (1, 2), r"targets y are \(3, 3\)"),
    (np.zeros((3, 8), np.float32), None, "xent", (1, 2), "no labels y"),
    (np.zeros((3, 8), np.float32), np.array([0, 1]), "xent", (1, 2), "x has 3 samples but y has 2"),
])
def test_bad_feature_data_is_one_usage_error(x, y, loss, out, match):
    with pytest.raises(UsageError, match=match):
        model_data(io_graph((1, 8), out), (x, y), loss=loss)


def test_a_plain_npy_is_a_usage_error(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((3, 8), np.float32))
    with pytest.raises(UsageError, match=r"plain \.npy array is not a dataset; save .* numpy.savez"):
        load_dataset(tmp_path / "x.npy")


@pytest.mark.slow
def test_int8_features_train_and_evaluate_like_the_images_they_quantize():
    from pathlib import Path

    import tinytrain

    model = tinytrain.load_model(Path(__file__).resolve().parents[1] / "models" / "mbv1-0.25-vww.onnx")
    rng = np.random.default_rng(0)
    images, y = rng.integers(0, 256, (4, 96, 96, 3), dtype=np.uint8), np.array([0, 1, 1, 0])
    features = model_inputs(model, images)
    a = tinytrain.train(model, (images, y), steps=3)
    b = tinytrain.train(model, (features, y), steps=3)
    assert np.array_equal(a.losses, b.losses) and a.train_accuracy == b.train_accuracy
    assert tinytrain.evaluate(model, (features, y)).accuracy == tinytrain.evaluate(model, (images, y)).accuracy
