"""Write the quantizer zoo: small ONNX models in the shapes the mainstream quantizers write (README.md here).

    .venv/bin/python tests/quantizers/make_zoo.py     # rewrites tests/quantizers/*.onnx (deterministic)

Each is one small float network (``float_model``: Conv 3x3/2 -> Relu -> depthwise Conv 3x3 -> Relu ->
GlobalAveragePool -> Flatten -> Gemm, 3x16x16 input, seeded weights) quantized by onnxruntime's quantize_static
(QDQ, per-channel int8 weights, int8 activations, 16 seeded calibration inputs), then rewritten into one quantizer's
form. The rewrites are what the quantizers' own exports hold (the issue-43 survey), so the tests need neither
Brevitas nor NNCF installed:

- ``qcdq.onnx`` (Brevitas ``export_onnx_qcdq``): float weights -> QuantizeLinear -> Clip(-127, 127) ->
  DequantizeLinear, and a Clip between every activation's Q and DQ (one narrowed to [-127, 127]);
- ``bn_unfolded.onnx`` (NNCF torch backend; onnxruntime without BatchNorm folding): a BatchNormalization between
  the first Conv and its QuantizeLinear (one channel's scale negative);
- ``per_channel_act.onnx`` (NNCF per-channel activation quantizers): an activation's Q / DQ with one scale and zero
  point per channel (all equal, as NNCF writes them for a per-tensor range);
- ``float_output.onnx`` (NNCF without output quantization): the Gemm's output is the float graph output;
- ``const_ops.onnx`` (PyTorch's ``x * s + t`` and ``x - m``): Mul, Add and Sub with per-channel constant operands
  between the depthwise Conv and its QuantizeLinear;
- ``transpose_const.onnx`` (PyTorch's ``x.permute(0, 2, 3, 1) * s + t`` and back): Transpose to NHWC, Mul and Add
  with constants along the last axis, Transpose back, between the depthwise Conv and its QuantizeLinear;

and one TFLite model written with the test schema builder (tests/oracles.py ``TfliteBuilder``, tflite-micro's
schema), ``litert_transpose.tflite`` (LiteRT-torch's export of an NCHW PyTorch model): float NCHW input -> QUANTIZE
-> TRANSPOSE [0, 2, 3, 1] -> CONV_2D (RELU) -> a residual left in float as LiteRT-torch leaves it (CONV_2D 1x1, then
DEQUANTIZE both -> float ADD -> QUANTIZE) -> MEAN -> FULLY_CONNECTED -> DEQUANTIZE; and ``tf_const_ops.tflite``
(the TensorFlow converter's unfused hard-swish and a Rescaling, MobileNetV3-Small-like): CONV_2D -> ADD 3 (RELU6)
-> MUL 1/6 -> MUL by the conv -> SUB a constant -> MUL a constant (operand first, RELU) -> MEAN -> FULLY_CONNECTED.
"""

from __future__ import annotations

import copy
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SIZE = 16
SEED = 0


def float_model(seed: int = SEED) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    f = np.float32
    inits = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
             "w2": rng.normal(0, 0.4, (8, 1, 3, 3)), "b2": rng.normal(0, 0.1, 8),
             "fw": rng.normal(0, 0.5, (4, 8)), "fb": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], "conv2", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Relu", ["c2"], ["r2"], "relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], "pool"),
             helper.make_node("Flatten", ["p"], ["flat"], "flatten"),
             helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], "fc", transB=1)]
    graph = helper.make_graph(nodes, "zoo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(a.astype(f), k) for k, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def inputs(n: int, seed: int) -> np.ndarray:
    """Real inputs in [0, 1] (NCHW)."""
    return np.random.default_rng(seed).random((n, 3, SIZE, SIZE), np.float32)


def quantized() -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    class Reader:
        def __init__(self):
            self.it = iter({"x": x[None]} for x in inputs(16, 7))

        def get_next(self):
            return next(self.it, None)

    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "f.onnx", Path(d) / "q.onnx"
        onnx.save(float_model(), str(src))
        quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
        return onnx.load(str(out))


# ----- rewrites


def _init(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == name))


def _set_init(model: onnx.ModelProto, name: str, arr: np.ndarray) -> None:
    kept = [i for i in model.graph.initializer if i.name != name]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept, numpy_helper.from_array(arr, name)])


def _producer(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if tensor in n.output)


