"""Firmware on the emulated Cortex-M and RISC-V boards (qemu-system-arm / -riscv32, -icount shift=0, semihosting):
the same C as the host engine gives the same bits — losses, trainable state, logits — on M4, M7, M55, M33, M3,
M0+ code and rv32imac / rv32imafc; the SRAM budget is the linker's RAM region (1 byte more does not link); SysTick
(RISC-V: minstret) counts instructions; faults exit with a status. Slow: each test links firmware
and runs QEMU (seconds each; the two real models about a minute together)."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import XORSHIFT64, shared_file
from test_codegen_train import train_ops_model
from test_grad_kernels import CHECK
from tinytrain.engines import qemu as engine_qemu
from tinytrain.cli import main
from tinytrain.codegen.context import arm_dsp, has_fpu
from tinytrain.codegen.bindings.conv2d import pointwise_tile_range
from tinytrain.data import load_dataset, model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.firmware import BOARDS, render_firmware, samples
from tinytrain.cores import stack_reserve
from tinytrain.frontends import load_model
from tinytrain.training.sparse import Plan, WeightUpdate, load_plan
from tinytrain.training.train_graph import build_training_graph

pytestmark = [
    pytest.mark.slow,
    pytest.mark.qemu,
]
QEMU_BOARDS = [name for name, b in BOARDS.items() if b.qemu]
# The boards whose core has the Arm DSP extension / a single-precision Arm FPU: the tests of their asm paths.
DSP_BOARDS = [name for name in QEMU_BOARDS if arm_dsp(BOARDS[name].core)]
FPU_BOARDS = [name for name in QEMU_BOARDS if has_fpu(BOARDS[name].core)]
NEW_BOARDS = ["qemu-m33", "qemu-m3", "qemu-m0plus", "qemu-riscv32", "qemu-riscv32f"]
# Semihosting stdio: newlib's rdimon needs its handles opened (Arm), picolibc's libsemihost has them (RISC-V).
GLUE = """#include <stdio.h>
#include "tt_board.h"
#if defined(__PICOLIBC__)
void tt_board_init(void) {}
#else
extern void initialise_monitor_handles(void);
void tt_board_init(void) { initialise_monitor_handles(); }
#endif
"""
ROOT = Path(__file__).resolve().parents[2]
KB = 1024
# A sparse plan of the MLPerf VWW MobileNetV1 that fits 256 KB: biases of the last 12 layers, the first quarter
# of the output channels of conv 24, half of conv 26, and the classifier.
VWW_PLAN = {"version": 1, "bias_last_k": 12, "weights": [{"conv": 24, "ratio": 0.25}, {"conv": 26, "ratio": 0.5},
                                                         {"conv": 27, "ratio": 1.0}], "channels": "first", "lr": 0.01}
# MobileNetV2-w0.35: biases of the last 20 layers and the classifier's weights (beside the shipped sparse plan).
MBV2_PLAN = {"version": 1, "bias_last_k": 20, "weights": [{"conv": 52, "ratio": 1.0}], "channels": "first", "lr": 0.01}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    g, _ = train_ops_model()
    # each layer its own remainder bits (a byte, none, the plan's packed nibbles): every update kernel on every core
    plan = Plan(bias_last_k=4, weights=(WeightUpdate(0, 0.5, 8), WeightUpdate(3, 0.25, 0), WeightUpdate(5, 1.0)),
                lr=0.05)
    tg = build_training_graph(g, plan)
    out = tmp_path_factory.mktemp("tiny_compile")
    engine_qemu.emit_compile_dir(tg, out, 96 * KB, 256 * KB)
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (12, *g.tensors[g.inputs[0]].shape[1:])).astype(np.int8)
    return tg, out, x, rng.integers(0, 5, 12)


@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_training_step_is_bit_identical_to_the_host_on_every_core(board, tiny, tmp_path):
    tg, _, x, y = tiny
    compile_dir = tmp_path / "compile"  # the C for this board's core (Arm DSP instructions or their C models)
    engine_qemu.emit_compile_dir(tg, compile_dir, 96 * KB, 256 * KB, target=BOARDS[board].core)
    fw = engine_qemu.build(compile_dir, board, tmp_path / "project")
    r = engine_qemu.run(fw, board, train=(x[:8], y[:8]), test=(x[8:], y[8:]))
    host = CTrainer(tg)
    assert _same_bits(r.losses, host.train(x[:8], y[:8]))
    assert r.state == host.state_bytes()
    assert np.array_equal(r.logits, host.predict(x[8:]))
    assert len(r.step_insns) == 8 and r.step_insns.min() > 0 and len(r.predict_insns) == 4
    assert 0 < r.stack_bytes < stack_reserve(BOARDS[board].core)  # measured high-water mark within the reserve
    # resuming from a saved state continues exactly where it stopped
    again = engine_qemu.run(fw, board, train=(x[8:], y[8:]), state_in=r.state)
    assert _same_bits(again.losses, host.train(x[8:], y[8:])) and again.state == host.state_bytes()


def _program(compile_dir: Path, board: str, main_c: str, out: Path) -> Path:
    """A firmware of this board whose harness is replaced by main_c (startup, ticks and linker script kept)."""
    for rel, data in render_firmware(compile_dir, board).items():
        if rel in ("src/tinytrain_model.c", "src/tt_harness_qemu.c"):
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    ld = out / "tinytrain.ld"
    ld.write_text(re.sub(r"^ASSERT\(SIZEOF\(\.bss\).*$", "", ld.read_text(), flags=re.M))  # no model arena here
    (out / "src" / "main.c").write_text(main_c)
    subprocess.run(["make", "-s"], cwd=out, check=True, capture_output=True)
    return out / "firmware.elf"


def _qemu(board: str, elf: Path) -> subprocess.CompletedProcess:
    b = BOARDS[board]
    cmd = ["timeout", "60", b.tools.qemu, "-M", b.qemu.machine, *b.qemu.args, "-nographic", "-icount", "shift=0",
           "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


COUNT_LOOP = GLUE + r"""
#include <stdint.h>
#include "tt_ticks.h"
#if defined(__riscv)
#define TT_LOOP "1: addi %0, %0, -1\n\tbnez %0, 1b" : "+r"(k)
#else
#define TT_LOOP ".syntax unified\n\t1: subs %0, %0, #1\n\tbne 1b" : "+r"(k) :: "cc"  /* unified: ARMv6-M too */
#endif
int main(void)
{
    tt_ticks_start();
    for (uint32_t n = 250000u; n <= 4000000u; n *= 4u) {
        uint32_t k = n;
        const uint64_t t0 = tt_ticks();
        __asm volatile(TT_LOOP);  /* 2 instructions per iteration */
        const uint64_t t1 = tt_ticks();
        printf("loop %lu ticks %lu\n", (unsigned long)(2u * n), (unsigned long)(t1 - t0));
    }
    return 0;
}
"""


@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_systick_counts_instructions(board, tiny, tmp_path):
    """-icount shift=0: one instruction per ns; ticks x tick length = instructions, to within a tick or two (RISC-V:
    minstret, one instruction per tick)."""
    r = _qemu(board, _program(tiny[1], board, COUNT_LOOP, tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    num, den = BOARDS[board].qemu.tick_ns
    rows = [tuple(map(int, m)) for m in re.findall(r"loop (\d+) ticks (\d+)", r.stdout)]
    assert len(rows) == 3
    for insns, ticks in rows:
        assert abs(ticks * num / den - insns) <= 2 * num / den + 16, (insns, ticks)


@pytest.mark.parametrize("board", FPU_BOARDS)
def test_fpu_requantization_equals_the_integer_spec_on_every_core(board, tiny, tmp_path):
    """On the cores' FPUs (TT_FP32_FPU: VCVT, VMUL, VCVTR) clamp(tt_requantize_fp32_s8 + zero point) ==
    clamp(tt_requantize_fp32 + zero point), the exact integer spec, on 400,000 values: every shift (-32..-2),
    random significands, zero points and ranges, accumulators of all magnitudes and crowded around rounding ties
    (test_codegen_ops.py FP32_S8_MAIN, there on the host's integer paths); tt_requantize_fp32_s8x2 (two values per
    VMOV) == tt_requantize_fp32_s8 of each."""
    from test_codegen_ops import FP32_S8_MAIN

    glue = ('#include "tt_board.h"\nextern void initialise_monitor_handles(void);\n'
            'void tt_board_init(void) { initialise_monitor_handles(); }\n#define VALUES 400000\n')
    on_fpu = '#if !TT_FP32_FPU\n#error "tt_fixedpoint.h takes no FPU path on this core"\n#endif\n'
    r = _qemu(board, _program(tiny[1], board, glue + FP32_S8_MAIN + on_fpu, tmp_path))
    assert r.returncode == 0 and "differ 0" in r.stdout, r.stdout + r.stderr


POINTWISE_GRAD_MAIN = r"""
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "tt_board.h"
#include "tt_float.h"
#if !TT_FMA_TILES
#error "tt_float.h takes no assembly path on this core"
#endif
extern void initialise_monitor_handles(void);
void tt_board_init(void) { initialise_monitor_handles(); }
""" + XORSHIFT64 + r"""
KERNELS
""" + CHECK + r"""
static float arena[ARENA], gz[GZ], want[GX], scale[CO];
static int8_t w[WEIGHTS], w_sram[WEIGHTS];
static int32_t zp[CO];
int main(void)
{
    static const int16_t cases[][13] = {CASES};  /* P Ci Co og oz density Cs L4 P4 L3 P3 L2 P2 */
    int differ = 0;
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int16_t *c = cases[i];
        differ += check(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], arena, gz,
                        want, scale, w, w_sram, zp);
    }
    printf("cases %u differ %d\n", (unsigned)(sizeof cases / sizeof cases[0]), differ);
    return 0;
}
"""


@pytest.mark.parametrize("split", [False, True], ids=["plain", "split"])
@pytest.mark.parametrize("board", FPU_BOARDS)
def test_pointwise_input_gradient_tiles_on_every_core_equal_one_term_at_a_time(board, split, tiny, tmp_path):
    """The pointwise input gradient (kernels/conv2d_grad_input.c.j2) with runtime/tt_float.h's tiles in Arm assembly
    (TT_FMA_TILES: VLDM / VSTM of four sums per pixel, LDRSB + VMOV of two + VCVT, VFMA) == one term at a time, bit
    for bit, on the core's FPU: test_grad_kernels.py's shapes (input channels off the multiples of 4 too), layouts
    (apart and in place) and densities, every tile choice (test_grad_kernels.TILES)."""
    from test_grad_kernels import SHAPES, input_gradient_program, layouts

    cases, sizes = [], np.zeros(5, np.int64)
    for p, ci, co in SHAPES:
        for og, oz in layouts(p, ci, co).values():
            bounds = [b for n in (4, 3, 2) for b in pointwise_tile_range(og * 4, oz * 4, p, ci, co, n)]
            cases += [(p, ci, co, og, oz, density, co // 2, *bounds) for density in (30, 50, 100)]
            sizes = np.maximum(sizes, [max(og, oz) + p * max(ci, co), p * co, p * ci, co, co * ci])
    main_c = input_gradient_program(POINTWISE_GRAD_MAIN, split, False, host=False)  # the device kernels
    for key, n in zip(("ARENA", "GZ", "GX", "CO", "WEIGHTS"), sizes):
        main_c = main_c.replace(f"[{key}]", f"[{n}]")
    main_c = main_c.replace("{CASES}", "{" + ", ".join("{" + ", ".join(map(str, c)) + "}" for c in cases) + "}")
    r = _qemu(board, _program(tiny[1], board, main_c, tmp_path))
    assert r.returncode == 0 and f"cases {len(cases)} differ 0" in r.stdout, r.stdout + r.stderr


FLOOR_MAIN = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "tt_board.h"
#include "tt_float.h"
extern void initialise_monitor_handles(void);
void tt_board_init(void) { initialise_monitor_handles(); }

static int32_t floor_ref(float x) {  /* tt_float.h's portable tt_floor_clamped */
    if (!(x >= -TT_STEP_LIMIT)) {
        x = -TT_STEP_LIMIT;
    }
    if (x > TT_STEP_LIMIT) {
        x = TT_STEP_LIMIT;
    }
    int32_t r = (int32_t)x;
    if ((float)r > x) {
        r -= 1;
    }
    return r;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int main(void) {
    static const uint32_t special[] = {0x7FC00000u, 0xFFC00000u, 0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,
                                       0x00000001u, 0x80000001u, 0x4E800000u, 0xCE800000u, 0x4E800001u, 0xCE800001u,
                                       0x4E7FFFFFu, 0xCE7FFFFFu, 0x4B000000u, 0xCB000000u, 0x3F000000u, 0xBF000000u,
                                       0x3F7FFFFFu, 0xBF7FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu};
    int differ = 0;
    for (unsigned k = 0; k < sizeof special / sizeof special[0]; k++) {
        differ += tt_floor_clamped(from_bits(special[k])) != floor_ref(from_bits(special[k]));
    }
    uint32_t s = 2463534242u;
    for (int k = 0; k < 300000; k++) {  /* every exponent, and steps of -4..4 LSB plus a draw, as the updates land */
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        const uint32_t quiet = (s & 0x7F800000u) == 0x7F800000u && (s & 0x007FFFFFu) ? 0x00400000u : 0u;
        const float x = k & 1 ? from_bits(s | quiet)  /* its argument is a sum: a NaN is quiet */
                              : (float)(int32_t)(s % 9) - 4.0f + (float)(s >> 8) * (1.0f / 16777216.0f);
        differ += tt_floor_clamped(x) != floor_ref(x);
    }
    printf("differ %d\n", differ);
    return 0;
}
"""


