"""Row-streamed execution of the frozen forward prefix (memory/stream.py, codegen/emit_stream.py).

The streamed C must compute exactly what the simulator computes layer by layer (integer work: bit for bit), its
line buffers must be large enough for the schedule (an undersized one corrupts rows, which these comparisons
catch), and it must read each input row once, in order, from a row source.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from ir_builders import ModelBuilder
from tinytrain.engines import host_c as engine_c
from tinytrain.codegen import render_project
from tinytrain.codegen.options import EmitOptions
from tinytrain.memory.report import forward_memory_report, memory_report
from tinytrain.memory.stream import stream_region, stream_prefix, streamable_prefix
from tinytrain.simulator import forward

ROOT = Path(__file__).resolve().parents[2]


def _graph(kind: str, seed: int = 0):
    """Forward graphs whose prefix streams through every window the kernels know, then a head that cannot stream."""
    mb = ModelBuilder(f"stream_{kind}", seed)
    if kind == "mobilenet":  # stem, blocks with residuals (delay lines), 5x5 and stride-2 depthwise
        h = mb.conv(mb.input((33, 29, 3)), 8, 3, 2)
        h = mb.inverted_residual(h, 8, 1)
        h = mb.inverted_residual(h, 12, 3, stride=2)
        h = mb.inverted_residual(h, 12, 3, k=5)
        h = mb.inverted_residual(h, 12, 2, k=7)
    elif kind == "windows":  # TFLite SAME padding, dilation, a valid 3x3, a strided 1x1, a regular 5x5, weight zps
        h = mb.conv(mb.input((40, 24, 4)), 8, 3, 2, padding=(0, 0, 1, 1))
        h = mb.conv(h, 8, 3, 1, depthwise=True, dilation=2)
        h = mb.conv(h, 6, 3, 1, padding=0)
        h = mb.conv(h, 10, 1, 2)
        h = mb.conv(h, 6, 5, 1, act=None)
        h = mb.conv(h, 6, 7, 2, depthwise=True, padding=3)
    else:
        raise ValueError(kind)
    return mb.build(mb.classifier(h, 4)), mb


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("c")


def _dsp_project(g) -> dict[str, str]:
    return render_project(g, forward_memory_report(g, 1 << 62, 1 << 62), options=EmitOptions(target="cortex-m7"))


@pytest.mark.parametrize("kind", ["mobilenet", "windows"])
@pytest.mark.parametrize("dsp", [False, True])
def test_streamed_c_equals_the_layer_by_layer_simulator(kind, dsp, cache):
    g, mb = _graph(kind)
    plan = forward_memory_report(g, 1 << 62, 1 << 62)
    assert plan.stream is not None and plan.stream.rings, "the prefix should stream"
    x = np.random.default_rng(1).integers(-128, 128, (3,) + g.tensors[g.inputs[0]].shape[1:], dtype=np.int8)
    want = forward(g, {g.inputs[0]: x})[g.outputs[0]]
    if dsp:  # tt_simd.h's Arm DSP path, its instructions modelled in C on the host
        files = _dsp_project(g)
        assert "#define TT_ARM_DSP 1" in files["tinytrain_model.c"]
        lib = ctypes.CDLL(str(engine_c.compile_files(files, cache)))
        lib.tt_init()
        got = np.empty_like(want)
        for i in range(len(x)):
            lib.tt_predict(ctypes.c_void_p(x[i].ctypes.data), ctypes.c_void_p(got[i].ctypes.data))
    else:
        got = engine_c.predict(g, x, cache)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["mobilenet", "windows"])
def test_every_streamable_prefix_computes_the_same_output(kind, cache):
    """Whatever prefix the compiler streams, the C equals layer-by-layer execution: each one is forced in turn."""
    g, _ = _graph(kind)
    x = np.random.default_rng(2).integers(-128, 128, (1,) + g.tensors[g.inputs[0]].shape[1:], dtype=np.int8)
    want = forward(g, {g.inputs[0]: x})[g.outputs[0]]
    tried = 0
    for steps in range(2, streamable_prefix(g) + 1):
        region = stream_prefix(g, steps)
        if region is None:
            continue
        plan = forward_memory_report(g, 1 << 62, 1 << 62, stream=region)
        lib = ctypes.CDLL(str(engine_c.compile_files(render_project(g, plan), cache)))
        lib.tt_init()
        got = np.empty_like(want)
        lib.tt_predict(ctypes.c_void_p(x[0].ctypes.data), ctypes.c_void_p(got[0].ctypes.data))
        np.testing.assert_array_equal(got, want, err_msg=f"prefix of {steps} nodes")
        tried += 1
    assert tried >= 3


def test_row_source_is_read_once_per_row_in_order(cache):
    g, _ = _graph("mobilenet")
    plan = forward_memory_report(g, 1 << 62, 1 << 62)
    source = next(b for b in plan.stream.buffers if b.source)
    assert source.rows < source.height  # a line buffer, not the image
    lib = ctypes.CDLL(str(engine_c.compile_files(render_project(g, plan), cache)))
    lib.tt_init()
    x = np.random.default_rng(3).integers(-128, 128, g.tensors[g.inputs[0]].shape[1:], dtype=np.int8)
    rows: list[int] = []
    row_bytes = x.nbytes // x.shape[0]

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
    def read_row(_source, row, dst):
        rows.append(row)
        ctypes.memmove(dst, x[row].ctypes.data, row_bytes)

    got = np.empty(g.tensors[g.outputs[0]].shape[1:], np.int8)
    lib.tt_predict_rows(read_row, None, ctypes.c_void_p(got.ctypes.data))
    assert rows == list(range(source.total))
    want = forward(g, {g.inputs[0]: x[None]})[g.outputs[0]][0]
    np.testing.assert_array_equal(got, want)


def test_mobilenet_v2_inference_streams_below_64_kb():
    """MobileNetV2-w0.35 @128: layer by layer its forward pass peaks at 240 KB (block 2's 192 KB expand output and its
    input); streamed, the input is a 3-row line buffer and the peak is a few line buffers and small tensors."""
    from tinytrain.frontends import load_model

    g = load_model(ROOT / "models" / "mbv2-w0.35.onnx")
    streamed, whole = forward_memory_report(g, 1 << 30, 1 << 30), forward_memory_report(g, 1 << 30, 1 << 30, stream=False)
    assert whole.peak_sram_bytes == 240 * 1024
    assert streamed.peak_sram_bytes == 46976 <= 64 * 1024
    image = streamed.stream.buffer(g.inputs[0])
    assert image.source and image.rows == 3 and image.nbytes == 3 * 128 * 3
    assert all(b.use.size <= 24 * 1024 for b in streamed.buffers)  # no whole 64x64 or 32x32 tensor


def test_region_stops_where_the_backward_pass_reads():
    """In a training step only the frozen prefix streams: no saved activation is a line buffer."""
    from tinytrain.frontends import load_model
    from tinytrain.ir import Role
    from tinytrain.training.device_step import device_step
    from tinytrain.training.sparse import load_plan

    g = load_model(ROOT / "models" / "mbv2-w0.35.onnx")
    step = device_step(g, load_plan(ROOT / "models" / "plans" / "mbv2-w0.35-sparse.json"))
    region = stream_prefix(step, 30)
    assert region is not None
    for b in region.buffers:
        assert step.tensors[b.tensor].role is not Role.SAVED
    chosen = stream_region(step)
    report = memory_report(step, 1 << 30, 1 << 30)
    assert chosen is not None and report.stream == chosen
    saved = [b for b in report.buffers if b.use.role == "saved"]
    assert saved and all(b.use.first_use >= chosen.steps for b in saved)


def test_a_plan_twice_the_sparse_one_now_fits_256_kb(tmp_path):
    """The last 20 biases + the last six pointwise convolutions of at most 40K weights at ratios 1/4 .. 1 (98 KB of
    trainable copies): refused at 292.5 KB while the frozen forward pass ran layer by layer."""
    import json

    from tinytrain.cli import main

    out = tmp_path / "wide"
    assert main(["compile", str(ROOT / "models" / "mbv2-w0.35.onnx"), "--sram", "256k",
                 "--plan", str(ROOT / "models" / "plans" / "mbv2-w0.35-wide.json"), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["fits"] and report["trainable_sram_bytes"] > 96 * 1024
    assert report["peak_sram_bytes"] <= 256 * 1024
