"""The ONNX frontends (QDQ and QOperator) against onnxruntime, and their error messages.

Rounding: ONNX imports requantize conv / fully connected / mean as onnxruntime's integer kernels do
(MLAS: the int32 accumulator times the float32 scale float32(float32(s_x * s_w) / s_y), the product
rounded to float32, then to an integer half to even), emulated exactly in integer arithmetic
(``Requant.fp32``); add and requantize round the real value once (single rounding), average pools
half to even, clamp bounds half to even (onnx_requant's docstring lists what remains). onnxruntime's
float execution of a QDQ graph rounds the real value once up to float32 error, so an integer tensor
differs from it only where the real value is within float32 error (about 1e-5 LSB here) of a
rounding boundary, at exact ties, and where we fold a MatMul -> Add into one rounding.

The small models below are compared with onnxruntime run with ``ORT_DISABLE_ALL`` (QDQ models as float
ops between DequantizeLinear / QuantizeLinear, QOperator models with their integer kernels); on 100 seeded
random inputs of a MobileNetV2-style network (QDQ and QOperator; 30 for the uint8 variants):

1. op by op (each IR node fed onnxruntime's own integer inputs): every integer tensor >= 99 %
   identical to onnxruntime's, none off by more than one LSB;
2. end to end: >= 99 % of the int8 outputs identical (100 % measured), none off by more than 1;
3. the same IR graph evaluated with exact real-value rounding in float64 (test-local) agrees with
   our integer arithmetic on >= 99 % of the outputs (99.7-99.9 % measured): the rest is float32
   rounding of near-ties, onnxruntime's and so ours.

The trained zoo models (``models/*.onnx``, 100 LFW images) are compared with onnxruntime's default
session, what users run: see ``test_zoo_model_matches_onnxruntime`` for why it is the oracle there,
and for the layer-by-layer account of what remains.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_models
from oracles import skip_unless_ort_int8_exact
from tinytrain.errors import ModelError, TinyTrainError, UnsupportedModelError
from tinytrain.frontends import load_model
from tinytrain.frontends.onnx import convert_onnx, graph_from_onnx
from tinytrain.ops import get_op
from tinytrain.ops.conv2d import accumulate as conv_accumulate
from tinytrain.ops.fully_connected import accumulate as fc_accumulate
from tinytrain.ops.mean import MeanAttrs
from tinytrain.simulator import forward, to_external, to_internal

ROOT = Path(__file__).resolve().parents[1]
# The image classifiers of models.ZOO; mbv3s-w0.5 (models.EXTRA) is checked against onnxruntime in
# tests/test_user_ops_model.py: onnxruntime's extended graph optimizations change its HardSwish / HardSigmoid / Mul
# QDQ groups (up to 97 LSB on the logits, 83.8 % instead of 91.0 % accuracy on 600 test images), so the default
# session is no oracle for it, while ORT_DISABLE_ALL and ORT_ENABLE_BASIC equal the simulator bit for bit.
ZOO_FILES = sorted(p for p in (ROOT / "models").glob("*.onnx") if p.stem != "mbv3s-w0.5")

ort = pytest.importorskip("onnxruntime")

N_SAMPLES = 100


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="session")
def mbv2(tmp_path_factory):
    paths = onnx_models.build_quantized(tmp_path_factory.mktemp("onnx_mbv2"))
    paths["qdq_uint8"] = onnx_models.quantize(paths["float"], paths["float"].parent / "mbv2_qdq_u8.onnx", "qdq", "uint8")
    paths["qop_uint8"] = onnx_models.quantize(paths["float"], paths["float"].parent / "mbv2_qop_u8.onnx", "qop", "uint8")
    return paths


@pytest.fixture(scope="session")
def patterns(tmp_path_factory):
    return onnx_models.build_patterns(tmp_path_factory.mktemp("onnx_patterns"))


def _ir_layout(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def run_onnxruntime(path, xs: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime's values of the named (integer) tensors for each sample of xs (batch-1 model)."""
    model = onnx.load(str(path))
    existing = {o.name for o in model.graph.output}
    for name in names:
        if name not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    runs = [session.run(names, {input_name: xs[i : i + 1]}) for i in range(len(xs))]
    return {name: np.concatenate([r[k] for r in runs]) for k, name in enumerate(names)}


