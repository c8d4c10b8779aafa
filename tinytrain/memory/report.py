"""SRAM / flash accounting of a planned schedule and the budget check (docs/design.md §5).

SRAM = the arena (every computed tensor: activations, saved activations, gradients, kernel scratch, at the
offsets the planner chose) + the SRAM copies of the trainable parameters (what the plan updates: a whole
bias, or the first n output-channel rows of a weight, the frozen rows staying in flash) + optimizer state
(momentum) + the C runtime's own statics + the stack (measured on the QEMU boards: STACK_BYTES below).
Flash = every constant (frozen weights, and the initial values the trainable copies are loaded from) + an
estimate of the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.errors import BudgetError
from tinytrain.ir import Graph, Role
from tinytrain.memory.inplace import SLACK, InPlace, choose
from tinytrain.memory.lifetimes import BufferUse, buffer_lifetimes, scratch_requests
from tinytrain.memory.planner import ALIGNMENT, PLANNERS, align
from tinytrain.memory.short import short_name
from tinytrain.memory.stream import StreamPlan, plan_stream
from tinytrain.ops import get_op
from tinytrain.sizes import format_size

RUNTIME_BYTES = 256      # the C runtime's statics: step counter, loss, label, arena pointer (estimate)
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
# The cores of codegen/context.py CORE_TARGETS without the DSP extension (tests/memory/test_memory_report.py checks it)
PORTABLE_STACK_TARGETS = frozenset({"cortex-m3", "cortex-m0plus", "riscv32"})


def stack_reserve(target: str) -> int:
    """The stack a project for ``target`` (a core of codegen/context.py CORE_TARGETS, or a host) reserves."""
    return PORTABLE_STACK_BYTES if target in PORTABLE_STACK_TARGETS else STACK_BYTES
CODE_BASE_BYTES = 4096   # code estimate: runtime + entry points, plus per distinct op and per call site
CODE_PER_OP_BYTES = 1536
CODE_PER_CALL_BYTES = 24


@dataclass(frozen=True)
class PlannedBuffer:
    use: BufferUse
    offset: int


@dataclass(frozen=True)
class MemoryReport:
    """What the device needs. ``peak_sram_bytes`` = arena + SRAM copies of trainable tensors + optimizer state
    + runtime + measured stack. ``buffers`` are the graph's tensors (codegen reads their offsets; a view shares
    its buffer's offset); kernel scratch is in ``scratch``. Steps index ``graph.nodes``."""

    arena_bytes: int
    trainable_sram_bytes: int
    runtime_sram_bytes: int
    flash_bytes: int
    sram_budget_bytes: int
    flash_budget_bytes: int
    max_live_bytes: int
    peak_step: int
    buffers: tuple[PlannedBuffer, ...]
    planner: str
    optimizer_state_bytes: int = 0
    stack_bytes: int = 0
    code_bytes: int = 0
    scratch: tuple[PlannedBuffer, ...] = ()
    inplace: tuple[InPlace, ...] = ()
    trainable: tuple[tuple[str, int], ...] = ()  # (parameter, bytes of its SRAM copy)
    target: str = ""
    stream: StreamPlan | None = None  # the row-streamed region of the schedule (memory/stream.py), if any
    remainder_bytes: int = 0  # of optimizer_state_bytes: the trained weights' remainders (ops/sgd_update.py)
    plain: tuple[str, ...] = ()  # convolutions whose kernels read the int8 weight, no table derived from it (flash)

    @property
    def peak_sram_bytes(self) -> int:
        return self.arena_bytes + self.static_sram_bytes

    @property
    def static_sram_bytes(self) -> int:
        """SRAM outside the arena, alive at every step."""
        return self.trainable_sram_bytes + self.optimizer_state_bytes + self.runtime_sram_bytes + self.stack_bytes

    @property
    def weights_flash_bytes(self) -> int:
        return self.flash_bytes - self.code_bytes

    @property
    def fits(self) -> bool:
        return self.peak_sram_bytes <= self.sram_budget_bytes and self.flash_bytes <= self.flash_budget_bytes

    @property
    def n_steps(self) -> int:
        return 1 + max((b.use.last_use for b in self.buffers + self.scratch), default=0)

    def alive_at(self, step: int) -> list[PlannedBuffer]:
        alive = [b for b in self.buffers + self.scratch if b.use.first_use <= step <= b.use.last_use]
        return sorted(alive, key=lambda b: (-b.use.size, b.use.tensor))

    def live_by_role(self) -> list[dict[str, int]]:
        """Per step, arena bytes alive by buffer role. An in-place output and the input it overwrites share
        bytes; the shared bytes count once, for the newer buffer."""
        result = []
        for step in range(self.n_steps):
            alive = sorted(self.alive_at(step), key=lambda b: -b.use.first_use)
            counted: list[tuple[int, int]] = []
            roles: dict[str, int] = {}
            for b in alive:
                lo, hi = b.offset, b.offset + align(b.use.size)
                own = hi - lo - sum(max(0, min(hi, e) - max(lo, s)) for s, e in counted)
                counted.append((lo, hi))
                roles[b.use.role] = roles.get(b.use.role, 0) + own
            result.append(roles)
        return result

    def to_json(self) -> dict:
        ties = {p.output: p for p in self.inplace}

        def entry(b: PlannedBuffer) -> dict:
            d = {"tensor": b.use.tensor, "role": b.use.role, "size": b.use.size, "offset": b.offset,
                 "first_use": b.use.first_use, "last_use": b.use.last_use}
            if b.use.views:
                d["views"] = list(b.use.views)
            if b.use.tensor in ties:
                d["overwrites"] = ties[b.use.tensor].input
            return d

        return {
            "peak_sram_bytes": self.peak_sram_bytes,
            "arena_bytes": self.arena_bytes,
            "trainable_sram_bytes": self.trainable_sram_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "remainder_bytes": self.remainder_bytes,
            "runtime_sram_bytes": self.runtime_sram_bytes,
            "stack_bytes": self.stack_bytes,
            "stack_source": "measured high-water mark + margin (benchmarks/results/stack.md)",
            "flash_bytes": self.flash_bytes,
            "weights_flash_bytes": self.weights_flash_bytes,
            "code_bytes_estimate": self.code_bytes,
            "plain_kernels": list(self.plain),
            "sram_budget_bytes": self.sram_budget_bytes,
            "flash_budget_bytes": self.flash_budget_bytes,
            "fits": self.fits,
            "max_live_bytes": self.max_live_bytes,
            "peak_step": self.peak_step,
            "planner": self.planner,
            "target": self.target,
            "trainable": [{"param": p, "sram_bytes": n} for p, n in self.trainable],
            "in_place": [{"step": p.step, "input": p.input, "output": p.output, "delta": p.delta}
                         for p in self.inplace],
            "streamed": None if self.stream is None else {
                "steps": self.stream.steps,
                "line_buffers": [{"tensor": b.tensor, "rows": b.rows, "height": b.height, "row_bytes": b.row_bytes}
                                 for b in self.stream.rings]},
            "buffers": [entry(b) for b in self.buffers + self.scratch],
        }


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


