"""Generated C == numpy simulator, bit for bit, op by op (docs/design.md §4), on graphs built in the IR.

Hypothesis draws shapes, strides, paddings and variants (derandomized), including the rounding of every
requantization (TFLite's double rounding, single rounding, or onnxruntime's float32 rounding, as ONNX imports
use for conv / fully connected / mean); every example is compiled by the host engine into a per-session cache
and run on a small batch including the int8 extremes.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from codegen_graphs import GraphBuilder
from conftest import XORSHIFT64
from tinytrain import simulator
from tinytrain.engines import host_c as engine_c
from tinytrain.ir import QuantParams
from tinytrain.csources import codegen_runtime

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("c_cache")


def assert_c_matches_simulator(b: GraphBuilder, g, cache, n: int = 3) -> None:
    x = b.inputs_batch(g, n)
    want = simulator.forward(g, {g.inputs[0]: x})[g.outputs[0]]
    got = engine_c.predict(g, x, cache_dir=cache)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i = tuple(bad[0])
        raise AssertionError(f"{len(bad)} of {want.size} outputs differ; first at {i}: C {got[i]} vs simulator "
                             f"{want[i]}; max |diff| {np.abs(got.astype(int) - want).max()}")


@settings(max_examples=30, **SETTINGS)
@given(variant=st.sampled_from(["regular", "depthwise", "pointwise"]), hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       cin=st.integers(1, 5), cout=st.integers(1, 6), mult=st.integers(1, 3), k=st.sampled_from([1, 2, 3, 5, 7]),
       kw=st.sampled_from([None, 1, 3]), stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       dilation=st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]), padded=st.booleans(),
       pads=st.tuples(*[st.integers(0, 3)] * 4), bias=st.booleans(), weight_zp=st.booleans(), relu=st.booleans(),
       per_tensor=st.booleans(), single=st.sampled_from([False, True, "fp32"]), seed=st.integers(0, 2**16))
def test_conv2d(cache, variant, hw, cin, cout, mult, k, kw, stride, dilation, padded, pads, bias, weight_zp, relu,
                per_tensor, single, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *hw, cin))
    kernel = (k, k if kw is None else kw)
    if variant == "pointwise":
        kernel, stride, dilation, pads = (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)
    padding = pads if padded else (0, 0, 0, 0)
    try:
        b.conv(x, cin * mult if variant == "depthwise" else cout, kernel, stride, padding, dilation,
               depthwise=variant == "depthwise", bias=bias, weight_zp=weight_zp, per_tensor=per_tensor,
               act=(-128 + 30, 100) if relu else (-128, 127), single=single)
    except ValueError:
        assume(False)  # kernel larger than the padded input
    g = b.build(b.nodes[-1].outputs[0])
    assert_c_matches_simulator(b, g, cache)


def _arm_dsp_files(g, stream: bool = True) -> dict[str, str]:
    """The C project of a cortex-m7 compile of ``g`` (TT_ARM_DSP 1: tt_simd.h's SXTB16 / SMLAD path), its frozen
    prefix row-streamed (memory/stream.py) unless ``stream`` is false."""
    from tinytrain.codegen import render_project
    from tinytrain.codegen.options import EmitOptions
    from tinytrain.memory.report import forward_memory_report

    files = render_project(g, forward_memory_report(g, 1 << 62, 1 << 62, stream=stream),
                           options=EmitOptions(target="cortex-m7"))
    assert "#define TT_ARM_DSP 1" in files["tinytrain_model.c"]
    return files


def _predict_arm_dsp(g, x: np.ndarray, cache, files: dict[str, str] | None = None) -> np.ndarray:
    """The C of a cortex-m7 compile (``files``, default _arm_dsp_files) run on the host, where the instructions are
    C models: the DSP algorithm checked bit for bit without an emulator."""
    import ctypes

    lib = ctypes.CDLL(str(engine_c.compile_files(files or _arm_dsp_files(g), cache)))
    lib.tt_init()
    y = np.empty((len(x),) + g.tensors[g.outputs[0]].shape[1:], np.int8)
    for i in range(len(x)):
        lib.tt_predict(ctypes.c_void_p(x[i].ctypes.data), ctypes.c_void_p(y[i].ctypes.data))
    return y


@settings(max_examples=20, **SETTINGS)
@given(variant=st.sampled_from(["regular", "pointwise", "fc", "depthwise"]),
       hw=st.tuples(st.integers(1, 6), st.integers(1, 6)), cin=st.integers(1, 37), cout=st.integers(1, 7),
       k=st.sampled_from([1, 2, 3]), stride=st.integers(1, 2), dilation=st.sampled_from([1, 2]), pad=st.integers(0, 2),
       weight_zp=st.booleans(), single=st.sampled_from([False, True, "fp32"]), seed=st.integers(0, 2**16))
def test_arm_dsp_inner_products_equal_the_portable_reference(cache, variant, hw, cin, cout, k, stride, dilation, pad,
                                                               weight_zp, single, seed):
    """Pointwise, regular, depthwise and fully connected kernels of a DSP target == the simulator (== the portable
    C), with channel counts around the 4-byte SIMD blocks, windows inside the input and clipped at its border."""
    b = GraphBuilder(seed)
    x = b.input((1, *hw, cin))
    try:
        if variant == "depthwise":
            b.conv(x, cin, (k, k), (stride, stride), (pad,) * 4, (dilation, dilation), depthwise=True, bias=True,
                   weight_zp=weight_zp, single=single)
        elif variant == "fc":
            flat = b.reshape(x, (hw[0] * hw[1] * cin,))
            b.fully_connected(flat, cout, bias=True, weight_zp=weight_zp, single=single)
        elif variant == "pointwise":
            b.conv(x, cout, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), bias=True, weight_zp=weight_zp, single=single)
        else:
            b.conv(x, cout, (k, k), (stride, stride), (pad,) * 4, (dilation, dilation), bias=True,
                   weight_zp=weight_zp, single=single)
    except ValueError:
        assume(False)
    g = b.build(b.nodes[-1].outputs[0])
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache), want)


@pytest.mark.parametrize("arm_dsp", [False, True])
@pytest.mark.parametrize("cin, cout, single", [(1, 3, "fp32"), (7, 5, False), (19, 13, True), (128, 6, "fp32"),
                                               (129, 4, False), (8, 12, True), (160, 12, "fp32"), (196, 8, True),
                                               (259, 7, "fp32")])
def test_pointwise_two_pixel_tiles_equal_the_simulator(cache, cin, cout, single, arm_dsp):
    """Pointwise kernels that widen two pixels' inputs at once and take 2 output channels x 2 pixels per inner
    product (tt_dot2x2w_s8, inputs of up to 128 channels, tt_dot2x2p_s8 for a multiple of 4: rows packed as
    halfwords less the weight zero points; 129 to 256: one pixel at a time, multiples of 4 with four rows packed
    and interleaved, tt_dot4wp_s8; 259, over XW_MAX: two pixels widened on the way, tt_dot2x2_s8) == the
    simulator, portable and DSP C: an odd number of pixels and of output channels, 0 to 3 channels after the blocks
    of 4, weight zero points, every rounding, the full int8 range and a clamp."""
    b = GraphBuilder(cin)
    h = b.conv(b.input((1, 7, 5, cin)), cout, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), bias=True, weight_zp=True,
               single=single)
    g = b.build(b.conv(h, cin, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), bias=True, single=single, act=(-100, 110)))
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    got = _predict_arm_dsp(g, xs, cache) if arm_dsp else engine_c.predict(g, xs, cache_dir=cache)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("cin, cout, single", [(272, 6, "fp32"), (259, 5, True), (384, 4, False)])
def test_pointwise_zero_point_in_the_sums_start_equals_the_simulator(cache, cin, cout, single):
    """Pointwise kernels over XW_MAX input channels beside a constant weight (conv2d.c.j2 "x2" + "zb"): the sums start
    at the bias less in_zp * the row's sum, the inputs widened as they are (on a Cortex-M an asm loop for multiples
    of 16, tests/firmware/test_firmware_qemu.py) == the simulator, DSP C models: an odd number of pixels, an odd channel
    count, a nonzero input zero point."""
    b = GraphBuilder(cin)
    x = b.input((1, 5, 3, cin))
    assert b.tensors[x].quant.zero_point != (0,)
    g = b.build(b.conv(x, cout, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), bias=True, single=single))
    files = _arm_dsp_files(g)
    assert f"_ci{cin}_zb" in files["tinytrain_model.c"]
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache, files), want)


@pytest.mark.parametrize("cin, single", [(3, "fp32"), (1, False), (2, True)])
def test_arm_dsp_regular_windows_equal_the_simulator(cache, cin, single):
    """Regular convolutions of a DSP target whose two pixels' windows are gathered a window row at a time (conv2d.c.j2
    "xw2": the input channels a constant, a whole row one copy of constant length, a row clipped at the border one
    copy of what remains) == the simulator: the stem's 3x3 stride 2, odd widths (a last pixel paired with itself),
    asymmetric and no padding, a dilated window (gathered tap by tap), weight zero points."""
    b = GraphBuilder(cin)
    h = b.input((1, 13, 11, cin))
    layers = [((3, 3), 2, (1, 1, 1, 1), 1, False, 6), ((5, 3), 1, (2, 0, 1, 1), 1, True, 5),
              ((3, 3), 1, (0, 0, 0, 0), 1, False, 3), ((3, 3), 1, (1, 2, 1, 0), 2, True, cin)]
    for k, stride, pad, dilation, weight_zp, cout in layers:
        h = b.conv(h, cout, k, (stride, stride), pad, (dilation, dilation), bias=True, weight_zp=weight_zp,
                   single=single, act=(-100, 110))
    g = b.build(h)
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache), want)


@pytest.mark.parametrize("arm_dsp", [False, True])
@pytest.mark.parametrize("cin, cout, hw, out_zp", [(8, 12, (7, 5), -128), (8, 2, (4, 8), 5), (16, 10, (5, 7), 17),
                                                   (24, 6, (8, 4), -128), (48, 4, (7, 5), -3), (100, 6, (7, 5), -128),
                                                   (16, 7, (7, 5), -128)])
def test_pointwise_channel_pair_loop_equals_the_simulator(cache, cin, cout, hw, out_zp, arm_dsp):
    """Pointwise kernels with a constant channel count (up to 128) and packed rows, float32 requantization and the
    full int8 range run their whole loop over output channel pairs in one helper (tt_simd.h tt_pw2x2p_fp32_sat_s8;
    its asm block on a device: the USAT form for out_zp = -128, SSAT for any other) == the simulator, portable and
    DSP C: an odd number of pixels (a last pixel paired with itself) and an even one, 2 to 12 output channels, one
    and many groups of four input channels; an odd output channel count keeps the 2 x 2 tiles in C."""
    b = GraphBuilder(cin + cout)
    h = b.input((1, *hw, cin))
    g = b.build(b.conv(h, cout, 1, single="fp32", quant=QuantParams.per_tensor(0.05, out_zp)))
    if arm_dsp:
        files = _arm_dsp_files(g)
        fused = "tt_pw2x2p_fp32_sat_s8(xw2" in files["tinytrain_model.c"]
        assert fused == (cout % 2 == 0), (cin, cout)
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    got = _predict_arm_dsp(g, xs, cache, files) if arm_dsp else engine_c.predict(g, xs, cache_dir=cache)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("c, single", [(19, "fp32"), (8, False), (13, True)])
def test_arm_dsp_depthwise_equals_the_portable_reference(cache, c, single):
    """Depthwise kernels of a DSP target (tt_mac4_s8: four channels per SXTAB16 / SMLABB step, taps unrolled inside
    the input, clipped at its border) == the simulator: a chain of windows, strides, paddings, dilations, weight
    zero points and a channel multiplier, with channel counts that leave 0 to 3 channels after the blocks of 4."""
    b = GraphBuilder(c)
    h = b.input((1, 13, 11, c))
    layers = [((3, 3), 1, (1, 1, 1, 1), 1, False), ((3, 3), 2, (1, 1, 1, 1), 1, True),
              ((5, 5), 1, (2, 2, 2, 2), 1, False), ((3, 3), 1, (0, 0, 0, 0), 2, True),
              ((7, 3), 2, (3, 1, 3, 1), 1, False), ((3, 3), 1, (0, 2, 1, 0), 1, False)]
    for k, stride, pad, dilation, weight_zp in layers:
        h = b.conv(h, c, k, (stride, stride), pad, (dilation, dilation), depthwise=True, weight_zp=weight_zp,
                   single=single, act=(-100, 110))
    g = b.build(b.conv(h, 2 * c, (3, 3), (1, 1), (1, 1, 1, 1), depthwise=True, single=single))
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache), want)


@pytest.mark.parametrize("c, single", [(5, "fp32"), (16, False), (3, True)])
@pytest.mark.parametrize("hw, stream, planar", [((14, 11), True, 3), ((60, 27), True, 8), ((60, 27), False, 8)])
def test_arm_dsp_planar_depthwise_equals_the_simulator(cache, c, single, hw, stream, planar):
    """Depthwise kernels that go one channel at a time (depthwise_planar.c.j2: the window's rows gathered as int16,
    two outputs per pass over each row, SMLAD over pairs of taps) == the simulator, DSP C: 3x3, 5x3, 5x5 and 7x7
    windows at strides 1 and 2, odd and even widths (a last output alone, a lone first or last gathered column),
    asymmetric and no padding, weight zero points, a clamp; in bands of a streamed prefix (every row gathered at
    each call) and whole (the ring's rows rotating); on the smaller maps, the kernel that unrolls every clipped
    window (depthwise_map.c.j2)."""
    b = GraphBuilder(c)
    h = b.input((1, *hw, c))
    layers = [((3, 3), 1, (1, 1, 1, 1), False), ((5, 5), 1, (2, 2, 2, 2), True), ((3, 3), 1, (0, 2, 1, 0), False),
              ((5, 3), 1, (2, 1, 2, 1), True), ((3, 3), 1, (0, 0, 0, 0), False), ((7, 7), 2, (3, 3, 3, 3), True),
              ((5, 5), 2, (2, 2, 1, 1), False), ((7, 7), 1, (3, 3, 3, 3), False)]
    for k, stride, pad, weight_zp in layers:
        h = b.conv(h, c, k, (stride, stride), pad, depthwise=True, weight_zp=weight_zp, single=single,
                   act=(-100, 110) if weight_zp else (-128, 127))
    g = b.build(h)
    files = _arm_dsp_files(g, stream)
    kernels = re.findall(r"^static .*void (tt_depthwise_conv_\w+)\(", files["tinytrain_model.c"], re.M)
    assert sum("_planar_" in n for n in kernels) == planar, kernels
    assert sum("_map_" in n for n in kernels) == len(layers) - planar, kernels
    assert any("_band_" in n for n in kernels) == stream, kernels
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache, files), want)


@pytest.mark.parametrize("c, single", [(5, "fp32"), (16, False), (3, True)])
@pytest.mark.parametrize("hw, layers", [
    ((15, 16), [((7, 7), 2, (3, 3, 3, 3), True), ((3, 3), 1, (1, 1, 1, 1), False), ((5, 5), 1, (2, 2, 2, 2), True),
                ((3, 3), 1, (0, 0, 0, 0), False), ((7, 7), 1, (3, 3, 3, 3), True)]),
    ((9, 7), [((5, 3), 2, (2, 1, 1, 0), False), ((7, 7), 1, (3, 3, 3, 3), True), ((7, 5), 1, (3, 2, 1, 1), False),
              ((3, 3), 2, (0, 1, 1, 0), True)]),
    ((16, 15), [((3, 3), 1, (1, 1, 1, 1), True), ((7, 7), 2, (3, 3, 3, 3), False), ((5, 5), 1, (2, 2, 2, 2), True)])])
def test_arm_dsp_map_depthwise_equals_the_simulator(cache, c, single, hw, layers):
    """Depthwise kernels over small maps (bindings/conv2d.py MAP_TERMS_MAX), one channel at a time with every
    output's window clipped at compile time (depthwise_map.c.j2: SMLAD per two inputs of a word, SMLAxy per input
    alone) == the simulator, DSP C: 3x3, 5x3, 7x5, 5x5 and 7x7 windows at strides 1 and 2, odd and even widths,
    windows that start or end half way through a word and windows larger than the map, asymmetric and no padding,
    weight zero points, a clamp."""
    b = GraphBuilder(c)
    h = b.input((1, *hw, c))
    for k, stride, pad, weight_zp in layers:
        h = b.conv(h, c, k, (stride, stride), pad, depthwise=True, weight_zp=weight_zp, single=single,
                   act=(-100, 110) if weight_zp else (-128, 127))
    g = b.build(h)
    files = _arm_dsp_files(g, stream=False)
    kernels = re.findall(r"^static .*void (tt_depthwise_conv_\w+)\(", files["tinytrain_model.c"], re.M)
    assert sum("_map_" in n for n in kernels) == len(layers), kernels
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    assert np.array_equal(_predict_arm_dsp(g, xs, cache, files), want)


def test_planar_depthwise_writes_over_its_input_only_whole_pixels_ahead():
    """The planar depthwise kernel stores channel by channel (all of channel 0's outputs first): it may take buffers
    apart, or an output the planner put a whole number of pixels ahead of its input (each channel's outputs then
    land below that channel's inputs still to be read), never part of a pixel ahead, nor a line buffer in a band
    (bindings/conv2d.py planar_safe; else the four-channel kernel, which stores in the planner's order)."""
    from tinytrain.codegen.bindings.conv2d import planar_safe

    class Arena:
        def __init__(self, x: int, y: int) -> None:
            self.offsets = {"x": x, "y": y}

        def extent(self, name: str) -> tuple[int, int]:
            return self.offsets[name], self.offsets[name] + 480

    assert planar_safe(Arena(96, 0), "x", "y", 48, None)
    assert not planar_safe(Arena(96, 0), "x", "y", 64, None)
    assert not planar_safe(Arena(0, 96), "x", "y", 48, None)
    assert planar_safe(Arena(480, 0), "x", "y", 64, None) and planar_safe(Arena(0, 480), "x", "y", 64, None)
    assert not planar_safe(Arena(96, 0), "x", "y", 48, band=object())


@settings(max_examples=25, **SETTINGS)
@given(hw=st.tuples(st.integers(1, 8), st.integers(1, 8)), c=st.integers(1, 6), kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), pads=st.tuples(*[st.integers(0, 2)] * 4),
       pool=st.sampled_from(["away", "half_up", "half_even", "requant", "requant_single"]), same_quant=st.booleans(),
       keepdims=st.booleans(), single=st.booleans(), count_folded=st.booleans(), seed=st.integers(0, 2**16))
def test_pooling_and_mean(cache, hw, c, kernel, stride, pads, pool, same_quant, keepdims, single, count_folded, seed):
    pads = tuple(min(p, kernel[i % 2] - 1) for i, p in enumerate(pads))  # a window always holds a valid cell
    b = GraphBuilder(seed)
    x = b.input((1, *hw, c))
    try:
        p = b.avg_pool(x, kernel, stride, pads, half_up=pool == "half_up", half_even=pool == "half_even",
                       requant=pool.startswith("requant"), single=pool == "requant_single", act=(-100, 90))
    except ValueError:
        assume(False)
    m1 = b.mean(p, same_quant=same_quant, keepdims=keepdims, single=single, count_folded=count_folded)
    m2 = b.mean(x, same_quant=not same_quant, keepdims=keepdims, single=not single, count_folded=not count_folded)
    g = b.build(b.add(m1, m2, single=single))
    assert_c_matches_simulator(b, g, cache, n=4)


@settings(max_examples=10, **SETTINGS)
@given(hw=st.tuples(st.integers(1, 7), st.integers(1, 7)), c=st.integers(1, 9), classes=st.integers(1, 12),
       keepdims=st.booleans(), weight_zp=st.booleans(), seed=st.integers(0, 2**16))
def test_fp32_rounding_conv_mean_fc(cache, hw, c, classes, keepdims, weight_zp, seed):
    """onnxruntime's float32 requantization (ONNX imports' conv2d / mean / fully_connected): C == simulator."""
    b = GraphBuilder(seed)
    x = b.input((1, *hw, c))
    h = b.conv(x, c, 3, padding=(1, 1, 1, 1), depthwise=True, act=(-100, 127), single="fp32")
    h = b.conv(h, 8, 1, weight_zp=weight_zp, single="fp32")
    m = b.mean(h, keepdims=keepdims, single="fp32", count_folded=True)
    if keepdims:
        m = b.reshape(m, (8,))
    g = b.build(b.fully_connected(m, classes, weight_zp=weight_zp, single="fp32"))
    assert all(n.attrs.requant.fp32 for n in g.nodes if hasattr(n.attrs, "requant"))
    assert_c_matches_simulator(b, g, cache, n=4)


@pytest.mark.parametrize("arm_dsp", [False, True])
def test_fp32_rounding_outside_the_fast_shifts(cache, arm_dsp):
    """Float32 requantization with shifts outside -32..-2 (scales of 0.4 and more, or below 2^-32: multiplier 0)
    gets the exact arithmetic alone (tt_requantize_fp32_wide, "_f32w" kernels); a node with all shifts inside gets
    the fast path ("_f32"): C == simulator, portable and DSP."""
    import dataclasses

    from tinytrain.codegen import render_project
    from tinytrain.codegen.options import EmitOptions
    from tinytrain.memory.report import forward_memory_report
    from tinytrain.quant import Requant

    b = GraphBuilder(7)
    x = b.input((1, 5, 6, 8))
    h = b.conv(x, 8, 3, padding=(1, 1, 1, 1), depthwise=True, single="fp32")
    h = b.conv(h, 6, 1, single="fp32")
    scales = [3.0, 0.7, 0.4, 2.0 ** -40, 2.0 ** -31, 1e-3]
    b.nodes[-1] = dataclasses.replace(b.nodes[-1], attrs=dataclasses.replace(
        b.nodes[-1].attrs, requant=Requant.from_scales([float(np.float32(s)) for s in scales], fp32=True)))
    g = b.build(h)
    assert g.nodes[1].attrs.requant.shift[:5] == (2, 0, -1, 0, -30)
    options = EmitOptions(target="cortex-m7" if arm_dsp else "host")
    source = render_project(g, forward_memory_report(g, 1 << 62, 1 << 62), options=options)["tinytrain_model.c"]
    host = ("tt_conv_depthwise_3x3_s1_p1x1_c8_rows_s8_f32(", "tt_conv_1x1_c8x6_channels_pairs_rows_s8_f32w(")  # bindings/conv2d.py
    device = ("tt_depthwise_conv_3x3_s1_p1x1_s8_f32_sat_map_c8_5x6_to_5x6(", "tt_conv_1x1_xw2_s8_f32w_sat_ci8(")
    assert all(name in source for name in (device if arm_dsp else host))
    xs = b.inputs_batch(g, 4)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    got = _predict_arm_dsp(g, xs, cache) if arm_dsp else engine_c.predict(g, xs, cache_dir=cache)
    assert np.array_equal(got, want)


@settings(max_examples=15, **SETTINGS)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), pads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3),
       classes=st.integers(1, 12), beta=st.sampled_from([0.5, 1.0, 3.0]), fc_bias=st.booleans(), weight_zp=st.booleans(),
       single=st.booleans(), seed=st.integers(0, 2**16))
