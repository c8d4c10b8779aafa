"""TFLite frontend: real models bit-exact with the TFLite reference kernels, small built models for the
ops those lack, and the reader's / importer's error paths.

Oracles (tests/oracles.py): int8 models run on the tflite-micro runtime. tflite-micro refuses uint8
(TF1-style) models ("Hybrid models are not supported on TFLite Micro"), so the uint8 MobileNets run on
ai-edge-litert's Interpreter with OpResolverType.BUILTIN_REF: TFLite's reference kernels, no XNNPACK.
"""

from __future__ import annotations

import math
import struct
import time

import numpy as np
import pytest
from conftest import shared_file
from oracles import (TfliteBuilder, first_mismatch, litert_run, litert_tensors, sim_tensors, tflm_run,
                     tflm_tensors)

from tinytrain import simulator
from tinytrain.errors import ModelError, TinyTrainError, UnsupportedModelError
from tinytrain.frontends import load_model
from tinytrain.frontends.tflite import graph_from_tflite, padding_values
from tinytrain.frontends.tflite.reader import read_model
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.quantize import QuantizeAttrs
from tinytrain.verify import verify


def run(graph, x: np.ndarray) -> np.ndarray:
    """The simulator on a batch in the model's own input dtype; output in its own dtype."""
    y = simulator.forward(graph, {graph.inputs[0]: simulator.to_internal(graph, x)})[graph.outputs[0]]
    return simulator.to_external(graph, y)


def to_int8(pixels: np.ndarray) -> np.ndarray:
    return (pixels.astype(np.int16) - 128).astype(np.int8)


@pytest.fixture(scope="module")
def vww():
    data = np.load(shared_file("data/vww96/vww96_dev800.npz"))
    return data["x"], data["y"]


def grayscale(rgb: np.ndarray) -> np.ndarray:
    """PIL's convert('L'): ITU-R 601-2 luma, L = (R*299 + G*587 + B*114) / 1000, rounded (N,H,W,1) uint8."""
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(im).convert("L")) for im in rgb])[..., None]


def read_bmp8(path) -> np.ndarray:
    """Raw 8-bit pixel bytes of an uncompressed BMP, rows top-down (BMP stores them bottom-up)."""
    data = path.read_bytes()
    offset, = struct.unpack_from("<I", data, 10)
    width, height = struct.unpack_from("<ii", data, 18)
    bpp, = struct.unpack_from("<H", data, 28)
    assert bpp == 8 and width % 4 == 0, "expects 8-bit rows without padding"
    rows = np.frombuffer(data, np.uint8, width * abs(height), offset).reshape(abs(height), width)
    return rows[::-1] if height > 0 else rows


# ---- real models ---------------------------------------------------------------------------------

def test_vww_int8_matches_tflite_micro_on_800_images(vww):
    path = shared_file("models/vww_96_int8.tflite")
    graph = load_model(path)
    x, labels = to_int8(vww[0]), vww[1]
    start = time.perf_counter()
    ours = run(graph, x)
    seconds = time.perf_counter() - start
    theirs = tflm_run(path, x)
    assert ours.dtype == theirs.dtype == np.int8 and ours.shape == theirs.shape == (800, 2)
    mismatches = int((ours != theirs).any(axis=1).sum())
    accuracy = float((ours.argmax(1) == labels).mean())
    print(f"vww_96_int8: 800 images, {mismatches} mismatching outputs vs tflite-micro, "
          f"accuracy {accuracy:.4f}, simulator {seconds:.1f} s")
    assert mismatches == 0
    assert 0.80 <= accuracy <= 0.90


def test_person_detect_matches_tflite_micro(vww):
    path = shared_file("models/person_detect.tflite")  # the original file; the full TFLite runtime rejects it
    graph = load_model(path)
    x = to_int8(grayscale(vww[0][:400]))
    ours, theirs = run(graph, x), tflm_run(path, x)
    print(f"person_detect: 400 grayscale images, {int((ours != theirs).any(axis=1).sum())} mismatching outputs")
    np.testing.assert_array_equal(ours, theirs)


