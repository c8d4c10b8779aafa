"""Writes the corpus of malformed and unsupported models in this folder.

    .venv/bin/python tests/bad_models/make_corpus.py

Every file is built from scratch here (onnx.helper for ONNX; the TFLite flatbuffer object API of
ai-edge-litert for TFLite) — nothing is copied from ../shared. ``CASES`` maps each file to the words
its one-line error must contain; tests/frontends/test_bad_models.py runs the CLI on each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent

# file -> (command, words the error line must contain, case-insensitive)
CASES: dict[str, tuple[str, str]] = {
    "not_a_model.onnx": ("inspect", "onnx"),
    "truncated.onnx": ("inspect", "onnx"),
    "empty.tflite": ("inspect", "short"),
    "truncated.tflite": ("inspect", "tflite"),
    "garbage_tfl3.tflite": ("inspect", "tflite"),
    "float_only.onnx": ("inspect", "quantiz"),
    "float_only.tflite": ("inspect", "quantiz"),
    "unsupported_op.onnx": ("inspect", "Sin"),
    "unsupported_op.tflite": ("inspect", "SIN"),
    "dynamic_input.onnx": ("inspect", "dynamic"),
    "dynamic_input.tflite": ("inspect", "dynamic"),
    "missing_initializer.onnx": ("inspect", "conv_w"),
    "zero_scale.onnx": ("inspect", "scale"),
    "negative_scale.tflite": ("inspect", "scale"),
    "nan_scale.onnx": ("inspect", "scale"),
    "per_axis_mismatch.onnx": ("inspect", "scale"),
    "cycle.onnx": ("inspect", "cycle"),
    "opset_too_old.onnx": ("inspect", "opset"),
    "two_inputs.onnx": ("inspect", "input"),
    "float_weights_in_qdq.onnx": ("inspect", "int8"),
    "huge_weights.onnx": ("compile", "flash"),
    # more_onnx_cases
    "initializer_dims_mismatch.onnx": ("inspect", "too small for the declared shape"),
    "external_data.onnx": ("inspect", "externally"),
    "inf_scale.onnx": ("inspect", "contains inf"),
    "negative_weight_scale.onnx": ("inspect", "positive"),
    "denormal_scale.onnx": ("inspect", "multiplier"),
    "input_scale_zero.onnx": ("inspect", "in_s"),
    "reads_unknown_tensor.onnx": ("inspect", "nowhere"),
    "produced_twice.onnx": ("inspect", "more than once"),
    "output_is_the_input.onnx": ("inspect", "float-only"),
    "no_nodes.onnx": ("inspect", "no graph"),
    "negative_pads.onnx": ("inspect", "negative pads"),
    "bad_auto_pad.onnx": ("inspect", "auto_pad"),
    "pads_3d.onnx": ("inspect", "2-D"),
    "batch_of_two.onnx": ("inspect", "batch size of 2"),
    "weight_channels_mismatch.onnx": ("inspect", "does not fit input"),
    "int4_weights.onnx": ("inspect", "int4"),
    "no_graph_output.onnx": ("inspect", "no outputs"),
    "unsupported_op_loop.onnx": ("inspect", "Loop"),
    "garbage_protobuf.onnx": ("inspect", "not an ONNX model"),
    # more_tflite_cases
    "zero_scale.tflite": ("inspect", "scale 0"),
    "nan_scale.tflite": ("inspect", "scale nan"),
    "buffer_index_out_of_range.tflite": ("inspect", "buffer 99"),
    "opcode_index_out_of_range.tflite": ("inspect", "operator code 7"),
    "tensor_index_out_of_range.tflite": ("inspect", "tensor 42"),
    "no_subgraph.tflite": ("inspect", "no subgraph"),
    "weights_buffer_short.tflite": ("inspect", "holds 10 bytes"),
    "int16_activations.tflite": ("inspect", "INT16"),
    "zero_stride.tflite": ("inspect", "stride"),
    "weight_without_quantization.tflite": ("inspect", "no quantization"),
    "per_axis_count_mismatch.tflite": ("inspect", "3 scales"),
    "output_not_computed.tflite": ("inspect", "never written"),
    "no_outputs.tflite": ("inspect", "no outputs"),
    "batch_of_two.tflite": ("inspect", "batch 2"),
}


# ---------------------------------------------------------------------------------------------- ONNX
def _q(name, x, scale, zp):
    return helper.make_node("QuantizeLinear", [x, scale, zp], [name])


def _dq(name, x, scale, zp, axis=None):
    kw = {} if axis is None else {"axis": axis}
    return helper.make_node("DequantizeLinear", [x, scale, zp], [name], **kw)


def qdq_conv(cin=3, cout=4, hw=8, k=3, *, weight_scale=None, opset=18, middle_op=None, input_dims=None,
             drop_initializer=None, weight_dtype=np.int8, cycle=False, second_input=False) -> onnx.ModelProto:
    """input -> Q -> DQ -> Conv(DQ w, DQ b) -> Q -> DQ -> output, as onnxruntime's quantize_static writes it."""
    rng = np.random.default_rng(0)
    w_scale = np.full(cout, 0.02, np.float32) if weight_scale is None else np.asarray(weight_scale, np.float32)
    w = rng.integers(-127, 128, (cout, cin, k, k))
    inits = [
        numpy_helper.from_array(np.array(1 / 255, np.float32), "in_s"),
        numpy_helper.from_array(np.array(-128, np.int8), "in_zp"),
        numpy_helper.from_array(w.astype(weight_dtype), "conv_w"),
        numpy_helper.from_array(w_scale, "conv_w_s"),
        numpy_helper.from_array(np.zeros(len(w_scale), np.int8), "conv_w_zp"),
        numpy_helper.from_array(rng.integers(-500, 500, cout).astype(np.int32), "conv_b"),
        numpy_helper.from_array((np.float32(1 / 255) * w_scale).astype(np.float32), "conv_b_s"),
        numpy_helper.from_array(np.zeros(len(w_scale), np.int32), "conv_b_zp"),
        numpy_helper.from_array(np.array(0.05, np.float32), "out_s"),
        numpy_helper.from_array(np.array(-10, np.int8), "out_zp"),
    ]
    if drop_initializer:
        inits = [t for t in inits if t.name != drop_initializer]
    conv_in = "x_dq" if not cycle else "y_f"
    nodes = [
        _q("x_q", "input", "in_s", "in_zp"),
        _dq("x_dq", "x_q", "in_s", "in_zp"),
        _dq("w_dq", "conv_w", "conv_w_s", "conv_w_zp", axis=0),
        _dq("b_dq", "conv_b", "conv_b_s", "conv_b_zp", axis=0),
        helper.make_node("Conv", [conv_in, "w_dq", "b_dq"], ["conv"], pads=[1, 1, 1, 1] if k == 3 else [0] * 4),
    ]
    last = "conv"
    if middle_op:
        nodes.append(helper.make_node(middle_op, [last], ["mid"]))
        last = "mid"
    nodes += [_q("y_q", last, "out_s", "out_zp"), _dq("y_f", "y_q", "out_s", "out_zp")]
    nodes.append(helper.make_node("Identity", ["y_f"], ["output"]))
    dims = input_dims or [1, cin, hw, hw]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)]
    if second_input:
        inputs.append(helper.make_tensor_value_info("input2", TensorProto.FLOAT, [1, cin, hw, hw]))
    graph = helper.make_graph(nodes, "bad", inputs,
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, cout, hw, hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def float_conv() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["input", "w"], ["output"])], "float",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 6, 6])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def huge_weights() -> onnx.ModelProto:
    """A 1x1 convolution from 1024 to 4096 channels: 4 MB of int8 weights (zeros compress in git)."""
    model = qdq_conv(cin=1024, cout=4096, hw=2, k=1)
    for t in model.graph.initializer:
        if t.name == "conv_w":
            t.CopyFrom(numpy_helper.from_array(np.ones((4096, 1024, 1, 1), np.int8), "conv_w"))
    return model