@pytest.mark.parametrize("board", FPU_BOARDS)
def test_sgd_step_floor_equals_the_portable_c_on_every_core(board, tiny, tmp_path):
    """tt_float.h tt_floor_clamped as the training C builds it for the core (TT_FPV5 on Cortex-M7 / M55: VMAXNM,
    VMINNM, VCVTM) == its portable C, on quiet NaNs (its argument is always a sum), infinities, the clamp's edges,
    zeros, subnormals and 300,000 random floats and steps."""
    from tinytrain.codegen.context import fpv5

    main_c = f"#define TT_FPV5 {int(fpv5(BOARDS[board].core))}\n" + FLOOR_MAIN
    r = _qemu(board, _program(tiny[1], board, main_c, tmp_path))
    assert r.returncode == 0 and "differ 0" in r.stdout, r.stdout + r.stderr


def test_a_fault_exits_qemu_with_its_status(tiny, tmp_path):
    fault = ('#include <stdio.h>\nextern void initialise_monitor_handles(void);\n'
             'void tt_board_init(void) { initialise_monitor_handles(); }\n'
             'int main(void) { printf("before\\n"); __asm volatile("udf #0"); return 0; }\n')
    r = _qemu("qemu-m7", _program(tiny[1], "qemu-m7", fault, tmp_path))
    assert r.stdout.strip() == "before" and r.returncode == 64 + 3  # HardFault (UsageFault escalates)