def quantize_input(graph, xs: np.ndarray) -> np.ndarray:
    """The model's first QuantizeLinear (round half to even), in the model's own dtype, NHWC."""
    q = graph.tensors[graph.inputs[0]].quant
    if graph.uint8_io:
        x = np.clip(np.rint(xs / np.float32(q.s)) + q.zp + 128, 0, 255).astype(np.uint8)
    else:
        x = np.clip(np.rint(xs / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8)
    return _ir_layout(x)


def output_int_tensor(model: onnx.ModelProto) -> str:
    """The integer tensor feeding the final DequantizeLinear, before a trailing Softmax (which is dropped)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    name = model.graph.output[0].name
    while True:
        node = producers[name]
        if node.op_type == "Softmax":
            name = node.input[0]
            continue
        assert node.op_type == "DequantizeLinear", node.op_type
        src = producers[node.input[0]]
        if src.op_type == "QLinearSoftmax":
            return src.input[0]
        if src.op_type == "QuantizeLinear" and producers[src.input[0]].op_type == "Softmax":
            name = producers[src.input[0]].input[0]
            continue
        return node.input[0]


def teacher_forced(graph, names: dict[str, str], ort_values: dict[str, np.ndarray]) -> dict[str, tuple[str, np.ndarray]]:
    """Run each IR node on onnxruntime's values of its inputs; per ONNX tensor: (op, |ours - ort|)."""
    ref = {}
    for onnx_name, ir in names.items():
        v = ort_values.get(onnx_name)
        if v is not None and v.dtype in (np.int8, np.uint8):
            ref[ir] = (onnx_name, to_internal(graph, _ir_layout(v)) if v.dtype == np.uint8 else _ir_layout(v))
    values = {ir: v for ir, (_, v) in ref.items()}
    out = {}
    for node in graph.nodes:
        arrays = [graph.tensors[i].data if graph.tensors[i].is_constant else values[i] for i in node.inputs]
        (y,) = get_op(node.op).reference(node.attrs, arrays, [graph.tensors[i] for i in node.inputs],
                                         [graph.tensors[o] for o in node.outputs])
        o = node.outputs[0]
        if o in ref:
            onnx_name, expected = ref[o]
            out[onnx_name] = (node.op, np.abs(y.astype(np.int64) - expected.astype(np.int64)))
            values[o] = expected
        else:
            values[o] = y
    return out


def exact_real(node, arrays, ts, out, batch: int) -> np.ndarray | None:
    """The real value of a requantizing node's output in output LSBs, zero point included, before any
    rounding (float64), or None for ops that do not requantize. Test-only."""
    a = node.attrs
    if node.op in ("conv2d", "fully_connected"):
        bias = arrays[2] if len(arrays) > 2 else None
        if node.op == "conv2d":
            acc = conv_accumulate(a, arrays[0], ts[0], arrays[1], ts[1], bias, (batch,) + out.shape[1:])
        else:
            acc = fc_accumulate(arrays[0], ts[0].quant.zp, arrays[1], ts[1].quant.zero_point, bias)
        return acc * (ts[0].quant.s * np.asarray(ts[1].quant.scale) / out.quant.s) + out.quant.zp
    if node.op == "mean":
        xs = arrays[0].astype(np.int64) - ts[0].quant.zp
        count = xs.shape[1] * xs.shape[2]
        v = xs.sum(axis=(1, 2)) * ts[0].quant.s / (count * out.quant.s) + out.quant.zp
        return v.reshape((batch,) + out.shape[1:])
    if node.op == "add":
        real = ((arrays[0].astype(np.int64) - ts[0].quant.zp) * ts[0].quant.s
                + (arrays[1].astype(np.int64) - ts[1].quant.zp) * ts[1].quant.s)
        return real / out.quant.s + out.quant.zp
    if node.op == "requantize":
        return (arrays[0].astype(np.int64) - ts[0].quant.zp) * ts[0].quant.s / out.quant.s + out.quant.zp
    return None


def forward_exact_rounding(graph, x: np.ndarray) -> np.ndarray:
    """The IR graph evaluated with exact real-value requantization rounded half to even (onnxruntime's
    rounding, in float64) instead of the integer arithmetic. Test-only."""
    values = {graph.inputs[0]: x}
    for node in graph.nodes:
        ts = [graph.tensors[i] for i in node.inputs]
        arrays = [t.data if t.is_constant else values[t.name] for t in ts]
        out = graph.tensors[node.outputs[0]]
        v = exact_real(node, arrays, ts, out, len(x))
        if v is None:
            (y,) = get_op(node.op).reference(node.attrs, arrays, ts, [out])
        else:
            lo, hi = (-128, 127) if node.op == "requantize" else (node.attrs.act_min, node.attrs.act_max)
            y = np.clip(np.rint(v), lo, hi)
        values[out.name] = np.asarray(y).astype(np.int8)
    return values[graph.outputs[0]]


# --------------------------------------------------------------------------- the MobileNetV2-style model


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["qdq", "qop", "qdq_uint8", "qop_uint8"])
def test_mobilenetv2_matches_onnxruntime(mbv2, fmt):
    if fmt == "qop_uint8":
        skip_unless_ort_int8_exact()
    path = mbv2[fmt]
    graph, names = convert_onnx(path.read_bytes(), path.stem)
    ops = [n.op for n in graph.nodes]
    assert ops.count("conv2d") == 15 and ops.count("add") == 2 and ops[-3:] == ["mean", "reshape", "fully_connected"]
    assert graph.uint8_io == fmt.endswith("uint8")
    assert graph.tensors[graph.inputs[0]].shape == (1, onnx_models.INPUT_SIZE, onnx_models.INPUT_SIZE, 3)

    # the uint8 variants repeat the check on fewer inputs (they only add the uint8 <-> int8 shift)
    xs = onnx_models.random_inputs(N_SAMPLES if not fmt.endswith("uint8") else 30, seed=1)
    model = onnx.load(str(path))
    out_name = output_int_tensor(model)
    ort_values = run_onnxruntime(path, xs, sorted(set(names) | {out_name}))
    expected = ort_values[out_name].astype(np.int64)

    # the rounding is the ONNX one: onnxruntime's float32 requantization for conv / fully connected / mean
    # (Requant.fp32, 1/count in the mean's scale), single rounding for the others
    for node in graph.nodes:
        for r in (getattr(node.attrs, f, None) for f in ("requant", "input1", "input2", "output")):
            want = "fp32" if node.op in ("conv2d", "fully_connected", "mean") else "single"
            assert r is None or r.rounding == want, node.name
    assert all(n.attrs.count_folded for n in graph.nodes if isinstance(n.attrs, MeanAttrs))

    # 1. op by op, on onnxruntime's own inputs
    per_op = teacher_forced(graph, names, ort_values)
    assert len(per_op) >= 17
    for onnx_name, (op, diff) in per_op.items():
        assert diff.max() <= 1, f"{op} {onnx_name}: max |diff| {diff.max()}"
        assert (diff == 0).mean() >= 0.99, f"{op} {onnx_name}: {(diff == 0).mean():.4f} identical"

    # 2. end to end, our integer arithmetic; a batch-1 model runs the whole batch
    x = quantize_input(graph, xs)
    ours = to_external(graph, forward(graph, {graph.inputs[0]: to_internal(graph, x)})[graph.outputs[0]])
    diff = np.abs(ours.astype(np.int64) - expected)
    identical = float((diff == 0).mean())
    # 3. end to end, exact real-value rounding (half to even, float64) on the same IR graph: ours differs from it
    #    only by the float32 rounding of near-ties that we share with onnxruntime
    exact = to_external(graph, forward_exact_rounding(graph, to_internal(graph, x)))
    ours_vs_exact = float((ours == exact).mean())
    print(f"\n{fmt}: {ours.size} int8 outputs: {identical:.1%} identical to onnxruntime, max |diff| {diff.max()}; "
          f"{ours_vs_exact:.1%} identical to exact real-value rounding")
    assert diff.max() <= 1
    assert identical >= 0.99
    assert ours_vs_exact >= 0.99 and np.abs(ours.astype(np.int64) - exact).max() <= 1


