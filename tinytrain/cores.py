"""The microcontroller cores a project may be compiled for: one row per core (docs/design.md §2).

Codegen (which kernels and instructions a project uses), the memory report (the stack it reserves) and the firmware
(each board names its core; its compiler flags start with the core's) read this table and nothing else about a core.
A new core is one row here plus its boards (firmware/boards.py); tests/test_architecture.py checks that no other
module names a core. Any other target ("", the engines, the plan search) is a host build.
"""

from __future__ import annotations

from dataclasses import dataclass

# The stack, measured: the largest high-water mark of the training step (reset, harness, forward, backward, updates,
# state save, inference) on qemu-m4 (mps2-an386), qemu-m7 (mps2-an500) and qemu-m55 (mps3-an547), over every zoo
# model with its shipped plan and the VWW TFLite models (benchmarks/stack.py -> benchmarks/results/stack.md),
# plus a margin for what the QEMU runs do not exercise (exception frames with FP context, 104 B each; the serial
# boards' harness), rounded up to 64 B. The firmware reserves the same (firmware/project.py). Saving and loading the
# state need no other RAM: it streams through a TT_STATE_CHUNK_BYTES (256 B) chunk on this stack, whose high-water
# mark with the flash saves stays within the measured value (benchmarks/results/state_resume.md).
STACK_MEASURED_BYTES = 1268  # proxyless-w0.3 sparse plan on qemu-m55
STACK_MARGIN_BYTES = 512
STACK_BYTES = -(-(STACK_MEASURED_BYTES + STACK_MARGIN_BYTES) // 64) * 64
# The cores without the DSP extension (Cortex-M3, M0+ code, RISC-V rv32: portable C, software float but on rv32imafc)
# use more stack: up to 1,780 B (proxyless-w0.3 sparse plan on qemu-m0plus, re-measured after the harnesses' row
# readers; 1,760 B on rv32imafc, 1,604 B on M3: benchmarks/results/cores.json), which would leave 12 B of the 1,792 B
# reserve. Their reserve is that plus the same margin, 2,304 B (512 B more); the DSP cores (M4, M7, M55, M33: 1,252 B
# at most) keep STACK_BYTES.
PORTABLE_STACK_MEASURED_BYTES = 1780
PORTABLE_STACK_BYTES = -(-(PORTABLE_STACK_MEASURED_BYTES + STACK_MARGIN_BYTES) // 64) * 64


@dataclass(frozen=True)
class Rate:
    """The emitted C's instructions per multiply-accumulate on a core, measured under QEMU ``-icount shift=0`` (one
    instruction per tick) by benchmarks/cores.py over the shipped sparse plans (benchmarks/results/cores.json; pooled:
    the plans' instructions over their MACs, tests/test_cores.py recomputes them from that file): ``forward`` per MAC
    of an inference, ``backward`` per MAC the training step adds to the forward (the step's instructions less the
    inference's, over the step's MACs less the forward's). ``variant``: the build measured; ``board``: where it ran."""

    variant: str
    board: str
    forward: float
    backward: float


@dataclass(frozen=True)
class Core:
    """What tinytrain knows of a core.

    ``dsp``: the Arm DSP extension (SXTB16, SMLAD; ARMv8-M mainline's DSP on the M33 is the M4's): tt_simd.h's inner
    products are its instructions there and their exact C models elsewhere (every core build defines TT_ARM_DSP 1:
    the device kernels). ``fpu``: a single-precision FPU on every board of the core (hard-float builds; riscv32 is
    either: its boards choose rv32imac (soft) or rv32imafc (F)); the others compute the fp32 backward in software
    float (libgcc). ``fpv5``: VMAXNM / VMINNM and VCVTM (Cortex-M7's FPv5, Cortex-M33's FPv5-SP, Cortex-M55's
    Armv8.1-M floating point): a training project defines TT_FPV5 1 and tt_float.h's tt_floor_clamped (the landing of
    every SGD step) takes them. ``stack_bytes``: the stack its firmware reserves and the report counts.
    ``cpu_flags``: the compiler flags that select the core (its boards add the float ABI and FPU)."""

    name: str
    isa: str
    dsp: bool
    fpu: bool
    fpv5: bool
    stack_bytes: int
    cpu_flags: tuple[str, ...]
    clock_mhz: int
    rates: tuple[Rate, ...]


# Clocks: STM32F405 (168 MHz), STM32F746 (216 MHz), Alif Ensemble's high-performance M55 (400 MHz), STM32U575
# (160 MHz), STM32F103 (72 MHz), STM32G071 (64 MHz), GD32VF103 (108 MHz). The M55 rows of cores.json did not link.
CORES: dict[str, Core] = {c.name: c for c in (
    Core("cortex-m4", "armv7e-m", True, True, False, STACK_BYTES, ("-mcpu=cortex-m4", "-mthumb"), 168,
         (Rate("DSP, FPv4-SP", "qemu-m4", 1.54, 2.27),)),
    Core("cortex-m7", "armv7e-m", True, True, True, STACK_BYTES, ("-mcpu=cortex-m7", "-mthumb"), 216,
         (Rate("DSP, FPv5-SP", "qemu-m7", 1.54, 2.17),)),
    Core("cortex-m55", "armv8.1-m.main", True, True, True, STACK_BYTES, ("-mcpu=cortex-m55", "-mthumb"), 400, ()),
    Core("cortex-m33", "armv8-m.main", True, True, True, STACK_BYTES, ("-mcpu=cortex-m33", "-mthumb"), 160,
         (Rate("DSP, FPv5-SP", "qemu-m33", 1.53, 2.19),)),
    Core("cortex-m3", "armv7-m", False, False, False, PORTABLE_STACK_BYTES, ("-mcpu=cortex-m3", "-mthumb"), 72,
         (Rate("soft float", "qemu-m3", 4.7, 351.0),)),
    Core("cortex-m0plus", "armv6-m", False, False, False, PORTABLE_STACK_BYTES, ("-mcpu=cortex-m0plus", "-mthumb"),
         64, (Rate("soft float", "qemu-m0plus", 10.5, 904.0),)),
    Core("riscv32", "rv32imac", False, False, False, PORTABLE_STACK_BYTES, (), 108,
         (Rate("rv32imac, soft float", "qemu-riscv32", 7.2, 666.0), Rate("rv32imafc", "qemu-riscv32f", 7.19, 9.97))),
)}
# The compile targets (`tinytrain compile --target`, a firmware board's core), in the table's order.
CORE_TARGETS = tuple(CORES)
DEFAULT_CORE = "cortex-m7"  # compile's default target (the QEMU board the guide starts on is an M7)


def core_of(target: str) -> Core | None:
    """The row of ``target``, None for a host build."""
    return CORES.get(target)


def stack_reserve(target: str) -> int:
    """The stack a project for ``target`` (a core, or a host: the DSP cores' reserve) reserves."""
    core = core_of(target)
    return STACK_BYTES if core is None else core.stack_bytes
