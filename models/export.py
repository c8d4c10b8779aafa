"""A trained float model -> the zoo's int8 ONNX: export (torch dynamo, opset 18) with the pooling head made canonical,
metadata stripped, onnxruntime static QDQ quantization with the input fixed at scale 1/255, zero point -128 (the
quantized input is exactly ``pixel - 128``), the int8 graph checked, and its accuracy under onnxruntime.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from models.data import to_input

ALLOWED_FLOAT_OPS = {"Conv", "Relu", "Clip", "Add", "GlobalAveragePool", "ReduceMean",
                     "Flatten", "Reshape", "Gemm", "MatMul", "HardSwish", "HardSigmoid", "Mul"}
INPUT_NAME, OUTPUT_NAME = "input", "logits"
INPUT_SCALE = np.float32(1.0 / 255.0)
INPUT_ZERO_POINT = np.int8(-128)


def _rename_value(graph, old: str, new: str) -> None:
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.name == old:
            v.name = new
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
        for i, name in enumerate(n.output):
            if name == old:
                n.output[i] = new


def canonicalize(model):
    """Rewrite the exporter's pooling head into GlobalAveragePool -> Flatten.

    torch's dynamo exporter lowers AdaptiveAvgPool2d(1) to ReduceMean(axes=[-1,-2] or [2,3],
    keepdims=1) and nn.Flatten to Reshape(shape=[1, C]).  Both are rewritten only when that
    exact pattern is seen; anything else is left alone (and later rejected if not allowed).
    """
    import onnx
    from onnx import helper, numpy_helper
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}

    def const_value(name):
        if name in inits:
            return numpy_helper.to_array(inits[name])
        if name in consts:
            for a in consts[name].attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None

    new_nodes = []
    for n in g.node:
        if n.op_type == "ReduceMean":
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            axes = const_value(n.input[1]) if len(n.input) > 1 else attrs.get("axes")
            if axes is not None and sorted(int(a) % 4 for a in np.ravel(axes)) == [2, 3] \
                    and attrs.get("keepdims", 1) == 1:
                new_nodes.append(helper.make_node("GlobalAveragePool", [n.input[0]], list(n.output),
                                                  name=n.name or "global_avg_pool"))
                continue
        if n.op_type == "Reshape":
            shape = const_value(n.input[1])
            if shape is not None and shape.size == 2 and int(shape[0]) in (1, -1, 0):
                new_nodes.append(helper.make_node("Flatten", [n.input[0]], list(n.output), axis=1,
                                                  name=n.name or "flatten"))
                continue
        new_nodes.append(n)
    del g.node[:]
    g.node.extend(new_nodes)
    # drop initializers / Constant nodes nobody uses any more
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = [n for n in g.node if not (n.op_type == "Constant" and n.output[0] not in used)]
    del g.node[:]
    g.node.extend(nodes)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def strip_metadata(model) -> None:
    """Drop the exporter's per-node metadata (stack traces with absolute paths, fx node dumps).

    They are large and make the file (and its sha256) depend on where the checkout lives.
    """
    g = model.graph
    for n in g.node:
        del n.metadata_props[:]
        n.doc_string = ""
    for v in list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer):
        del v.metadata_props[:]
        v.doc_string = ""
    del g.metadata_props[:]
    del model.metadata_props[:]
    model.doc_string = ""


def finalize_int8(path: Path, name: str) -> None:
    """Strip metadata from the quantized file, re-run shape inference, stamp a short description."""
    import onnx
    from onnx import helper
    m = onnx.load(str(path))
    strip_metadata(m)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    helper.set_model_props(m, {"tinytrain.zoo.model": name,
                               "tinytrain.zoo.input": "float32 pixel/255 NCHW; quantized input = pixel - 128",
                               "tinytrain.zoo.provenance": "models/provenance.json"})
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def export_float_onnx(folded, size: int, path: Path, log) -> dict:
    import onnx
    import torch
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    prog = torch.onnx.export(folded, (x,), dynamo=True, opset_version=18, optimize=True, verbose=False)
    model = prog.model_proto
    g = model.graph
    if len(g.input) != 1 or len(g.output) != 1:
        raise RuntimeError(f"expected one input and one output, got {len(g.input)} / {len(g.output)}")
    raw_ops = sorted({n.op_type for n in g.node})
    strip_metadata(model)
    _rename_value(g, g.input[0].name, INPUT_NAME)
    _rename_value(g, g.output[0].name, OUTPUT_NAME)
    model = canonicalize(model)
    ops = sorted({n.op_type for n in model.graph.node})
    bad = set(ops) - ALLOWED_FLOAT_OPS
    if bad:
        # last resort: constant-fold with onnxscript's optimizer and re-check
        import onnxscript.optimizer
        model = onnxscript.optimizer.optimize(model)
        model = canonicalize(model)
        ops = sorted({n.op_type for n in model.graph.node})
        bad = set(ops) - ALLOWED_FLOAT_OPS
        if bad:
            raise RuntimeError(f"exported graph has unsupported ops {sorted(bad)}")
    for inp in model.graph.input:
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if dims != [1, 3, size, size]:
            raise RuntimeError(f"unexpected input shape {dims}")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    # float ONNX must agree with torch
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = folded(x).numpy()
    got = sess.run(None, {INPUT_NAME: x.numpy()})[0]
    diff = float(np.abs(ref - got).max())
    if diff > 1e-3:
        raise RuntimeError(f"float ONNX disagrees with torch: max |diff| {diff}")
    log(f"  exported float ONNX: exporter ops {raw_ops} -> {ops}; max |onnx - torch| = {diff:.2e}")
    return {"exporter_ops": raw_ops, "float_ops": ops, "float_onnx_max_abs_diff": diff}


class _Calib:
    def __init__(self, x_u8: np.ndarray):
        self.x = x_u8
        self.i = 0

    def get_next(self):
        if self.i >= len(self.x):
            return None
        self.i += 1
        return {INPUT_NAME: to_input(self.x[self.i - 1:self.i])}

    def rewind(self):
        self.i = 0


def quantize(float_path: Path, out_path: Path, calib_u8: np.ndarray) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    quantize_static(
        str(float_path), str(out_path), _Calib(calib_u8),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        per_channel=True, calibrate_method=CalibrationMethod.MinMax,
        extra_options={
            "WeightSymmetric": True,
            "ActivationSymmetric": False,
            # onnxruntime wants numpy arrays here (a numpy scalar is rejected)
            "TensorQuantOverrides": {INPUT_NAME: [{"scale": np.array(INPUT_SCALE, dtype=np.float32),
                                                   "zero_point": np.array(INPUT_ZERO_POINT, dtype=np.int8)}]},
        },
    )


def inspect_qdq(path: Path) -> dict:
    """Check the int8 graph: input Q = (1/255, -128), int8 per-channel weights, int32 biases."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(path))
    g = m.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    # input quantization
    qs = [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == INPUT_NAME]
    if len(qs) != 1:
        raise RuntimeError(f"expected exactly one QuantizeLinear on the input, found {len(qs)}")
    scale, zp = inits[qs[0].input[1]], inits[qs[0].input[2]]
    if not (scale.dtype == np.float32 and scale.shape == () and scale == INPUT_SCALE
            and zp.dtype == np.int8 and zp.shape == () and int(zp) == -128):
        raise RuntimeError(f"input quantization is scale={scale!r} zp={zp!r}, expected 1/255, -128")
    weight_info = []
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm"):
            continue
        w_dq = producers.get(n.input[1])
        if w_dq is None or w_dq.op_type != "DequantizeLinear" or w_dq.input[0] not in inits:
            raise RuntimeError(f"{n.op_type} {n.name}: weight is not an int8 initializer + DequantizeLinear")
        wq, ws, wz = (inits[w_dq.input[i]] for i in range(3))
        axis = next((a.i for a in w_dq.attribute if a.name == "axis"), 1)
        cout = wq.shape[0] if n.op_type == "Conv" else (wq.shape[axis])
        if wq.dtype != np.int8 or ws.shape != (cout,) or np.any(wz != 0):
            raise RuntimeError(f"{n.op_type} {n.name}: weights not int8 symmetric per-channel "
                               f"(dtype {wq.dtype}, scale shape {ws.shape})")
        if len(n.input) > 2:
            b_dq = producers.get(n.input[2])
            if b_dq is None or b_dq.op_type != "DequantizeLinear" or inits[b_dq.input[0]].dtype != np.int32:
                raise RuntimeError(f"{n.op_type} {n.name}: bias is not int32 + DequantizeLinear")
        weight_info.append((n.op_type, tuple(wq.shape), int(axis)))
    ops: dict[str, int] = {}
    for n in g.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    weight_bytes = int(sum(a.nbytes for a in inits.values()))
    return {"ops": dict(sorted(ops.items())), "n_conv": sum(1 for t, _, _ in weight_info if t == "Conv"),
            "n_gemm": sum(1 for t, _, _ in weight_info if t == "Gemm"),
            "initializer_bytes": weight_bytes,
            "weight_elements": int(sum(int(np.prod(s)) for _, s, _ in weight_info)),
            "gemm_weight_axis": [a for t, _, a in weight_info if t == "Gemm"]}


def eval_onnx(path: Path, x_u8: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    preds = np.empty(len(x_u8), np.int64)
    for i in range(len(x_u8)):
        out = sess.run(None, {INPUT_NAME: to_input(x_u8[i:i + 1])})[0]
        preds[i] = int(out.argmax())
    return float((preds == y).mean()), preds


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
