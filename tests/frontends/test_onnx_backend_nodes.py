"""ONNX backend node test cases through tinytrain's op implementations.

Cases: ``test_qlinearconv*``, ``test_qlinearmatmul*``, ``test_quantizelinear*``, ``test_dequantizelinear*``
of the installed ``onnx`` package, each a ``model.onnx`` with ``test_data_set_0/{input,output}_k.pb``.
Wheels that ship ``onnx/backend/test/data/node`` are read directly; onnx 1.23 wheels ship only the
case generators (``onnx/backend/test/case/node/<op>.py``), so the cases are written once to a cache
folder with the same serialization as onnx's ``backend-test-tools generate-data``.

- QLinearConv / QLinearMatMul go through the ONNX frontend: the data input stays the graph input,
  the other inputs become initializers (tinytrain needs constant weights and quantization
  parameters); QLinearMatMul's leading batch dimension becomes the IR batch (2-D) or, when each
  batch has its own weights (3-D), one graph per batch. Outputs are compared with |diff| <= 1: ONNX's
  reference requantizes the exact real value in float and rounds half to even, tinytrain uses the
  TFLite fixed-point multiplier with its double rounding (design.md section 3).
- QuantizeLinear / DequantizeLinear use the IR ``quantize`` / ``dequantize`` ops (per axis: one
  per-tensor op per slice). Both are exact (float32 divide / multiply, round half to even).

Cases with element types tinytrain does not support (float8, int4 / uint4, int2 / uint2, float4,
int16 / uint16, float16) or blocked quantization are skipped, and the skip reason names them.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinytrain.frontends.onnx import graph_from_onnx
from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.dequantize import DequantizeAttrs
from tinytrain.ops.quantize import QuantizeAttrs
from tinytrain.simulator import forward, to_external, to_internal

PREFIXES = ("test_qlinearconv", "test_qlinearmatmul", "test_quantizelinear", "test_dequantizelinear")
GENERATORS = ("qlinearconv", "qlinearmatmul", "quantizelinear", "dequantizelinear")
SUPPORTED_TYPES = {TensorProto.FLOAT, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32}
SHIPPED = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def _materialize_generated(root: Path) -> None:
    """Write the node cases of the four ops as onnx's backend-test-tools would."""
    from onnx.backend.test.case import node as node_cases

    for module in GENERATORS:
        importlib.import_module(f"onnx.backend.test.case.node.{module}")  # registers the cases (expect())
    for case in node_cases._NodeTestCases:
        if not case.name.startswith(PREFIXES):
            continue
        folder = root / case.name
        data = folder / "test_data_set_0"
        data.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        for kind, values, infos in (("input", inputs, case.model.graph.input), ("output", outputs, case.model.graph.output)):
            for k, (value, info) in enumerate(zip(values, infos)):
                proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(value, info.name)
                (data / f"{kind}_{k}.pb").write_bytes(proto.SerializeToString())


def case_root() -> Path:
    if SHIPPED.is_dir() and any(p.name.startswith(PREFIXES) for p in SHIPPED.iterdir()):
        return SHIPPED
    root = Path(tempfile.gettempdir()) / f"tinytrain-onnx-node-cases-{onnx.__version__}"
    if not root.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=root.name + "-", dir=root.parent))
        _materialize_generated(staging)
        try:
            staging.rename(root)  # atomic: a concurrent run either sees nothing or every case
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process got there first
    return root


ROOT = case_root()
CASES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name.startswith(PREFIXES)
               and not p.name.endswith("_expanded"))


def load_case(name: str):
    folder = ROOT / name
    model = onnx.load(str(folder / "model.onnx"))
    data = folder / "test_data_set_0"

    def read(kind: str, n: int) -> list[TensorProto]:
        out = []
        for k in range(n):
            t = TensorProto()
            t.ParseFromString((data / f"{kind}_{k}.pb").read_bytes())
            out.append(t)
        return out

    return model, read("input", len(model.graph.input)), read("output", len(model.graph.output))


def unsupported_reason(model: onnx.ModelProto, inputs: list[TensorProto], outputs: list[TensorProto]) -> str | None:
    types = {t.data_type for t in inputs + outputs}
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("output_dtype"):
        types.add(attrs["output_dtype"])
    bad = sorted(TensorProto.DataType.Name(t).lower() for t in types - SUPPORTED_TYPES)
    reasons = []
    if bad:
        reasons.append(f"element type(s) {', '.join(bad)}")
    if attrs.get("block_size"):
        reasons.append("blocked quantization")
    if not reasons:
        return None
    return (f"{name_of(model)}: {' and '.join(reasons)} not supported by tinytrain (int8/uint8 tensors with float32 "
            f"scales only; float8, int4/uint4, int2/uint2, float4, int16/uint16, float16 and blocked quantization "
            f"are out of scope)")


def name_of(model: onnx.ModelProto) -> str:
    return model.graph.name


@pytest.fixture(params=CASES)
def case(request):
    model, inputs, outputs = load_case(request.param)
    reason = unsupported_reason(model, inputs, outputs)
    if reason:
        pytest.skip(reason)
    return request.param, model, [numpy_helper.to_array(t) for t in inputs], [numpy_helper.to_array(t) for t in outputs]