def test_elementwise_pad_reshape_fc_softmax(cache, shape, pads, classes, beta, fc_bias, weight_zp, single, seed):
    b = GraphBuilder(seed)
    x = b.input((1, *shape))
    padded = b.pad(x, pads[: len(shape)])
    r = b.requantize(padded, single=single)
    s = b.add(r, padded, act=(-120, 120), single=single)
    flat = b.reshape(s, (int(np.prod(b.tensors[s].shape[1:])),))
    y = b.fully_connected(flat, classes, bias=fc_bias, weight_zp=weight_zp, single=single)
    g = b.build(b.softmax(y, beta))
    assert_c_matches_simulator(b, g, cache, n=4)


@pytest.mark.parametrize("depth, spread", [(1001, 0), (1001, 40), (7, 255), (1, 10)])
def test_softmax_wide_rows(cache, depth, spread):
    """1001 equal logits push the final rounding shift past 31 bits; the C must still match."""
    b = GraphBuilder(depth + spread)
    x = b.input((1, 2, depth))
    g = b.build(b.softmax(x, 1.0))
    xs = b.rng.integers(-spread // 2 - 1, spread // 2 + 1, (3, 2, depth)).clip(-128, 127).astype(np.int8)
    np.testing.assert_array_equal(engine_c.predict(g, xs, cache_dir=cache), simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]])