def test_person_detect_example_images():
    path = shared_file("models/person_detect.tflite")
    graph = load_model(path)
    person = read_bmp8(shared_file("data/person_detection/person.bmp")).view(np.int8)  # bytes already int8
    no_person = to_int8(read_bmp8(shared_file("data/person_detection/no_person.bmp")))
    x = np.stack([person, no_person])[..., None]
    ours = run(graph, x)
    np.testing.assert_array_equal(ours, tflm_run(path, x))
    assert ours.argmax(1).tolist() == [1, 0]  # outputs are [not a person, person]


def coral_batch(size: int, names=None):
    from PIL import Image

    folder = shared_file("data/coral_images")
    paths = sorted(p for p in folder.iterdir() if p.suffix in (".bmp", ".jpg"))
    if names is not None:
        paths = [p for p in paths if p.name in names]
    images = [np.asarray(Image.open(p).convert("RGB").resize((size, size), Image.BILINEAR)) for p in paths]
    return [p.name for p in paths], np.stack(images)


def test_mobilenet_v1_uint8_matches_reference_kernels():
    path = shared_file("models/mobilenet_v1_0.25_128_quant.tflite")
    labels = shared_file("models/imagenet_labels.txt").read_text().splitlines()
    graph = load_model(path)
    assert graph.uint8_input and graph.uint8_output and simulator.external_input_dtype(graph) == np.uint8
    names, x = coral_batch(128)
    ours = run(graph, x)
    theirs = litert_run(path, x)  # ai-edge-litert BUILTIN_REF: tflite-micro does not run uint8 models
    assert ours.dtype == theirs.dtype == np.uint8
    np.testing.assert_array_equal(ours, theirs)
    top1 = {n: labels[i] for n, i in zip(names, ours.argmax(1))}
    print("mobilenet_v1_0.25_128_quant top-1:", top1)
    expected = {"bird.bmp": ("chickadee",), "cat.bmp": ("cat",), "parrot.jpg": ("macaw",), "sunflower.bmp": ("daisy",),
                "grace_hopper.bmp": ("military uniform", "academic gown"), "kite_and_cold.jpg": ("seashore", "kite"),
                "squat.bmp": ("dumbbell", "barbell")}
    for name, words in expected.items():
        assert any(w in top1[name] for w in words), (name, top1[name])


def test_mobilenet_v2_uint8_with_add_matches_reference_kernels():
    path = shared_file("models/mobilenet_v2_1.0_224_quant.tflite")
    graph = load_model(path)
    assert sum(n.op == "add" for n in graph.nodes) == 10
    _, x = coral_batch(224, {"grace_hopper.bmp", "parrot.jpg"})
    ours = run(graph, x)
    np.testing.assert_array_equal(ours, litert_run(path, x))
    # The logits decide the softmax; check every layer, not only the (mostly zero) probabilities.
    ours = sim_tensors(graph, simulator.to_internal(graph, x[:1]))
    assert first_mismatch(graph, ours, litert_tensors(path, x[:1])) is None


def test_every_layer_matches_tflite_micro(vww):
    path = shared_file("models/vww_96_int8.tflite")
    graph = load_model(path)
    x = to_int8(vww[0][:1])
    assert first_mismatch(graph, sim_tensors(graph, x), tflm_tensors(path, x)) is None


def test_imported_graph_layout():
    graph = load_model(shared_file("models/person_detect.tflite"))
    verify(graph)
    first = graph.nodes[0]
    w = graph.tensors[first.inputs[1]]
    # DEPTHWISE_CONV_2D, depth multiplier 8 on a grayscale input: (1,3,3,8) -> (8,3,3,1), groups = 1.
    assert first.op == "conv2d" and w.shape == (8, 3, 3, 1) and first.attrs.groups == 1
    assert w.quant.axis == 0 and len(w.quant.scale) == 8
    assert graph.tensors[first.inputs[2]].quant.axis == 0  # the file says quantized_dimension 3 for a 1-D bias
    assert graph.source_sha256 and not graph.uint8_input
    # fixed batch-1 graphs run batches of any size
    assert run(graph, np.zeros((3, 96, 96, 1), np.int8)).shape == (3, 2)


