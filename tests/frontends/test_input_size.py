"""A model's layers at another input size (tinytrain/frontends/resize.py, ``--input-size``): shapes, identity at
the model's own size, the forward pass bit-exact against TFLite's reference kernels running the same weights at
the new size, training on the host C engine bit-exact against the simulator, and one-line refusals."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tinytrain
from conftest import shared_file
from ir_builders import ModelBuilder, tiny_mobilenet
from oracles import sim_tensors
from tinytrain.cli import main
from tinytrain.errors import UsageError
from tinytrain.frontends.resize import parse_input_size, resize_input
from tinytrain.ops.avg_pool2d import divide_rounded
from tinytrain.simulator import forward, to_external, to_internal
from tinytrain.verify import verify

ROOT = Path(__file__).resolve().parents[2]
MBV1 = "models/mobilenet_v1_0.5_160_quant.tflite"


def _shape(graph, name):
    return graph.tensors[name].shape


def _pooled(hw: int = 8, k: int = 4):
    """input -> conv 3x3/2 -> conv 1x1 -> average pool over the whole (k x k) map -> flatten -> fc."""
    mb = ModelBuilder("pooled", seed=3)
    h = mb.conv(mb.conv(mb.input((hw, hw, 3)), 8, 3, 2), 12, 1)
    pooled = mb.avg_pool(h, k, 1)
    return mb.build(mb.fc(mb.reshape(pooled, (12,)), 4)), h, pooled


def test_parse_input_size():
    assert parse_input_size(128) == parse_input_size("128") == (128, 128)
    assert parse_input_size("96x128") == parse_input_size((96, 128)) == (96, 128)
    for bad in ("12a", "x", "0", "4x-1"):
        with pytest.raises(UsageError, match="--input-size"):
            parse_input_size(bad)


def test_tiny_mobilenet_at_other_sizes():
    graph, _ = tiny_mobilenet(hw=16)
    assert resize_input(graph, 16) is graph  # the model's own size: the same graph
    for size in (8, 24, (8, 24)):
        g = resize_input(graph, size)
        verify(g)
        h, w = parse_input_size(size)
        assert _shape(g, g.inputs[0]) == (1, h, w, 3)
        assert _shape(g, g.outputs[0]) == _shape(graph, g.outputs[0])  # the mean stays global
        assert g.nodes[0].attrs == graph.nodes[0].attrs  # weights, attrs, quantization untouched
        assert all(g.tensors[t.name].data is t.data for t in graph.constants())
        x = np.random.default_rng(0).integers(-128, 128, (2, h, w, 3)).astype(np.int8)
        assert forward(g, {g.inputs[0]: x})[g.outputs[0]].shape == (2, 5)


def test_a_global_average_pool_stays_global():
    """The pool that covered the 4x4 map covers the 6x6 one: the rounded average of all 36 cells."""
    graph, conv, pooled = _pooled()
    g = resize_input(graph, 12)
    pool = next(n for n in g.nodes if n.op == "avg_pool2d")
    assert pool.attrs.kernel == (6, 6) and _shape(g, pooled) == (1, 1, 1, 12)
    x = np.random.default_rng(1).integers(-128, 128, (3, 12, 12, 3)).astype(np.int8)
    values = sim_tensors(g, x)
    sums = values[conv].astype(np.int64).sum(axis=(1, 2))
    assert (values[pooled].reshape(3, 12) == divide_rounded(sums, 36, False)).all()


def test_refusals_are_one_line(capsys):
    graph, _, _ = _pooled()
    with pytest.raises(UsageError, match="stride 2.*multiple of 2"):
        resize_input(graph, 9)
    mb = ModelBuilder("flat", seed=1)
    h = mb.conv(mb.input((8, 8, 3)), 4, 3, 2)
    flat = mb.build(mb.fc(mb.reshape(h, (64,)), 3))
    with pytest.raises(UsageError, match="would get .* = 144; its weights fix the number of features"):
        resize_input(flat, 12)
    mb = ModelBuilder("fixed", seed=2)
    fixed = mb.build(mb.avg_pool(mb.conv(mb.input((8, 8, 3)), 4, 3, 1, padding=0), 3, 3))  # 6x6 -> 2x2
    with pytest.raises(UsageError, match="too small for layer pool0"):
        resize_input(fixed, 4)
    x = flat.tensors[flat.inputs[0]]
    vector = replace(flat, tensors={**flat.tensors, x.name: replace(x, shape=(1, 192))})
    with pytest.raises(UsageError, match="needs an image model"):
        resize_input(vector, 8)
    model = ROOT / "models" / "proxyless-w0.3.onnx"
    assert main(["eval", str(model), "--data", "lfw", "--input-size", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "multiple of 32" in err and "Traceback" not in err


def test_onnx_mean_gets_the_scale_of_its_new_count():
    from tinytrain.ops.mean import mean_requant

    path = ROOT / "models" / "proxyless-w0.3.onnx"
    graph = tinytrain.load_model(path)
    assert tinytrain.load_model(path, input_size=128).nodes == graph.nodes
    g = tinytrain.load_model(path, input_size=96, new_head=3)
    mean = next(n for n in g.nodes if n.op == "mean")
    x, y = (g.tensors[t].quant.s for t in (mean.inputs[0], mean.outputs[0]))
    assert _shape(g, mean.inputs[0])[1:3] == (3, 3) and mean.attrs.requant == mean_requant(x, 9, y)


@pytest.fixture(scope="module")
def mbv1():
    return tinytrain.load_model(shared_file(MBV1))


def _tflite_at(data: bytes, pool: int):
    """The TFLite model with its average pool's window set to ``pool`` (what a converter writes at that size)."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    for op in model.subgraphs[0].operators:
        if isinstance(op.builtinOptions, s.Pool2DOptionsT):
            op.builtinOptions.filterWidth = op.builtinOptions.filterHeight = pool
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.slow
def test_mobilenet_v1_at_128_matches_tflite_reference_kernels(mbv1):
    """The uint8 model (TFLite Micro refuses uint8; LiteRT's reference kernels are the oracle for it, as in
    tests/oracles.py) with its input resized to 128x128 and its pool to the 4x4 map, against the simulator."""
    from oracles import litert_interpreter

    assert resize_input(mbv1, 160) is mbv1
    g = resize_input(mbv1, 128)
    assert [_shape(g, n.outputs[0])[1] for n in g.nodes if n.op == "conv2d"][:4] == [64, 64, 64, 32]
    assert _shape(g, g.nodes[-5].outputs[0]) == (1, 4, 4, 512) and g.nodes[-4].attrs.kernel == (4, 4)
    interp = litert_interpreter(_tflite_at(shared_file(MBV1).read_bytes(), 4))
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    interp.resize_tensor_input(inp["index"], [1, 128, 128, 3])
    interp.allocate_tensors()
    x = np.random.default_rng(0).integers(0, 256, (6, 128, 128, 3)).astype(np.uint8)
    theirs = []
    for item in x:
        interp.set_tensor(inp["index"], item[None])
        interp.invoke()
        theirs.append(interp.get_tensor(out["index"]).copy())
    ours = to_external(g, forward(g, {g.inputs[0]: to_internal(g, x)})[g.outputs[0]])
    assert ours.shape == (6, 1001) and (ours == np.concatenate(theirs)).all()


