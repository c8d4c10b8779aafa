"""onnxruntime as an oracle for small ONNX models: unoptimized sessions, and the model's own input quantization."""

from __future__ import annotations

import numpy as np
import onnx


def ir_layout(a: np.ndarray) -> np.ndarray:
    """ONNX's NCHW as the IR's NHWC (other ranks unchanged)."""
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def unoptimized_session(model: onnx.ModelProto):
    """An onnxruntime CPU session of ``model`` with every graph optimization off (``ORT_DISABLE_ALL``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_onnxruntime(path, xs: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime's values of the named (integer) tensors for each sample of xs (batch-1 model), unoptimized."""
    model = onnx.load(str(path))
    existing = {o.name for o in model.graph.output}
    for name in names:
        if name not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    session = unoptimized_session(model)
    input_name = session.get_inputs()[0].name
    runs = [session.run(names, {input_name: xs[i : i + 1]}) for i in range(len(xs))]
    return {name: np.concatenate([r[k] for r in runs]) for k, name in enumerate(names)}


def quantize_input(graph, xs: np.ndarray) -> np.ndarray:
    """The model's first QuantizeLinear (round half to even), in the model's own dtype, NHWC."""
    q = graph.tensors[graph.inputs[0]].quant
    if graph.uint8_input:
        x = np.clip(np.rint(xs / np.float32(q.s)) + q.zp + 128, 0, 255).astype(np.uint8)
    else:
        x = np.clip(np.rint(xs / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8)
    return ir_layout(x)