def _insert_after(model: onnx.ModelProto, tensor: str, make) -> None:
    """Route the consumers of ``tensor`` through the nodes ``make(tensor, new_name)`` returns (placed after the
    producer)."""
    new = tensor + "_rw"
    for n in model.graph.node:
        n.input[:] = [new if i == tensor else i for i in n.input]
    nodes = make(tensor, new)
    pos = list(model.graph.node).index(_producer(model, tensor)) + 1
    for k, node in enumerate(nodes):
        model.graph.node.insert(pos + k, node)


def qcdq(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    i8 = {name: numpy_helper.from_array(np.array(v, np.int8), name) for name, v in
          (("clip_lo", -128), ("clip_hi", 127), ("narrow_lo", -127))}
    m.graph.initializer.extend(i8.values())
    for dq in [n for n in m.graph.node if n.op_type == "DequantizeLinear"]:
        src = dq.input[0]
        if any(i.name == src for i in m.graph.initializer):
            if _init(m, src).dtype != np.int8:
                continue  # the int32 biases stay DQ(int32) in QCDQ
            w = _init(m, src).astype(np.float32)
            scale = _init(m, dq.input[1]).astype(np.float32)
            axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
            shape = [1] * w.ndim
            shape[axis] = scale.size
            _set_init(m, src + "_float", w * scale.reshape(shape))
            pos = list(m.graph.node).index(dq)
            qn = helper.make_node("QuantizeLinear", [src + "_float", dq.input[1], dq.input[2]], [src + "_q"],
                                  src + "_Q", axis=axis)
            clip = helper.make_node("Clip", [src + "_q", "narrow_lo", "clip_hi"], [src + "_clipped"], src + "_Clip")
            m.graph.node.insert(pos, qn)
            m.graph.node.insert(pos + 1, clip)
            dq.input[0] = src + "_clipped"
        else:
            narrow = "relu1" in src or "r1" in src
            _insert_after(m, src, lambda t, new: [helper.make_node(
                "Clip", [t, "narrow_lo" if narrow else "clip_lo", "clip_hi"], [new], t + "_Clip")])
    _drop_unused(m)
    return m


def _drop_unused(m: onnx.ModelProto) -> None:
    used = {i for n in m.graph.node for i in n.input}
    kept = [i for i in m.graph.initializer if i.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)


def _output_q(m: onnx.ModelProto, node_name: str) -> onnx.NodeProto:
    """The QuantizeLinear reading the output of the float node ``node_name``."""
    out = next(n for n in m.graph.node if n.name == node_name).output[0]
    return next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == out)


def bn_unfolded(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    rng = np.random.default_rng(3)
    gamma = rng.uniform(0.8, 1.2, 8).astype(np.float32)
    gamma[5] = -gamma[5]
    params = {"bn_scale": gamma, "bn_bias": rng.normal(0, 0.05, 8).astype(np.float32),
              "bn_mean": rng.normal(0, 0.05, 8).astype(np.float32),
              "bn_var": rng.uniform(0.8, 1.2, 8).astype(np.float32)}
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in params.items())
    conv_out = next(n for n in m.graph.node if n.name == "conv1").output[0]
    _insert_after(m, conv_out, lambda t, new: [helper.make_node("BatchNormalization", [t, *params], [new], "bn1")])
    return m


def per_channel_act(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    qn = _output_q(m, "conv2")
    dqs = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == qn.output[0]]
    s, zp = _init(m, qn.input[1]), _init(m, qn.input[2])
    _set_init(m, "pc_scale", np.full(8, s, np.float32))
    _set_init(m, "pc_zero_point", np.full(8, zp, np.int8))
    for n in [qn, *dqs]:
        n.input[1], n.input[2] = "pc_scale", "pc_zero_point"
        n.attribute.append(helper.make_attribute("axis", 1))
    _drop_unused(m)
    return m


