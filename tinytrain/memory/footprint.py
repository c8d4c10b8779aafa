"""What a step needs on the device, in SRAM and flash (docs/design.md §5).

SRAM = the arena (every computed tensor at the offsets of its ``ArenaLayout``) + the SRAM copies of the trainable
parameters (what the plan updates: a whole bias, or the first n output-channel rows of a weight, the frozen rows
staying in flash) + optimizer state (momentum, weight remainders) + the C runtime's own statics + the stack its core
reserves (tinytrain/cores.py: measured on the QEMU boards). Flash = every constant (frozen weights, the tables the
kernels derive from them, and the initial values the trainable copies are loaded from) + an estimate of the code.

The code estimate is one formula (``code_estimate``), calibrated against the linker on the emitted C: it needs the
kernels' C, so a footprint planned before any C is emitted counts its base only (a lower bound) and the graph's
constants; ``codegen.flash`` measures the emitted source and ``MemoryReport.with_emitted_flash`` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tinytrain.cores import stack_reserve
from tinytrain.ir import Graph, Role
from tinytrain.ops import get_op

RUNTIME_BYTES = 256      # the C runtime's statics: step counter, loss, label, arena pointer (estimate)
# Least squares over the 146 kernels of 3 firmware (proxyless-w0.3 on qemu-m7 and m55, mcunet-5fps on qemu-m7): a
# kernel's code = 819 B + 0.105 B per character of its C; the rest (tt_forward / tt_backward, runtime, harness, C
# library) 24.4-25.8 KB. Constants + this estimate are -0.3 to +1.3 % off the linked flash of the 4 shipped plans'
# training firmware on qemu-m7 and qemu-m55 (620-848 KB; arm-none-eabi-gcc 12.2 -O2).
CODE_BASE_BYTES = 25 * 1024     # the schedule, runtime entry points, the firmware harness and the C library's stdio
CODE_PER_KERNEL_BYTES = 820     # a kernel's prologue, loops and epilogue
CODE_PER_KERNEL_CHAR = 0.105    # a kernel's code per character of its C


def code_estimate(kernel_chars: Iterable[int] = ()) -> int:
    """The code a project links to, with the firmware around it, from the length of each kernel's C (none: before
    the C is emitted, the base alone)."""
    kernels = list(kernel_chars)
    return int(CODE_BASE_BYTES + CODE_PER_KERNEL_BYTES * len(kernels) + CODE_PER_KERNEL_CHAR * sum(kernels))


@dataclass(frozen=True)
class Footprint:
    """The step's SRAM (``peak_sram_bytes``: arena + what is alive at every step) and flash (``flash_bytes``:
    constants + code estimate) on ``core`` (whose stack it reserves; "" a host)."""

    arena_bytes: int
    trainable_sram_bytes: int
    optimizer_state_bytes: int
    runtime_sram_bytes: int
    stack_bytes: int
    weights_flash_bytes: int
    code_bytes: int
    trainable: tuple[tuple[str, int], ...] = ()  # (parameter, bytes of its SRAM copy)
    remainder_bytes: int = 0  # of optimizer_state_bytes: the trained weights' remainders (ops/sgd_update.py)
    core: str = ""

    @property
    def static_sram_bytes(self) -> int:
        """SRAM outside the arena, alive at every step."""
        return self.trainable_sram_bytes + self.optimizer_state_bytes + self.runtime_sram_bytes + self.stack_bytes

    @property
    def peak_sram_bytes(self) -> int:
        return self.arena_bytes + self.static_sram_bytes

    @property
    def flash_bytes(self) -> int:
        return self.weights_flash_bytes + self.code_bytes


def trainable_copies(graph: Graph) -> list[tuple[str, int]]:
    """(parameter, SRAM bytes) for every parameter an update op writes: the selected output-channel rows."""

    result = []
    for node in graph.nodes:
        op = get_op(node.op)
        for w in op.writes:
            if w >= len(node.inputs) or not node.inputs[w]:
                continue
            t = graph.tensors[node.inputs[w]]
            if t.role is Role.OPTIMIZER_STATE:
                continue
            channels = getattr(node.attrs, "channels", None)
            rows = t.shape[0] if channels is None else len(channels)
            result.append((t.name, t.nbytes // t.shape[0] * rows))
    return result


def remainder_bytes(graph: Graph) -> int:
    """SRAM of the remainders the updates keep beside their int8 weights (an update op's third written input)."""

    names = {n.inputs[w] for n in graph.nodes for w in get_op(n.op).writes[2:3] if w < len(n.inputs) and n.inputs[w]}
    return sum(graph.tensors[name].nbytes for name in names)


def footprint(graph: Graph, arena_bytes: int, core: str = "", runtime_bytes: int = RUNTIME_BYTES,
              stack_bytes: int | None = None, code_bytes: int | None = None) -> Footprint:
    """The footprint of ``graph`` with an arena of ``arena_bytes``, before its C is emitted: the graph's constants and
    the code estimate's base unless ``code_bytes``; ``stack_bytes``: ``core``'s reserve unless given."""
    copies = trainable_copies(graph)
    optimizer = sum(t.nbytes for t in graph.tensors.values() if t.role is Role.OPTIMIZER_STATE)
    return Footprint(arena_bytes, sum(n for _, n in copies), optimizer, runtime_bytes,
                     stack_reserve(core) if stack_bytes is None else stack_bytes,
                     sum(t.nbytes for t in graph.constants()), code_estimate() if code_bytes is None else code_bytes,
                     tuple(copies), remainder_bytes(graph), core)