@pytest.mark.parametrize("board", ["qemu-riscv32", "qemu-m0plus"])
def test_a_fault_exits_qemu_with_its_status_on_the_new_cores(board, tiny, tmp_path):
    """RISC-V: every trap to tt_trap, exit 64 + mcause (2: illegal instruction); M0+ code: HardFault (64 + 3)."""
    bad = '"unimp"' if BOARDS[board].toolchain == "riscv" else '"udf #0"'
    fault = GLUE + f'int main(void) {{ printf("before\\n"); __asm volatile({bad}); return 0; }}\n'
    r = _qemu(board, _program(tiny[1], board, fault, tmp_path))
    assert r.stdout.strip() == "before" and r.returncode == 64 + (2 if "riscv" in board else 3), r.stdout + r.stderr


@pytest.mark.parametrize("board", NEW_BOARDS + ["qemu-m55"])
def test_a_256k_ram_region_links_when_full_and_refuses_one_byte_more(board, tiny, tmp_path):
    """The new cores' linker scripts, and qemu-m55's (code and weights in the AN547's SRAM at 0x21000000, the vector
    table in its ITCM at 0, data in the DTCM): RAM = 256 KB; a heap that fills it to the last byte links, one byte
    more fails with the linker's overflow message (or tinytrain's ASSERT)."""
    tg = tiny[0]
    engine_qemu.emit_compile_dir(tg, tmp_path / "compile", 256 * KB, 256 * KB, target=BOARDS[board].core)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    ld_path = fw.project / "tinytrain.ld"
    ld = ld_path.read_text()
    assert re.search(rf"RAM\s+\(rwx\) : ORIGIN = 0x{BOARDS[board].ram_origin:08X}, LENGTH = 262144\b", ld)
    nm = subprocess.run([BOARDS[board].tools.prefix + "nm", str(fw.elf)], capture_output=True, text=True, check=True)
    if BOARDS[board].vectors_origin is not None:
        symbols = {m.group(2): int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+) \w (\w+)$", nm.stdout, re.M)}
        assert symbols["tt_vectors"] == BOARDS[board].vectors_origin
        assert BOARDS[board].flash_origin <= symbols["Reset_Handler"] < BOARDS[board].flash_origin + 256 * KB
    sheap = int(re.search(r"^([0-9a-f]+) \w _sheap$", nm.stdout, re.M).group(1), 16)
    room = BOARDS[board].ram_origin + 256 * KB - sheap
    for heap, links in ((room, True), (room + 1, False)):
        ld_path.write_text(re.sub(r"^_tt_heap_min_bytes = \d+;", f"_tt_heap_min_bytes = {heap};", ld, flags=re.M))
        r = subprocess.run(["make", "-s", "-B", "firmware.elf"], cwd=fw.project, capture_output=True, text=True)
        assert (r.returncode == 0) == links, r.stderr
        if not links:
            assert re.search(r"region `RAM' overflowed by 1 byte|exceed the SRAM budget", r.stderr), r.stderr


