"""The lr schedule's factor (lr_schedule.py, the spec) against the C runtime's tt_lr_factor (tt_float.h):
bit for bit at every step of several schedules, built with the host compiler as the emitted C is; the same for the
integer step's Q15 factor (factor_q15, tt_lr_factor_q15), which stays within 2^-14 of the float one."""

import subprocess

import numpy as np
import pytest

from tinytrain.csources import codegen_runtime
from tinytrain.errors import PlanError
from tinytrain.lr_schedule import Schedule

SCHEDULES = [Schedule(0, 1), Schedule(0, 97), Schedule(5, 40, 0.25), Schedule(700, 7000), Schedule(1, 3, 1.0)]
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tt_float.h"
int main(int argc, char **argv) {
    if (argc != 5) {
        return 2;
    }
    const uint32_t warmup = (uint32_t)strtoul(argv[1], 0, 10), steps = (uint32_t)strtoul(argv[2], 0, 10);
    const float lr_floor = strtof(argv[3], 0);
    const int32_t floor_q15 = (int32_t)strtol(argv[4], 0, 10);
    for (uint32_t s = 0; s < steps + 3; s++) {
        const float f = tt_lr_factor(s, warmup, steps, lr_floor);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        printf("%08x %ld\n", (unsigned)bits, (long)tt_lr_factor_q15(s, warmup, steps, floor_q15));
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def factor_program(tmp_path_factory):
    d = tmp_path_factory.mktemp("schedule")
    (d / "main.c").write_text(PROGRAM)
    (d / "tt_float.h").write_text(codegen_runtime().joinpath("tt_float.h").read_text())
    subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-I",
                    str(codegen_runtime()), "-o", "factor", "main.c"], cwd=d, check=True)  # -I: tt_float.h's parts
    return d / "factor"


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_c_factor_is_the_spec_bit_for_bit(factor_program, schedule):
    out = subprocess.run([str(factor_program), str(schedule.warmup), str(schedule.steps), repr(schedule.floor),
                          str(schedule.floor_q15)], check=True, capture_output=True, text=True).stdout.split()
    want = [f"{int(np.float32(schedule.factor(s)).view(np.uint32)):08x}" for s in range(schedule.steps + 3)]
    assert out[0::2] == want
    assert out[1::2] == [str(schedule.factor_q15(s)) for s in range(schedule.steps + 3)]


@pytest.mark.parametrize("schedule", SCHEDULES + [Schedule(3, (1 << 24) - 1, 0.3)], ids=str)
def test_the_integer_factor_is_the_float_one_in_q15(schedule):
    steps = sorted({*range(min(schedule.steps, 2000) + 3), schedule.steps - 1, max(schedule.steps - 2, 0)})
    q = np.array([schedule.factor_q15(s) for s in steps])
    f = np.array([schedule.factor(s) for s in steps], np.float64)
    assert np.all((q >= 0) & (q <= 1 << 15)) and np.abs(q / (1 << 15) - f).max() <= 2.0 ** -14


def test_shape_warm_up_cosine_floor():
    s = Schedule(10, 110, 0.1)
    f = np.array([s.factor(k) for k in range(120)], np.float64)
    np.testing.assert_allclose(f[:10], np.arange(1, 11) / 10)  # linear warm-up to 1
    t = (np.arange(10, 110) - 10) / 100
    np.testing.assert_allclose(f[10:110], 0.1 + 0.9 * (1 + np.cos(np.pi * t)) / 2, atol=5e-6)  # cosine to the floor
    assert np.all(np.diff(f[10:110]) <= 0) and np.all(f[110:] == np.float32(0.1))


def test_over_spans_a_run_and_bad_schedules_are_refused():
    assert Schedule.over(1000, 0.05) == Schedule(50, 1000)
    with pytest.raises(PlanError, match="warm-up fraction"):
        Schedule.over(1000, 1.0)
    with pytest.raises(PlanError, match="warmup"):
        Schedule(5, 5)
