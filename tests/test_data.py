"""Dataset loaders and the model-derived input pipeline, checked against hand computations."""

import re

import numpy as np
import pytest
from PIL import Image

from tinytrain.data import load_dataset, model_inputs
from tinytrain.splits import stratified_split
from tinytrain.errors import Notice, UsageError
from tinytrain.input_mapping import NAMED, for_model, from_model, guess, parse, with_mapping
from tinytrain.ir import DType, Graph, QuantParams, Role, Tensor

from conftest import shared_file


def input_graph(h, w, c, scale, zp, uint8_input=False):
    """A graph that is only an input: enough for the input pipeline."""
    t = Tensor("x", (1, h, w, c), DType.INT8, Role.INPUT, QuantParams.per_tensor(scale, zp))
    return Graph("g", {"x": t}, (), ("x",), ("x",), uint8_input=uint8_input)


def test_vww_npz_pixels_become_pixel_minus_128():
    ds = load_dataset(shared_file("data/vww96/vww96_dev800.npz"))
    assert len(ds) == 800 and ds.x.shape == (800, 96, 96, 3) and set(np.unique(ds.y)) == {0, 1}
    q = model_inputs(input_graph(96, 96, 3, 1 / 255, -128), ds.x[:4])
    for n, y, x, c in [(0, 0, 0, 0), (1, 50, 17, 2), (3, 95, 95, 1)]:
        assert int(q[n, y, x, c]) == int(ds.x[n, y, x, c]) - 128


def test_grayscale_model_gets_luma_and_tf1_scale():
    x = np.zeros((1, 2, 2, 3), np.uint8)
    x[0, 0, 0] = (200, 100, 50)  # luma 0.299*200 + 0.587*100 + 0.114*50 = 124.2 -> 124
    q = model_inputs(input_graph(2, 2, 1, 1 / 128, 0, uint8_input=True), x)  # TF1 uint8 style: real = (p - 128) / 128
    assert q.shape == (1, 2, 2, 1)
    assert int(q[0, 0, 0, 0]) == 124 - 128 and int(q[0, 1, 1, 0]) == -128


def test_a_given_mapping_is_applied_then_the_input_quantization():
    x = np.array([[[[0], [255]], [[128], [64]]]], np.uint8)
    q = model_inputs(with_mapping(input_graph(2, 2, 1, 0.01, 5), "unit"), x)
    # real = p / 255; q = clamp(round(real / 0.01) + 5)
    assert q.ravel().tolist() == [5, 105, round(128 / 255 / 0.01) + 5, round(64 / 255 / 0.01) + 5]
    q = model_inputs(with_mapping(input_graph(2, 2, 1, 0.01, 5), "0.002,-0.1"), x)
    assert q.ravel().tolist() == [-5, 46, round((128 * 0.002 - 0.1) / 0.01) + 5, round((64 * 0.002 - 0.1) / 0.01) + 5]


def test_model_inputs_in_chunks_equal_one_batch():
    x = np.random.default_rng(0).integers(0, 256, (7, 5, 6, 1), dtype=np.uint8)
    g = input_graph(8, 9, 3, 1 / 128, 0, uint8_input=True)
    whole = model_inputs(g, x, chunk=7)
    assert whole.shape == (7, 8, 9, 3) and whole.dtype == np.int8
    for chunk in (1, 3):
        assert np.array_equal(model_inputs(g, x, chunk=chunk), whole)


def test_image_folder_and_resize(tmp_path):
    for cls, value in (("cat", 10), ("dog", 250)):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(np.full((8, 8, 3), value + i, np.uint8)).save(tmp_path / cls / f"{i}.png")
    with pytest.warns(Notice, match=r"2 classes: 0 cat, 1 dog"):
        ds = load_dataset(tmp_path)
    assert ds.classes == ("cat", "dog") and ds.y.tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.warns(Notice, match=r"images resized from 8x8 to 4x4 \(bilinear, aspect ratio kept\)"):
        q = model_inputs(input_graph(4, 4, 3, 1 / 255, -128), ds.x)
    assert q.shape == (6, 4, 4, 3)
    assert int(q[4, 2, 1, 0]) == 251 - 128  # constant images survive bilinear resizing exactly
    assert load_dataset(tmp_path) is ds  # decoded once per process