# ---- built models: ops the shared models lack ----------------------------------------------------

def _weights(rng, shape):
    return rng.integers(-127, 128, shape).astype(np.int8)


def mixed_model(seed: int = 0) -> bytes:
    """float input -> QUANTIZE -> PAD -> CONV (VALID, stride 2, RELU6) -> DEPTHWISE (SAME, dilation 2, x2,
    RELU_N1_TO_1) -> QUANTIZE (int8 -> int8) -> ADD with a 1x1 CONV branch (one weight scale) -> AVERAGE_POOL
    (SAME, 3x3/2) -> MEAN (rescaling) -> FULLY_CONNECTED from 4-D (per channel) -> FULLY_CONNECTED (one scale)
    -> SOFTMAX -> DEQUANTIZE -> float output; a second output: MEAN with equal quantization, no keep_dims."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    rng = np.random.default_rng(seed)
    b = TfliteBuilder()
    fin = b.tensor("in", (1, 9, 9, 3), "FLOAT32", signature=(-1, 9, 9, 3))
    q0 = b.tensor("q0", (1, 9, 9, 3), "INT8", 0.02, -3)
    b.op("QUANTIZE", [fin], [q0])
    pads = b.tensor("pads", (4, 2), "INT32", data=np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32))
    p0 = b.tensor("p0", (1, 12, 10, 3), "INT8", 0.02, -3)
    b.op("PAD", [q0, pads], [p0])

    def conv(name, x, s_x, w_shape, w_scale, axis, out_shape, s_y, zp_y, kind, options):
        w = b.tensor(f"{name}_w", w_shape, "INT8", w_scale, 0, axis, _weights(rng, w_shape))
        cout = w_shape[axis]
        bias = b.tensor(f"{name}_b", (cout,), "INT32", np.float32(s_x) * np.float32(np.broadcast_to(w_scale, cout)),
                        0, 0, rng.integers(-400, 400, cout).astype(np.int32))
        y = b.tensor(name, out_shape, "INT8", s_y, zp_y)
        b.op(kind, [x, w, bias], [y], options)
        return y

    c1 = conv("c1", p0, 0.02, (4, 3, 3, 3), rng.uniform(0.004, 0.02, 4), 0, (1, 5, 4, 4), 0.03, -128, "CONV_2D",
              s.Conv2DOptionsT(padding=s.Padding.VALID, strideW=2, strideH=2,
                               fusedActivationFunction=s.ActivationFunctionType.RELU6))
    c2 = conv("c2", c1, 0.03, (1, 3, 3, 8), rng.uniform(0.002, 0.01, 8), 3, (1, 5, 4, 8), 0.009, 0,
              "DEPTHWISE_CONV_2D",
              s.DepthwiseConv2DOptionsT(padding=s.Padding.SAME, strideW=1, strideH=1, depthMultiplier=2,
                                        dilationWFactor=2, dilationHFactor=2,
                                        fusedActivationFunction=s.ActivationFunctionType.RELU_N1_TO_1))
    r2 = b.tensor("r2", (1, 5, 4, 8), "INT8", 0.013, 5)
    b.op("QUANTIZE", [c2], [r2])
    c3 = conv("c3", c1, 0.03, (8, 1, 1, 4), [0.011], 0, (1, 5, 4, 8), 0.05, 2, "CONV_2D",
              s.Conv2DOptionsT(padding=s.Padding.SAME, strideW=1, strideH=1))
    a4 = b.tensor("a4", (1, 5, 4, 8), "INT8", 0.05, -1)
    b.op("ADD", [r2, c3], [a4], s.AddOptionsT(fusedActivationFunction=s.ActivationFunctionType.RELU))
    ap = b.tensor("ap", (1, 3, 2, 8), "INT8", 0.05, -1)
    b.op("AVERAGE_POOL_2D", [a4], [ap], s.Pool2DOptionsT(padding=s.Padding.SAME, strideW=2, strideH=2,
                                                         filterWidth=3, filterHeight=3))
    axes = b.tensor("axes", (2,), "INT32", data=np.array([1, 2], np.int32))
    m5 = b.tensor("m5", (1, 1, 1, 8), "INT8", 0.035, -7)
    b.op("MEAN", [ap, axes], [m5], s.ReducerOptionsT(keepDims=True))
    f6 = conv("f6", m5, 0.035, (5, 8), rng.uniform(0.005, 0.02, 5), 0, (1, 5), 0.1, 3, "FULLY_CONNECTED",
              s.FullyConnectedOptionsT())
    f7 = conv("f7", f6, 0.1, (3, 5), [0.0015], 0, (1, 3), 0.02, 0, "FULLY_CONNECTED", s.FullyConnectedOptionsT())
    sm = b.tensor("sm", (1, 3), "INT8", 1 / 256, -128)
    b.op("SOFTMAX", [f7], [sm], s.SoftmaxOptionsT(beta=1.0))
    fout = b.tensor("out", (1, 3), "FLOAT32")
    b.op("DEQUANTIZE", [sm], [fout])
    m8 = b.tensor("m8", (1, 8), "INT8", 0.05, -1)
    b.op("MEAN", [a4, axes], [m8], s.ReducerOptionsT(keepDims=False))
    return b.finish([fin], [fout, m8])


def test_built_model_matches_tflite_micro():
    data = mixed_model()
    graph = graph_from_tflite(data, "mixed", "")
    assert [n.op for n in graph.nodes] == ["pad", "conv2d", "conv2d", "requantize", "conv2d", "add", "avg_pool2d",
                                           "mean", "reshape", "fully_connected", "fully_connected", "softmax", "mean"]
    assert graph.inputs == ("q0",) and graph.outputs == ("sm", "m8")  # float boundary dropped
    rng = np.random.default_rng(1)
    x = rng.uniform(-2.7, 2.7, (24, 1, 9, 9, 3)).astype(np.float32)
    x[0, 0, 0, 0, :] = [0.01, -0.03, 0.049999997]  # halfway cases of QUANTIZE's rounding
    q_in = graph.tensors["q0"]
    xq = get_op("quantize").reference(QuantizeAttrs(half_to_even=False), [x[:, 0]], [None], [q_in])[0]
    outs = simulator.forward(graph, {"q0": xq})
    probs = get_op("dequantize").reference(None, [outs["sm"]], [graph.tensors["sm"]], [None])[0]
    np.testing.assert_array_equal(probs, tflm_run(data, x, output=0))  # float32, bit for bit
    np.testing.assert_array_equal(outs["m8"], tflm_run(data, x, output=1))
    assert len(np.unique(outs["sm"], axis=0)) > 12 and len(np.unique(outs["m8"], axis=0)) > 12  # inputs matter
    assert first_mismatch(graph, sim_tensors(graph, xq[:1]), tflm_tensors(data, x[0])) is None


@pytest.mark.parametrize("padding,size,kernel,stride,dilation", [
    (0, 9, 3, 2, 1), (0, 10, 3, 2, 1), (0, 4, 1, 2, 1), (0, 7, 3, 1, 2), (1, 9, 3, 2, 1), (1, 10, 4, 3, 1)])
def test_padding_follows_compute_padding_height_width(padding, size, kernel, stride, dilation):
    out, before, after = padding_values(padding, size, kernel, stride, dilation)
    effective = (kernel - 1) * dilation + 1
    assert out == (math.ceil(size / stride) if padding == 0 else math.ceil((size - effective + 1) / stride))
    assert (size + before + after - effective) // stride + 1 == out
    assert before == max((out - 1) * stride + effective - size, 0) // 2


# ---- error paths ---------------------------------------------------------------------------------

def assert_one_line(err: pytest.ExceptionInfo, kind: type, *words: str) -> None:
    assert isinstance(err.value, kind) and isinstance(err.value, TinyTrainError)
    message = str(err.value)
    assert "\n" not in message and message
    for w in words:
        assert w in message, message


@pytest.fixture(scope="module")
def vww_bytes() -> bytes:
    return shared_file("models/vww_96_int8.tflite").read_bytes()


def test_truncated_files(tmp_path, vww_bytes):
    for n in (8, 12, 64, 1000, len(vww_bytes) // 2, len(vww_bytes) - 1):
        path = tmp_path / "cut.tflite"
        path.write_bytes(vww_bytes[:n])
        with pytest.raises(TinyTrainError) as err:
            load_model(path)
        assert_one_line(err, ModelError, "cut")


def test_garbage_with_tfl3_tag(tmp_path):
    rng = np.random.default_rng(0)
    for seed_bytes in (b"\x00" * 4, b"\xff\xff\xff\x7f", b"\x10\x00\x00\x00"):
        path = tmp_path / "garbage.tflite"
        path.write_bytes(seed_bytes + b"TFL3" + rng.integers(0, 256, 5000).astype(np.uint8).tobytes())
        with pytest.raises(TinyTrainError) as err:
            load_model(path)
        assert_one_line(err, ModelError, "garbage")


def test_random_corruption_never_crashes(vww_bytes):
    """Flipped bytes anywhere: either a valid import or a one-line TinyTrainError, never a traceback."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        data = bytearray(vww_bytes)
        for pos in rng.integers(0, 4096, 4):  # the tables live before the big buffers... and after them
            data[pos] ^= int(rng.integers(1, 256))
        for pos in rng.integers(len(data) - 6000, len(data), 4):
            data[pos] ^= int(rng.integers(1, 256))
        try:
            graph_from_tflite(bytes(data), "flipped", "")
        except TinyTrainError as e:
            assert "\n" not in str(e)


