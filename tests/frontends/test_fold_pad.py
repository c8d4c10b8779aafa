"""A zero-point PAD folded into the convolution after it (frontends/fold_pad.py): the forward byte for byte with
tflite-micro, a training step through the folded convolution the padded graph's (the gradient of the unpadded
input), its C the simulator's, the PAD kept where it cannot fold; and LiteRT-torch's 1-channel input RESHAPE dropped
(frontends/tflite/importer.py), so its first layers stream as the TF converter's do."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from oracles import TfliteBuilder, first_mismatch, sim_tensors, tflm_run, tflm_tensors
from test_codegen_train import check_step
from test_tflite_frontend import mixed_model
from tinytrain.engines.host_c import CTrainer
from tinytrain.errors import Notice
from tinytrain.frontends import load_model
from tinytrain.frontends.fold_pad import fold_pads
from tinytrain.frontends.tflite import graph_from_tflite
from tinytrain.ir import QuantParams
from tinytrain.simulator import forward, init_state, train_step
from tinytrain.training.sparse import preset
from tinytrain.training.train_graph import build_training_graph

pytest.importorskip("tflite_micro")


def test_an_asymmetric_pad_folds_into_the_valid_conv_byte_for_byte_with_tflite_micro(tmp_path):
    """mixed_model's PAD ((1, 2), (0, 1)) then a VALID stride-2 CONV: one conv padded (1, 0, 2, 1)."""
    data = mixed_model()
    (tmp_path / "m.tflite").write_bytes(data)
    graph = load_model(tmp_path / "m.tflite")
    assert [n.op for n in graph.nodes][:2] == ["conv2d", "conv2d"] and "p0" not in graph.tensors
    assert graph.nodes[0].inputs[0] == "q0" and graph.nodes[0].attrs.padding == (1, 0, 2, 1)
    x = np.random.default_rng(1).uniform(-2.7, 2.7, (24, 9, 9, 3)).astype(np.float32)
    q = graph.tensors["q0"].quant
    xq = np.clip(np.floor(x / np.float32(q.s) + 0.5) + q.zp, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(forward(graph, {"q0": xq})["m8"], tflm_run(data, x[:, None], output=1))
    assert first_mismatch(graph, sim_tensors(graph, xq[:1]), tflm_tensors(data, x[0])) is None


def _conv(b, rng, name, x, s_x, w_shape, axis, out_shape, kind, options):
    w = b.tensor(f"{name}_w", w_shape, "INT8", rng.uniform(0.01, 0.03, w_shape[axis]), 0, axis,
                 rng.integers(-127, 128, w_shape).astype(np.int8))
    bias = b.tensor(f"{name}_b", (w_shape[axis],), "INT32", np.float32(s_x) * np.float32(0.02), 0, 0,
                    rng.integers(-300, 300, w_shape[axis]).astype(np.int32))
    y = b.tensor(name, out_shape, "INT8", 0.05, -20)
    b.op(kind, [x, w, bias], [y], options)
    return y


def _mid_pad_model(zp_pad: int = -20) -> bytes:
    """CONV 3x3 SAME -> PAD ((1, 1), (0, 1)) -> DEPTHWISE 3x3 VALID stride 2 -> MEAN -> FULLY_CONNECTED: a PAD whose
    input gradient a full step needs (the first conv's weights). ``zp_pad``: the PAD output's zero point."""
    rng = np.random.default_rng(3)
    b = TfliteBuilder()
    s = b.s
    x = b.tensor("x", (1, 8, 8, 2), "INT8", 0.04, 3)
    c1 = _conv(b, rng, "c1", x, 0.04, (4, 3, 3, 2), 0, (1, 8, 8, 4), "CONV_2D",
               s.Conv2DOptionsT(padding=s.Padding.SAME, strideW=1, strideH=1,
                                fusedActivationFunction=s.ActivationFunctionType.RELU))
    pads = b.tensor("pads", (4, 2), "INT32", data=np.array([[0, 0], [1, 1], [0, 1], [0, 0]], np.int32))
    p = b.tensor("p", (1, 10, 9, 4), "INT8", 0.05, zp_pad)
    b.op("PAD", [c1, pads], [p])
    c2 = _conv(b, rng, "c2", p, 0.05, (1, 3, 3, 4), 3, (1, 4, 4, 4), "DEPTHWISE_CONV_2D",
               s.DepthwiseConv2DOptionsT(padding=s.Padding.VALID, strideW=2, strideH=2, depthMultiplier=1))
    axes = b.tensor("axes", (2,), "INT32", data=np.array([1, 2], np.int32))
    m = b.tensor("m", (1, 4), "INT8", 0.05, -20)
    b.op("MEAN", [c2, axes], [m], s.ReducerOptionsT(keepDims=False))
    logits = _conv(b, rng, "fc", m, 0.05, (3, 4), 0, (1, 3), "FULLY_CONNECTED", s.FullyConnectedOptionsT())
    return b.finish([x], [logits])


def test_a_full_step_through_a_folded_pad_is_the_padded_graphs_and_its_c_the_simulators(tmp_path):
    padded = graph_from_tflite(_mid_pad_model(), "m", "")
    folded = fold_pads(padded)
    assert [n.op for n in padded.nodes].count("pad") == 1 and "pad" not in [n.op for n in folded.nodes]
    assert next(n for n in folded.nodes if n.name == padded.nodes[2].name).attrs.padding == (1, 0, 1, 1)
    xs = np.random.default_rng(0).integers(-128, 128, (3, 8, 8, 2)).astype(np.int8)
    np.testing.assert_array_equal(forward(folded, {"x": xs})["fc"], forward(padded, {"x": xs})["fc"])
    graphs = [build_training_graph(g, preset("full", g, lr=0.05)) for g in (padded, folded)]
    states = [init_state(tg) for tg in graphs]
    for k in range(3):
        losses = [train_step(tg, st, xs[k:k + 1], k % 3)["loss"] for tg, st in zip(graphs, states)]
        np.testing.assert_array_equal(*losses)
    assert states[0].tensors.keys() == states[1].tensors.keys()
    for name, value in states[0].tensors.items():
        np.testing.assert_array_equal(value, states[1].tensors[name], err_msg=name)
    trainer = CTrainer(graphs[1], tmp_path, planner="linear", inplace=False, reorder=False)
    state = init_state(graphs[1])
    for k in range(2):
        check_step(graphs[1], trainer, state, xs[k], k)


def test_a_pad_filling_with_another_value_or_also_an_output_stays():
    """A PAD whose output zero point is not its input's (it pads with another value than real zero), or whose output
    is also a graph output, is kept."""
    graph = graph_from_tflite(_mid_pad_model(), "m", "")
    p = graph.tensors["p"]
    other_zp = replace(graph, tensors={**graph.tensors, "p": replace(p, quant=QuantParams(p.quant.scale, (-19,)))})
    also_output = replace(graph, outputs=graph.outputs + ("p",))
    for g in (other_zp, also_output):
        assert [n.op for n in fold_pads(g).nodes].count("pad") == 1


def test_litert_torchs_one_channel_start_reshape_and_pad_both_go(tmp_path):
    """LiteRT-torch's NCHW -> NHWC of a 1-channel input is a RESHAPE (1, 1, H, W) -> (1, H, W, 1), the same bytes:
    dropped (stated) as its TRANSPOSE is; the PAD after it folds; tflite-micro byte for byte on the (1, 1, H, W)
    bytes."""
    rng = np.random.default_rng(4)
    b = TfliteBuilder()
    s = b.s
    x = b.tensor("x", (1, 1, 8, 8), "INT8", 0.04, -128)
    r = b.tensor("r", (1, 8, 8, 1), "INT8", 0.04, -128)
    b.op("RESHAPE", [x], [r])
    pads = b.tensor("pads", (4, 2), "INT32", data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    p = b.tensor("p", (1, 10, 10, 1), "INT8", 0.04, -128)
    b.op("PAD", [r, pads], [p])
    y = _conv(b, rng, "c", p, 0.04, (1, 3, 3, 4), 3, (1, 4, 4, 4), "DEPTHWISE_CONV_2D",
              s.DepthwiseConv2DOptionsT(padding=s.Padding.VALID, strideW=2, strideH=2, depthMultiplier=4))
    data = b.finish([x], [y])
    (tmp_path / "m.tflite").write_bytes(data)
    with pytest.warns(Notice, match=r"operator 0 \(RESHAPE of the \[1, 1, 8, 8\] NCHW input to NHWC\) dropped"):
        graph = load_model(tmp_path / "m.tflite")
    assert [n.op for n in graph.nodes] == ["conv2d"] and graph.tensors[graph.inputs[0]].shape == (1, 8, 8, 1)
    assert graph.nodes[0].attrs.padding == (1, 1, 1, 1)
    xs = rng.integers(-128, 128, (20, 1, 8, 8, 1)).astype(np.int8)
    ours = forward(graph, {graph.inputs[0]: xs[:, 0]})["c"]
    np.testing.assert_array_equal(ours, tflm_run(data, xs).reshape(ours.shape))
    assert len(np.unique(ours, axis=0)) > 10
