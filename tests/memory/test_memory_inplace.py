"""In-place outputs: the safe distance derived from ``OpDef.min_read``, checked against an independent model
of the kernels' access order, and the emitted C run with overlapping buffers against the simulator."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tinytrain.ir import DType, QuantParams, Role, Tensor
from tinytrain.memory.inplace import min_gap
from tinytrain.ops.conv2d import Conv2dAttrs, min_read
from tinytrain.quant import Requant

ROOT = Path(__file__).resolve().parents[2]


def _conv(h, w, cin, cout, k, stride, pad, depthwise):
    groups = cin if depthwise else 1
    x = Tensor("x", (1, h, w, cin), DType.INT8, Role.ACTIVATION, QuantParams.per_tensor(0.1, 0))
    wt = Tensor("w", (cout, k, k, 1 if depthwise else cin), DType.INT8, Role.WEIGHT)
    a = Conv2dAttrs((stride, stride), (pad, pad, pad, pad), Requant((1 << 30,), (0,)), groups=groups)
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    y = Tensor("y", (1, ho, wo, cout), DType.INT8, Role.ACTIVATION)
    return a, x, wt, y


def _reads(a, x, wt, y):
    """Per output element in C order, every input index it reads: the taps enumerated directly."""
    _, h, w, cin = x.shape
    _, ho, wo, cout = y.shape
    kh, kw = wt.shape[1:3]
    mult = cout // cin
    for oy in range(ho):
        for ox in range(wo):
            for o in range(cout):
                chans = [o // mult] if a.groups > 1 else range(cin)
                idx = [((oy * a.stride[0] - a.padding[0] + i) * w + ox * a.stride[1] - a.padding[1] + j) * cin + c
                       for i in range(kh) for j in range(kw) for c in chans
                       if 0 <= oy * a.stride[0] - a.padding[0] + i < h and 0 <= ox * a.stride[1] - a.padding[1] + j < w]
                yield idx


def _safe(a, x, wt, y, delta, s_out=1, s_in=1, reads=None) -> bool:
    """Write outputs in order at (input start - delta): is every input byte read before it is overwritten?"""
    clobbered = -1  # highest input byte (relative to the input start) overwritten so far
    for q, idx in enumerate(reads if reads is not None else _reads(a, x, wt, y)):
        if idx and min(idx) * s_in <= clobbered:
            return False
        clobbered = max(clobbered, (q + 1) * s_out - 1 - delta)
    return True


convs = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(1, 2), st.sampled_from([1, 3, 5]),
                  st.integers(1, 2), st.integers(0, 2), st.booleans())


@settings(derandomize=True, max_examples=120, deadline=None)
@given(convs)
def test_conv_min_gap_is_the_smallest_safe_distance(spec):
    h, w, cin, m, k, stride, pad, depthwise = spec
    cout = cin * m if depthwise else m + 1
    if pad >= k or h + 2 * pad < k or w + 2 * pad < k:
        return
    a, x, wt, y = _conv(h, w, cin, cout, k, stride, pad, depthwise)
    gap = min_gap(min_read(a, [x, wt], [y], 0), 1, 1)
    if y.size == 1:
        return
    assert _safe(a, x, wt, y, gap)
    assert not _safe(a, x, wt, y, gap - 1)


def _grad_reads(a, x, wt, y):
    """Per element of a depthwise input gradient g_x (shaped as x) in C order, every g_z index (shaped as y) it reads:
    the windows holding it enumerated directly."""
    _, h, w, cin = x.shape
    _, ho, wo, cout = y.shape
    kh, kw = wt.shape[1:3]
    m = cout // cin
    for iy in range(h):
        for ix in range(w):
            for c in range(cin):
                yield [(oy * wo + ox) * cout + o for o in range(c * m, (c + 1) * m) for oy in range(ho)
                       for ox in range(wo) if 0 <= iy + a.padding[0] - oy * a.stride[0] < kh
                       and 0 <= ix + a.padding[1] - ox * a.stride[1] < kw]


@settings(derandomize=True, max_examples=120, deadline=None)
@given(convs)
def test_depthwise_grad_input_min_gap_is_the_smallest_safe_distance(spec):
    """The gathering depthwise input gradient (conv2d_grad_input.c.j2) writes g_x over its g_z."""
    from tinytrain.ops.conv2d import Conv2dGradInputAttrs, grad_input_min_read

    h, w, cin, m, k, stride, pad, _ = spec
    if pad >= k or h + 2 * pad < k or w + 2 * pad < k:
        return
    cin += 1  # groups = C_in > 1 (one channel is a regular convolution, whose kernel scatters)
    a, x, wt, y = _conv(h, w, cin, cin * m, k, stride, pad, True)
    ga = Conv2dGradInputAttrs(a.stride, a.padding, (h, w), groups=cin)
    gz, gx = Tensor("gz", y.shape, DType.FLOAT32, Role.GRADIENT), Tensor("gx", x.shape, DType.FLOAT32, Role.GRADIENT)
    gap = min_gap(grad_input_min_read(ga, [gz, wt], [gx], 0), 1, 1)
    reads = list(_grad_reads(a, x, wt, y))
    if x.size == 1:
        return
    assert _safe(a, y, wt, x, gap, reads=reads)
    if all(reads):  # (elements that read nothing count as reading past the end: safe, not always the tightest)
        assert not _safe(a, y, wt, x, gap - 1, reads=reads)
    assert grad_input_min_read(dataclasses.replace(ga, groups=1, stride=(2, 2)), [gz, wt], [gx], 0) is None


@pytest.mark.parametrize("ci, co", [(8, 48), (48, 8), (16, 16)])
def test_pointwise_grad_input_min_gap_is_the_smallest_safe_distance(ci, co):
    """The pointwise input gradient zeroes and accumulates g_x pixel p while it reads g_z pixel p: in place, g_x
    pixel p must end before g_z pixel p starts (g_z pixels before p are read already)."""
    from tinytrain.ops.conv2d import Conv2dGradInputAttrs, grad_input_min_read

    _, _, wt, _ = _conv(3, 4, ci, co, 1, 1, 0, False)
    ga = Conv2dGradInputAttrs((1, 1), (0, 0, 0, 0), (3, 4))
    gz = Tensor("gz", (1, 3, 4, co), DType.FLOAT32, Role.GRADIENT)
    gx = Tensor("gx", (1, 3, 4, ci), DType.FLOAT32, Role.GRADIENT)
    gap = min_gap(grad_input_min_read(ga, [gz, wt], [gx], 0), 4, 4)

    def safe(delta: int) -> bool:
        return all((p + 1) * ci * 4 - delta <= p * co * 4 for p in range(12))

    assert safe(gap) and not safe(gap - 1)


def test_known_distances():
    # stride-2 3x3 depthwise: the output may start exactly on its input
    a, x, wt, y = _conv(64, 64, 48, 48, 3, 2, 1, True)
    assert max(min_gap(min_read(a, [x, wt], [y], 0), 1, 1), 0) == 0
    # stride-1 3x3 depthwise: one row and one pixel before it
    a, x, wt, y = _conv(32, 32, 48, 48, 3, 1, 1, True)
    assert min_gap(min_read(a, [x, wt], [y], 0), 1, 1) == (32 + 1) * 48
    # expanding 1x1 (8 -> 48 channels): the output ends where the input ends (up to the last pixel's reads)
    a, x, wt, y = _conv(64, 64, 8, 48, 1, 1, 0, False)
    # (the last pixel's 48 outputs all read its 8 inputs, so the first 7 of them may not land on those)
    assert min_gap(min_read(a, [x, wt], [y], 0), 1, 1) == y.nbytes - x.nbytes + 7
    # elementwise int8 -> fp32 (a clamp mask reading the saved output): 3 bytes per element ahead
    assert min_gap(np.arange(10), 4, 1) == 4 * 9 - 9


def test_mbv2_forward_in_place_pairs_and_arena():
    from tinytrain.frontends import load_model
    from tinytrain.memory.report import memory_report

    g = load_model(ROOT / "models" / "mbv2-w0.35.onnx")
    r = memory_report(g, 1 << 30, 1 << 30, inplace=True, stream=False)  # layer by layer (streaming: test_stream.py)
    steps = {p.step: p for p in r.inplace}
    assert 3 in steps and 4 in steps  # the expand 1x1 and the stride-2 depthwise of block 2
    assert steps[4].delta == 0
    assert r.max_live_bytes == 196624 and r.arena_bytes <= 196672  # 192 KB + alignment, not 240 KB
    offsets = {b.use.tensor: b.offset for b in r.buffers}
    for p in r.inplace:
        assert offsets[p.output] == offsets[p.input] - p.delta
        assert next(b for b in r.buffers if b.use.tensor == p.input).use.last_use == p.step


def test_saved_activations_are_never_overwritten_before_their_last_use():
    from tinytrain.frontends import load_model
    from tinytrain.memory.report import memory_report
    from tinytrain.training.reorder import reorder
    from tinytrain.training.sparse import load_plan
    from tinytrain.training.train_graph import build_training_graph

    g = load_model(ROOT / "models" / "mbv2-w0.35.onnx")
    step = reorder(build_training_graph(g, load_plan(ROOT / "models" / "plans" / "mbv2-w0.35-sparse.json")))
    r = memory_report(step, 1 << 30, 1 << 30)
    uses = {b.use.tensor: b.use for b in r.buffers}
    assert r.inplace
    for p in r.inplace:
        assert uses[p.input].last_use == p.step == uses[p.output].first_use
        assert p.input not in step.inputs and p.input not in step.outputs


def _compile_and_run(graph, plan, x, tmp_path):
    import ctypes
    import shutil
    import subprocess

    from tinytrain.codegen import render_project

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    for name, text in render_project(graph, plan).items():
        (tmp_path / name).write_text(text)
    lib = tmp_path / "libm.so"
    subprocess.run(["gcc", "-std=c99", "-O1", "-shared", "-fPIC", "-o", str(lib), "tinytrain_model.c"],
                   cwd=tmp_path, check=True)
    so = ctypes.CDLL(str(lib))
    so.tt_init()
    out_t = graph.tensors[graph.outputs[0]]
    ys = []
    for img in x:
        y = np.empty(out_t.shape[1:], np.int8)
        so.tt_predict(np.ascontiguousarray(img).ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p))
        ys.append(y)
    return np.stack(ys)


def test_c_forward_with_in_place_buffers_matches_the_simulator(tmp_path):
    """The emitted kernels honour the min_read contract: the in-place plan computes what the simulator does."""
    from tinytrain.frontends import load_model
    from tinytrain.memory.report import memory_report
    from tinytrain.simulator import forward

    g = load_model(ROOT / "models" / "mbv2-w0.35.onnx")
    plan = memory_report(g, 1 << 30, 1 << 30, inplace=True, stream=False)
    # the pairs of the crowded steps (block 2's expand and depthwise); the training-step tests run dozens more
    assert len(plan.inplace) >= 3
    x = np.random.default_rng(0).integers(-128, 128, (2,) + g.tensors[g.inputs[0]].shape[1:], dtype=np.int8)
    want = forward(g, {g.inputs[0]: x})[g.outputs[0]]
    got = _compile_and_run(g, plan, x, tmp_path)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_blocked_depthwise_grad_input_takes_its_gradients_bytes():
    """A 7x7 depthwise input gradient on a 4x4 map (C order would need 3 rows and 3 pixels ahead) goes a block of
    channels at a time through a scratch of at most 2 KB, exactly over its g_z (``OpDef.overwrites``); a 3x3 one on a
    64x64 map of 16 channels stays in C order (a row and a pixel ahead: less than one channel's scratch)."""
    from tinytrain.ops.conv2d import (BLOCK_SCRATCH_BYTES, Conv2dGradInputAttrs, grad_input_block, grad_input_min_read,
                                      grad_input_overwrites, grad_input_scratch)

    def case(hw, c, k):
        a = Conv2dGradInputAttrs((1, 1), (k // 2,) * 4, (hw, hw), groups=c)
        gz = Tensor("gz", (1, hw, hw, c), DType.FLOAT32, Role.GRADIENT)
        wt = Tensor("w", (c, k, k, 1), DType.INT8, Role.WEIGHT)
        return a, [gz, wt], [gz]

    a, ins, outs = case(4, 384, 7)  # a block: the channels whose g_x and 49 dequantized taps fit 2 KB
    assert grad_input_block(a, ins, outs) == BLOCK_SCRATCH_BYTES // (16 * 4 + 49 * 4) == 7
    assert grad_input_scratch(a, ins, outs) == 7 * (16 + 49) * 4 and grad_input_overwrites(a, ins, outs) == 0
    assert grad_input_min_read(a, ins, outs, 0) is None
    a, ins, outs = case(16, 48, 3)  # 2 channels (2 KB) against a row and a pixel (3264 bytes); blocks of 1 with taps
    assert grad_input_block(a, ins, outs) == 1 and grad_input_scratch(a, ins, outs) == (256 + 9) * 4
    a, ins, outs = case(64, 16, 3)  # one channel (16 KB) against a row and a pixel (4160 bytes)
    assert grad_input_block(a, ins, outs) == 0 and grad_input_scratch(a, ins, outs) == 0
    assert grad_input_overwrites(a, ins, outs) is None
    assert min_gap(grad_input_min_read(a, ins, outs, 0), 4, 4) == (64 + 1) * 16 * 4
