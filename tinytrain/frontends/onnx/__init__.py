"""ONNX frontend: parse, check, and dispatch to the QDQ or QOperator reader.

``graph_from_onnx(data, name, sha256)`` reads an int8 ONNX model produced by onnxruntime's
``quantize_static`` (QDQ or QOperator format, int8 or uint8 activations) into the IR and runs
``verify`` on the result. Every problem is a one-line ``TinyTrainError`` saying what to do:
``ModelError`` for malformed files (not ONNX, truncated, cycle, missing initializer, bad scale),
``UnsupportedModelError`` for valid models tinytrain cannot take (float-only, op, dtype, opset,
dynamic input shape, several inputs).

The package: parse.py and constants.py (the protobuf), values.py (what an ONNX value is during conversion),
convert.py, reader.py and emit.py (the converter), requant.py (arithmetic and documented deviations), qdq.py and
qoperator.py (the two formats' handler tables), boundary.py and clamp.py (the converter's own handlers); the ops'
handlers are their modules' (``tinytrain/ops/<op>.py``).
"""

from __future__ import annotations

from dataclasses import replace

import onnx
from google.protobuf.message import DecodeError

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.frontends.onnx import qdq, qoperator
from tinytrain.frontends.onnx.convert import Converter
from tinytrain.frontends.onnx.parse import MIN_OPSET, default_opset, graph_inputs, one_line, topo_sort
from tinytrain.ir import Graph

MAX_OPSET = onnx.defs.onnx_opset_version()
QDQ_MARKERS = {"QuantizeLinear", "DequantizeLinear"}
DYNAMIC_QUANT_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul",
                     "DynamicQuantizeLSTM", "MatMulIntegerToFloat"}


def parse_model(data: bytes, name: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ModelError(one_line(f"{name}: not an ONNX model, or the file is truncated ({e}); give an int8 .onnx "
                                  f"or .tflite file")) from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{name}: not an ONNX model (no graph in the protobuf); give an int8 .onnx or .tflite file")
    return model


def check_model(model: onnx.ModelProto, name: str) -> None:
    """Opset range, single input, defined inputs and no cycle, then onnx.checker."""
    opset = default_opset(model)
    if opset is None:
        raise ModelError(f"{name}: the model imports no version of the default ONNX domain; re-export it")
    if opset < MIN_OPSET:
        raise UnsupportedModelError(f"{name}: opset {opset} is too old (tinytrain needs {MIN_OPSET}..{MAX_OPSET}, "
                                    f"quantized ops start at 10); convert it with "
                                    f"onnx.version_converter.convert_version(model, 13) and re-quantize")
    if opset > MAX_OPSET:
        raise UnsupportedModelError(f"{name}: opset {opset} is newer than the installed onnx {onnx.__version__} supports "
                                    f"({MAX_OPSET}); export with opset <= {MAX_OPSET} or upgrade onnx")
    inputs = graph_inputs(model.graph)
    if len(inputs) != 1:
        listed = ", ".join(vi.name for vi in inputs) or "none"
        raise UnsupportedModelError(f"{name}: the model has {len(inputs)} inputs ({listed}); tinytrain supports models "
                                    f"with exactly one image input")
    topo_sort(model, name)
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx.checker.ValidationError and friends from the C++ checker
        raise ModelError(one_line(f"{name}: the ONNX checker rejects the model: {str(e).splitlines()[0] if str(e) else e}; "
                                  f"re-export it")) from None


def graph_from_onnx(data: bytes, name: str = "model", sha256: str = "") -> Graph:
    return convert_onnx(data, name, sha256)[0]


def convert_onnx(data: bytes, name: str = "model", sha256: str = "") -> tuple[Graph, dict[str, str]]:
    """The IR graph and, for each integer ONNX tensor kept in it, the name of the IR tensor holding it."""
    model = parse_model(data, name)
    check_model(model, name)
    ops = {n.op_type for n in model.graph.node}
    dynamic = sorted(ops & DYNAMIC_QUANT_OPS)
    if dynamic:
        raise UnsupportedModelError(f"{name}: the model is dynamically quantized ({', '.join(dynamic)}); quantize it "
                                    f"with onnxruntime quantize_static (QDQ or QOperator) instead")
    if "FakeQuantize" in ops:
        raise UnsupportedModelError(f"{name}: the model is quantized with OpenVINO FakeQuantize nodes (NNCF's default "
                                    f"export); export QuantizeLinear / DequantizeLinear instead (NNCF: "
                                    f"strip(model) then torch.onnx.export, or nncf.quantize on the ONNX model)")
    if ops & qoperator.MARKERS:
        converter = Converter(model, name, sha256, qoperator.handlers(), "QOperator")
    elif ops & QDQ_MARKERS:
        converter = Converter(model, name, sha256, qdq.handlers(), "QDQ")
    else:
        raise UnsupportedModelError(f"{name}: the model is float-only (no QuantizeLinear / DequantizeLinear / QLinear "
                                    f"ops); quantize it with `tinytrain quantize MODEL --data CALIB -o MODEL_int8.onnx` "
                                    f"(onnxruntime quantize_static on your images)")
    graph = replace(converter.run(), metadata={p.key: p.value for p in model.metadata_props})
    return graph, dict(converter.ir_names)