def _build_fixedpoint_main(tmp_path, main: str, exe_name: str, *flags: str):
    """Compile ``main`` (a C program including tt_fixedpoint.h) with UBSan and ``flags`` into ``exe_name``."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    header = codegen_runtime().joinpath("tt_fixedpoint.h").read_text(encoding="utf-8")
    (tmp_path / "tt_fixedpoint.h").write_text(header)
    (tmp_path / "main.c").write_text(main)
    exe = tmp_path / exe_name
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-fsanitize=undefined",
                        "-fno-sanitize-recover=all", str(tmp_path / "main.c"), "-o", str(exe), *flags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


REQUANT_MAIN = r"""
#include <stdio.h>
#include "tt_fixedpoint.h"

int main(void) {
    long long acc, multiplier, shift, left_ok;
    while (scanf("%lld %lld %lld %lld", &acc, &multiplier, &shift, &left_ok) == 4) {
        /* tt_requantize shifts acc left in int32: only called where that cannot overflow, as in the kernels */
        printf("%ld %ld %ld %ld\n", left_ok ? (long)tt_requantize((int32_t)acc, (int32_t)multiplier, (int32_t)shift) : 0L,
               (long)tt_requantize_single((int32_t)acc, (int32_t)multiplier, (int32_t)shift),
               left_ok ? (long)tt_requantize_s8((int32_t)acc, (int32_t)multiplier, (int32_t)shift) : 0L,
               (long)tt_requantize_single_s8((int32_t)acc, (int32_t)multiplier, (int32_t)shift));
    }
    return 0;
}
"""


def test_requantize_helpers_match_quant_py(tmp_path):
    """tt_requantize / tt_requantize_single == quant.multiply_by_quantized_multiplier (double / single rounding)
    over the whole int32 accumulator range, every shift -31..30 and the extreme multipliers; so is the kernels'
    tt_requantize_s8 (its own arithmetic for shifts <= 0) and tt_requantize_single_s8 (for shifts <= -2)."""
    from tinytrain.quant import INT32_MAX, INT32_MIN, multiply_by_quantized_multiplier

    exe = _build_fixedpoint_main(tmp_path, REQUANT_MAIN, "requant")
    rng = np.random.default_rng(0)
    n = 20000
    shift = rng.integers(-31, 31, n)
    multiplier = rng.integers(1 << 30, 1 << 31, n)
    multiplier[:8] = [1 << 30, INT32_MAX, 0, 1 << 30, INT32_MAX, 1 << 30, INT32_MAX, 1 << 30]
    bits = rng.integers(0, 32, n)
    acc = rng.integers(-(1 << 31), 1 << 31, n) >> bits  # all magnitudes
    acc[:8] = [INT32_MIN, INT32_MAX, 12345, -1, 1, 0, -(1 << 20), 7]
    # the double-rounding helper shifts acc left in int32: compare it where that product is in range
    left_ok = np.abs(acc) < (1 << (31 - np.maximum(shift, 0))) - 1
    lines = "".join(f"{a} {m} {s} {int(ok)}\n" for a, m, s, ok in zip(acc, multiplier, shift, left_ok))
    r = subprocess.run([str(exe)], input=lines, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.array([[int(v) for v in line.split()] for line in r.stdout.splitlines()])
    double = multiply_by_quantized_multiplier(acc, multiplier, shift)
    single = multiply_by_quantized_multiplier(acc, multiplier, shift, single_rounding=True)
    fits = np.abs(single) <= INT32_MAX  # TFLite DCHECKs that the result fits int32
    assert left_ok.mean() > 0.4 and fits.mean() > 0.4
    np.testing.assert_array_equal(got[left_ok, 0], double[left_ok])
    np.testing.assert_array_equal(got[left_ok, 2], double[left_ok])
    np.testing.assert_array_equal(got[fits, 1], single[fits])
    np.testing.assert_array_equal(got[fits, 3], single[fits])


FP32_MAIN = r"""
#include <stdio.h>
#include "tt_fixedpoint.h"