@pytest.mark.slow
def test_training_at_128_on_the_host_c_matches_the_simulator(mbv1):
    """The plan that fits 256 KB only at 128 (benchmarks/results/input_size.md): biases of the last 21 layers, a
    quarter of the last pointwise convolution's rows, the new head; the backward runs through 21 layers at 128."""
    rng = np.random.default_rng(0)
    data = (rng.integers(0, 256, (6, 28, 28, 1)).astype(np.uint8), rng.integers(0, 10, 6))  # resized to 128x128
    plan = {"version": 1, "bias_last_k": 21, "weights": [{"conv": 26, "ratio": 0.25}, {"conv": 27, "ratio": 1.0}]}
    runs = [tinytrain.train(mbv1, data, plan=plan, new_head=10, steps=3, engine=e, input_size=128)
            for e in ("sim", "c")]
    assert runs[0].graph.tensors[runs[0].graph.inputs[0]].shape == (1, 128, 128, 3)
    assert runs[0].state.tensors.keys() == runs[1].state.tensors.keys() and runs[0].state.step == runs[1].state.step
    for name, value in runs[0].state.tensors.items():
        assert np.array_equal(value, runs[1].state.tensors[name]), name
    assert np.array_equal(runs[0].losses, runs[1].losses)


@pytest.mark.slow
def test_compile_at_a_smaller_size(tmp_path, capsys):
    """The command line's --input-size reaches the compiled step: the same plan peaks lower at 96 than at 128."""
    import json

    model = str(ROOT / "models" / "proxyless-w0.3.onnx")
    args = ["compile", model, "--new-head", "2", "--update", "last-k:1", "--sram", "256k"]
    assert main([*args, "--input-size", "96", "-o", str(tmp_path / "96")]) == 0
    small = json.loads((tmp_path / "96" / "report.json").read_text())
    full = tinytrain.compile(model, new_head=2, update="last-k:1")
    assert small["fits"] and small["peak_sram_bytes"] < full.report.peak_sram_bytes
    assert small["model_sha256"] == full.graph.source_sha256
    assert capsys.readouterr().err == ""


def test_a_strided_max_pool_keeps_its_windows_on_the_padding():
    """A 2x2/2 max pool with SAME-style padding is a strided window like a convolution (issue 42: it was left out of
    the resize pass's window list): a size whose change is not a multiple of its stride is refused, naming it; one
    that is keeps the padding and runs."""
    mb = ModelBuilder("maxpooled", seed=4)
    pooled = mb.max_pool(mb.conv(mb.input((8, 8, 3)), 4, 1), 2, 2, padding=(0, 0, 1, 1))
    graph = mb.build(pooled)
    with pytest.raises(UsageError, match=r"layer \S+ \(stride 2\) would see 9 rows instead of 8.*multiple of 2"):
        resize_input(graph, 9)
    g = resize_input(graph, 10)
    assert _shape(g, pooled) == (1, 5, 5, 4)
    forward(g, {g.inputs[0]: np.zeros((1, 10, 10, 3), np.int8)})
