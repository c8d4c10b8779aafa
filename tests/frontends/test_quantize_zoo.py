"""The quantizer zoo (tests/quantizers/: small models in the forms Brevitas, NNCF, PyTorch and LiteRT-torch exports
write, built by make_zoo.py): each imports, its forward equals onnxruntime's (tflite-micro's for the TFLite one), a last-k:2 step compiles within 256 KB and 3 steps
train alike on the simulator and the emitted C; and each form tinytrain cannot take exactly is refused in one line
naming the node, what it is and what to do.

Exactness: byte for byte, except where the import folds a float chain into one layer (BatchNormalization, a
constant Mul / Add / Sub after a Conv: frontends/onnx/fold.py): the folded layer rounds once from its accumulator,
onnxruntime rounds its float32 chain at the QuantizeLinear, and the folded shift is an int32 of the layer's bias
scale; values within float32 error of a tie (0.3 % and 0.6 % of the logits of these 200 inputs) differ by one LSB.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import tinytrain
from onnx_oracle import ir_layout, unoptimized_session
from tinytrain.errors import Notice, TinyTrainError, UnsupportedModelError
from tinytrain.frontends import load_model
from tinytrain.frontends.onnx import graph_from_onnx
from tinytrain.simulator import forward

HERE = Path(__file__).resolve().parents[1] / "quantizers"
sys.path.insert(0, str(HERE))
import make_zoo  # noqa: E402

pytest.importorskip("onnxruntime")
FOLDED = {"bn_unfolded", "const_ops", "transpose_const"}  # at most 1 LSB (module docstring)
pytestmark = pytest.mark.filterwarnings("ignore::tinytrain.errors.Notice")


def _ours_and_theirs(path: Path, xs: np.ndarray):
    graph = load_model(path)
    q, oq = graph.tensors[graph.inputs[0]].quant, graph.tensors[graph.outputs[0]].quant
    xq = ir_layout(np.clip(np.rint(xs / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8))
    ours = forward(graph, {graph.inputs[0]: xq})[graph.outputs[0]].astype(np.int64)
    session = unoptimized_session(onnx.load(str(path)))
    y = np.concatenate([session.run(None, {"x": xs[i:i + 1]})[0] for i in range(len(xs))])
    return ours, np.clip(np.rint(y / np.float32(oq.s)) + oq.zp, -128, 127).astype(np.int64)


@pytest.mark.parametrize("name", list(make_zoo.ZOO))
def test_zoo_model_matches_onnxruntime(name):
    ours, theirs = _ours_and_theirs(HERE / f"{name}.onnx", make_zoo.inputs(50, 11))
    diff = np.abs(ours - theirs)
    assert diff.max() <= (1 if name in FOLDED else 0), (name, diff.max())
    assert (diff == 0).mean() >= 0.99


def test_litert_transpose_matches_tflite_micro():
    """The NCHW input's TRANSPOSE dropped (stated), the rest byte for byte with tflite-micro."""
    pytest.importorskip("tflite_micro")
    from oracles import tflm_run

    path = HERE / "litert_transpose.tflite"
    with pytest.warns(Notice, match=r"operator 1 \(TRANSPOSE of the \[1, 3, 8, 8\] NCHW input to NHWC\) dropped"):
        graph = load_model(path)
    xs = np.random.default_rng(2).random((50, 3, 8, 8), np.float32)
    q = graph.tensors[graph.inputs[0]].quant
    xq = np.clip(np.floor(xs / np.float32(q.s) + 0.5) + q.zp, -128, 127).astype(np.int8)  # TFLite rounds half up
    ours = forward(graph, {graph.inputs[0]: ir_layout(xq)})[graph.outputs[0]]
    oq = graph.tensors[graph.outputs[0]].quant
    theirs = np.rint(tflm_run(path.read_bytes(), xs[:, None]) / np.float32(oq.s)) + oq.zp
    np.testing.assert_array_equal(ours, theirs.reshape(ours.shape))
    assert len(np.unique(ours, axis=0)) > 10


