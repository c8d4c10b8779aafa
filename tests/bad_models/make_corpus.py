"""Writes the corpus of malformed and unsupported models in this folder.

    .venv/bin/python tests/bad_models/make_corpus.py

Every file is built from scratch here (onnx.helper for ONNX; the TFLite flatbuffer object API of
ai-edge-litert for TFLite) — nothing is copied from ../shared. ``CASES`` maps each file to the words
its one-line error must contain; tests/test_bad_models.py runs the CLI on each.
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


def write_corpus(folder: Path = HERE) -> None:
    files = {**onnx_cases(), **tflite_cases()}
    assert set(files) == set(CASES), set(files) ^ set(CASES)
    for name, data in files.items():
        (folder / name).write_bytes(data)


if __name__ == "__main__":
    write_corpus(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
