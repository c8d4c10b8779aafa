"""Where a QEMU board's instructions go, per op family (common/qemu_instructions.py, benchmarks/speed.py --only qemu).

A copy of a compile's C whose tt_forward / tt_backward read the SysTick counter (firmware/c/tt_ticks.h, under QEMU
-icount shift=0 a tick is a fixed number of instructions) around every kernel call and add the ticks to that kernel's
total, training steps and inferences apart (tt_forward's ``train``); the totals are printed at exit. Each kernel
counts in one family (FAMILIES, by its name). What the step spends outside the kernels (the harness's row reads,
the guard, the calls' own bookkeeping) is the step's count less the kernels'.

Requantization runs inside the int8 kernels, so it is measured by difference: a second copy replaces the int8-output
requantization helpers (tt_fixedpoint.h ``*_s8``, and ``tt_requantize_fp32_s8x2`` of two outputs) by one shift per
output, and the inference's instructions drop by what they cost with their table loads, less the shift's one
instruction per output. Its outputs are garbage; only its instruction count is read (the int8 kernels' work does
not depend on the values).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from tinytrain.engines import qemu as engine_qemu
from tinytrain.firmware import BOARDS

FAMILIES = (  # (key, what, pattern on the kernel's name): the first match
    ("update", "weight gradients fused with their SGD update, bias SGD updates", r"sgd_update"),
    ("masks", "1-bit clamp masks: packed in the forward, applied in the backward", r"clamp_mask"),
    ("backward_fp32", "fp32 input and bias gradients, loss", r"_grad|softmax_xent"),
    ("pointwise", "int8 pointwise convolutions", r"^tt_conv_1x1_"),
    ("depthwise", "int8 depthwise convolutions", r"^tt_(depthwise_conv|conv_depthwise)_"),
    ("conv", "int8 regular convolutions (the stem)", r"^tt_conv_\d"),
    ("other_int8", "int8 add, mean, fully connected", r"."),
)
REQUANT_S8 = ("tt_requantize_s8", "tt_requantize_single_s8", "tt_requantize_fp32_s8", "tt_requantize_fp32_wide_s8")
_CALL = re.compile(r"^(\s*)(tt_\w+)\((.*)\);$")
_PROFILE = re.compile(r"^tt: profile (\w+) (\d+) (\d+)$", re.M)


def family(kernel: str) -> str:
    return next(key for key, _, pattern in FAMILIES if re.search(pattern, kernel))


def instrument(source: str) -> tuple[str, list[str]]:
    """The model C with each kernel call of tt_forward / tt_backward timed, and the kernels' names in id order."""
    names: list[str] = []
    out, train = [], None
    for line in source.splitlines():
        if line.startswith("static void tt_forward(") or line.startswith("static int tt_backward("):
            train = "train" if "tt_forward" in line else "1"
        elif line == "}":
            train = None
        m = _CALL.match(line) if train else None
        if m:
            ind, name, args = m.groups()
            if name not in names:
                names.append(name)
            line = (f"{ind}{{ const uint64_t tt_t0 = tt_ticks(); {name}({args}); "
                    f"tt_profile_add({names.index(name)}, {train}, tt_ticks() - tt_t0); }}")
        out.append(line)
    head = '#include "tt_ticks.h"\nvoid tt_profile_add(int kernel, int train, uint64_t ticks);\n'
    return head + "\n".join(out) + "\n", names


def stub_requantization(source: str) -> str:
    """The model C with every int8-output requantization helper, after its definition, replaced by a shift."""
    stubs = "".join(f"#define {h}(acc, multiplier, shift) ((void)(multiplier), (void)(shift), (acc) >> 8)\n" for h in REQUANT_S8)
    stubs += ("#define tt_requantize_fp32_s8x2(acc0, m0, s0, acc1, m1, s1, r) "
              "((void)(m0), (void)(s0), (void)(m1), (void)(s1), (r)[0] = (acc0) >> 8, (r)[1] = (acc1) >> 8)\n")
    return source.replace('#include "tt_float.h"\n', '#include "tt_float.h"\n' + stubs, 1)


def profile_c(names: list[str]) -> str:
    """tt_profile.c: the per-kernel tick totals, printed at exit."""
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"""#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const tt_profile_names[{len(names)}] = {{{quoted}}};
static uint64_t tt_profile_ticks[2][{len(names)}];  /* [train][kernel] */

static void tt_profile_print(void)
{{
    for (int k = 0; k < {len(names)}; k++) {{
        printf("tt: profile %s %lu %lu\\n", tt_profile_names[k], (unsigned long)tt_profile_ticks[1][k],
               (unsigned long)tt_profile_ticks[0][k]);
    }}
}}

void tt_profile_add(int kernel, int train, uint64_t ticks);
void tt_profile_add(int kernel, int train, uint64_t ticks)
{{
    static int registered;
    if (!registered) {{
        registered = atexit(tt_profile_print) == 0;
    }}
    tt_profile_ticks[train != 0][kernel] += ticks;
}}
"""


def _run_variant(compile_dir: Path, work: Path, name: str, board: str, edit, extra: dict[str, str], train, test):
    d = work / f"{name}_compile"
    shutil.copytree(compile_dir, d)
    model = d / "tinytrain_model.c"
    model.write_text(edit(model.read_text()))
    for file, text in extra.items():
        (d / file).write_text(text)
    return engine_qemu.run(engine_qemu.build(d, board, work / f"{name}_project"), board, train=train, test=test)


def profile(compile_dir: Path, board: str, work: Path, train, test, step_insns: float, inference_insns: float) -> dict:
    """Instructions per training step and per inference of each family and per step of each kernel (``step_insns``:
    the step's count, of the uninstrumented firmware, as ``inference_insns``), and the requantization's per
    inference, on ``board``."""
    num, den = BOARDS[board].qemu.tick_ns
    timed, names = instrument((compile_dir / "tinytrain_model.c").read_text())
    r = _run_variant(compile_dir, work, "profile", board, lambda _: timed, {"tt_profile.c": profile_c(names)},
                     train, test)
    steps, inferences = len(train[1]), len(test[1])
    per_step = dict.fromkeys([k for k, _, _ in FAMILIES], 0.0)
    per_inference = dict.fromkeys(per_step, 0.0)
    kernels = {}
    for name, t_train, t_predict in _PROFILE.findall(r.stdout):
        kernels[name] = int(int(t_train) * num / den / steps)
        per_step[family(name)] += int(t_train) * num / den / steps
        per_inference[family(name)] += int(t_predict) * num / den / inferences
    per_step["outside_kernels"] = step_insns - sum(per_step.values())
    stub = _run_variant(compile_dir, work, "stub", board, stub_requantization, {}, train, test)
    return {"per_step": {k: int(v) for k, v in per_step.items()},
            "per_inference": {k: int(v) for k, v in per_inference.items()},
            "requantization_per_inference": int(inference_insns - np.mean(stub.predict_insns)),
            "per_step_by_kernel": dict(sorted(kernels.items(), key=lambda kv: -kv[1]))}