@pytest.mark.parametrize("name", ["litert_mbv2", "litert_cnn"])
def test_real_litert_torch_export_matches_tflite_micro(name):
    """make_litert.py's real LiteRT-torch exports, byte for byte with tflite-micro on every tensor and on the logits
    of 200 inputs: the int8 NCHW input's TRANSPOSE dropped (stated), the TRANSPOSE before the MEAN read as the mean's
    axes, the MobileNetV2-style net's float residual adds (chained: ADD -> ADD, the first sum never rounded to int8
    on its way to the second) each a ``float_add`` of every operand of its chain, TFLite's float32 arithmetic (two
    int8 adds, the first sum rounded, were up to 3 LSB off, 83 % of the logits equal)."""
    pytest.importorskip("tflite_micro")
    from oracles import first_mismatch, sim_tensors, tflm_run, tflm_tensors

    path = HERE / f"{name}.tflite"
    with pytest.warns(Notice, match=r"operator 0 \(TRANSPOSE of the \[1, 3, 16, 16\] NCHW input to NHWC\) dropped"):
        graph = load_model(path)
    xs = np.random.default_rng(2).random((200, 3, 16, 16), np.float32)
    q = graph.tensors[graph.inputs[0]].quant
    xq = np.clip(np.floor(xs / np.float32(q.s) + 0.5) + q.zp, -128, 127).astype(np.int8)
    for i in range(0, 200, 50):
        theirs = tflm_tensors(path.read_bytes(), xq[i:i + 1])
        assert first_mismatch(graph, sim_tensors(graph, ir_layout(xq[i:i + 1])), theirs) is None
    ours = forward(graph, {graph.inputs[0]: ir_layout(xq)})[graph.outputs[0]]
    np.testing.assert_array_equal(ours, tflm_run(path.read_bytes(), xq[:, None]).reshape(ours.shape))
    assert len(np.unique(ours, axis=0)) > 10