def test_float_model_is_rejected():
    with pytest.raises(TinyTrainError) as err:
        load_model(shared_file("models/vww_96_float.tflite"))
    assert_one_line(err, UnsupportedModelError, "float", "quantize it to int8 first")


def _patch(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_unsupported_op_is_named(tmp_path, vww_bytes):
    """The operator code of the first operator (CONV_2D) patched to LSTM in both code fields."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    model = s.Model.GetRootAsModel(vww_bytes, 0)
    code = model.OperatorCodes(model.Subgraphs(0).Operators(0).OpcodeIndex())._tab
    deprecated, builtin = code.Offset(4), code.Offset(10)  # fields 0 and 3 of OperatorCode
    assert deprecated and builtin
    data = _patch(vww_bytes, code.Pos + builtin, "<i", s.BuiltinOperator.LSTM)
    data = _patch(data, code.Pos + deprecated, "<b", s.BuiltinOperator.LSTM)
    path = tmp_path / "lstm.tflite"
    path.write_bytes(data)
    with pytest.raises(TinyTrainError) as err:
        load_model(path)
    assert_one_line(err, UnsupportedModelError, "LSTM", "not supported", "CONV_2D", "FULLY_CONNECTED")


def _scale_offset(data: bytes, tensor_index: int) -> int:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    t = s.Model.GetRootAsModel(data, 0).Subgraphs(0).Tensors(tensor_index)
    q = t.Quantization()
    return q._tab.Vector(q._tab.Offset(8))  # scale is field 2 (vtable slot 8): start of the float vector


@pytest.mark.parametrize("value", [float("nan"), 0.0, -0.5])
def test_bad_scale_is_rejected(tmp_path, vww_bytes, value):
    model = read_model(vww_bytes)
    weight = model.operators[2].inputs[1]  # a pointwise conv's per-channel weight
    data = _patch(vww_bytes, _scale_offset(vww_bytes, weight) + 4, "<f", value)
    path = tmp_path / "bad_scale.tflite"
    path.write_bytes(data)
    with pytest.raises(TinyTrainError) as err:
        load_model(path)
    assert_one_line(err, ModelError, "scale", model.tensors[weight].name)


def test_built_model_errors():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    def conv_model(*, w_scales=(0.01, 0.02), w_data=True, signature=None, subgraphs=1, order_ok=True, dtype="INT8",
                   act=s.ActivationFunctionType.RELU):
        b = TfliteBuilder()
        x = b.tensor("x", (1, 4, 4, 3), dtype, 0.02, 0, signature=signature)
        w = b.tensor("w", (2, 1, 1, 3), "INT8", list(w_scales), 0, 0,
                     np.ones((2, 1, 1, 3), np.int8) if w_data else None)
        y = b.tensor("y", (1, 4, 4, 2), "INT8", 0.05, 0)
        z = b.tensor("z", (1, 4, 4, 2), "INT8", 0.05, 0)
        options = s.Conv2DOptionsT(strideW=1, strideH=1, fusedActivationFunction=act)
        first = ("CONV_2D", [x, w], [y], options)
        second = ("RESHAPE", [y], [z], None)
        for op in ((first, second) if order_ok else (second, first)):
            b.op(*op)
        return b.finish([x], [z], subgraphs)

    cases = [
        (conv_model(w_scales=(0.01, 0.02, 0.03)), ModelError, ("3 scales",)),
        (conv_model(w_data=False), ModelError, ("no data", "'w'")),
        (conv_model(signature=(1, -1, -1, 3)), UnsupportedModelError, ("dynamic shape",)),
        (conv_model(subgraphs=2), UnsupportedModelError, ("2 subgraphs",)),
        (conv_model(order_ok=False), ModelError, ("before any operator writes it",)),
        (conv_model(dtype="INT16"), UnsupportedModelError, ("INT16",)),
        (conv_model(act=s.ActivationFunctionType.TANH), UnsupportedModelError, ("TANH",)),
    ]
    assert graph_from_tflite(conv_model(), "ok", "").nodes[0].op == "conv2d"
    for data, kind, words in cases:
        with pytest.raises(TinyTrainError) as err:
            graph_from_tflite(data, "bad", "")
        assert_one_line(err, kind, "bad: ", *words)


def test_fused_relu6_clamp_divides_in_float32():
    """TFLite's CalculateActivationRangeQuantized rounds float32(6) / float32(scale): with this scale the
    float32 quotient is 5.5 (-> 6), the double one 5.4999998 (-> 5)."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    scale = 1.0909091234207153
    b = TfliteBuilder()
    x = b.tensor("x", (1, 2, 2, 3), "INT8", 0.5, 0)
    w = b.tensor("w", (2, 1, 1, 3), "INT8", [0.5, 0.5], 0, 0, np.full((2, 1, 1, 3), 127, np.int8))
    y = b.tensor("y", (1, 2, 2, 2), "INT8", scale, -128)
    b.op("CONV_2D", [x, w], [y], s.Conv2DOptionsT(strideW=1, strideH=1,
                                                  fusedActivationFunction=s.ActivationFunctionType.RELU6))
    data = b.finish([x], [y])
    graph = graph_from_tflite(data, "relu6", "")
    assert graph.nodes[0].attrs.act_max == -128 + 6
    xs = np.full((1, 1, 2, 2, 3), 127, np.int8)
    np.testing.assert_array_equal(simulator.forward(graph, {"x": xs[:, 0]})["y"], tflm_run(data, xs))


def test_quantize_rounds_half_away_from_zero_like_tflite():
    t = Tensor("q", (1, 6), DType.INT8, Role.ACTIVATION, QuantParams.per_tensor(1.0, 0))
    x = np.array([[0.49999997, -0.49999997, 0.5, -0.5, 1.5, -2.5]], np.float32)
    q = get_op("quantize").reference(QuantizeAttrs(half_to_even=False), [x], [None], [t])[0]
    assert q.tolist() == [[0, 0, 1, -1, 2, -3]]


# (weight scale, accumulator) pairs where the double and the float32 product of s_in * s_w give different
# fixed-point multipliers *and* different outputs (found by search; asserted below), s_in = 0.0371, s_out = 0.0213.
S_IN, S_OUT = float(np.float32(0.0371)), float(np.float32(0.0213))
DISCRIMINATING = ((0.00022739233099855483, 122453), (0.00010819470480782911, 517373),
                  (0.00010330553050152957, 480726), (0.00028255110373720527, 173729))


def _rule_outputs(s_w: float, acc: int) -> tuple[int, int]:
    from tinytrain.quant import multiply_by_quantized_multiplier, quantize_multiplier

    double = quantize_multiplier(S_IN * s_w / S_OUT)
    single = quantize_multiplier(float(np.float32(S_IN) * np.float32(s_w)) / S_OUT)
    return int(multiply_by_quantized_multiplier(acc, *double)), int(multiply_by_quantized_multiplier(acc, *single))


@pytest.mark.parametrize("kind", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "CONV_2D_UINT8",
                                  "DEPTHWISE_CONV_2D_UINT8", "FULLY_CONNECTED_UINT8"])
