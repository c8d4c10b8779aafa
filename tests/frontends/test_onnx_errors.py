"""Hand-built ONNX QDQ models: what the frontend accepts (symbolic batch, rescaled biases, float weights, bare
Relu) and the one-line typed errors for what it refuses."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from onnx_oracle import ir_layout, quantize_input, run_onnxruntime
from tinytrain.errors import ModelError, TinyTrainError, UnsupportedModelError
from tinytrain.frontends import load_model
from tinytrain.simulator import forward

pytest.importorskip("onnxruntime")


# --------------------------------------------------------------------------- hand-built QDQ models


def tiny_qdq(opset: int = 18, w_dtype=np.int8, scale: float = 0.05, in_shape=(1, 3, 4, 4), extra_nodes=(),
             last: str = "c_q") -> onnx.ModelProto:
    """float x -> Q -> DQ -> Conv(DQ w per-channel, DQ b int32) -> Q -> DQ -> y."""
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (4, 3, 3, 3)).astype(w_dtype)
    ws = np.full(4, 0.01, np.float32)
    inits = [nh.from_array(np.array(scale, np.float32), "x_s"), nh.from_array(np.array(0, np.int8), "x_zp"),
             nh.from_array(w, "w"), nh.from_array(ws, "w_s"), nh.from_array(np.zeros(4, w_dtype), "w_zp"),
             nh.from_array(rng.integers(-50, 50, 4).astype(np.int32), "b"),
             nh.from_array((ws * scale).astype(np.float32), "b_s"), nh.from_array(np.zeros(4, np.int32), "b_zp"),
             nh.from_array(np.array(0.1, np.float32), "c_s"), nh.from_array(np.array(-3, np.int8), "c_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["x_q"], name="q_in"),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_zp"], ["x_dq"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["w", "w_s", "w_zp"], ["w_dq"], name="dq_w", axis=0),
             helper.make_node("DequantizeLinear", ["b", "b_s", "b_zp"], ["b_dq"], name="dq_b", axis=0),
             helper.make_node("Conv", ["x_dq", "w_dq", "b_dq"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "c_s", "c_zp"], ["c_q"], name="q_c"),
             *extra_nodes,
             helper.make_node("DequantizeLinear", [last, "c_s", "c_zp"], ["y"], name="dq_out")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _save(tmp_path, model: onnx.ModelProto, name: str = "bad.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def test_tiny_qdq_converts(tmp_path):
    graph = load_model(_save(tmp_path, tiny_qdq(), "tiny.onnx"))
    assert [n.op for n in graph.nodes] == ["conv2d"]
    assert graph.tensors[graph.nodes[0].inputs[1]].shape == (4, 3, 3, 3)


def _set_init(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    for i, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[i].CopyFrom(nh.from_array(value, name))
            return model
    raise KeyError(name)


def _remove_init(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    keep = [i for i in model.graph.initializer if i.name != name]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model


def _cycle() -> onnx.ModelProto:
    m = tiny_qdq()
    # conv reads the output of the final DQ, which (through q_c) depends on conv
    for n in m.graph.node:
        if n.name == "conv":
            n.input[0] = "y"
    return m


def _two_inputs() -> onnx.ModelProto:
    m = tiny_qdq()
    m.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3]))
    return m


def _dynamic_shape() -> onnx.ModelProto:
    m = tiny_qdq()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "height"
    return m


def _unsupported_op() -> onnx.ModelProto:
    return tiny_qdq(extra_nodes=[
        helper.make_node("DequantizeLinear", ["c_q", "c_s", "c_zp"], ["c_dq"], name="dq_c"),
        helper.make_node("Tanh", ["c_dq"], ["sg"], name="tanh"),
        helper.make_node("QuantizeLinear", ["sg", "c_s", "c_zp"], ["sg_q"], name="q_sg")], last="sg_q")


def _non_1x1_flatten() -> onnx.ModelProto:
    return tiny_qdq(extra_nodes=[
        helper.make_node("DequantizeLinear", ["c_q", "c_s", "c_zp"], ["c_dq"], name="dq_c"),
        helper.make_node("Flatten", ["c_dq"], ["fl"], name="flatten"),
        helper.make_node("QuantizeLinear", ["fl", "c_s", "c_zp"], ["fl_q"], name="q_fl")], last="fl_q")


def _float_only() -> onnx.ModelProto:
    w = nh.from_array(np.ones((2, 3, 1, 1), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "f",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _short_scale() -> onnx.ModelProto:
    m = tiny_qdq()
    _set_init(m, "w_s", np.full(3, 0.01, np.float32))
    return _set_init(m, "w_zp", np.zeros(3, np.int8))


ERROR_CASES = {
    # name: (bytes or model factory, error class, words the one-line message must contain)
    "not_onnx": (lambda: b"this is certainly not an ONNX protobuf \xff\xfe\x00\x01", ModelError, ["not an ONNX model"]),
    "truncated": (lambda: tiny_qdq().SerializeToString()[:300], ModelError, ["truncated"]),
    "float_only": (_float_only, UnsupportedModelError, ["float", "quantize_static"]),
    "unsupported_op": (_unsupported_op, UnsupportedModelError, ["Tanh", "supports", "Conv", "QuantizeLinear"]),
    "dynamic_shape": (_dynamic_shape, UnsupportedModelError, ["height", "axis 2", "fix the input shape"]),
    "missing_initializer": (lambda: _remove_init(tiny_qdq(), "w"), ModelError, ["'w'", "missing initializer"]),
    "zero_scale": (lambda: _set_init(tiny_qdq(), "x_s", np.array(0.0, np.float32)), ModelError,
                   ["positive and finite"]),
    "negative_scale": (lambda: _set_init(tiny_qdq(), "w_s", np.full(4, -0.01, np.float32)), ModelError,
                       ["positive and finite"]),
    "nan_scale": (lambda: _set_init(tiny_qdq(), "c_s", np.array(math.nan, np.float32)), ModelError,
                  ["positive and finite"]),
    "per_axis_length": (_short_scale, ModelError, ["per-axis", "3 values", "has 4"]),
    "cycle": (_cycle, ModelError, ["cycle"]),
    "opset_too_old": (lambda: tiny_qdq(opset=9), UnsupportedModelError, ["opset 9", "too old", "convert_version"]),
    "opset_too_new": (lambda: tiny_qdq(opset=onnx.defs.onnx_opset_version() + 1), UnsupportedModelError,
                      ["newer", "export with opset"]),
    "int16_weights": (lambda: tiny_qdq(w_dtype=np.int16), UnsupportedModelError, ["int16", "int8", "weight_type"]),
    "two_inputs": (_two_inputs, UnsupportedModelError, ["2 inputs", "x, z"]),
    "non_1x1_flatten": (_non_1x1_flatten, UnsupportedModelError, ["NHWC", "1x1"]),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_are_one_line_and_typed(tmp_path, case):
    make, cls, words = ERROR_CASES[case]
    made = make()
    data = made if isinstance(made, bytes) else made.SerializeToString()
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(data)
    with pytest.raises(TinyTrainError) as info:
        load_model(path)
    err = info.value
    message = str(err)
    print(f"\n{case}: {type(err).__name__}: {message}")
    assert isinstance(err, cls), f"{type(err).__name__}: {message}"
    assert "\n" not in message and message.startswith(f"{case}: ")
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_batch_dimension_may_be_symbolic(tmp_path):
    m = tiny_qdq()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    graph = load_model(_save(tmp_path, m, "symbolic_batch.onnx"))
    x = np.random.default_rng(0).integers(-128, 128, (5, 4, 4, 3)).astype(np.int8)
    assert forward(graph, {graph.inputs[0]: x})[graph.outputs[0]].shape == (5, 4, 4, 4)


def test_bias_with_another_scale_is_rescaled(tmp_path):
    """A DQ bias whose scale is not s_x*s_w is re-rounded to s_x*s_w (same real value)."""
    m = tiny_qdq()
    b = next(nh.to_array(i) for i in m.graph.initializer if i.name == "b")
    b_s = next(nh.to_array(i) for i in m.graph.initializer if i.name == "b_s")
    _set_init(m, "b", (b * 4).astype(np.int32))
    _set_init(m, "b_s", (b_s / 4).astype(np.float32))
    graph = load_model(_save(tmp_path, m, "bias.onnx"))
    np.testing.assert_array_equal(graph.tensors[graph.nodes[0].inputs[2]].data, b)


def test_float_weights_quantized_in_the_graph(tmp_path):
    """float weights -> QuantizeLinear -> DequantizeLinear (as QAT exports write them) are quantized on import."""
    m = tiny_qdq()
    w = next(nh.to_array(i) for i in m.graph.initializer if i.name == "w")
    _set_init(m, "w", (w.astype(np.float32) * 0.01).astype(np.float32))
    m.graph.node.insert(0, helper.make_node("QuantizeLinear", ["w", "w_s", "w_zp"], ["w_q"], name="q_w", axis=0))
    for n in m.graph.node:
        if n.name == "dq_w":
            n.input[0] = "w_q"
    graph = load_model(_save(tmp_path, m, "qat.onnx"))
    np.testing.assert_array_equal(graph.tensors[graph.nodes[0].inputs[1]].data, w.transpose(0, 2, 3, 1))


def test_standalone_relu_without_a_producer_is_a_clamp(tmp_path):
    """Relu on the dequantized input (no layer to fuse it into): a 1x1 avg_pool2d clamp, equal to onnxruntime."""
    inits = [nh.from_array(np.array(0.02, np.float32), "s"), nh.from_array(np.array(5, np.int8), "zp"),
             nh.from_array(np.array(0.01, np.float32), "s2"), nh.from_array(np.array(0, np.int8), "zp2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xf"]),
             helper.make_node("Relu", ["xf"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "zp2"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "zp2"], ["y"])]
    g = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    path = _save(tmp_path, m, "relu.onnx")
    graph = load_model(path)
    assert [n.op for n in graph.nodes] == ["requantize", "avg_pool2d"]
    xs = np.random.default_rng(0).standard_normal((20, 2, 3, 3)).astype(np.float32)
    expected = run_onnxruntime(path, xs, ["rq"])["rq"]
    ours = forward(graph, {graph.inputs[0]: quantize_input(graph, xs)})[graph.outputs[0]]
    assert np.abs(ir_layout(expected).astype(int) - ours.astype(int)).max() <= 1
    assert ours.min() >= 0  # real 0 is q = 0 here: the clamp happened
