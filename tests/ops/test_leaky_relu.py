"""Leaky ReLU (ops/leaky_relu.py): TFLite LEAKY_RELU bit-exact against TFLite Micro on every int8 input, ONNX
LeakyRelu (QDQ) and com.microsoft QLinearLeakyRelu (QOperator) against onnxruntime, exported and re-imported, and a
training step through it in the host C equal to the simulator (forward table and backward slope)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ir_builders
from ir_builders import ModelBuilder
from oracles import TfliteBuilder
from test_codegen_train import check_step
from test_user_ops import _assert_all_int8_inputs, _assert_onnxruntime, _init, _quantized_onnx
from tinytrain.engines.host_c import CTrainer
from tinytrain.ops import leaky_relu
from tinytrain.simulator import init_state
from tinytrain.tables import TableAttrs
from tinytrain.training.sparse import preset
from tinytrain.training.train_graph import build_training_graph

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("alpha,in_scale,in_zp,out_scale,out_zp", [
    (0.1, 0.05, -3, 0.04, -20), (0.2, 0.11, 30, 0.09, -100), (0.01, 0.02, -128, 0.01, -128), (0.3, 0.3, 5, 0.3, 5)])
def test_leaky_relu_matches_tflite_micro(alpha, in_scale, in_zp, out_scale, out_zp):
    b = TfliteBuilder()
    x = b.tensor("x", (1, 4, 8, 8), "INT8", in_scale, in_zp)
    y = b.tensor("y", (1, 4, 8, 8), "INT8", out_scale, out_zp)
    b.op("LEAKY_RELU", [x], [y], b.s.LeakyReluOptionsT(alpha=alpha))
    graph = _assert_all_int8_inputs(b.finish([x], [y]))
    assert [(n.op, n.attrs.alpha) for n in graph.nodes] == [("leaky_relu", pytest.approx(alpha))]


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_leaky_relu_matches_onnxruntime(tmp_path, fmt):
    """Conv -> LeakyRelu (alpha 0.2) -> Conv: quantize_static writes DQ -> LeakyRelu -> Q (QDQ) or QLinearLeakyRelu
    (QOperator); every integer tensor equals onnxruntime's, and the export re-imports to the same graph."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("LeakyRelu", ["c1"], ["l"], alpha=0.2),
             helper.make_node("Conv", ["l", "w2"], ["y"], kernel_shape=[1, 1])]
    path = _quantized_onnx(tmp_path, nodes, [_init(rng, "w1", 6, 3, 1, 1), _init(rng, "w2", 4, 6, 1, 1)],
                           (1, 3, 5, 5), (1, 4, 5, 5), fmt)
    assert _assert_onnxruntime(path, (1, 3, 5, 5)) == ["conv2d", "leaky_relu", "conv2d"]


def _leaky(mb: ModelBuilder, x: str, alpha: float) -> str:
    """leaky_relu as an ONNX import builds it, its output quantization calibrated."""
    xt = mb.tensors[x]
    real = (mb.values[x].astype(np.float64) - xt.quant.zp) * xt.quant.s
    q = ir_builders._out_quant(np.where(real >= 0, real, alpha * real), None)
    name = mb._name("leaky_relu")
    attrs = TableAttrs(leaky_relu.onnx_table(xt.quant, q, alpha), "leaky_relu", alpha)
    return mb._node("leaky_relu", name, [x], mb._act(f"{name}.out", xt.shape, q), attrs)


def test_a_training_step_through_leaky_relu_in_c_is_the_simulator(tmp_path):
    """A full-update step reaching the conv below the op through its slope table: every kernel of 3 steps from
    identical states, C against the simulator."""
    mb = ModelBuilder("leaky", 2)
    h = _leaky(mb, mb.conv(mb.input((6, 6, 3)), 8, 3, 1, act=None), 0.1)
    g = mb.build(mb.fc(mb.reshape(mb.mean(h), (8,)), 3))
    tg = build_training_graph(g, preset("full", g, lr=0.05))
    assert {"leaky_relu", "table_grad"} <= {n.op for n in tg.nodes}
    trainer = CTrainer(tg, tmp_path, planner="linear", inplace=False, reorder=False)
    state = init_state(tg)
    xs = mb.calibration_input()
    for k in range(3):
        check_step(tg, trainer, state, xs[k], k)