int main(void) {
    long long acc, multiplier, shift;
    while (scanf("%lld %lld %lld", &acc, &multiplier, &shift) == 3) {
        printf("%ld\n", (long)tt_requantize_fp32((int32_t)acc, (int32_t)multiplier, (int32_t)shift));
    }
    return 0;
}
"""


def test_requantize_fp32_helper_matches_quant_py_and_float32(tmp_path):
    """tt_requantize_fp32 == quant.multiply_by_float32_scale == onnxruntime's float32 arithmetic
    nearbyint((float)acc * scale) (numpy float32 here), over all int32 magnitudes, float32 scales 2^-40..2^10
    and accumulators crowded around rounding ties (where the float32 product's own rounding decides)."""
    from tinytrain.quant import INT32_MAX, INT32_MIN, multiply_by_float32_scale, quantize_multiplier

    exe = _build_fixedpoint_main(tmp_path, FP32_MAIN, "requant_fp32")
    rng = np.random.default_rng(1)
    n = 20000
    scale = (rng.uniform(0.5, 1.0, n) * 2.0 ** rng.integers(-40, 11, n)).astype(np.float32)
    scale[:4] = [np.float32(1 / 3), 0.5, 1.0, np.float32(0.0372)]
    acc = rng.integers(-(1 << 31), 1 << 31, n) >> rng.integers(0, 32, n)
    acc[:8] = [INT32_MIN, INT32_MAX, 12345, -1, 1, 0, -(1 << 24) - 1, (1 << 24) + 3]
    # near ties: acc = (j + 1/2) / scale, rounded, for small scales
    near = slice(8, 8 + n // 4)
    j = rng.integers(-300, 300, n // 4)
    acc[near] = np.clip(np.rint((j + 0.5) / scale[near].astype(np.float64)), INT32_MIN, INT32_MAX).astype(np.int64)
    pairs = [quantize_multiplier(float(s)) for s in scale]
    multiplier = np.array([p[0] for p in pairs], np.int64)
    shift = np.array([p[1] for p in pairs], np.int64)
    lines = "".join(f"{a} {m} {s}\n" for a, m, s in zip(acc, multiplier, shift))
    r = subprocess.run([str(exe)], input=lines, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.array([int(v) for v in r.stdout.split()])
    ours = multiply_by_float32_scale(acc, multiplier, shift)
    with np.errstate(over="ignore"):
        flt = np.rint((acc.astype(np.float32) * scale).astype(np.float32)).astype(np.float64)
    flt = np.clip(flt, -(1 << 30), 1 << 30)
    np.testing.assert_array_equal(got, ours)
    np.testing.assert_array_equal(ours, flt)
    assert (np.abs(ours) < 1 << 30).mean() > 0.5 and (np.abs(ours[near]) <= 300).mean() > 0.5


FP32_S8_MAIN = r"""
#include <stdio.h>
#include "tt_fixedpoint.h"
#ifndef VALUES
#define VALUES 4000000
#endif

""" + XORSHIFT64 + r"""

int main(void) {
    long tested = 0, differ = 0;
    int32_t prev_acc = 0, prev_multiplier = 1 << 30, prev_bits = 116 << 23, prev_r = 0;  /* shift -10: r = 0 */
    for (long i = 0; i < VALUES; i++) {
        const int32_t shift = -32 + (int32_t)(next() % 31);                          /* -32..-2 */
        const int32_t m = (int32_t)((1u << 23) + (uint32_t)(next() % (1u << 23)));  /* 24-bit significand */
        const int32_t zp = (int32_t)(next() % 256) - 128;
        int32_t lo = (int32_t)(next() % 256) - 128, hi = (int32_t)(next() % 256) - 128;
        const int k = 24 - shift;
        int64_t acc;
        if (i % 4 == 3) {  /* the whole int8 range */
            lo = -128;
            hi = 127;
        } else if (lo > hi) {
            const int32_t t = lo;
            lo = hi;
            hi = t;
        }
        if (i % 2) {  /* near a tie (2j + 1) * 2^(k - 1) of p = acc * m, about as near as the fast path's band */
            const int64_t span = i % 8 == 1 ? 4200 : 300;  /* mostly results that land in the int8 range */
            const double j = (double)((int64_t)(next() % (uint64_t)(2 * span)) - span);
            const int64_t reach = k > 35 ? (int64_t)1 << (k - 33) : 3;
            const double t = (2.0 * j + 1.0) * (double)((int64_t)1 << (k - 1)) / (double)m;
            const int64_t t_int = (int64_t)t;  /* floor(t): no libm on the boards */
            acc = t_int - ((double)t_int > t) + (int64_t)(next() % (uint64_t)(2 * reach + 1)) - reach;
        } else {  /* any magnitude */
            acc = (int64_t)(int32_t)(uint32_t)next() >> (next() % 32);
        }
        if (acc < INT32_MIN || acc > INT32_MAX) {
            continue;
        }
        tested++;
        const int32_t scale_bits = (int32_t)(((uint32_t)(shift + 126) << 23) + (uint32_t)m - (1u << 23));
        const int32_t r = tt_requantize_fp32_s8((int32_t)acc, m * 128, scale_bits);
        const int8_t fast = (int8_t)tt_clamp(r + zp, lo, hi);
        const int8_t want = (int8_t)tt_clamp(tt_requantize_fp32((int32_t)acc, m * 128, shift) + zp, lo, hi);
        if (fast != want && differ++ < 5) {
            printf("acc %ld multiplier %ld shift %ld zp %ld range %ld..%ld: %d, want %d\n", (long)acc,
                   (long)m * 128, (long)shift, (long)zp, (long)lo, (long)hi, fast, want);
        }
        int32_t pair[2];  /* the two-value form: this value beside the previous one, each with its own scale */
        tt_requantize_fp32_s8x2((int32_t)acc, m * 128, scale_bits, prev_acc, prev_multiplier, prev_bits, pair);
        if ((pair[0] != r || pair[1] != prev_r) && differ++ < 5) {
            printf("pair of acc %ld, %ld: %ld, %ld, want %ld, %ld\n", (long)acc, (long)prev_acc, (long)pair[0],
                   (long)pair[1], (long)r, (long)prev_r);
        }
        prev_acc = (int32_t)acc;
        prev_multiplier = m * 128;
        prev_bits = scale_bits;
        prev_r = r;
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


def test_requantize_fp32_s8_equals_the_exact_helper(tmp_path):
    """clamp(tt_requantize_fp32_s8 + zero point) (the kernels' int8 output, with a 32-bit fast path) ==
    clamp(tt_requantize_fp32 + zero point) on 4 M values: every shift it takes (-32..-2), random 24-bit
    significands, zero points and clamp ranges, accumulators of all magnitudes and near rounding ties, as near as
    the fast path's tie band (where the float32 roundings of wide accumulators decide), for results in the int8
    range and beyond; both ways the header computes it (TT_WORD64: 32-bit cores, 64-bit hosts); the two-value
    tt_requantize_fp32_s8x2 == tt_requantize_fp32_s8 of each."""
    for word64 in (0, 1):  # both ways tt_fixedpoint.h computes the fast path (32-bit cores, 64-bit hosts)
        exe = _build_fixedpoint_main(tmp_path, FP32_S8_MAIN, f"requant_fp32_s8_{word64}", f"-DTT_WORD64={word64}")
        r = subprocess.run([str(exe)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "differ 0" in r.stdout