def test_case_list_is_complete():
    for prefix in PREFIXES:
        assert any(c.startswith(prefix) for c in CASES), f"no {prefix}* case found under {ROOT}"


def _ir_layout(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def _onnx_layout(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 3, 1, 2) if a.ndim == 4 else a


def _run_frontend(node: onnx.NodeProto, opsets, x: np.ndarray, consts: list[np.ndarray], out_shape) -> np.ndarray:
    """A one-node model (x the graph input, batch 1; the rest initializers) through the frontend + simulator.

    ``x`` may carry any batch: the graph is built for batch 1 and the simulator runs the whole batch.
    """
    names = list(node.input)
    inits = [numpy_helper.from_array(c, n) for n, c in zip(names[1:], consts) if n]
    x_info = helper.make_tensor_value_info(names[0], helper.np_dtype_to_tensor_dtype(x.dtype), [1, *x.shape[1:]])
    y_info = helper.make_tensor_value_info(node.output[0], helper.np_dtype_to_tensor_dtype(x.dtype), [1, *out_shape[1:]])
    graph = helper.make_graph([node], "case", [x_info], [y_info], inits)
    model = helper.make_model(graph, opset_imports=list(opsets))
    model.ir_version = 8
    ir = graph_from_onnx(model.SerializeToString(), "case")
    xi = to_internal(ir, _ir_layout(x))
    y = to_external(ir, forward(ir, {ir.inputs[0]: xi})[ir.outputs[0]])
    return _onnx_layout(y)


def _compare_within_one(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    print(f"\n{name}: {(diff == 0).mean():.1%} of {diff.size} values identical, max |diff| {diff.max()}")
    # fixed-point requantization (TFLite double rounding) vs ONNX's float requantization rounded half to even
    assert diff.max() <= 1


def _slices(shape: tuple[int, ...], axis: int, n: int):
    """Index tuples selecting each of the n slices along axis (one slice when n == 1)."""
    if n == 1:
        yield 0, (slice(None),) * len(shape)
        return
    for k in range(n):
        idx = [slice(None)] * len(shape)
        idx[axis] = slice(k, k + 1)
        yield k, tuple(idx)


def test_node_case(case):
    name, model, inputs, outputs = case
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    expected = outputs[0]
    if node.op_type == "QLinearConv":
        got = _run_frontend(node, model.opset_import, inputs[0], inputs[1:], expected.shape)
        _compare_within_one(name, got, expected)
    elif node.op_type == "QLinearMatMul":
        a, b = inputs[0], inputs[3]
        consts = inputs[1:]
        if a.ndim == 2:
            got = _run_frontend(node, model.opset_import, a, consts, expected.shape)
        else:  # batched: one fully-connected graph per leading index (each has its own weights)
            parts = []
            for i in range(a.shape[0]):
                per = [c if k != 2 else b[i] for k, c in enumerate(consts)]
                parts.append(_run_frontend(node, model.opset_import, a[i], per, expected.shape[1:]))
            got = np.stack(parts)
        _compare_within_one(name, got, expected)
    elif node.op_type == "QuantizeLinear":
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else np.zeros_like(scale, dtype=np.uint8)
        axis = attrs.get("axis", 1) % x.ndim
        got = np.empty(x.shape, zp.dtype)
        for k, idx in _slices(x.shape, axis, scale.size):
            shift = 128 if zp.dtype == np.uint8 else 0
            out = Tensor("y", x[idx].shape, DType.INT8, Role.ACTIVATION,
                         QuantParams.per_tensor(float(scale.ravel()[k]), int(zp.ravel()[k]) - shift))
            (y,) = get_op("quantize").reference(QuantizeAttrs(half_to_even=True), [x[idx]],
                                                [Tensor("x", x[idx].shape, DType.FLOAT32, Role.INPUT)], [out])
            got[idx] = (y.astype(np.int16) + shift).astype(zp.dtype)
        np.testing.assert_array_equal(got, expected)  # exact: float32 divide, round half to even
    elif node.op_type == "DequantizeLinear":
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else np.zeros_like(scale, dtype=x.dtype)
        axis = attrs.get("axis", 1) % x.ndim
        got = np.empty(x.shape, np.float32)
        for k, idx in _slices(x.shape, axis, scale.size):
            if x.dtype == np.uint8:
                q, shift = (x[idx].astype(np.int16) - 128).astype(np.int8), 128
            elif x.dtype == np.int32:
                pytest.skip(f"{name}: int32 DequantizeLinear is only used for biases, which tinytrain keeps as int32")
            else:
                q, shift = x[idx], 0
            xt = Tensor("x", q.shape, DType.INT8, Role.INPUT,
                        QuantParams.per_tensor(float(scale.ravel()[k]), int(zp.ravel()[k]) - shift))
            (y,) = get_op("dequantize").reference(DequantizeAttrs(), [q], [xt],
                                                  [Tensor("y", q.shape, DType.FLOAT32, Role.ACTIVATION)])
            got[idx] = y
        np.testing.assert_array_equal(got, expected)  # exact: (q - zp) * scale in float32
    else:
        pytest.fail(f"{name}: unexpected op {node.op_type}")