def float_output(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    fc = next(n for n in m.graph.node if n.name == "fc")
    tail = [n for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
            and (n.input[0] == fc.output[0] or n.output[0] == "logits")]
    for n in tail:
        m.graph.node.remove(n)
    fc.output[0] = "logits"
    _drop_unused(m)
    return m


def const_ops(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    rng = np.random.default_rng(4)
    consts = {"mul_c": rng.uniform(0.7, 1.3, (1, 8, 1, 1)), "add_c": rng.normal(0, 0.05, (1, 8, 1, 1)),
              "sub_c": rng.normal(0, 0.05, (8, 1, 1))}
    m.graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items())
    conv_out = next(n for n in m.graph.node if n.name == "conv2").output[0]
    _insert_after(m, conv_out, lambda t, new: [helper.make_node("Mul", [t, "mul_c"], [t + "_m"], "scale"),
                                               helper.make_node("Add", [t + "_m", "add_c"], [t + "_a"], "shift"),
                                               helper.make_node("Sub", [t + "_a", "sub_c"], [new], "center")])
    return m


def _pooled_head(b, s, rng, x, mean_name: str, mean_scale: float, fin) -> bytes:
    """The TFLite fixtures' tail after ``x`` (1, 4, 4, 4): MEAN over H and W into ``mean_name`` at ``mean_scale``,
    a seeded 3-class FULLY_CONNECTED, DEQUANTIZE to float logits; the finished model from input ``fin``."""
    axes = b.tensor("axes", (2,), "INT32", data=np.array([1, 2], np.int32))
    m = b.tensor(mean_name, (1, 4), "INT8", mean_scale, -128)
    b.op("MEAN", [x, axes], [m], s.ReducerOptionsT(keepDims=False))
    fs = rng.uniform(0.004, 0.01, 3)
    fw = b.tensor("fc_w", (3, 4), "INT8", fs, 0, 0, rng.integers(-127, 128, (3, 4)).astype(np.int8))
    fb = b.tensor("fc_b", (3,), "INT32", np.float32(mean_scale) * fs.astype(np.float32), 0, 0,
                  rng.integers(-500, 500, 3).astype(np.int32))
    y = b.tensor("logits_q", (1, 3), "INT8", 0.02, 0)
    b.op("FULLY_CONNECTED", [m, fw, fb], [y], s.FullyConnectedOptionsT())
    out = b.tensor("logits", (1, 3), "FLOAT32")
    b.op("DEQUANTIZE", [y], [out])
    return b.finish([fin], [out])


def litert_transpose() -> bytes:
    sys.path.insert(0, str(HERE.parent))
    from oracles import TfliteBuilder
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    rng = np.random.default_rng(5)
    b = TfliteBuilder()
    fin = b.tensor("x", (1, 3, 8, 8), "FLOAT32")
    q = b.tensor("x_q", (1, 3, 8, 8), "INT8", 1 / 255, -128)
    b.op("QUANTIZE", [fin], [q])
    perm = b.tensor("perm", (4,), "INT32", data=np.array([0, 2, 3, 1], np.int32))
    t = b.tensor("x_nhwc", (1, 8, 8, 3), "INT8", 1 / 255, -128)
    b.op("TRANSPOSE", [q, perm], [t])
    w_scale = rng.uniform(0.002, 0.006, 4)
    w = b.tensor("conv_w", (4, 3, 3, 3), "INT8", w_scale, 0, 0, rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8))
    bias = b.tensor("conv_b", (4,), "INT32", np.float32(1 / 255) * w_scale.astype(np.float32), 0, 0,
                    rng.integers(-2000, 2000, 4).astype(np.int32))
    c = b.tensor("conv", (1, 4, 4, 4), "INT8", 0.01, -128)
    b.op("CONV_2D", [t, w, bias], [c], s.Conv2DOptionsT(padding=s.Padding.SAME, strideW=2, strideH=2,
                                                         fusedActivationFunction=s.ActivationFunctionType.RELU))
    w2s = rng.uniform(0.004, 0.01, 4)
    w2 = b.tensor("conv2_w", (4, 1, 1, 4), "INT8", w2s, 0, 0, rng.integers(-127, 128, (4, 1, 1, 4)).astype(np.int8))
    b2 = b.tensor("conv2_b", (4,), "INT32", np.float32(0.01) * w2s.astype(np.float32), 0, 0,
                  rng.integers(-300, 300, 4).astype(np.int32))
    c2 = b.tensor("conv2", (1, 4, 4, 4), "INT8", 0.0061, 3)
    b.op("CONV_2D", [c, w2, b2], [c2], s.Conv2DOptionsT(padding=s.Padding.SAME, strideW=1, strideH=1))
    fa, fb2 = b.tensor("conv_f", (1, 4, 4, 4), "FLOAT32"), b.tensor("conv2_f", (1, 4, 4, 4), "FLOAT32")
    b.op("DEQUANTIZE", [c], [fa])
    b.op("DEQUANTIZE", [c2], [fb2])
    fsum = b.tensor("sum_f", (1, 4, 4, 4), "FLOAT32")
    b.op("ADD", [fa, fb2], [fsum], s.AddOptionsT())
    r = b.tensor("sum", (1, 4, 4, 4), "INT8", 0.0123, -60)
    b.op("QUANTIZE", [fsum], [r])
    return _pooled_head(b, s, rng, r, "mean", 0.008, fin)