def onnx_cases() -> dict[str, bytes]:
    good = qdq_conv().SerializeToString()
    return {
        "not_a_model.onnx": b"this is a text file, not a model\n" * 4,
        "truncated.onnx": good[: len(good) // 2],
        "float_only.onnx": float_conv().SerializeToString(),
        "unsupported_op.onnx": qdq_conv(middle_op="Sin").SerializeToString(),
        "dynamic_input.onnx": qdq_conv(input_dims=[1, 3, "height", "width"]).SerializeToString(),
        "missing_initializer.onnx": qdq_conv(drop_initializer="conv_w").SerializeToString(),
        "zero_scale.onnx": qdq_conv(weight_scale=[0.02, 0.0, 0.02, 0.02]).SerializeToString(),
        "nan_scale.onnx": qdq_conv(weight_scale=[0.02, float("nan"), 0.02, 0.02]).SerializeToString(),
        "per_axis_mismatch.onnx": qdq_conv(weight_scale=[0.02, 0.02, 0.02]).SerializeToString(),
        "cycle.onnx": qdq_conv(cycle=True).SerializeToString(),
        "opset_too_old.onnx": qdq_conv(opset=7).SerializeToString(),
        "two_inputs.onnx": qdq_conv(second_input=True).SerializeToString(),
        "float_weights_in_qdq.onnx": qdq_conv(weight_dtype=np.float32).SerializeToString(),
        "huge_weights.onnx": huge_weights().SerializeToString(),
    }


# -------------------------------------------------------------------------------------------- TFLite
def tflite_conv(*, op="CONV_2D", dtype="INT8", scale=0.02, shape_signature=None) -> bytes:
    """A one-convolution TFLite model built with the flatbuffer object API."""
    from ai_edge_litert import schema_py_generated as s

    tt = getattr(s.TensorType, dtype)
    np_dtype = np.float32 if dtype == "FLOAT32" else np.int8

    def quant(scales, zps, dim=0):
        q = s.QuantizationParametersT()
        q.scale, q.zeroPoint, q.quantizedDimension = list(scales), list(zps), dim
        return q

    def tensor(name, shape, buffer, ttype, q=None, signature=None):
        t = s.TensorT()
        t.name, t.shape, t.buffer, t.type = name.encode(), list(shape), buffer, ttype
        t.quantization = q if dtype != "FLOAT32" else None
        t.shapeSignature = signature
        return t

    def buf(data=None):
        b = s.BufferT()
        b.data = None if data is None else list(np.frombuffer(data.tobytes(), np.uint8))
        return b

    w = np.ones((2, 3, 3, 3), np_dtype)
    bias = np.zeros(2, np.int32 if dtype != "FLOAT32" else np.float32)
    model = s.ModelT()
    model.version = 3
    model.buffers = [buf(), buf(), buf(w), buf(bias), buf()]
    code = s.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = getattr(s.BuiltinOperator, op)
    model.operatorCodes = [code]
    sg = s.SubGraphT()
    bias_type = s.TensorType.INT32 if dtype != "FLOAT32" else tt
    sg.tensors = [
        tensor("input", (1, 8, 8, 3), 1, tt, quant([1 / 255], [-128]), shape_signature),
        tensor("weight", w.shape, 2, tt, quant([scale, scale], [0, 0])),
        tensor("bias", bias.shape, 3, bias_type, quant([scale / 255] * 2, [0, 0])),
        tensor("output", (1, 8, 8, 2), 4, tt, quant([0.05], [-10])),
    ]
    sg.inputs, sg.outputs = [0], [3]
    operator = s.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, [0, 1, 2], [3]
    if op == "CONV_2D":
        opts = s.Conv2DOptionsT()
        opts.padding, opts.strideH, opts.strideW = s.Padding.SAME, 1, 1
        operator.builtinOptionsType, operator.builtinOptions = s.BuiltinOptions.Conv2DOptions, opts
    sg.operators = [operator]
    model.subgraphs = [sg]
    import flatbuffers

    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def tflite_cases() -> dict[str, bytes]:
    good = tflite_conv()
    rng = np.random.default_rng(1)
    garbage = bytearray(rng.integers(0, 256, 600, dtype=np.uint8).tobytes())
    garbage[4:8] = b"TFL3"
    return {
        "empty.tflite": b"",
        "truncated.tflite": good[: len(good) // 2],
        "garbage_tfl3.tflite": bytes(garbage),
        "float_only.tflite": tflite_conv(dtype="FLOAT32"),
        "unsupported_op.tflite": tflite_conv(op="SIN"),
        "dynamic_input.tflite": tflite_conv(shape_signature=[1, -1, -1, 3]),
        "negative_scale.tflite": tflite_conv(scale=-0.02),
    }


# ------------------------------------------------------------------------------------ more ONNX cases
def _edited(model: onnx.ModelProto, edit) -> bytes:
    """``model`` changed in place by ``edit(model)``, serialized."""
    edit(model)
    return model.SerializeToString()


def _init(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _node(model: onnx.ModelProto, op: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op)


def _set_init(model, name, value) -> None:
    _init(model, name).CopyFrom(numpy_helper.from_array(np.asarray(value), name))


def _set_attr(model, op, **attrs) -> None:
    n = _node(model, op)
    for key, value in attrs.items():
        for a in list(n.attribute):
            if a.name == key:
                n.attribute.remove(a)
        n.attribute.append(helper.make_attribute(key, value))


def more_onnx_cases() -> dict[str, bytes]:
    q = qdq_conv
    return {
        "initializer_dims_mismatch.onnx": _edited(q(), lambda m: _init(m, "conv_w").dims.__setitem__(0, 5)),
        "external_data.onnx": _edited(q(), lambda m: setattr(_init(m, "conv_w"), "data_location",
                                                             TensorProto.EXTERNAL)),
        "inf_scale.onnx": q(weight_scale=[0.02, float("inf"), 0.02, 0.02]).SerializeToString(),
        "negative_weight_scale.onnx": q(weight_scale=[0.02, -0.02, 0.02, 0.02]).SerializeToString(),
        "denormal_scale.onnx": _edited(q(), lambda m: _set_init(m, "out_s", np.float32(1e-45))),
        "input_scale_zero.onnx": _edited(q(), lambda m: _set_init(m, "in_s", np.float32(0.0))),
        "reads_unknown_tensor.onnx": _edited(q(), lambda m: _node(m, "Conv").input.__setitem__(0, "nowhere")),
        "produced_twice.onnx": _edited(q(), lambda m: m.graph.node.append(helper.make_node("Identity", ["x_dq"],
                                                                                           ["conv"]))),
        "output_is_the_input.onnx": _edited(q(), lambda m: (m.graph.ClearField("node"),
                                                             m.graph.node.append(helper.make_node("Identity", ["input"], ["output"])))),
        "no_nodes.onnx": _edited(q(), lambda m: m.graph.ClearField("node")),
        "negative_pads.onnx": _edited(q(), lambda m: _set_attr(m, "Conv", pads=[-1, 0, 0, 0])),
        "bad_auto_pad.onnx": _edited(q(), lambda m: _set_attr(m, "Conv", auto_pad="SOMETIMES")),
        "pads_3d.onnx": _edited(q(), lambda m: _set_attr(m, "Conv", pads=[1, 1, 1, 1, 1, 1])),
        "batch_of_two.onnx": q(input_dims=[2, 3, 8, 8]).SerializeToString(),
        "weight_channels_mismatch.onnx": q(cin=3, input_dims=[1, 5, 8, 8]).SerializeToString(),
        "int4_weights.onnx": _edited(q(), lambda m: setattr(_init(m, "conv_w"), "data_type", TensorProto.INT4)),
        "no_graph_output.onnx": _edited(q(), lambda m: m.graph.ClearField("output")),
        "unsupported_op_loop.onnx": q(middle_op="Loop").SerializeToString(),
        "garbage_protobuf.onnx": bytes(np.random.default_rng(2).integers(0, 256, 700, dtype=np.uint8)),
    }


# ---------------------------------------------------------------------------------- more TFLite cases
def _tflite_edited(edit, **kw) -> bytes:
    """tflite_conv(**kw) changed by ``edit(model, subgraph)`` through the flatbuffer object API."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT.InitFromPackedBuf(tflite_conv(**kw), 0)
    edit(m, m.subgraphs[0])
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def more_tflite_cases() -> dict[str, bytes]:
    def weight_quant(m, sg, **fields):
        for k, v in fields.items():
            setattr(sg.tensors[1].quantization, k, v)

    return {
        "zero_scale.tflite": tflite_conv(scale=0.0),
        "nan_scale.tflite": tflite_conv(scale=float("nan")),
        "buffer_index_out_of_range.tflite": _tflite_edited(lambda m, sg: setattr(sg.tensors[1], "buffer", 99)),
        "opcode_index_out_of_range.tflite": _tflite_edited(lambda m, sg: setattr(sg.operators[0], "opcodeIndex", 7)),
        "tensor_index_out_of_range.tflite": _tflite_edited(lambda m, sg: setattr(sg.operators[0], "inputs", [0, 42, 2])),
        "no_subgraph.tflite": _tflite_edited(lambda m, sg: setattr(m, "subgraphs", [])),
        "weights_buffer_short.tflite": _tflite_edited(lambda m, sg: setattr(m.buffers[2], "data", m.buffers[2].data[:10])),
        "int16_activations.tflite": _tflite_edited(lambda m, sg: [setattr(sg.tensors[k], "type", 7) for k in (0, 3)]),
        "zero_stride.tflite": _tflite_edited(lambda m, sg: setattr(sg.operators[0].builtinOptions, "strideH", 0)),
        "weight_without_quantization.tflite": _tflite_edited(lambda m, sg: setattr(sg.tensors[1], "quantization", None)),
        "per_axis_count_mismatch.tflite": _tflite_edited(lambda m, sg: weight_quant(m, sg, scale=[0.02, 0.02, 0.02],
                                                                                  zeroPoint=[0, 0, 0])),
        "output_not_computed.tflite": _tflite_edited(lambda m, sg: setattr(sg, "outputs", [1])),
        "no_outputs.tflite": _tflite_edited(lambda m, sg: setattr(sg, "outputs", [])),
        "batch_of_two.tflite": _tflite_edited(lambda m, sg: [setattr(sg.tensors[k], "shape", [2, 8, 8, c])
                                                             for k, c in ((0, 3), (3, 2))]),
    }


def all_cases() -> dict[str, bytes]:
    return {**onnx_cases(), **tflite_cases(), **more_onnx_cases(), **more_tflite_cases()}


def write_corpus(folder: Path = HERE) -> None:
    files = all_cases()
    assert set(files) == set(CASES), set(files) ^ set(CASES)
    for name, data in files.items():
        (folder / name).write_bytes(data)


if __name__ == "__main__":
    write_corpus(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