def test_lfw_builtin():
    ds = load_dataset("lfw")
    assert len(ds) == 200 and ds.y.sum() == 100 and ds.x.dtype == np.uint8
    q = model_inputs(input_graph(32, 32, 3, 1 / 255, -128), ds.x[:2])
    assert q.shape == (2, 32, 32, 3) and (q[..., 0] == q[..., 2]).all()


def test_stratified_split_is_deterministic_and_balanced():
    y = np.r_[np.zeros(60, int), np.ones(40, int)]
    train, test = stratified_split(y, 0.25, seed=3)
    assert len(test) == 25 and (y[test] == 1).sum() == 10
    assert not set(train) & set(test)
    assert np.array_equal(stratified_split(y, 0.25, seed=3)[1], test)


def test_bad_datasets(tmp_path):
    with pytest.raises(UsageError):
        load_dataset(tmp_path / "missing.npz")
    np.savez(tmp_path / "bad.npz", images=np.zeros(3))
    with pytest.raises(UsageError, match="needs arrays 'x'"):
        load_dataset(tmp_path / "bad.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no images"):
        load_dataset(tmp_path / "empty")


def _fashion_mnist_root():
    from tinytrain.data import FASHION_MNIST_DIR

    if not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip(f"{FASHION_MNIST_DIR} is absent (the Debian package dataset-fashion-mnist is not installed)")
    return FASHION_MNIST_DIR


def test_fashion_mnist_by_name():
    _fashion_mnist_root()
    test = load_dataset("fashion-mnist:test")
    assert test.x.shape == (10000, 28, 28, 1) and test.x.dtype == np.uint8 and len(test.classes) == 10
    assert np.bincount(test.y).tolist() == [1000] * 10  # the official test set is balanced
    sub = load_dataset("fashion-mnist:test:50")
    assert len(sub) == 50 and np.bincount(sub.y).tolist() == [5] * 10
    assert np.array_equal(sub.x, load_dataset("fashion-mnist:test:50").x)  # the same rows every time
    rows = {img.tobytes() for img in test.x}
    assert all(img.tobytes() in rows for img in sub.x)


def test_fashion_mnist_missing_package_and_bad_names_are_one_line_errors(tmp_path):
    from tinytrain.data import load_fashion_mnist

    with pytest.raises(UsageError, match="install the Debian package dataset-fashion-mnist"):
        load_fashion_mnist("fashion-mnist", root=tmp_path)
    for bad in ("fashion-mnist:val", "fashion-mnist:test:0", "fashion-mnist:train:10:2"):
        with pytest.raises(UsageError, match=r"fashion-mnist\[:train\|:test\]\[:N\]"):
            load_dataset(bad)


def test_idx_reader_checks_the_header(tmp_path):
    import gzip

    from tinytrain.data import _read_idx

    good = tmp_path / "ok.gz"
    good.write_bytes(gzip.compress(b"\0\0\x08\x02" + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes(range(6))))
    assert _read_idx(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"\0\0\x0d\x01" + (2).to_bytes(4, "big") + bytes(8)))  # float32 values
    with pytest.raises(UsageError, match="not an IDX file of uint8"):
        _read_idx(bad)
    short = tmp_path / "short.gz"
    short.write_bytes(gzip.compress(b"\0\0\x08\x01" + (5).to_bytes(4, "big") + bytes(3)))
    with pytest.raises(UsageError, match="truncated"):
        _read_idx(short)


def test_fashion_mnist_becomes_rgb_for_a_three_channel_raw_pixel_model():
    """Fashion-MNIST (28x28 gray) for ResNet-8's input (32x32x3, scale 1, zero point -128: raw pixels): the
    gray value resized bilinearly, repeated in all three channels, pixel - 128."""
    from tinytrain.data import _resize

    _fashion_mnist_root()
    ds = load_dataset("fashion-mnist:test:20")
    q = model_inputs(input_graph(32, 32, 3, 1.0, -128), ds.x)
    assert q.shape == (20, 32, 32, 3) and q.dtype == np.int8
    assert np.array_equal(q[..., 0], q[..., 1]) and np.array_equal(q[..., 0], q[..., 2])
    gray = np.stack([_resize(img, 32, 32) for img in ds.x])[..., 0]
    assert np.array_equal(q[..., 0].astype(np.int16), gray.astype(np.int16) - 128)
    assert q.min() == -128 and q.max() > 100  # the full pixel range, not pixel / 255


