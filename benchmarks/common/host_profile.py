"""Where the host C training step's time goes, per kernel and per op family (one zoo model, shipped sparse plan).

    python benchmarks/speed.py profile-host [--model mbv2-w0.35] [--steps 200] [--repeats 3] [--top 25]

One of benchmarks/speed.py's host models (common/step_time.py) (default models/mbv2-w0.35.onnx, models/plans/mbv2-w0.35-sparse.json), on
the same images. A copy of the step's emitted C (``engine_c.CTrainer``'s files, the same flags:
``engine_c.TRAIN_CFLAGS``) whose tt_forward / tt_backward read ``clock_gettime(CLOCK_MONOTONIC)`` around every kernel
call, as benchmarks/common/qemu_profile.py reads SysTick on QEMU (its ``instrument`` and ``FAMILIES``). Each kernel's time
per step is the best of ``--repeats`` runs of ``--steps`` steps (the machine may be shared); "outside kernels" is the
step's wall time less the kernels' (the streamed region's row bookkeeping, the calls themselves, the guard). The clock
reads add roughly 20 ns per call, so the total is a little above an uninstrumented step. Caveat: the timed calls
change what gcc inlines and clones per call site (an uninstrumented build specializes a kernel to each call's
constant channel counts), so a kernel's time here can differ from its share of the real step by 2x or more; `perf
record` on a process running the step (the built library's symbols: kernel.constprop.N) gives that share. Prints a
table (host only; it writes nothing).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import numpy as np

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
from common.qemu_profile import FAMILIES, family, instrument  # noqa: E402
from common.step_time import fashion_images  # noqa: E402

TICKS_H = """#ifndef TT_TICKS_H
#define TT_TICKS_H
#define _POSIX_C_SOURCE 199309L  /* clock_gettime under -std=c99 */
#include <stdint.h>
#include <time.h>
static inline uint64_t tt_ticks(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
#endif
"""


def profile_c(n: int) -> str:
    """The per-kernel nanosecond totals ([train][kernel]), read and cleared by tt_profile_take."""
    return f"""
static uint64_t tt_profile_ns[2][{n}];

void tt_profile_add(int kernel, int train, uint64_t ticks)
{{
    tt_profile_ns[train != 0][kernel] += ticks;
}}

void tt_profile_take(uint64_t *out);
void tt_profile_take(uint64_t *out)
{{
    memcpy(out, tt_profile_ns, sizeof tt_profile_ns);
    memset(tt_profile_ns, 0, sizeof tt_profile_ns);
}}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mbv2-w0.35", help="a zoo model with a shipped sparse plan")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)

    from common.qemu_instructions import shipped_plans
    from tinytrain.codegen import MODEL_SOURCE
    from tinytrain.data import model_inputs
    from tinytrain.engines.host_c import TRAIN_CFLAGS, CTrainer, _private_copy, compile_files
    from tinytrain.frontends import load_model
    from tinytrain.training.train_graph import build_training_graph

    targets = {t.name: t for t in shipped_plans()}
    if args.model not in targets:
        ap.error(f"--model {args.model}: not a zoo model with a shipped plan; one of {', '.join(targets)}")
    target = targets[args.model]
    graph = load_model(target.path)
    tg = build_training_graph(graph, target.plan)
    trainer = CTrainer(tg)
    files = dict(trainer.files)
    timed, names = instrument(files[MODEL_SOURCE])
    files[MODEL_SOURCE] = timed + profile_c(len(names))
    files["tt_ticks.h"] = TICKS_H
    lib = _private_copy(compile_files(files, cflags=TRAIN_CFLAGS))
    lib.tt_init.argtypes, lib.tt_init.restype = [], None
    lib.tt_train_step.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.tt_train_step.restype = ctypes.c_int
    lib.tt_profile_take.argtypes, lib.tt_profile_take.restype = [ctypes.c_void_p], None
    lib.tt_init()

    images, y = fashion_images(graph, 64)
    x = model_inputs(graph, images)
    n = len(x)
    loss = ctypes.c_float()
    ns = np.zeros((2, len(names)), np.uint64)

    def run(k: int) -> float:
        t0 = time.perf_counter()
        for j in range(k):
            lib.tt_train_step(x[j % n].ctypes.data, int(y[j % n]), ctypes.addressof(loss))
        return (time.perf_counter() - t0) / k

    run(10)
    lib.tt_profile_take(ns.ctypes.data)
    best_step, best = float("inf"), None
    for _ in range(args.repeats):
        step = run(args.steps)
        lib.tt_profile_take(ns.ctypes.data)
        per = ns[1].astype(np.float64) / args.steps
        best_step = min(best_step, step)
        best = per if best is None else np.minimum(best, per)

    us = {name: best[i] / 1e3 for i, name in enumerate(names)}
    fams = dict.fromkeys([k for k, _, _ in FAMILIES], 0.0)
    for name, t in us.items():
        fams[family(name)] += t
    total = best_step * 1e6
    print(f"host step (instrumented, wall, best of {args.repeats} x {args.steps}): {total:.0f} us")
    print(f"{'family':<16}{'us/step':>10}{'%':>7}")
    for k, t in sorted(fams.items(), key=lambda kv: -kv[1]):
        print(f"{k:<16}{t:>10.1f}{100 * t / total:>7.1f}")
    out = total - sum(fams.values())
    print(f"{'outside_kernels':<16}{out:>10.1f}{100 * out / total:>7.1f}")
    print(f"\n{'kernel':<48}{'us/step':>10}{'%':>7}")
    for name, t in sorted(us.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{name:<48}{t:>10.1f}{100 * t / total:>7.1f}")