def test_a_residual_add_pooled_in_float_is_refused_naming_the_add_and_the_fix(capsys):
    """LiteRT-torch's export of a net whose last residual add is pooled directly (ADD -> TRANSPOSE -> MEAN, all
    float, up to the QUANTIZE after the mean): int8 ops would round the sum before the mean."""
    from tinytrain.cli import main

    assert main(["inspect", str(HERE / "litert_pooled_residual.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "operator 14 (ADD) is a residual add left in float and averaged by operator 16 (MEAN)" in err
    assert "1x1 head conv" in err


def test_make_litert_rebuilds_the_committed_exports(tmp_path):
    """The fixtures are what make_litert.py writes (needs litert-torch: its own environment, see the script)."""
    pytest.importorskip("litert_torch")
    import make_litert

    for name, path in make_litert.build(tmp_path).items():
        assert path.read_bytes() == (HERE / path.name).read_bytes(), name


def test_tf_converter_constant_mul_add_sub_match_tflite_micro_on_every_tensor():
    """The TF converter's unfused hard-swish (ADD 3 RELU6, MUL 1/6, MUL), SUB and MUL of a scalar constant: each a
    table of TFLite Micro's kernel, byte for byte on every tensor of 50 inputs."""
    pytest.importorskip("tflite_micro")
    from oracles import first_mismatch, sim_tensors, tflm_run, tflm_tensors

    data = (HERE / "tf_const_ops.tflite").read_bytes()
    graph = load_model(HERE / "tf_const_ops.tflite")
    assert [n.op for n in graph.nodes].count("const_affine") == 4
    xs = np.random.default_rng(2).random((50, 8, 8, 3), np.float32)
    q = graph.tensors[graph.inputs[0]].quant
    xq = np.clip(np.floor(xs / np.float32(q.s) + 0.5) + q.zp, -128, 127).astype(np.int8)  # TFLite rounds half up
    for i in range(0, 50, 10):
        assert first_mismatch(graph, sim_tensors(graph, xq[i:i + 1]), tflm_tensors(data, xs[i])) is None
    ours = forward(graph, {graph.inputs[0]: xq})[graph.outputs[0]]
    oq = graph.tensors[graph.outputs[0]].quant
    np.testing.assert_array_equal(ours, (np.rint(tflm_run(data, xs) / np.float32(oq.s)) + oq.zp).reshape(ours.shape))
    assert len(np.unique(ours, axis=0)) > 10


def _tf_const_ops_with(change) -> bytes:
    """tf_const_ops.tflite with one operator's inputs changed by ``change(schema, model)``."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    model = s.ModelT.InitFromPackedBuf(bytearray((HERE / "tf_const_ops.tflite").read_bytes()), 0)
    change(s, model)
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _tflite_refusal(data: bytes) -> str:
    from tinytrain.frontends.tflite import graph_from_tflite

    with pytest.raises(UnsupportedModelError) as info:
        graph_from_tflite(data, "m", "0" * 64)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_per_channel_constant_and_a_difference_of_activations_are_refused():
    pytest.importorskip("tflite_micro")

    def per_channel(s, model):
        g = model.subgraphs[0]
        t = next(t for t in g.tensors if t.name == b"mean")
        t.shape = [1, 1, 1, 4]
        model.buffers[t.buffer].data = np.array([-77, -70, 1, 9], np.int8).view(np.uint8)

    msg = _tflite_refusal(_tf_const_ops_with(per_channel))
    assert "operator 5 (SUB) has a constant operand 'mean'" in msg and "scalar constant" in msg and "fold it" in msg

    def two_activations(s, model):
        g = model.subgraphs[0]
        sub = g.operators[5]
        sub.inputs[1] = sub.inputs[0]

    msg = _tflite_refusal(_tf_const_ops_with(two_activations))
    assert "operator 5 (SUB) subtracts two activations" in msg


STEP_MODELS = [f"{name}.onnx" for name in make_zoo.ZOO] + ["litert_transpose.tflite", "tf_const_ops.tflite",
                                                            "litert_mbv2.tflite", "litert_cnn.tflite"]


@pytest.mark.parametrize("name", STEP_MODELS)
def test_zoo_model_compiles_a_step_in_256k_and_trains_alike_on_sim_and_c(name, tmp_path):
    path = HERE / name
    compiled = tinytrain.compile(path, update="last-k:2", sram="256k")
    assert compiled.plan is not None
    rng = np.random.default_rng(0)
    size = 8 if name in ("litert_transpose.tflite", "tf_const_ops.tflite") else 16
    data = rng.integers(0, 256, (3, size, size, 3), dtype=np.uint8), rng.integers(0, 3, 3)
    runs = [tinytrain.train(path, data, update="last-k:2", steps=3, engine=e, input_mapping="unit")
            for e in ("sim", "c")]
    assert np.array_equal(runs[0].losses, runs[1].losses)
    assert runs[0].state.tensors.keys() == runs[1].state.tensors.keys()
    assert all(np.array_equal(v, runs[1].state.tensors[k]) for k, v in runs[0].state.tensors.items())


def test_the_zoo_files_are_what_make_zoo_writes(tmp_path):
    pytest.importorskip("tflite_micro")
    for name, path in make_zoo.build(tmp_path).items():
        assert path.read_bytes() == (HERE / path.name).read_bytes(), name


def test_a_float_output_is_quantized_to_its_reachable_range_and_stated():
    with pytest.warns(Notice, match="graph output 'logits' is the float result of Gemm 'fc': quantized .* the range"):
        load_model(HERE / "float_output.onnx")


# ----- refusals: one line, the node, what it is, what to do

def _model(name: str) -> onnx.ModelProto:
    return onnx.load(str(HERE / f"{name}.onnx"))


def _refusal(model: onnx.ModelProto) -> str:
    with pytest.raises(TinyTrainError) as info:
        graph_from_onnx(model.SerializeToString(), "m")
    message = str(info.value)
    assert isinstance(info.value, UnsupportedModelError) and "\n" not in message
    return message


def _set(model: onnx.ModelProto, name: str, arr: np.ndarray) -> None:
    init = next(i for i in model.graph.initializer if i.name == name)
    init.CopyFrom(numpy_helper.from_array(arr, name))


def test_per_channel_activations_with_different_scales_read_by_a_pool_are_refused():
    m = _model("per_channel_act")
    s = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "pc_scale")).copy()
    s[3] *= 2
    _set(m, "pc_scale", s)
    msg = _refusal(m)  # taken exactly only into a depthwise Conv (channels.py); here a pool reads it
    assert "GlobalAveragePool 'pool'" in msg and "per channel" in msg and "depthwise" in msg and "per tensor" in msg


def test_a_batchnorm_after_no_conv_is_refused():
    m = _model("bn_unfolded")
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    pool = next(n for n in m.graph.node if n.op_type == "GlobalAveragePool")
    # move it after the pool: BatchNormalization of a dequantized mean
    conv_in, bn_out = bn.input[0], bn.output[0]
    for n in m.graph.node:
        n.input[:] = [conv_in if i == bn_out else i for i in n.input]
    bn.input[0], bn.output[0] = pool.output[0], pool.output[0] + "_bn"
    for n in m.graph.node:
        if n is not bn:
            n.input[:] = [bn.output[0] if i == pool.output[0] else i for i in n.input]
    m.graph.node.remove(bn)
    m.graph.node.insert(list(m.graph.node).index(pool) + 1, bn)
    msg = _refusal(m)
    assert "BatchNormalization 'bn1'" in msg and "GlobalAveragePool" in msg and "fold it into the layer" in msg


def test_a_negated_channel_with_a_minus_128_weight_is_refused():
    m = _model("bn_unfolded")
    w = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "w1_quantized")).copy()
    w[5, 0, 0, 0] = -128
    _set(m, "w1_quantized", w)
    msg = _refusal(m)
    assert "bn1" in msg and "-128" in msg and "[-127, 127]" in msg


def test_the_difference_of_two_activations_is_refused():
    m = _model("const_ops")
    sub = next(n for n in m.graph.node if n.op_type == "Sub")
    sub.input[1] = sub.input[0]
    msg = _refusal(m)
    assert "Sub 'center'" in msg and "two activations" in msg



def test_a_zero_point_written_as_identity_of_an_initializer_is_a_constant():
    """Some exporters write a Q / DQ parameter as Identity(initializer)."""
    m = _model("qcdq")
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and "x_" in n.input[0])
    m.graph.node.insert(0, helper.make_node("Identity", [dq.input[2]], ["zp_alias"], "zp_identity"))
    dq.input[2] = "zp_alias"
    graph = graph_from_onnx(m.SerializeToString(), "m")
    assert [n.op for n in graph.nodes] == [n.op for n in load_model(HERE / "qcdq.onnx").nodes]


# ----- different integer types at the two ends: exact, the uint8 end offset by 128 at the boundary

def _tflite_mixed_ends(uint8_input: bool) -> bytes:
    """uint8 input -> QUANTIZE to int8 -> FULLY_CONNECTED -> int8 output (TF converter's inference_input_type
    uint8 alone), or the reverse (an int8 model with a uint8 output)."""
    from oracles import TfliteBuilder

    b = TfliteBuilder()
    x = b.tensor("x", (1, 4), "UINT8" if uint8_input else "INT8", 0.02, 0 if uint8_input else -128)
    xq = b.tensor("x_q", (1, 4), "INT8", 0.02, -128)
    if uint8_input:
        b.op("QUANTIZE", [x], [xq])
    w = b.tensor("w", (3, 4), "INT8", 0.01, 0, 0, np.arange(12, dtype=np.int8).reshape(3, 4))
    y = b.tensor("y", (1, 3), "INT8", 0.05, 0)
    b.op("FULLY_CONNECTED", [xq if uint8_input else x, w], [y])
    if uint8_input:
        return b.finish([x], [y])
    yu = b.tensor("y_u8", (1, 3), "UINT8", 0.05, 128)
    b.op("QUANTIZE", [y], [yu])
    return b.finish([x], [yu])


@pytest.mark.parametrize("uint8_input", [True, False], ids=["uint8_in_int8_out", "int8_in_uint8_out"])
def test_different_integer_types_at_the_two_ends_of_a_tflite_model_are_exact(uint8_input):
    """The uint8 end is the int8 tensor with its zero point - 128: simulator == host C == TFLite Micro, bytes."""
    pytest.importorskip("tflite_micro")
    from oracles import tflm_run

    from tinytrain.engines.trainer import forward_outputs
    from tinytrain.frontends.tflite import graph_from_tflite
    from tinytrain.simulator import external_input_dtype, to_external, to_internal

    data = _tflite_mixed_ends(uint8_input)
    graph = graph_from_tflite(data, "mixed", "")
    assert (graph.uint8_input, graph.uint8_output) == (uint8_input, not uint8_input)
    info = np.iinfo(external_input_dtype(graph))
    x = np.random.default_rng(0).integers(info.min, info.max + 1, (64, 1, 4)).astype(info.dtype)
    theirs = tflm_run(data, x)
    assert theirs.dtype == (np.int8 if uint8_input else np.uint8) and len(np.unique(theirs)) > 10
    for engine in ("sim", "c"):
        ours = to_external(graph, forward_outputs(graph, to_internal(graph, x.reshape(64, 4)), engine))
        np.testing.assert_array_equal(ours.reshape(theirs.shape), theirs, err_msg=engine)


def test_a_uint8_input_with_an_int8_output_of_an_onnx_model_is_exact(tmp_path):
    """const_ops with its input quantized to uint8 (zero point + 128, as NNCF writes): the same int8 graph inside;
    on the uint8 input the simulator equals the int8 model's on the same real values, byte for byte, and so does
    onnxruntime (the model is FOLDED: simulator vs onnxruntime at most 1 LSB, as for the int8 model)."""
    from onnx_oracle import quantize_input, run_onnxruntime

    from tinytrain.simulator import to_internal

    m, base_model = _model("const_ops"), _model("const_ops")
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    for name in {q.input[2]} | {n.input[2] for n in m.graph.node if n.op_type == "DequantizeLinear"
                                and n.input[0] == q.output[0]}:
        zp = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == name))
        _set(m, name, (zp.astype(np.int16) + 128).astype(np.uint8))
    graph, base = (graph_from_onnx(g.SerializeToString(), "m") for g in (m, base_model))
    assert graph.uint8_input and not graph.uint8_output and [n.op for n in graph.nodes] == [n.op for n in base.nodes]
    xs = make_zoo.inputs(30, 11)
    x, xb = quantize_input(graph, xs), quantize_input(base, xs)
    assert x.dtype == np.uint8
    ours = forward(graph, {graph.inputs[0]: to_internal(graph, x)})[graph.outputs[0]]
    np.testing.assert_array_equal(ours, forward(base, {base.inputs[0]: xb})[base.outputs[0]])
    out = next(n.output[0] for n in reversed(m.graph.node) if n.op_type == "QuantizeLinear")
    for model, path in ((m, tmp_path / "u8.onnx"), (base_model, tmp_path / "i8.onnx")):
        onnx.save(model, path)
    theirs, theirs_base = (run_onnxruntime(p, xs, [out])[out] for p in (tmp_path / "u8.onnx", tmp_path / "i8.onnx"))
    np.testing.assert_array_equal(theirs, theirs_base)
    assert np.abs(ours.astype(np.int64) - ir_layout(theirs).reshape(ours.shape)).max() <= 1
    assert len(np.unique(ours)) > 10
