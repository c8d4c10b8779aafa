"""The ONNX frontends (QDQ and QOperator) against onnxruntime (hand-built models and errors: test_onnx_errors.py).

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

from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_models
from onnx_oracle import ir_layout, quantize_input, run_onnxruntime, unoptimized_session
from oracles import skip_unless_ort_int8_exact
from tinytrain.frontends import load_model
from tinytrain.frontends.onnx import convert_onnx, graph_from_onnx
from tinytrain.ops import get_op
from tinytrain.ops.conv2d import accumulate as conv_accumulate
from tinytrain.ops.fully_connected import accumulate as fc_accumulate
from tinytrain.ops.mean import MeanAttrs
from tinytrain.simulator import forward, to_external, to_internal

ROOT = Path(__file__).resolve().parents[2]
# The image classifiers of models.ZOO; mbv3s-w0.5 (models.EXTRA) is checked against onnxruntime in
# tests/frontends/test_user_ops_model.py: onnxruntime's extended graph optimizations change its HardSwish / HardSigmoid / Mul
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
            ref[ir] = (onnx_name, to_internal(graph, ir_layout(v)) if v.dtype == np.uint8 else ir_layout(v))
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
    assert graph.uint8_input == graph.uint8_output == fmt.endswith("uint8")
    assert graph.tensors[graph.inputs[0]].shape == (1, onnx_models.INPUT_SIZE, onnx_models.INPUT_SIZE, 3)

    # the uint8 variants repeat the check on fewer inputs (they only add the uint8 <-> int8 shift)
    xs = onnx_models.random_inputs(N_SAMPLES if not fmt.endswith("uint8") else 30, seed=1)
    model = onnx.load(str(path))
    out_name = output_int_tensor(model)
    ort_values = run_onnxruntime(path, xs, sorted(set(names) | {out_name}))
    expected = ort_values[out_name].astype(np.int64)

    # the rounding is the ONNX one: onnxruntime's float32 requantization for conv / fully connected / mean
    # (Requant.fp32, 1/count in the mean's scale), single rounding for the others
    requants = {"conv2d": ("requant",), "fully_connected": ("requant",), "mean": ("requant",),
                "add": ("input1", "input2", "output"), "requantize": ("requant",)}
    for node in graph.nodes:
        want = "fp32" if node.op in ("conv2d", "fully_connected", "mean") else "single"
        for field in requants.get(node.op, ()):  # every requantizing node has its requantizations, rounded so
            assert getattr(node.attrs, field).rounding == want, (node.name, field)
    assert {n.op for n in graph.nodes} >= {"conv2d", "add", "mean", "fully_connected"}
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
    session = unoptimized_session(model)
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
        ir_layout(to_internal(graph, run_onnxruntime(path, xs[i : i + ZOO_BATCH], [out_name])[out_name]))
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