def code_estimate(graph: Graph) -> int:
    ops = {n.op for n in graph.nodes}
    return CODE_BASE_BYTES + CODE_PER_OP_BYTES * len(ops) + CODE_PER_CALL_BYTES * len(graph.nodes)


def plan_memory(graph: Graph, sram_budget: int, flash_budget: int, planner: str = "greedy", inplace: bool = True,
                runtime_bytes: int = RUNTIME_BYTES, stack_bytes: int | None = None, code_bytes: int | None = None,
                target: str = "", stream: bool | StreamPlan = True) -> MemoryReport:
    """Plan the arena of ``graph`` executed in node order, with in-place outputs where ops allow it, and
    account SRAM and flash. Works for a forward graph and for a (reordered) training step. ``stack_bytes``: the
    target's reserve (``stack_reserve``) unless given.

    With ``stream`` the schedule's streamable prefix runs row by row in line buffers (memory/stream.py chooses which,
    or ``stream`` is the region to use).
    With ``inplace`` the arena is also planned with gradient chains as compact as the others (``memory.inplace``:
    ``GRADIENT_SLACK``), without in-place outputs, and with only the pairs at the crowded steps (where at least
    half the largest live set is alive without in-place), and the smallest plan is kept: a chain of in-place buffers
    is placed as one rigid unit, which can cost more than it saves where memory is not tight."""
    region = stream if isinstance(stream, StreamPlan) else plan_stream(graph) if stream else None
    stack_bytes = stack_reserve(target) if stack_bytes is None else stack_bytes
    uses = buffer_lifetimes(graph, region)
    scratch = scratch_requests(graph, region)

    def arena(pairs: list[InPlace]):
        p = PLANNERS[planner](alignment=ALIGNMENT)
        ids = {u.tensor: p.add_buffer(u.size, u.first_use, u.last_use) for u in uses + scratch}
        for pair in pairs:
            p.tie(ids[pair.output], ids[pair.input], -pair.delta)
        return p, ids

    first = region.steps if region else 0
    pairs = choose(graph, uses, ALIGNMENT, first_step=first) if inplace else []
    p, ids = arena(pairs)
    if pairs:
        alone, alone_ids = arena([])
        crowd = alone.live_profile(list(range(len(graph.nodes))))
        compact = choose(graph, uses, ALIGNMENT, gradient_slack=SLACK, first_step=first)  # gradient chains too
        crowded = [q for q in pairs if 2 * crowd[q.step] >= max(crowd)]
        for option in (compact, [], crowded):  # ties keep the earlier plan, except that none beats some pairs
            planned_option = (alone, alone_ids) if not option else arena(option)
            size = planned_option[0].total_size()
            if size < p.total_size() or (size == p.total_size() and not option):
                (p, ids), pairs = planned_option, option
    planned = tuple(PlannedBuffer(u, p.offset(ids[u.tensor])) for u in uses)
    planned_scratch = tuple(PlannedBuffer(u, p.offset(ids[u.tensor])) for u in scratch)
    steps = range(max(len(graph.nodes), 1))
    live = p.live_profile(list(steps))
    peak_step = max(steps, key=lambda s: (live[s], -s))
    copies = trainable_copies(graph)
    optimizer = sum(t.nbytes for t in graph.tensors.values() if t.role is Role.OPTIMIZER_STATE)
    code = code_estimate(graph) if code_bytes is None else code_bytes
    weights = sum(t.nbytes for t in graph.constants())
    return MemoryReport(p.total_size(), sum(n for _, n in copies), runtime_bytes, weights + code, sram_budget,
                        flash_budget, max(live, default=0), peak_step, planned, planner, optimizer, stack_bytes,
                        code, planned_scratch, tuple(pairs), tuple(copies), target, region, remainder_bytes(graph))


