"""The host build's own kernels (kernels/conv2d_rows.c.j2, codegen/runtime/tt_rows.h): which projects get them, and
the float32 requantization of tt_rows.h against the exact integer helper of tt_fixedpoint.h. Their outputs against
the simulator are checked with every other kernel (tests/codegen/test_codegen_ops.py, test_stream.py, test_codegen_models.py:
those build for the host); the variant across output channels, which needs 16 of them, and the host update's split
floor (tt_float.h), here."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from codegen_graphs import GraphBuilder
from conftest import XORSHIFT64
from test_codegen_ops import assert_c_matches_simulator
from tinytrain import simulator
from tinytrain.engines import host_c as engine_c
from tinytrain.codegen import render_project
from tinytrain.csources import codegen_runtime
from tinytrain.codegen.options import EmitOptions
from tinytrain.cores import DEFAULT_CORE
from tinytrain.memory.report import forward_memory_report

ROWS_MAIN = r"""
#include <math.h>
#include <stdio.h>
#include "tt_rows.h"

""" + XORSHIFT64 + r"""

int main(void) {
    enum { N = 40 };  /* a block of 32 (the AVX2 path) and 8 more */
    long tested = 0, differ = 0;
    for (long i = 0; i < 100000; i++) {
        const int32_t shift = -32 + (int32_t)(next() % 31);                          /* -32..-2 */
        const int32_t m = (int32_t)((1u << 23) + (uint32_t)(next() % (1u << 23)));  /* 24-bit significand */
        const int32_t zp = (int32_t)(next() % 256) - 128;
        const int k = 24 - shift;
        int32_t acc[N], rq[2 * N];
        float scale[N];
        int8_t row[N];
        for (int t = 0; t < N; t++) {
            int64_t a;
            if (t % 2) {  /* near a tie (2j + 1) * 2^(k - 1) of p = acc * m */
                const double j = (double)((int64_t)(next() % 600) - 300);
                const int64_t reach = k > 35 ? (int64_t)1 << (k - 33) : 3;
                a = (int64_t)floor((2.0 * j + 1.0) * ldexp(1.0, k - 1) / (double)m) +
                    (int64_t)(next() % (uint64_t)(2 * reach + 1)) - reach;
            } else {  /* any magnitude */
                a = (int64_t)(int32_t)(uint32_t)next() >> (next() % 32);
            }
            acc[t] = a < INT32_MIN ? INT32_MIN : (a > INT32_MAX ? INT32_MAX : (int32_t)a);
            rq[2 * t] = m * 128;
            rq[2 * t + 1] = shift;
            scale[t] = tt_fp32_scale(((shift + 126) << 23) + m - (1 << 23));  /* bindings/common.py rq_operand */
        }
        tt_requantize_fp32_row_s8(row, acc, scale, N, zp, -128, 127);
        for (int t = 0; t < N; t++) {
            const int8_t want = (int8_t)tt_clamp(tt_requantize_fp32(acc[t], rq[2 * t], rq[2 * t + 1]) + zp, -128, 127);
            tested++;
            if (row[t] != want && differ++ < 5) {
                printf("acc %ld multiplier %ld shift %ld zp %ld: %d, want %d\n", (long)acc[t], (long)m * 128,
                       (long)shift, (long)zp, row[t], want);
            }
        }
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", ["", "-march=native"])
def test_float32_requantization_equals_the_exact_helper(tmp_path, march):
    """tt_rows.h's float32 requantization (nearbyint((float)acc * scale) computed in float32) == tt_requantize_fp32
    (the spec emulated in integers) on 4 M int8 outputs: every shift -32..-2, random 24-bit significands and zero
    points, accumulators of every magnitude and near rounding ties; scalar and vectorized builds."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    for name in ("tt_rows.h", "tt_fixedpoint.h"):
        (tmp_path / name).write_text(codegen_runtime().joinpath(name).read_text(encoding="utf-8"))
    (tmp_path / "main.c").write_text(ROWS_MAIN)
    exe = tmp_path / "rows"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O3", *([march] if march else []),
                        "-ffp-contract=off", "-fsanitize=undefined", "-fno-sanitize-recover=all",
                        str(tmp_path / "main.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "differ 0" in r.stdout


PAIRS_MAIN = r"""
#include <stdio.h>
#include "tt_rows.h"

""" + XORSHIFT64 + r"""

int main(void) {
    static const int shapes[][2] = {{1, 8}, {3, 16}, {12, 24}, {14, 40}, {48, 128}, {288, 96}};  /* (k2, cp) */
    long tested = 0, differ = 0;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int k2 = shapes[s][0], cp = shapes[s][1];
        static int16_t x[4 * 2 * 288], w[288 * 128 * 2];
        static int32_t bias[128], acc[4 * 128];
        for (int rep = 0; rep < 50; rep++) {
            for (int i = 0; i < 4 * 2 * k2; i++) {
                x[i] = (int16_t)((int32_t)(next() % 511) - 255);  /* int8 less a zero point */
            }
            for (int i = 0; i < k2 * cp * 2; i++) {
                w[i] = (int16_t)((int32_t)(next() % 511) - 255);
            }
            for (int o = 0; o < cp; o++) {
                bias[o] = (int32_t)(next() % 2000001) - 1000000;
            }
            tt_dot_pairs4(acc, x, w, bias, k2, cp);
            for (int t = 0; t < 4; t++) {
                for (int o = 0; o < cp; o++) {
                    long long want = bias[o];
                    for (int c = 0; c < 2 * k2; c++) {
                        want += (long long)x[t * 2 * k2 + c] * w[((c / 2) * cp + o) * 2 + c % 2];
                    }
                    tested++;
                    if (acc[t * cp + o] != want && differ++ < 5) {
                        printf("k2 %d cp %d t %d o %d: %ld, want %lld\n", k2, cp, t, o, (long)acc[t * cp + o], want);
                    }
                }
            }
        }
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", ["", "-march=native"])
def test_pairs_of_halfwords_sum_exactly(tmp_path, march):
    """tt_rows.h tt_dot_pairs4 (the host convolutions' inner products, conv2d_rows.c.j2) == the plain sums of
    products: inputs and weights over the whole +-255 range, one to 288 pairs, blocks of 16 channels and a last 8;
    the portable C and, on a host with AVX2, the vector path."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    for name in ("tt_rows.h", "tt_fixedpoint.h"):
        (tmp_path / name).write_text(codegen_runtime().joinpath(name).read_text(encoding="utf-8"))
    (tmp_path / "main.c").write_text(PAIRS_MAIN)
    exe = tmp_path / "pairs"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *([march] if march else []),
                        "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        str(tmp_path / "main.c"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "differ 0" in r.stdout


def test_host_projects_get_the_host_kernels_and_cortex_m_projects_the_device_ones():
    """bindings/conv2d.py: a project without a Cortex-M target convolves with conv2d_rows.c.j2, a Cortex-M one not;
    pointwise and regular ones across output channels, specialized to their channel counts, their weights a table of
    halfword pairs where the step does not update them ("pairs", any size); depthwise ones specialized to theirs."""
    b = GraphBuilder(3)
    h = b.conv(b.input((1, 6, 5, 3)), 8, 3, padding=(1, 1, 1, 1), stride=(2, 2), single="fp32")
    h = b.conv(h, 8, 3, padding=(1, 1, 1, 1), depthwise=True, single="fp32")
    h = b.conv(h, 32, 1, single="fp32")
    g = b.build(b.conv(h, 300, 1, single="fp32"))
    host, device = (render_project(g, forward_memory_report(g, 1 << 62, 1 << 62), options=EmitOptions(target=t))
                    ["tinytrain_model.c"] for t in ("", DEFAULT_CORE))
    for kernel in ("tt_conv_3x3_s2_p1x1_c3x8_channels_pairs_rows_s8_f32(", "tt_conv_depthwise_3x3_s1_p1x1_c8_rows_s8_f32(",
                   "tt_conv_1x1_c8x32_channels_pairs_rows_s8_f32(", "tt_conv_1x1_c32x300_channels_pairs_rows_s8_f32("):
        assert kernel in host and kernel not in device


@pytest.mark.parametrize("single", [False, True, "fp32"])
@pytest.mark.parametrize("variant, cin, cout", [("pointwise", 1, 16), ("pointwise", 8, 17), ("pointwise", 24, 40),
                                                ("pointwise", 70, 5), ("pointwise", 33, 12), ("regular", 3, 16),
                                                ("regular", 2, 33)])
def test_convolutions_across_output_channels_equal_the_simulator(tmp_path, variant, cin, cout, single):
    """conv2d_rows.c.j2 across output channels (tt_rows.h tt_dot_pairs4, the weights a table): blocks of 8 and 16
    channels, output channels past whole blocks, a last tile of fewer than 4 pixels, padding, strides, weight zero
    points, every rounding."""
    b = GraphBuilder(cin * cout)
    x = b.input((1, 7, 5, cin))
    if variant == "pointwise":
        b.conv(x, cout, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), bias=True, weight_zp=True, single=single)
    else:
        b.conv(x, cout, (3, 3), (2, 1), (1, 0, 1, 1), (1, 1), bias=cin == 3, weight_zp=True, single=single)
    g = b.build(b.nodes[-1].outputs[0])
    source = render_project(g, forward_memory_report(g, 1 << 62, 1 << 62))["tinytrain_model.c"]
    assert "_channels_pairs_rows_s8" in source
    assert_c_matches_simulator(b, g, tmp_path)


@pytest.mark.parametrize("march", [True, False], ids=["native", "portable"])
@pytest.mark.parametrize("k, stride, padding, dilation, c, hw", [
    (3, 1, (1, 1, 1, 1), 1, 16, (9, 8)), (3, 2, (1, 1, 1, 1), 1, 24, (9, 7)), (5, 1, (2, 2, 2, 2), 1, 33, (6, 7)),
    (7, 2, (3, 3, 3, 3), 1, 40, (9, 9)), (3, 1, (0, 0, 0, 0), 1, 5, (6, 5)), (5, 2, (1, 2, 2, 1), 1, 17, (8, 8)),
    (7, 1, (3, 3, 3, 3), 1, 48, (4, 4)), (3, 1, (1, 0, 0, 1), 1, 20, (5, 6)), (3, 1, (2, 2, 2, 2), 2, 19, (7, 6)),
    (5, 1, (0, 0, 0, 0), 1, 32, (7, 9))])
def test_depthwise_convolutions_equal_the_simulator(tmp_path, march, k, stride, padding, dilation, c, hw):
    """conv2d_rows.c.j2 "depthwise" (tt_rows.h tt_dw_sums_s8: taps in pairs, sixteen channels at a time in AVX2
    registers, the last sixteen overlapping; border pixels' pairs listed, a tap in padding read as in_zp) == the
    simulator: channel counts below 16, multiples of 16 and between, odd windows (a pair's tap of weight 0), strides,
    uneven padding, dilation, weight zero points, no bias, both roundings; built with -march=native and without (the
    C loops)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    b = GraphBuilder(c * k)
    x = b.input((1, *hw, c))
    b.conv(x, c, k, (stride, stride), padding, (dilation, dilation), depthwise=True, bias=c % 3 != 0,
           weight_zp=k == 5, act=(-100, 90) if c % 2 else (-128, 127), single="fp32" if c != 20 else False)
    g = b.build(b.nodes[-1].outputs[0])
    source = render_project(g, forward_memory_report(g, 1 << 62, 1 << 62))["tinytrain_model.c"]
    assert f"_c{c}_rows_s8" in source
    xs = b.inputs_batch(g, 3)
    want = simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]]
    flags = engine_c.HOST_CFLAGS if march else tuple(f for f in engine_c.HOST_CFLAGS if f != "-march=native")
    lib = ctypes.CDLL(str(engine_c.build(g, tmp_path, cflags=flags)))
    lib.tt_init()
    got = np.empty((len(xs),) + want.shape[1:], np.int8)
    for i in range(len(xs)):
        lib.tt_predict(ctypes.c_void_p(np.ascontiguousarray(xs[i]).ctypes.data), ctypes.c_void_p(got[i].ctypes.data))
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {want.size} outputs differ"


FLOOR_MAIN = r"""
#include <stdio.h>
#include "tt_float.h"

""" + XORSHIFT64 + r"""

static int check(float x, long *differ) {
    const int32_t want = tt_floor_clamped(x), got = tt_floor_of_clamped(tt_step_clamp(x));
    if (got != want && (*differ)++ < 5) {
        printf("x %a: %ld, want %ld\n", (double)x, (long)got, (long)want);
    }
    return 1;
}

int main(void) {
    long tested = 0, differ = 0;
    const float special[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 8388607.5f, -8388607.5f, 1073741824.0f,
                             -1073741824.0f, 1073741888.0f, -1073741888.0f, 3e38f, -3e38f};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++) {
        tested += check(special[i], &differ);
    }
    uint32_t inf = 0x7F800000u, nan = 0x7FC00000u;
    float v;
    memcpy(&v, &inf, sizeof v);
    tested += check(v, &differ) + check(-v, &differ);
    memcpy(&v, &nan, sizeof v);
    tested += check(v, &differ);
    for (long i = 0; i < 2000000; i++) {
        const uint32_t bits = (uint32_t)next();
        memcpy(&v, &bits, sizeof v);  /* every sign, exponent and significand */
        tested += check(v, &differ);
        tested += check((float)(int32_t)(uint32_t)next() / (float)(1 + (next() % 1024)), &differ);  /* near integers */
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", ["", "-march=native"])
def test_the_split_floor_equals_tt_floor_clamped(tmp_path, march):
    """tt_floor_of_clamped(tt_step_clamp(x)) (a host build's update, kernels/sgd_update.c.j2) == tt_floor_clamped(x)
    on 4 M floats: random bit patterns (NaN, infinities, subnormals, beyond +-2^30) and quotients near integers."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    (tmp_path / "tt_float.h").write_text(codegen_runtime().joinpath("tt_float.h").read_text(encoding="utf-8"))
    (tmp_path / "main.c").write_text(FLOOR_MAIN)
    exe = tmp_path / "floor"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O3", *([march] if march else []),
                        "-ffp-contract=off", "-I", str(codegen_runtime()), str(tmp_path / "main.c"), "-o", str(exe)],
                       capture_output=True, text=True)  # -I: the parts tt_float.h includes
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "differ 0" in r.stdout