def tf_const_ops() -> bytes:
    """The TF converter's unfused hard-swish / hard-sigmoid and a Rescaling: ADD(x, 3) RELU6 -> MUL(., 1/6) ->
    MUL(x, .); SUB(x, c); MUL(c, x) (the constant first); uint8-free, int8 throughout."""
    sys.path.insert(0, str(HERE.parent))
    from oracles import TfliteBuilder
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    rng = np.random.default_rng(7)
    b = TfliteBuilder()
    fin = b.tensor("x", (1, 8, 8, 3), "FLOAT32")
    q = b.tensor("x_q", (1, 8, 8, 3), "INT8", 1 / 255, -128)
    b.op("QUANTIZE", [fin], [q])
    w_scale = rng.uniform(0.002, 0.006, 4)
    w = b.tensor("conv_w", (4, 3, 3, 3), "INT8", w_scale, 0, 0, rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8))
    bias = b.tensor("conv_b", (4,), "INT32", np.float32(1 / 255) * w_scale.astype(np.float32), 0, 0,
                    rng.integers(-2000, 2000, 4).astype(np.int32))
    c = b.tensor("conv", (1, 4, 4, 4), "INT8", 0.031, 5)
    b.op("CONV_2D", [q, w, bias], [c], s.Conv2DOptionsT(padding=s.Padding.SAME, strideW=2, strideH=2))

    def const(name, value, scale, zp, shape=()):
        return b.tensor(name, shape, "INT8", scale, zp, 0, np.full(shape, value, np.int8))

    def act(name, scale, zp):
        return b.tensor(name, (1, 4, 4, 4), "INT8", scale, zp)
    three = const("three", 127, 3 / 127, 0)
    plus3 = act("plus3", 6 / 255, -128)
    b.op("ADD", [c, three], [plus3], s.AddOptionsT(fusedActivationFunction=s.ActivationFunctionType.RELU6))
    sixth = const("sixth", 127, (1 / 6) / 127, 0, (1,))
    gate = act("hard_sigmoid", 1 / 255, -128)
    b.op("MUL", [plus3, sixth], [gate], s.MulOptionsT())
    hs = act("hard_swish", 0.019, -100)
    b.op("MUL", [c, gate], [hs], s.MulOptionsT())
    mean = const("mean", -77, 0.004, 3, (1, 1, 1, 1))
    centred = act("centred", 0.021, -90)
    b.op("SUB", [hs, mean], [centred], s.SubOptionsT())
    scale = const("scale", 91, 0.011, -20)
    scaled = act("scaled", 0.024, -85)
    b.op("MUL", [scale, centred], [scaled], s.MulOptionsT(fusedActivationFunction=s.ActivationFunctionType.RELU))
    return _pooled_head(b, s, rng, scaled, "mean_hw", 0.012, fin)


def transpose_const(q: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(q)
    rng = np.random.default_rng(6)
    consts = {"t_scale": rng.uniform(0.7, 1.3, 8), "t_shift": rng.normal(0, 0.05, 8)}
    m.graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items())
    conv_out = next(n for n in m.graph.node if n.name == "conv2").output[0]
    _insert_after(m, conv_out, lambda t, new: [
        helper.make_node("Transpose", [t], [t + "_nhwc"], "to_nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("Mul", [t + "_nhwc", "t_scale"], [t + "_m"], "channel_scale"),
        helper.make_node("Add", [t + "_m", "t_shift"], [t + "_a"], "channel_shift"),
        helper.make_node("Transpose", [t + "_a"], [new], "to_nchw", perm=[0, 3, 1, 2])])
    return m


ZOO = {"qcdq": qcdq, "bn_unfolded": bn_unfolded, "per_channel_act": per_channel_act, "float_output": float_output,
       "const_ops": const_ops, "transpose_const": transpose_const}


def build(out: Path = HERE) -> dict[str, Path]:
    q = quantized()
    paths = {}
    for name, rewrite in ZOO.items():
        m = rewrite(q)
        m.producer_name, m.producer_version = f"tests/quantizers/make_zoo.py ({name})", "1"
        onnx.checker.check_model(m)
        paths[name] = out / f"{name}.onnx"
        onnx.save(m, str(paths[name]))
    paths["litert_transpose"] = out / "litert_transpose.tflite"
    paths["litert_transpose"].write_bytes(litert_transpose())
    paths["tf_const_ops"] = out / "tf_const_ops.tflite"
    paths["tf_const_ops"].write_bytes(tf_const_ops())
    return paths


if __name__ == "__main__":
    for k, v in build().items():
        print(f"wrote {v.relative_to(HERE.parents[1])} ({v.stat().st_size} bytes)")