def test_a_malformed_sample_file_is_reported(tiny, tmp_path):
    tg, compile_dir, x, y = tiny
    fw = engine_qemu.build(compile_dir, "qemu-m7", tmp_path / "project")
    work = tmp_path / "run"
    work.mkdir()
    (work / "tt_train.bin").write_bytes(samples.encode(x[:2, :1], y[:2]))  # images of the wrong size
    r = subprocess.run(
        ["timeout", "60", "qemu-system-arm", "-M", "mps2-an500", "-nographic", "-icount", "shift=0",
         "-semihosting-config", "enable=on,target=native", "-kernel", str(fw.elf.resolve())],
        cwd=work, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "tt: error tt_train.bin: sample size is not this model's TT_INPUT_BYTES" in r.stdout


def test_a_lowered_ram_region_fails_with_the_linkers_overflow_message(tiny, tmp_path):
    project = tmp_path / "project"
    fw = engine_qemu.build(tiny[1], "qemu-m7", project)  # links at the budget
    ld = project / "tinytrain.ld"
    lowered = re.sub(r"(RAM\s+\(rwx\) : ORIGIN = 0x[0-9A-F]+, LENGTH = )\d+", rf"\g<1>{fw.ram_bytes - 1024}",
                     ld.read_text())
    assert lowered != ld.read_text()
    ld.write_text(lowered)
    r = subprocess.run(["make", "-s", "-B"], cwd=project, capture_output=True, text=True)
    assert r.returncode != 0
    assert re.search(r"region `RAM' overflowed by \d+ bytes", r.stderr), r.stderr


def test_a_plan_that_does_not_fit_is_refused_by_compile_before_any_linker(tmp_path, capsys):
    model = shared_file("models/vww_96_int8.tflite")
    out = tmp_path / "out"
    # the full update (518360 B); last-k:2 fits since each weight gradient is fused with its update (115496 B)
    assert main(["compile", str(model), "--sram", "256k", "--update", "full", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not fit" in err[0] and "over the 256.0 KB budget" in err[0]
    assert not out.exists()


def _vww(n):
    ds = load_dataset(shared_file("data/vww96/vww96_dev800.npz"))
    return ds.x[:n], ds.y[:n]


def test_vww_mobilenet_v1_20_steps_on_qemu_m7_equal_the_host_engine(tmp_path, capsys):
    """The CLI end to end: `train --engine qemu` and `--engine c` write byte-identical state files."""
    model = str(shared_file("models/vww_96_int8.tflite"))
    x, y = _vww(30)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    (tmp_path / "plan.json").write_text(json.dumps(VWW_PLAN))
    out = {}
    for engine in ("qemu", "c"):
        args = ["train", model, "--data", str(tmp_path / "d.npz"), "--plan", str(tmp_path / "plan.json"),
                "--steps", "20", "--engine", engine, "--state-out", str(tmp_path / f"{engine}.npz"), "--json"]
        assert main(args) == 0
        out[engine] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (tmp_path / "qemu.npz").read_bytes() == (tmp_path / "c.npz").read_bytes()
    assert out["qemu"]["final_loss"] == out["c"]["final_loss"]
    assert out["qemu"]["train_accuracy"] == out["c"]["train_accuracy"]
    assert out["qemu"]["insns_per_step"] > 0


def _firmware_run(graph, plan_json: dict, tmp_path, x, y, board="qemu-m7", steps=20):
    tg = build_training_graph(graph, _plan(plan_json, tmp_path))
    b = BOARDS[board]
    report = engine_qemu.emit_compile_dir(tg, tmp_path / "compile", 256 * KB, 1024 * KB, target=b.core)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    ld = (fw.project / "tinytrain.ld").read_text()
    assert re.search(rf"RAM\s+\(rwx\) : ORIGIN = 0x{b.ram_origin:08X}, LENGTH = 262144\b", ld)
    assert fw.ram_bytes <= 256 * KB and fw.flash_bytes <= 1024 * KB and report["fits"]
    r = engine_qemu.run(fw, board, train=(x[:steps], y[:steps]), test=(x[steps:], y[steps:]))
    host = CTrainer(tg)
    return r, host


def _plan(obj, tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(obj))
    return load_plan(tmp_path / "plan.json")


def test_vww_logits_and_state_equal_the_host_engine(tmp_path):
    g = load_model(shared_file("models/vww_96_int8.tflite"))
    x, y = _vww(24)
    x = model_inputs(g, x)
    r, host = _firmware_run(g, VWW_PLAN, tmp_path, x, y)
    assert _same_bits(r.losses, host.train(x[:20], y[:20]))
    assert r.state == host.state_bytes() and np.array_equal(r.logits, host.predict(x[20:]))


@pytest.mark.parametrize("plan", [
    MBV2_PLAN,
    json.loads((ROOT / "models/plans/mbv2-w0.35-sparse.json").read_text()),
], ids=["bias+classifier", "shipped-sparse-plan"])
def test_mbv2_20_steps_on_qemu_m7_equal_the_host_engine(plan, tmp_path):
    g = load_model(ROOT / "models/mbv2-w0.35.onnx")
    x, y = _vww(24)
    x = model_inputs(g, x)
    r, host = _firmware_run(g, plan, tmp_path, x, y)
    assert _same_bits(r.losses, host.train(x[:20], y[:20]))
    assert r.state == host.state_bytes() and np.array_equal(r.logits, host.predict(x[20:]))


@pytest.mark.parametrize("model", ["proxyless-w0.3", "mcunet-5fps"])
def test_zoo_shipped_plans_on_qemu_m7_equal_the_host_engine(model, tmp_path):
    """The other zoo models' training steps (frozen forward streamed, clamp masks in bits): 20 steps on qemu-m7
    give the host C's losses, state and logits bit for bit."""
    g = load_model(ROOT / "models" / f"{model}.onnx")
    x, y = _vww(24)
    x = model_inputs(g, x)
    plan = json.loads((ROOT / "models" / "plans" / f"{model}-sparse.json").read_text())
    r, host = _firmware_run(g, plan, tmp_path, x, y)
    assert host.memory.stream is not None  # the step streams its frozen prefix
    assert _same_bits(r.losses, host.train(x[:20], y[:20]))
    assert r.state == host.state_bytes() and np.array_equal(r.logits, host.predict(x[20:]))


# One shipped plan per new core, few steps: without an FPU a step is software float, billions of instructions
# (proxyless-w0.3 on M0+ code: 4.5 G, two minutes of QEMU). benchmarks/cores.py runs the shipped plans on every core
# with the same comparison (benchmarks/results/cores.md).
NEW_CORE_PLANS = [("qemu-m33", "proxyless-w0.3-sparse", 4), ("qemu-m3", "mbv2-w0.35-sparse", 1),
                  ("qemu-m0plus", "proxyless-w0.3-sparse", 1), ("qemu-riscv32", "mbv2-w0.35-sparse", 1),
                  ("qemu-riscv32f", "proxyless-w0.3-sparse", 2)]


@pytest.mark.parametrize("board, plan, steps", NEW_CORE_PLANS)
def test_a_shipped_plan_on_each_new_core_equals_the_host_engine(board, plan, steps, tmp_path):
    """A zoo model's shipped plan on a new core (its own compile: DSP instructions on the M33, their C models and soft
    float on M3 / M0+ / rv32imac, the F extension on rv32imafc): its steps and 2 inferences give the host C's losses,
    state and logits bit for bit, in a 256 KB RAM region."""
    g = load_model(ROOT / "models" / f"{plan.rsplit('-', 1)[0]}.onnx")
    x, y = _vww(steps + 2)
    x = model_inputs(g, x)
    r, host = _firmware_run(g, json.loads((ROOT / "models" / "plans" / f"{plan}.json").read_text()), tmp_path, x, y,
                            board=board, steps=steps)
    assert _same_bits(r.losses, host.train(x[:steps], y[:steps]))
    assert r.state == host.state_bytes() and np.array_equal(r.logits, host.predict(x[steps:]))


@pytest.mark.parametrize("board", DSP_BOARDS)
def test_dsp_forward_kernels_on_every_core_equal_the_simulator(board, tmp_path):
    """The forward kernels' Arm DSP paths on the real instructions (SXTAB16 / SMLAD / SMLABB, SSAT / BFI / SSUB8 +
    SEL, the 32-bit requantization fast paths): depthwise windows inside and clipped at the border, channel counts
    off the blocks of 4, widened pointwise (two pixels at once, tt_dot2x2w_s8; tt_dot2x2p_s8 with packed rows) and
    im2col inputs, every rounding (the float32 one on the FPU, two values per VMOV), clamped and full-range
    outputs, == the simulator."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from codegen_graphs import GraphBuilder
    from tinytrain import simulator

    b = GraphBuilder(5)
    h = b.input((1, 9, 7, 19))
    h = b.conv(h, 19, 3, padding=(1, 1, 1, 1), depthwise=True, weight_zp=True, single="fp32", act=(-100, 110))
    h = b.conv(h, 19, (5, 3), (2, 1), (2, 1, 2, 1), depthwise=True, single=True)
    h = b.conv(h, 13, 1, weight_zp=True, single="fp32")  # 35 pixels, 13 channels: odd in both tiles' sizes
    h = b.conv(h, 8, 1, single=True)
    h = b.conv(h, 13, 1, weight_zp=True, single="fp32")  # 8 input channels: rows packed as halfwords
    h = b.conv(h, 7, 3, (2, 2), (1, 1, 1, 1), single=False, act=(-128, 90))
    g = b.build(b.conv(h, 6, 1, single="fp32"))
    engine_qemu.emit_compile_dir(g, tmp_path / "compile", 96 * KB, 256 * KB, target=BOARDS[board].core)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    x = b.inputs_batch(g, 3)
    r = engine_qemu.run(fw, board, test=(x, np.zeros(len(x), np.int32)))
    want = simulator.forward(g, {g.inputs[0]: x})[g.outputs[0]]
    assert np.array_equal(r.logits, want.reshape(len(x), -1))


@pytest.mark.parametrize("board", DSP_BOARDS)
@pytest.mark.parametrize("hw, packed", [((7, 5), True), ((5, 5), False)])
def test_pointwise_channel_pair_loop_on_every_core_equals_the_simulator(board, hw, packed, tmp_path):
    """Pointwise kernels with a constant channel count and packed rows whose loop over output channel pairs is one
    asm block (tt_simd.h tt_pw2x2p_fp32_sat_s8, with tt_widen2_s8's): two tiles per iteration (up to 48 channels)
    and the one-tile loop after them (a channel count of 4k + 2) or alone (52 and 100 channels), the USAT store
    form (out_zp = -128) and the SSAT one in each, 35 pixels (the last paired with itself), == the simulator; with
    25 pixels (too few for packed rows) the int8 rows' asm block (tt_dot2x2w_s8) in each 2 x 2 tile; and 160
    channels, one pixel at a time (the asm loops over four rows: packed, tt_dot4wp_s8, or int8, tt_dot4w_s8)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from codegen_graphs import GraphBuilder
    from tinytrain import simulator
    from tinytrain.ir import QuantParams

    b = GraphBuilder(7)
    h = b.input((1, *hw, 8))
    for cout, out_zp in [(16, -128), (40, 9), (100, -128), (52, -128), (8, -5), (6, -128), (12, -128), (8, 3),
                         (10, 3), (160, -128), (12, 3)]:
        h = b.conv(h, cout, 1, single="fp32", quant=QuantParams.per_tensor(0.05, out_zp))
    g = b.build(h)
    engine_qemu.emit_compile_dir(g, tmp_path / "compile", 96 * KB, 256 * KB, target=BOARDS[board].core,
                                 stream=False)  # whole tensors: every layer's rows packed
    src = (tmp_path / "compile" / "tinytrain_model.c").read_text()
    assert src.count("tt_pw2x2p_fp32_sat_s8(xw2") == (6 if packed else 0)  # ci8, 16, 40, 100, 52, 12 (not 6)
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    x = b.inputs_batch(g, 3)
    r = engine_qemu.run(fw, board, test=(x, np.zeros(len(x), np.int32)))
    want = simulator.forward(g, {g.inputs[0]: x})[g.outputs[0]]
    assert np.array_equal(r.logits, want.reshape(len(x), -1))


@pytest.mark.parametrize("board", DSP_BOARDS)
def test_asm_inner_product_loops_on_every_core_equal_the_simulator(board, tmp_path):
    """The inner products written as asm loops, on the real instructions: a 3x3 stride-2 window of 3 channels
    gathered a row at a time (the stem's), 144 input channels against four packed rows (tt_dot4wp_s8: LDM), 272
    raw input channels with the zero point in the sums' start (tt_dot2x2_s8, conv2d.c.j2 "zb": the second pixel and
    row at immediate offsets; 35 pixels, the last paired with itself in C), == the simulator."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from codegen_graphs import GraphBuilder
    from tinytrain import simulator

    b = GraphBuilder(11)
    h = b.input((1, 13, 9, 3))
    h = b.conv(h, 16, 3, (2, 2), (1, 1, 1, 1), single="fp32")  # 7 x 5 = 35 pixels
    h = b.conv(h, 144, 1, single="fp32", act=(-128, 100))
    h = b.conv(h, 272, 1, single="fp32")
    g = b.build(b.conv(h, 10, 1, single="fp32"))
    engine_qemu.emit_compile_dir(g, tmp_path / "compile", 96 * KB, 256 * KB, target=BOARDS[board].core,
                                 stream=False)
    src = (tmp_path / "compile" / "tinytrain_model.c").read_text()
    assert "_k28_ci3_packed(" in src and "tt_conv_1x1_xw_s8_f32_sat_packed(" in src and "_ci272_zb(" in src
    fw = engine_qemu.build(tmp_path / "compile", board, tmp_path / "project")
    x = b.inputs_batch(g, 3)
    r = engine_qemu.run(fw, board, test=(x, np.zeros(len(x), np.int32)))
    want = simulator.forward(g, {g.inputs[0]: x})[g.outputs[0]]
    assert np.array_equal(r.logits, want.reshape(len(x), -1))


def test_inference_firmware_from_the_cli_gives_the_host_logits_on_m55(tmp_path, capsys):
    """compile (no plan: the inference project) -> `tinytrain firmware` -> QEMU: the logits of the host C."""
    from tinytrain.engines import host_c as engine_c

    model = shared_file("models/vww_96_int8.tflite")
    assert main(["compile", str(model), "--sram", "256k", "-o", str(tmp_path / "build")]) == 0
    assert main(["firmware", str(tmp_path / "build"), "--board", "qemu-m55", "-o", str(tmp_path / "fw")]) == 0
    assert "qemu-m55" in capsys.readouterr().out
    assert b"#define TT_HAS_TRAINING 0" in (tmp_path / "fw" / "src" / "tt_board.h").read_bytes()
    subprocess.run(["make", "-s"], cwd=tmp_path / "fw", check=True, capture_output=True)
    g = load_model(model)
    x, y = _vww(6)
    x = model_inputs(g, x)
    r = engine_qemu.run(tmp_path / "fw" / "firmware.elf", "qemu-m55", test=(x, y))
    assert np.array_equal(r.logits, engine_c.predict(g, x).reshape(len(x), -1))
    assert r.state is None and len(r.losses) == 0 and r.predict_insns.min() > 0


# int8 weights only ("remainder_bits": 0): with the default 4-bit remainders this plan no longer fits 256 KB.
FULL_VWW_PLAN = {"version": 1, "bias_last_k": 2, "channels": "first", "lr": 0.001, "remainder_bits": 0, "weights": [
    {"conv": c, "ratio": r} for c, r in ((8, 0.25), (9, 0.25), (10, 1.0), (11, 1.0), (13, 0.125), (14, 1.0),
                                         (15, 0.25), (16, 0.125), (17, 1.0), (18, 0.25), (19, 1.0), (20, 0.25),
                                         (21, 1.0), (22, 0.125), (23, 0.25), (24, 0.125), (25, 0.125), (27, 1.0))]}


@pytest.mark.slow
def test_a_plan_that_fills_the_budget_still_reads_its_samples(tmp_path, capsys, monkeypatch):
    """A plan an earlier VWW search chose without a noise floor (18 layers) leaves ~3 KB of the 256 KB for the heap:
    the harness's stdio must not take buffers from it (regression: 'cannot seek to the labels' when both sample
    streams were buffered)."""
    monkeypatch.setenv("TINYTRAIN_CACHE", str(tmp_path / "cache"))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(FULL_VWW_PLAN))
    model = shared_file("models/mobilenet_v1_0.25_128_quant.tflite")
    assert main(["train", str(model), "--data", "lfw", "--new-head", "2", "--plan", str(plan), "--steps", "2",
                 "--engine", "qemu", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 2