def plan_forward(graph: Graph, sram_budget: int, flash_budget: int, planner: str = "greedy",
                 runtime_bytes: int = 0, stream: bool | StreamPlan = True) -> MemoryReport:
    """Plan the arena of the int8 forward pass as separate buffers (no in-place); flash = weights only."""
    return plan_memory(graph, sram_budget, flash_budget, planner, inplace=False, runtime_bytes=runtime_bytes,
                       stack_bytes=0, code_bytes=0, stream=stream)


def check_budget(report: MemoryReport, graph: Graph) -> None:
    """Raise a one-line BudgetError naming the peak step, what is alive there and the excess."""
    training = bool(report.trainable)
    if report.peak_sram_bytes > report.sram_budget_bytes:
        node = graph.nodes[report.peak_step]
        alive = report.alive_at(report.peak_step)
        names = ", ".join(f"{short_name(b.use.tensor, 48)} ({b.use.role}, {format_size(b.use.size)})"
                          for b in alive[:4])
        if len(alive) > 4:
            names += f" and {len(alive) - 4} more"
        over = report.peak_sram_bytes - report.sram_budget_bytes
        statics = (f" + {format_size(report.static_sram_bytes)} outside the arena (trainable copies "
                   f"{format_size(report.trainable_sram_bytes)}, optimizer {format_size(report.optimizer_state_bytes)}"
                   f", runtime + stack {format_size(report.runtime_sram_bytes + report.stack_bytes)})")
        hint = ("try a smaller plan (fewer layers or lower ratios in --plan, or --update bias-only) or a larger --sram"
                if training else "try a smaller model or input size, or a larger --sram")
        raise BudgetError(
            f"does not fit: peak SRAM {format_size(report.peak_sram_bytes)} is {format_size(over)} over the "
            f"{format_size(report.sram_budget_bytes)} budget at step {report.peak_step} ({node.op} {node.name}): "
            f"{format_size(report.max_live_bytes)} alive in the arena{statics if report.static_sram_bytes else ''}, "
            f"largest: {names}; {hint}")
    if report.flash_bytes > report.flash_budget_bytes:
        over = report.flash_bytes - report.flash_budget_bytes
        raise BudgetError(
            f"does not fit: weights and code need {format_size(report.flash_bytes)} of flash, {format_size(over)} over "
            f"the {format_size(report.flash_budget_bytes)} budget; use a smaller model or a larger --flash")
