"""A residual add left in float (ops/float_add.py: TFLite DEQUANTIZE -> ADD -> ADD -> QUANTIZE): bit-exact against
TFLite Micro on every int8 input, ties of the rounding included (scales powers of two), the C equal to the simulator,
a full-update training step through LiteRT-torch's MobileNetV2-style export in C equal to the simulator, and the ONNX
export equal to the reference in onnxruntime on every int8 input triple (TFLite's ties away from zero included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import utils

from oracles import TfliteBuilder
from test_codegen_train import check_step
from test_user_ops import _assert_all_int8_inputs
from tinytrain.engines import host_c
from tinytrain.engines.host_c import CTrainer
from tinytrain.export_onnx import graph_to_onnx
from tinytrain.frontends.tflite import graph_from_tflite
from tinytrain.ops import get_op
from tinytrain.frontends import load_model
from tinytrain.simulator import forward, init_state
from tinytrain.training.sparse import preset
from tinytrain.training.train_graph import build_training_graph

LITERT_MBV2 = Path(__file__).resolve().parents[1] / "quantizers" / "litert_mbv2.tflite"
SHAPE = (1, 4, 8, 8)


def _chain(scales, zps) -> bytes:
    """x -> QUANTIZE to x2, x3 (other scales); DEQUANTIZE the three; ADD x, x2; ADD that, x3; QUANTIZE."""
    b = TfliteBuilder()
    ints = [b.tensor(f"x{k}", SHAPE, "INT8", s, z) for k, (s, z) in enumerate(zip(scales[:3], zps[:3]))]
    for t in ints[1:]:
        b.op("QUANTIZE", [ints[0]], [t])
    fs = [b.tensor(f"f{k}", SHAPE, "FLOAT32") for k in range(3)]
    for t, f in zip(ints, fs):
        b.op("DEQUANTIZE", [t], [f])
    s1, s2 = b.tensor("sum1", SHAPE, "FLOAT32"), b.tensor("sum2", SHAPE, "FLOAT32")
    b.op("ADD", [fs[0], fs[1]], [s1], b.s.AddOptionsT())
    b.op("ADD", [fs[2], s1], [s2], b.s.AddOptionsT())  # the running sum second: float32 adds commute
    y = b.tensor("y", SHAPE, "INT8", scales[3], zps[3])
    b.op("QUANTIZE", [s2], [y])
    return b.finish([ints[0]], [y])


CHAINS = [
    ((1 / 16, 1 / 8, 3 / 64, 1 / 4), (0, 0, 0, 0)),  # every sum a multiple of 1/64: ties of the rounding
    ((1 / 32, 1 / 16, 1 / 8, 1 / 2), (-5, 3, 0, 7)),
    ((0.0173, 0.0311, 0.0089, 0.0397), (-128, 10, -3, -20)),
    ((0.05, 0.05, 0.05, 0.01), (0, 0, 0, 0))]  # saturates at both ends


@pytest.mark.parametrize("scales,zps", CHAINS)
def test_a_float_add_chain_matches_tflite_micro_on_every_int8_input_and_the_c(scales, zps, tmp_path):
    pytest.importorskip("tflite_micro")
    graph = _assert_all_int8_inputs(_chain(scales, zps))
    assert [n.op for n in graph.nodes][-1] == "float_add" and len(graph.nodes[-1].inputs) == 3
    x = np.arange(-128, 128, dtype=np.int8).reshape(SHAPE)
    np.testing.assert_array_equal(host_c.predict(graph, x, cache_dir=tmp_path),
                                  forward(graph, {graph.inputs[0]: x})[graph.outputs[0]])


def test_a_full_training_step_through_litert_float_adds_in_c_is_the_simulator(tmp_path):
    """Every kernel of 2 full-update steps of the LiteRT-torch MobileNetV2-style export (its chained float residual
    adds: one float_add of two operands, one of three), C against the simulator from identical states."""
    with pytest.warns(Warning):
        g = load_model(LITERT_MBV2)
    assert sorted(len(n.inputs) for n in g.nodes if n.op == "float_add") == [2, 3]
    tg = build_training_graph(g, preset("full", g, lr=0.05))
    trainer = CTrainer(tg, tmp_path, planner="linear", inplace=False, reorder=False)
    state = init_state(tg)
    xs = np.random.default_rng(0).integers(-128, 128, (2, 16, 16, 3)).astype(np.int8)
    for k in range(2):
        check_step(tg, trainer, state, xs[k], k)


def _float_add_subgraph(model, output: str):
    """The exported model cut at the float_add's int8 operands (the inputs of the DequantizeLinears before its
    Adds) up to its int8 output, every dimension symbolic."""
    import onnx

    producer = {o: n for n in model.graph.node for o in n.output}
    cut, todo = [], [output]
    while todo:
        node = producer[todo.pop()]
        if node.op_type == "DequantizeLinear":
            cut += [node.input[0]] if node.input[0] not in cut else []
        else:
            todo += [i for i in node.input if i in producer]
    sub = utils.Extractor(model).extract_model(cut[::-1], [output])
    del sub.graph.value_info[:]
    for v in (*sub.graph.input, *sub.graph.output):
        for k, d in enumerate(v.type.tensor_type.shape.dim):
            d.dim_param = f"d{k}"
    onnx.checker.check_model(sub, full_check=True)
    return sub


@pytest.mark.parametrize("scales,zps", CHAINS[:2])  # the chains whose sums fall on ties
def test_the_onnx_export_equals_the_reference_in_onnxruntime_on_every_int8_triple(scales, zps):
    """All 2^24 (x1, x2, x3) of the chain: a plain QuantizeLinear (ties to even) was 1 LSB off on 528,384 of them
    (the first chain) and 532,480 (the second), where the sums fall on ties; TFLite's rounding built from standard
    ops (export_onnx ``q_half_away``) is exact on all, in the default and the unoptimized session."""
    ort = pytest.importorskip("onnxruntime")
    graph = graph_from_tflite(_chain(scales, zps), "m", "")
    node = graph.nodes[-1]
    sub = _float_add_subgraph(graph_to_onnx(graph), node.outputs[0])
    ins = [graph.tensors[i] for i in node.inputs]
    grid = np.stack(np.meshgrid(*[np.arange(-128, 128, dtype=np.int8)] * 3, indexing="ij")).reshape(3, -1)
    ref = get_op("float_add").reference(node.attrs, list(grid), ins, [graph.tensors[node.outputs[0]]])[0]
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(sub.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: grid[k].reshape(1, 1, 1, -1) for k, i in enumerate(session.get_inputs())}
        np.testing.assert_array_equal(session.run(None, feeds)[0].ravel(), ref, err_msg=str(level))