def test_a_folder_of_mixed_sizes_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    Image.fromarray(np.zeros((96, 96, 3), np.uint8)).save(tmp_path / "a" / "0.png")
    Image.fromarray(np.zeros((200, 20, 3), np.uint8)).save(tmp_path / "a" / "1.png")
    with pytest.raises(UsageError, match=r"1.png is 20x200, .*0.png 96x96: give all the images one size"):
        load_dataset(tmp_path)


def test_an_empty_class_folder_is_refused_not_a_class_without_images(tmp_path):
    """imgs/{cats,dogs,empty}: 'empty' was class 2 with no image, stated among the classes and trained silently."""
    for c in ("cats", "dogs"):
        (tmp_path / c).mkdir()
        Image.fromarray(np.zeros((31, 47, 3), np.uint8)).save(tmp_path / c / "0.png")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an image")
    with pytest.raises(UsageError, match="class folder empty holds no PNG/JPEG/BMP image; add images or remove"):
        load_dataset(tmp_path)


def test_an_npz_carries_its_class_names(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 4, 4, 3), np.uint8), y=[0, 1], classes=["person", "background"])
    with pytest.warns(Notice, match="2 classes: 0 person, 1 background"):
        assert load_dataset(tmp_path / "d.npz").classes == ("person", "background")
    np.savez(tmp_path / "e.npz", x=np.zeros((2, 4, 4, 3), np.uint8), y=[0, 1], classes=["one"])
    with pytest.raises(UsageError, match="a name for each label 0..1"):
        load_dataset(tmp_path / "e.npz")


@pytest.mark.parametrize("scale,zp,uint8_input,mapping", [
    (1 / 255, -128, False, "unit"),        # onnxruntime's asymmetric quantizer on p / 255: the zoo
    (1.0, -128, False, "raw"),             # MLPerf Tiny's ResNet-8
    (1 / 128, 0, True, "symmetric"),       # TF1 uint8 MobileNets (zero point 128)
    (2 / 255, -1, False, "symmetric"),     # TFLM's person detection: asymmetric on [-1, 1]
    (1 / 128, 0, False, None),             # Brevitas' symmetric int8 quantizer: [0, 1] or [-1, 1] data
    (1 / 127, 0, False, None),             # onnxruntime's ActivationSymmetric
    (0.01867, -14, False, None),           # calibrated on ImageNet-normalized inputs: about [-2.1, 2.6]
])
def test_the_input_quantization_implies_a_mapping_only_where_its_range_says_it(scale, zp, uint8_input, mapping):
    g = input_graph(2, 2, 3, scale, zp, uint8_input)
    assert guess(g) == (None if mapping is None else NAMED[mapping])
    if mapping is None:
        with pytest.raises(UsageError, match="does not say how pixels become its input; give --input-mapping unit"):
            for_model(g)
    else:
        with pytest.warns(Notice, match=re.escape(f"input mapping: {NAMED[mapping].describe()}")):
            assert for_model(g) == NAMED[mapping]
    given = with_mapping(g, "imagenet")
    assert for_model(given) == NAMED["imagenet"] and from_model(given) == NAMED["imagenet"]


def test_input_mapping_forms():
    assert parse("unit") is NAMED["unit"] and parse("0.5,-1").scale == (0.5,) and parse("0.5,-1").offset == (-1.0,)
    m = parse("1,2,3:4,5,6")
    assert m.scale == (1, 2, 3) and m.offset == (4, 5, 6)
    pixels = np.array([[[[0, 255, 128]]]], np.uint8)
    np.testing.assert_allclose(NAMED["imagenet"].real(pixels)[0, 0, 0],
                               (np.array([0, 1, 128 / 255]) - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225], 1e-6)
    np.testing.assert_allclose(parse(",".join(map(str, NAMED["imagenet"].scale)) + ":"
                                     + ",".join(map(str, NAMED["imagenet"].offset))).real(pixels),
                               NAMED["imagenet"].real(pixels), rtol=1e-5, atol=1e-5)
    for bad in ("units", "1,2,3", "1:2,3", "0,0", "nan,1"):
        with pytest.raises(UsageError, match="input.mapping"):
            parse(bad)
