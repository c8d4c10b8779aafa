"""A residual add left in float (ops/float_add.py: TFLite DEQUANTIZE -> ADD -> ADD -> QUANTIZE): bit-exact against
TFLite Micro on every int8 input, ties of the rounding included (scales powers of two), the C equal to the simulator,
and a full-update training step through LiteRT-torch's MobileNetV2-style export in C equal to the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oracles import TfliteBuilder
from test_codegen_train import check_step
from test_user_ops import _assert_all_int8_inputs
from tinytrain.engines import host_c
from tinytrain.engines.host_c import CTrainer
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


@pytest.mark.parametrize("scales,zps", [
    ((1 / 16, 1 / 8, 3 / 64, 1 / 4), (0, 0, 0, 0)),  # every sum a multiple of 1/64: ties of the rounding
    ((1 / 32, 1 / 16, 1 / 8, 1 / 2), (-5, 3, 0, 7)),
    ((0.0173, 0.0311, 0.0089, 0.0397), (-128, 10, -3, -20)),
    ((0.05, 0.05, 0.05, 0.01), (0, 0, 0, 0))])  # saturates at both ends
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