# --------------------------------------------------------------------------- the shipped zoo models

TIE_TOLERANCE = 1e-4  # output LSB: onnxruntime's float32 error on these networks is below 1e-5
INTEGER_KERNELS = ("QLinearConv", "QGemm", "QLinearGlobalAveragePool")  # MLAS, float32 requantization
ZOO_BATCH = 25  # onnxruntime's intermediate tensors of this many images at a time


def _zoo_inputs(graph, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n LFW images as the model's internal int8 input and as the float input (NCHW) that onnxruntime's
    first QuantizeLinear maps to exactly that input."""
    from tinytrain.data import load_dataset, model_inputs

    q = model_inputs(graph, load_dataset("lfw").x[:n])
    quant = graph.tensors[graph.inputs[0]].quant
    xs = ((q.astype(np.float32) - np.float32(quant.zp)) * np.float32(quant.s)).transpose(0, 3, 1, 2)
    return q, np.ascontiguousarray(xs, np.float32)


def run_default_session(path, xs: np.ndarray, graph) -> np.ndarray:
    """The int8 output of onnxruntime's default session (all graph optimizations) on the unmodified model, per
    sample. Its float output is DequantizeLinear of the int8 one, so dividing by the scale recovers it exactly
    (exposing the int8 tensor as a graph output instead could change what onnxruntime fuses)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    f = np.concatenate([session.run(None, {input_name: xs[i : i + 1]})[0] for i in range(len(xs))])
    q = graph.tensors[graph.outputs[0]].quant
    return np.rint(f.astype(np.float64) / q.s + q.zp).astype(np.int64)


def default_session_observer(path, tmp_path):
    """onnxruntime's default session, node by node: its optimized graph (``SessionOptions.
    optimized_model_filepath``) is run again without further optimization, every quantized node output exposed.

    Returns (run, kinds): ``run(xs)`` -> ({ONNX source node name: int8 output in IR layout}, float model output);
    ``kinds``: {source node: how onnxruntime computes it}: an integer kernel it fused (QLinearConv, QGemm,
    QLinearGlobalAveragePool; named after the source node plus "_token_N") or "float Conv" / "float Add" for
    a node it left in float between DequantizeLinear and QuantizeLinear (the tensor after that QuantizeLinear)."""
    import re

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / f"{path.stem}.optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = onnx.load(options.optimized_model_filepath)
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    picks = {}  # source node -> (kind, tensor name, channels last)
    for node in model.graph.node:
        source = re.sub(r"_token_\d+$", "", node.name)
        if node.domain == "com.microsoft" and node.op_type in INTEGER_KERNELS:
            nhwc = any(a.name == "channels_last" and a.i for a in node.attribute)
            picks[source] = (node.op_type, node.output[0], nhwc)
        elif node.domain in ("", "ai.onnx") and node.op_type in ("Conv", "Gemm", "MatMul", "Add", "GlobalAveragePool"):
            qs = [c for c in consumers.get(node.output[0], []) if c.op_type == "QuantizeLinear"]
            if len(qs) == 1:
                picks[source] = (f"float {node.op_type}", qs[0].output[0], False)
    out_name = model.graph.output[0].name
    names = [out_name] + [t for _, t, _ in picks.values()]
    for name in names[1:]:
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run(xs):
        runs = [session.run(names, {input_name: xs[i : i + 1]}) for i in range(len(xs))]
        values = {}
        for k, (source, (_, _, nhwc)) in enumerate(picks.items(), start=1):
            v = np.concatenate([r[k] for r in runs])
            v = (v.astype(np.int16) - 128).astype(np.int8) if v.dtype == np.uint8 else v
            values[source] = v.transpose(0, 2, 3, 1) if v.ndim == 4 and not nhwc else v
        return values, np.concatenate([r[0] for r in runs])

    return run, {source: kind for source, (kind, _, _) in picks.items()}


def zoo_per_layer(graph, observed: dict[str, np.ndarray], q: np.ndarray, stats: dict[str, list]) -> None:
    """Teacher-forced comparison with the default session: each IR node gets onnxruntime's values of its inputs.
    Accumulates per source node [IR op, values, differing, max |diff|, differing not at a float32 near-tie] (a
    near-tie: the exact real value lies within TIE_TOLERANCE of a rounding boundary)."""
    import re

    by_source = {}
    for node in graph.nodes:
        m = re.search(r"'([^']*)'", node.name)
        if m and m.group(1) in observed and node.op in ("conv2d", "fully_connected", "add", "mean"):
            by_source[node.outputs[0]] = m.group(1)
    values = {graph.inputs[0]: q}
    for node in graph.nodes:
        ts = [graph.tensors[i] for i in node.inputs]
        arrays = [t.data if t.is_constant else values[t.name] for t in ts]
        o = graph.tensors[node.outputs[0]]
        (y,) = get_op(node.op).reference(node.attrs, arrays, ts, [o])
        source = by_source.get(o.name)
        if source is None:
            values[o.name] = y
            continue
        expected = observed[source].reshape(y.shape)
        bad = y != expected
        row = stats.setdefault(source, [node.op, 0, 0, 0, 0])
        row[1] += y.size
        row[2] += int(bad.sum())
        if bad.any():
            row[3] = max(row[3], int(np.abs(y.astype(np.int64) - expected).max()))
            v = exact_real(node, arrays, ts, o, len(q))
            near_tie = np.abs(v - np.floor(v) - 0.5) < TIE_TOLERANCE
            row[4] += int((bad & ~near_tie).sum())
        values[o.name] = expected


@pytest.mark.slow
@pytest.mark.skipif(not ZOO_FILES, reason="no models/*.onnx (python -m models.build writes them)")
@pytest.mark.parametrize("path", ZOO_FILES, ids=[p.name for p in ZOO_FILES])
def test_zoo_model_matches_onnxruntime(path, tmp_path):
    """A shipped int8 QDQ model on 100 LFW images against onnxruntime's default session: issue 3 asks for
    >= 99 % of the int8 outputs identical and none off by more than one LSB.

    The oracle is the default session (``InferenceSession(path)``, all graph optimizations), not
    ``ORT_DISABLE_ALL``: it is what users run, and it is onnxruntime's integer execution of the model (QDQ
    groups fused into QLinearConv / QGemm / QLinearGlobalAveragePool, integer accumulation, MLAS's float32
    requantization), the computation an int8 deployment stands for. ``ORT_DISABLE_ALL`` executes the QDQ graph
    as float ops between DequantizeLinear / QuantizeLinear, a simulation of the quantization whose float32
    rounding near ties differs from onnxruntime's own integer execution: the two sessions agree on only
    96.5 / 91.7 / 97.7 / 96.8 % of the outputs (mbv1 / mbv2 / mcunet / proxyless; max |diff| 2 / 1 / 1 / 1).

    Measured (identical / max |diff|), before -> after ONNX conv / fully connected / mean switched from single
    rounding to onnxruntime's float32 rounding (``Requant.fp32``): vs the default session mbv1-0.25-vww
    100 % / 0 -> 100 % / 0, mbv2-w0.35 99.9 % / 1 -> 100 % / 0, mcunet-5fps 99.0 % / 1 -> 100 % / 0,
    proxyless-w0.3 96.2 % / 1 -> 99.0 % / 1; vs ORT_DISABLE_ALL 96.5 / 91.8 / 98.1 / 95.0 % ->
    96.5 / 91.7 / 97.7 / 96.0 %. (Choosing the fixed-point multiplier from onnxruntime's float32 scale alone,
    without the float32 rounding of the product, gave 100 / 100 / 98.7 / 96.5 %.)

    Layer by layer (each IR node fed the default session's own inputs; its graph observed through
    ``optimized_model_filepath``): every layer onnxruntime runs as an integer kernel is bit-exact (with
    single rounding 39 / 16 / 22 / 4 values of 61 / 74 / 65 / 23 million differed in proxyless / mbv2 /
    mcunet / mbv1, all float32 near-ties: the product's float32 rounding puts values within 2^-24 relative
    of a tie onto the tie, then rounds it half to even; and the scale itself is a float32). The rest is
    structural and x86-specific: onnxruntime converts int8 activations to uint8 for its kernels except the
    ones that feed two consumers (the source of each residual Add), so a Conv reading or writing such a
    tensor mixes int8 and uint8 and is left in float (proxyless 18 of 61 Convs, mbv2 15 of 52, mcunet 12 of
    42), as is every Add. Those float layers accumulate in float32 (SGEMM) and round near-ties either way:
    32 of 15.6 million values in proxyless (mbv2 11 of 17.8, mcunet 12 of 15.4 million; Adds none), each
    within 1e-5 LSB of a tie, which no integer arithmetic can reproduce. Through proxyless's depth they
    reach 10 of its 1000 logits: 99.0 %, the bound exactly (a CPU with another SGEMM kernel, or another
    onnxruntime version, may move this by a few logits).
    """
    skip_unless_ort_int8_exact()
    graph, _ = convert_onnx(path.read_bytes(), path.stem)
    q, xs = _zoo_inputs(graph, N_SAMPLES)
    np.testing.assert_array_equal(to_internal(graph, quantize_input(graph, xs)), q)
    ours = forward(graph, {graph.inputs[0]: q})[graph.outputs[0]].astype(np.int64)
    expected = run_default_session(path, xs, graph)
    observe, kinds = default_session_observer(path, tmp_path)
    stats: dict[str, list] = {}
    for i in range(0, len(xs), ZOO_BATCH):
        observed, logits = observe(xs[i : i + ZOO_BATCH])
        q_ir = graph.tensors[graph.outputs[0]].quant
        np.testing.assert_array_equal(np.rint(logits.astype(np.float64) / q_ir.s + q_ir.zp),
                                      expected[i : i + ZOO_BATCH])  # the observed run is the default session
        zoo_per_layer(graph, observed, q[i : i + ZOO_BATCH], stats)
    diff = np.abs(ours - expected)
    identical = float((diff == 0).mean())
    out_name = output_int_tensor(onnx.load(str(path)))
    disable_all = np.concatenate([
        _ir_layout(to_internal(graph, run_onnxruntime(path, xs[i : i + ZOO_BATCH], [out_name])[out_name]))
        for i in range(0, len(xs), ZOO_BATCH)]).astype(np.int64)
    by_kind: dict[str, list] = {}
    for source, (op, n, bad, worst, unexplained) in stats.items():
        acc = by_kind.setdefault(kinds[source], [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += n
        acc[2] += bad
        acc[3] = max(acc[3], worst)
        acc[4] += unexplained
    summary = (f"{path.name}: {diff.size} int8 outputs, {identical:.1%} identical to onnxruntime's default session, "
               f"max |diff| {diff.max()} (ORT_DISABLE_ALL: {(ours == disable_all).mean():.1%}, max "
               f"{np.abs(ours - disable_all).max()}; default vs ORT_DISABLE_ALL "
               f"{(expected == disable_all).mean():.1%}); "
               + "; ".join(f"{k}: {c} layers, {b} of {n} values differ (max {w}), {u} not near-ties"
                           for k, (c, n, b, w, u) in sorted(by_kind.items())))
    print("\n" + summary)
    for source, (op, n, bad, worst, unexplained) in stats.items():
        if bad:
            print(f"  {kinds[source]} {source} ({op}): {bad} of {n} differ (max {worst}), {unexplained} not near-ties")
    layers = [n for n in graph.nodes if n.op in ("conv2d", "fully_connected", "add", "mean")]
    assert len(stats) == len(layers), f"{summary}: observed {len(stats)} of {len(layers)} layers"
    for source, (op, n, bad, worst, unexplained) in stats.items():
        if kinds[source] in INTEGER_KERNELS:
            assert bad == 0, f"{kinds[source]} {source}: {bad} of {n} values differ from onnxruntime's integer kernel"
        else:
            assert worst <= 1 and unexplained == 0 and bad <= 1e-5 * n, f"{kinds[source]} {source}: {stats[source]}"
    assert diff.max() <= 1, summary
    assert identical >= 0.99, summary


def test_load_model_dispatches_onnx(mbv2):
    graph = load_model(mbv2["qdq"])
    assert graph.name == "mbv2_qdq" and len(graph.source_sha256) == 64
    assert graph.outputs == ("logits",) and graph.inputs == ("input",)


# --------------------------------------------------------------------------- other op patterns


@pytest.mark.parametrize("key", [f"{m}_{f}_{a}" for m in ("convs", "pools") for f in ("qdq", "qop")
                                 for a in ("int8", "int8sym", "uint8")])
def test_patterns_match_onnxruntime_op_by_op(patterns, key):
    """Every integer tensor within one LSB of onnxruntime's when each IR node gets onnxruntime's inputs.

    One documented exception: the MatMul -> Add bias fold (one rounding instead of onnxruntime's two,
    so the intermediate MatMul output is neither rounded nor saturated; up to 2 LSB in principle,
    1 measured). QDQ AveragePool differs from onnxruntime only at exact ties (see the module docstring).
    """
    if key.endswith("qop_uint8"):
        skip_unless_ort_int8_exact()
    path = patterns[key]
    graph, names = convert_onnx(path.read_bytes(), key)
    model = onnx.load(str(path))
    out_name = output_int_tensor(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    xs = np.random.default_rng(3).standard_normal((40, *shape[1:])).astype(np.float32)
    ort_values = run_onnxruntime(path, xs, sorted(set(names) | {out_name}))
    per_op = teacher_forced(graph, names, ort_values)
    assert out_name in per_op
    ops = [n.op for n in graph.nodes]
    lines = []
    for onnx_name, (op, diff) in per_op.items():
        lines.append(f"{op} {onnx_name}: {(diff == 0).mean():.3f} identical, max {diff.max()}")
        limit = 1
        if op == "fully_connected" and key.startswith("pools"):
            limit = 2  # MatMul -> Add folded into one fully_connected
        assert diff.max() <= limit, f"{key}: {op} {onnx_name} max |diff| {diff.max()}"
    print(f"\n{key}: {ops}\n  " + "\n  ".join(lines))
    if op_pairs := [(a, b) for a, b in zip(ops, ops[1:]) if (a, b) == ("avg_pool2d", "requantize")]:
        raise AssertionError(f"{key}: an average pool is rounded twice: {op_pairs}")
    if key.startswith("convs"):
        assert ops.count("conv2d") == 4 and "add" in ops and "avg_pool2d" not in ops  # Relu/Clip fused
        dw = [n for n in graph.nodes if n.op == "conv2d" and n.attrs.groups > 1][0]
        assert graph.tensors[dw.inputs[1]].shape == (16, 3, 3, 1) and dw.attrs.groups == 8
    else:
        assert graph.tensors[graph.outputs[0]].shape == (1, 5)  # the logits: the Softmax is dropped


def test_trailing_softmax_is_dropped(patterns):
    graph = graph_from_onnx(patterns["pools_qdq_int8"].read_bytes(), "pools")
    assert graph.nodes[-1].op == "fully_connected" and "softmax" not in [n.op for n in graph.nodes]


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
    assert np.abs(_ir_layout(expected).astype(int) - ours.astype(int)).max() <= 1
    assert ours.min() >= 0  # real 0 is q = 0 here: the clamp happened
