"""The real TensorFlow Lite converter, where TensorFlow is installed (the ``tf`` extra; skipped cleanly without it):
a Keras MobileNetV2 (alpha 0.35), a MobileNetV3-Small-like Keras model (hard-swish, squeeze-excite with a
hard-sigmoid gate, which the converter writes as HARD_SWISH and ADD / MUL by scalar constants) and a TF1-style
graph (fake-quant nodes, uint8) each convert, import, equal the runtime on every tensor (TFLite Micro for int8;
LiteRT's reference kernels for the uint8 TF1 model, which TFLite Micro does not run), compile a last-k:2 step
within 256 KB (MobileNetV2's last 1x1 convolution of 1280 channels does not: the deepest preset that fits)
and train 3 steps alike on the simulator and the emitted C.

The Keras heads are logits (``classifier_activation=None``): TFLite Micro's Python interpreter aborts on the SOFTMAX
this TensorFlow's converter writes, so it could not be the oracle of one.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

import tinytrain
from oracles import first_mismatch, litert_tensors, sim_tensors, tflm_run, tflm_tensors
from tinytrain.errors import BudgetError
from tinytrain.frontends import load_model
from tinytrain.simulator import forward, to_internal

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tf]')")
pytest.importorskip("tflite_micro")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytestmark = pytest.mark.filterwarnings("ignore::tinytrain.errors.Notice")


def _convert(model, size: int, input_type=None) -> bytes:
    rng = np.random.default_rng(0)
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([rng.random((1, size, size, 3), np.float32)] for _ in range(16))
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type, c.inference_output_type = input_type or tf.int8, tf.int8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return c.convert()


def mobilenet_v3_small_like(size: int = 32):
    """Conv -> hard-swish -> depthwise -> squeeze-excite (GAP, Dense ReLU, Dense, hard-sigmoid gate, Multiply) ->
    1x1 Conv (+ residual) -> hard-swish -> GAP -> Dense logits, as MobileNetV3-Small's blocks are built."""
    keras = tf.keras
    layers = keras.layers
    keras.utils.set_random_seed(0)

    def hard_sigmoid(x):
        return layers.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)

    inp = keras.Input((size, size, 3))
    x = layers.Conv2D(8, 3, strides=2, padding="same")(inp)
    x = layers.Activation("hard_swish")(x)
    y = layers.DepthwiseConv2D(3, padding="same")(x)
    s = layers.GlobalAveragePooling2D(keepdims=True)(y)
    s = layers.Conv2D(4, 1, activation="relu")(s)
    s = hard_sigmoid(layers.Conv2D(8, 1)(s))
    y = layers.Multiply()([y, s])
    y = layers.Conv2D(8, 1)(y)
    x = layers.Activation("hard_swish")(layers.Add()([x, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(5)(x))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Converted models by name (written lazily: MobileNetV2 takes ~20 s to convert)."""
    out, cache = tmp_path_factory.mktemp("tf"), {}

    def get(name: str):
        if name not in cache:
            if name == "mobilenet_v2_035":
                m = tf.keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=5,
                                                      classifier_activation=None)
                data = _convert(m, 96)
            elif name == "mobilenet_v3_small_like_uint8_input":
                data = _convert(mobilenet_v3_small_like(), 32, tf.uint8)
            else:
                data = _convert(mobilenet_v3_small_like(), 32)
            (out / f"{name}.tflite").write_bytes(data)
            cache[name] = out / f"{name}.tflite"
        return cache[name]
    return get


def _deepest_fitting(path) -> str:
    """last-k:2 if its step fits 256 KB, else the deepest preset the refusal names as fitting."""
    try:
        assert tinytrain.compile(path, update="last-k:2", sram="256k").plan is not None
        return "last-k:2"
    except BudgetError as e:
        found = re.search(r"--update '(bias-only \(last \d+\))'", str(e))
        assert found, str(e)
        assert tinytrain.compile(path, update=found.group(1), sram="256k").plan is not None
        return found.group(1)


def _exact_and_trains(path, size: int) -> None:
    data, graph = path.read_bytes(), load_model(path)
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (8, size, size, 3)).astype(np.int8)
    assert first_mismatch(graph, sim_tensors(graph, x[:1]), tflm_tensors(data, x[0])) is None
    ours = forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    np.testing.assert_array_equal(ours, tflm_run(data, x).reshape(ours.shape))
    update = _deepest_fitting(path)
    images = rng.integers(0, 256, (3, size, size, 3), dtype=np.uint8), rng.integers(0, 5, 3)
    sim, c = (tinytrain.train(path, images, update=update, steps=3, engine=e) for e in ("sim", "c"))
    assert np.array_equal(sim.losses.view(np.uint32), c.losses.view(np.uint32))
    assert all(np.array_equal(v, c.state.tensors[k]) for k, v in sim.state.tensors.items())


@pytest.mark.slow
def test_keras_mobilenet_v2_035_full_int8_is_exact_and_trains(converted):
    _exact_and_trains(converted("mobilenet_v2_035"), 96)


def test_a_mobilenet_v3_small_like_keras_model_is_exact_and_trains(converted):
    path = converted("mobilenet_v3_small_like")
    ops = [n.op for n in load_model(path).nodes]
    assert "hard_swish" in ops and "const_affine" in ops and "mul" in ops  # the gate: ADD 3, MUL 1/6; x * gate
    _exact_and_trains(path, 32)


def test_a_uint8_input_with_an_int8_output_is_exact_and_trains(converted):
    """inference_input_type tf.uint8, output tf.int8: the uint8 input is the int8 one with zero point - 128 (exact);
    every tensor equals TFLite Micro on the uint8 input, and 3 steps train alike on the simulator and the C."""
    path = converted("mobilenet_v3_small_like_uint8_input")
    data, graph = path.read_bytes(), load_model(path)
    assert graph.uint8_input and not graph.uint8_output
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (8, 32, 32, 3)).astype(np.uint8)
    assert first_mismatch(graph, sim_tensors(graph, to_internal(graph, x[:1])), tflm_tensors(data, x[0])) is None
    ours = forward(graph, {graph.inputs[0]: to_internal(graph, x)})[graph.outputs[0]]
    np.testing.assert_array_equal(ours, tflm_run(data, x).reshape(ours.shape))
    images = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8), rng.integers(0, 5, 3)
    sim, c = (tinytrain.train(path, images, update="last-k:2", steps=3, engine=e) for e in ("sim", "c"))
    assert np.array_equal(sim.losses.view(np.uint32), c.losses.view(np.uint32))
    assert all(np.array_equal(v, c.state.tensors[k]) for k, v in sim.state.tensors.items())


def _tf1_graph() -> bytes:
    """A TF1-style graph (placeholders, fake-quant nodes) converted to uint8 with from_session."""
    tf1 = tf.compat.v1
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        fq = tf.quantization.fake_quant_with_min_max_args
        x = tf1.placeholder(tf.float32, (1, 8, 8, 3), name="x")
        w = fq(tf.constant(rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32)), -1.0, 1.0)
        y = tf.nn.conv2d(fq(x, 0.0, 1.0), w, [1, 2, 2, 1], "SAME") + rng.normal(0, 0.1, 4).astype(np.float32)
        p = fq(tf.reduce_mean(fq(tf.nn.relu6(y), 0.0, 6.0), [1, 2]), 0.0, 6.0)
        z = tf.matmul(p, fq(tf.constant(rng.normal(0, 0.3, (4, 3)).astype(np.float32)), -1.0, 1.0))
        logits = tf.identity(fq(z, -4.0, 4.0), name="logits")
        with tf1.Session(graph=g) as sess:
            c = tf1.lite.TFLiteConverter.from_session(sess, [x], [logits])
            c.inference_type = tf.uint8
            c.quantized_input_stats = {"x": (0.0, 255.0)}
            return c.convert()


def test_a_tf1_style_uint8_graph_is_exact_and_trains(tmp_path):
    path = tmp_path / "tf1.tflite"
    path.write_bytes(_tf1_graph())
    graph = load_model(path)
    assert graph.uint8_input and graph.uint8_output
    x = np.random.default_rng(1).integers(0, 256, (1, 8, 8, 3), dtype=np.uint8)
    assert first_mismatch(graph, sim_tensors(graph, to_internal(graph, x)), litert_tensors(path, x)) is None
    images = np.random.default_rng(2).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8), np.array([0, 1, 2])
    sim, c = (tinytrain.train(path, images, update="last-k:2", steps=3, engine=e) for e in ("sim", "c"))
    assert np.array_equal(sim.losses.view(np.uint32), c.losses.view(np.uint32))
    assert all(np.array_equal(v, c.state.tensors[k]) for k, v in sim.state.tensors.items())