def test_requantization_multiplier_rule_matches_the_runtime(kind):
    """A zero input makes the accumulator equal the bias, so outputs show which multiplier the runtime used:
    double(s_in) * double(s_w) for int8 conv / depthwise (tflite-micro) and every FULLY_CONNECTED (one weight
    scale here; tflite-micro for int8, the reference kernels for uint8); float32(s_in * s_w) for uint8 conv /
    depthwise (reference kernels). uint8 models run on ai-edge-litert BUILTIN_REF (tflite-micro refuses them)."""
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    uint8 = kind.endswith("UINT8")
    op = kind.replace("_UINT8", "")
    float_product = uint8 and op != "FULLY_CONNECTED"
    per_channel = op != "FULLY_CONNECTED" and not uint8
    pairs = DISCRIMINATING if per_channel else DISCRIMINATING[:1]
    for s_w, acc in pairs:
        double, single = _rule_outputs(s_w, acc)
        assert double != single and _rule_outputs(s_w, -acc) == (-double, -single)
    scales = [s_w for s_w, _ in pairs for _ in (0, 1)]
    bias = np.array([sign * acc for _, acc in pairs for sign in (1, -1)], np.int32)
    cout = len(bias)
    dtype, zp = ("UINT8", 128) if uint8 else ("INT8", 0)
    rng = np.random.default_rng(0)
    b = TfliteBuilder()

    def weight(shape, axis):
        data = rng.integers(0, 256, shape).astype(np.uint8) if uint8 else _weights(rng, shape)
        return b.tensor("w", shape, dtype, scales if per_channel else scales[:1], 131 if uint8 else 0, axis, data)

    if op == "FULLY_CONNECTED":
        x, w = b.tensor("x", (1, 3), dtype, S_IN, zp), weight((cout, 3), 0)
        y_shape, options = (1, cout), s.FullyConnectedOptionsT()
    elif op == "DEPTHWISE_CONV_2D":
        x, w = b.tensor("x", (1, 1, 1, cout), dtype, S_IN, zp), weight((1, 1, 1, cout), 3)
        y_shape, options = (1, 1, 1, cout), s.DepthwiseConv2DOptionsT(strideW=1, strideH=1, depthMultiplier=1)
    else:
        x, w = b.tensor("x", (1, 1, 1, 3), dtype, S_IN, zp), weight((cout, 1, 1, 3), 0)
        y_shape, options = (1, 1, 1, cout), s.Conv2DOptionsT(strideW=1, strideH=1)
    bt = b.tensor("b", (cout,), "INT32", [S_IN * v for v in scales], 0, 0, bias)
    y = b.tensor("y", y_shape, dtype, S_OUT, zp)
    b.op(op, [x, w, bt], [y], options)
    data = b.finish([x], [y])
    graph = graph_from_tflite(data, kind.lower(), "")
    xs = np.full((1,) + tuple(graph.tensors["x"].shape), zp, np.uint8 if uint8 else np.int8)
    theirs = (litert_run if uint8 else tflm_run)(data, xs).reshape(-1).astype(np.int64) - zp
    ours = run(graph, xs[:, 0]).reshape(-1).astype(np.int64) - zp
    expected = [_rule_outputs(s_w, sign * acc)[1 if float_product else 0] for s_w, acc in pairs for sign in (1, -1)]
    assert theirs.tolist() == expected  # the runtime follows the documented rule...
    assert ours.tolist() == expected  # ...and so does the importer
