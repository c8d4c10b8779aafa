"""The C project of a training graph: int8 forward, fp32 loss + backward, in-place SGD updates.

``render_training_project(graph, layout)`` takes a training graph (``training.train_graph``: inputs
image, label[, step]; output loss; ``sgd_update`` nodes) and the arena layout of that graph, and
returns the project's files. As for the forward pass, codegen only reads the graph and the layout: every
activation and gradient sits at the offset of its planned buffer, the schedule is the node order.

Memory: one static arena of ``TT_ARENA_BYTES`` holds the int8 activations, the fp32 gradients and the kernels'
scratch at the planner's offsets. Its declared type is ``float`` and int8 tensors are accessed through ``int8_t``
(a character type, which may alias any object), so no access violates C's strict-aliasing rule and the
project needs no ``-fno-strict-aliasing`` (offsets are 16-byte aligned, so every fp32 tensor is aligned).
The tensors the step updates live outside the arena: trainable weights and biases are SRAM arrays copied
from their flash originals by ``tt_init()`` — of a weight whose plan updates only its first Cs output
channels, only those rows (kernels read the other rows from the flash original: template parameter
``split``), as the memory report counts — and momentum buffers are zeroed SRAM arrays; frozen weights stay
``const`` in flash.

State file (``tinytrain.codegen.state``): the byte layout is documented in the emitted header and in ``state.py``.
``tt_state_save_to`` / ``tt_state_load_from`` stream it in ``TT_STATE_CHUNK_BYTES`` chunks between the SRAM arrays
and a caller's sink / source (so no copy of the whole state is needed: flash slots, files, the serial reply);
``tt_state_save`` / ``tt_state_load`` are the same to and from a whole buffer.
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen import cformat
from tinytrain.codegen.bindings import BINDINGS
from tinytrain.version import __version__
from tinytrain.codegen.context import (MODEL_HEADER, MODEL_SOURCE, RUNTIME_FILES, Array, Context, Kernel,
                                       arena_offsets, arm_dsp, bind_call, dsp_kernels, environment, fpv5, runtime_files,
                                       step_comment, streamed_input)
from tinytrain.codegen.contract import header_contract
from tinytrain.codegen.emit_stream import render_region
from tinytrain.codegen.options import EmitOptions
from tinytrain.codegen.state import MAGIC, VERSION, StateEntry, fingerprint, state_layout, state_size
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, Role
from tinytrain.memory.lifetimes import scratch_name
from tinytrain.memory.arena import ArenaLayout, PlannedBuffer
from tinytrain.memory.stream import StreamRegion
from tinytrain.names import LABEL, LOSS, STEP_INPUT, TARGET
from tinytrain.ops import loss_ops
from tinytrain.ops import get_op
from tinytrain.training.autodiff import is_forward
from tinytrain.training.finite import gradient_bounds

# tt_float.h and its parts by family (rounding, draws, gradient tiles, clamp masks)
TRAIN_RUNTIME_FILES = RUNTIME_FILES + ("tt_float.h", "tt_float_round.h", "tt_float_draws.h", "tt_float_grad.h",
                                       "tt_float_masks.h")


class _TrainContext(Context):
    """The forward context plus fp32 arena tensors, SRAM copies of the state and scalar inputs."""

    def __init__(self, graph: Graph, offsets: dict[str, int], layout: list[StateEntry], scalars: dict[str, str],
                 scratch: dict[str, PlannedBuffer], target: str, plain: tuple[str, ...] = ()) -> None:
        super().__init__(graph, offsets, target, plain)
        self.scratch_buffers = scratch            # kernel scratch buffer name -> its planned buffer
        self.ctypes: dict[str, str] = {}          # pointer variable -> element type
        self.sram: dict[str, Array] = {}         # tensor -> SRAM array (name, ctype, initial values: its rows)
        self.rows: dict[str, int] = {}            # weight -> rows in SRAM, when the plan updates only those
        self.scalars = scalars
        for e in layout:
            t = graph.tensors[e.name]
            if e.partial:
                if e.row0 != 0:
                    raise UnsupportedModelError(f"codegen: {e.name} updates channels from {e.row0}; the C keeps the "
                                                "first channels of a weight in SRAM")
                self.rows[e.name] = e.shape[0]
            cname = self._unique("tt_" + cformat.identifier(e.name))
            rows = f"rows 0..{e.shape[0] - 1} of " if e.partial else ""
            self.sram[e.name] = Array(cname, cformat.ctype(t.data.dtype), t.data[: e.shape[0]],
                                       f"{rows}{cformat.shape(t.shape)} {t.dtype.value} {t.role.value} "
                                       f"{cformat.comment(e.name)}")

    def _pointer(self, name: str, ctype: str, prefix: str) -> str:
        if name not in self.offsets and name not in self.scratch_buffers:
            raise ValueError(f"memory plan has no buffer for {name!r}; plan this graph before emitting it")
        var = self.pointers.get(name)
        if var is None:
            var = self.pointers[name] = f"{prefix}{len(self.pointers)}"
            self.ctypes[var] = ctype
        return var

    def act(self, name: str) -> str:
        t = self.graph.tensors[name]
        if t.has_data or t.dtype != DType.INT8:
            raise UnsupportedModelError(f"codegen: {name} ({t.dtype.value} {t.role.value}) used as an int8 activation")
        return self._pointer(name, "int8_t", "a")

    def fp(self, name: str) -> str:
        t = self.graph.tensors[name]
        if t.has_data or t.dtype != DType.FLOAT32:
            raise UnsupportedModelError(f"codegen: {name} ({t.dtype.value} {t.role.value}) used as an fp32 tensor")
        if self.offsets.get(name, 0) % 4:
            raise ValueError(f"memory plan puts fp32 tensor {name!r} at {self.offsets[name]}, not a multiple of 4")
        return self._pointer(name, "float", "f")

    def ints(self, name: str) -> str:
        """An int32 gradient of the integer step (training/integer_step.py) in the arena, through ``tt_i32a``: int32_t
        that may alias the float arena (train_model.c.j2)."""
        t = self.graph.tensors[name]
        if t.has_data or t.dtype != DType.INT32 or t.role is not Role.GRADIENT:
            raise UnsupportedModelError(f"codegen: {name} ({t.dtype.value} {t.role.value}) used as an int32 gradient")
        return self._pointer(name, "tt_i32a", "g")

    def bits(self, name: str) -> str:
        """A packed clamp mask (uint8, ops/clamp_mask_packed.py) in the arena."""
        t = self.graph.tensors[name]
        if t.has_data or t.dtype != DType.UINT8:
            raise UnsupportedModelError(f"codegen: {name} ({t.dtype.value} {t.role.value}) used as packed bits")
        return self._pointer(name, "uint8_t", "m")

    def scratch(self, node: Node) -> str:
        """The fp32 scratch the memory plan reserved for ``node``'s kernel (``OpDef.scratch``)."""
        return self._pointer(scratch_name(node.name), "float", "f")

    def int_scratch(self, node: Node) -> str:
        """The same scratch as int32 (``tt_i32a``): an integer-step kernel's (the fused integer weight gradient)."""
        return self._pointer(scratch_name(node.name), "tt_i32a", "g")

    def const(self, name: str) -> str:
        if name in self.sram:  # a trainable weight or bias: kernels read the SRAM copy
            return self.sram[name].name
        return super().const(name)

    def trainable_rows(self, name: str) -> int | None:
        return self.rows.get(name)

    def trainable(self, name: str) -> bool:
        return name in self.sram

    def frozen(self, name: str) -> str:
        """The flash original of a weight whose first rows are in SRAM (it also initializes them)."""
        if name not in self.rows:
            raise ValueError(f"{name} is not partially trainable")
        return self.sram[name].name + "_init"

    def state(self, name: str) -> str:
        if name not in self.sram:
            raise ValueError(f"{name} is not updated by the training step")
        return self.sram[name].name

    def scalar(self, name: str) -> str:
        if name not in self.scalars:
            raise UnsupportedModelError(f"codegen: {name} is not a scalar input of the training step")
        return self.scalars[name]


def _view(node: Node) -> bool:
    return get_op(node.op).view


def _phases(graph: Graph) -> tuple[list[Node], list[Node]]:
    """(forward nodes, training nodes): the forward int8 nodes must be a prefix of the schedule."""

    forward: list[Node] = []
    for k, node in enumerate(graph.nodes):
        if not is_forward(graph, node) and not (_view(node) and graph.tensors[node.outputs[0]].dtype == DType.INT8):
            rest = list(graph.nodes[k:])
            break
        forward.append(node)
    else:
        rest = []
    late = [n.name for n in rest if is_forward(graph, n)]
    if late:
        raise UnsupportedModelError(f"codegen: forward node {late[0]} is scheduled after the loss; the C step "
                                    "runs the int8 forward first")
    return forward, rest


def _loss_node(graph: Graph) -> Node:
    nodes = [n for n in graph.nodes if n.op in loss_ops()]
    if len(nodes) != 1:
        raise UnsupportedModelError(f"codegen: a training graph has one loss ({', '.join(loss_ops())}), this one has "
                                    f"{len(nodes)}")
    return nodes[0]


def _train_only(forward: list[Node], logits: str) -> set[str]:
    """The forward nodes whose outputs only the backward pass reads (e.g. the clamp masks' packing): tt_predict
    skips them."""
    read = {i for n in forward for i in n.inputs} | {logits}
    return {n.name for n in forward if not any(o in read for o in n.outputs)}


def _render_steps(env, ctx: _TrainContext, graph: Graph, nodes: list[Node], kernels: dict,
                  stream: StreamRegion | None = None, train_only: set[str] = frozenset()) -> tuple[list[dict], set[str]]:
    """The steps of ``nodes``; those of a streamed region (a prefix of the schedule) as one step, those in
    ``train_only`` run only when the forward pass's ``train`` flag is set."""
    index = {n.name: k for k, n in enumerate(graph.nodes)}
    steps, used = [], set()
    if stream is not None and nodes and index[nodes[0].name] == 0:
        step, region_used = render_region(graph, stream, ctx, lambda n, c: bind_call(env, BINDINGS, n, c, kernels),
                                          lambda j, n: step_comment(j, n, graph))
        steps.append(step)
        used.update(region_used)
        nodes = nodes[stream.steps:]
    for node in nodes:
        comment = step_comment(index[node.name], node, graph)
        if _view(node):
            steps.append({"comment": comment + " (a view: same arena bytes, no code)", "code": ""})
            continue
        call = bind_call(env, BINDINGS, node, ctx, kernels)
        code = f"{call.kernel.name}({', '.join(call.args)});"
        if node.name in train_only:
            comment, code = comment + " (training only)", f"if (train) {{\n        {code}\n    }}"
        steps.append({"comment": comment, "code": code})
        used.update(call.args)
    return steps, used


def _guard_position(training: list[Node], loss_node: Node) -> int:
    """Index of the loss among the training steps: the non-finite guard (train_model.c.j2) runs right after it,
    so it must come before every update."""

    k = next(i for i, n in enumerate(training) if n is loss_node)
    early = [n.name for n in training[:k] if get_op(n.op).writes]
    if early:
        raise UnsupportedModelError(f"codegen: update {early[0]} is scheduled before the loss; the non-finite guard "
                                    "needs the loss first")
    return k


def _pointer_decls(ctx: _TrainContext, graph: Graph, used: set[str]) -> list[dict]:
    decls = []
    for name, var in ctx.pointers.items():
        if var not in used:
            continue
        ctype = ctx.ctypes[var]
        if name in ctx.scratch_buffers:
            b = ctx.scratch_buffers[name]
            kind = "float32" if ctype == "float" else "int32"
            off, comment = b.offset, f"({b.use.size // 4},) {kind} {b.use.role} {cformat.comment(name)}"
        else:
            t = graph.tensors[name]
            off = ctx.offsets[name]
            comment = f"{cformat.shape(t.shape)} {t.dtype.value} {t.role.value} {cformat.comment(name)}"
        init = (f"tt_arena + {off // 4}" if ctype == "float" else f"({ctype} *)(tt_arena + {off // 4})"
                if ctype == "tt_i32a" else f"({ctype} *)tt_arena + {off}")
        decls.append({"decl": f"{ctype} *const {var} = {init};", "comment": comment})
    width = max((len(d["decl"]) for d in decls), default=0)
    for d in decls:
        d["pad"] = width - len(d["decl"])
    return decls


def _checked_layout(graph: Graph, options: EmitOptions) -> list:
    """The state layout of a training graph the C can run (inputs, outputs, proven-finite gradients, optimizer state
    starting at zero); UnsupportedModelError otherwise. The finite-gradient proof is ``options.proof``, proven here
    when the caller has none."""
    if graph.inputs[1:] not in ((LABEL,), (LABEL, STEP_INPUT), (LABEL, TARGET), (LABEL, TARGET, STEP_INPUT)) \
            or graph.outputs != (LOSS,):
        raise UnsupportedModelError(f"codegen: a training graph has inputs (image, {LABEL}[, {TARGET}][, "
                                    f"{STEP_INPUT}]) and output {LOSS}; this one has {graph.inputs} -> {graph.outputs}")
    if options.proof is None:  # the C guard checks the loss only: a finite one must imply finite gradients
        gradient_bounds(graph)
    layout = state_layout(graph)
    for e in layout:
        t = graph.tensors[e.name]
        if t.role is Role.OPTIMIZER_STATE and np.any(t.data):
            raise UnsupportedModelError(f"codegen: optimizer state {e.name} does not start at zero")
    return layout


def _state_and_sram(ctx, graph: Graph, layout: list) -> tuple[list[dict], list[dict]]:
    """The templates' tables of the state's arrays (save / load order) and of every SRAM array (tt_init)."""
    state = []
    for e in layout:
        arr = ctx.sram[e.name]
        state.append({"var": arr.name, "count": int(np.prod(e.shape)), "kind": e.kind, "comment": arr.comment})
    sram = []
    for name, arr in ctx.sram.items():
        t = graph.tensors[name]
        zero = t.role is Role.OPTIMIZER_STATE
        sram.append({"name": arr.name, "ctype": arr.ctype, "count": arr.values.size, "comment": arr.comment,
                     "zero": zero, "init_count": t.size, "init_comment": f"{cformat.shape(t.shape)} {t.dtype.value} "
                     f"{t.role.value} {cformat.comment(name)}" + (" (its first rows initialize the SRAM copy, "
                     "kernels read the others from here)" if name in ctx.rows else ""),
                     "body": None if zero else cformat.array_body(t.data)})
    return state, sram


def _flash_bytes(ctx, graph: Graph) -> int:
    """The bytes of the constant arrays: the kernels' constants and tables, and the trainable copies' initial values."""
    inits = sum(graph.tensors[name].nbytes for name in ctx.sram if graph.tensors[name].role is not Role.OPTIMIZER_STATE)
    return sum(c.values.nbytes for c in ctx.constants.values()) + inits


def render_training_project(graph: Graph, layout: ArenaLayout, choices: list[str] | None = None,
                            options: EmitOptions = EmitOptions()) -> dict[str, str]:
    """File name -> text of the emitted training project (model source, header, runtime); the bindings' kernel
    choices appended to ``choices``."""
    image = graph.inputs[0]
    state_entries = _checked_layout(graph, options)
    env = environment()
    offsets = arena_offsets(graph, layout)
    ctx = _TrainContext(graph, offsets, state_entries, {LABEL: "label", STEP_INPUT: "tt_step", TARGET: "tt_target"},
                        {b.use.tensor: b for b in layout.scratch}, options.target, options.plain)
    loss_node = _loss_node(graph)
    logits = loss_node.inputs[0]
    forward, training = _phases(graph)
    ctx.act(image)
    kernels: dict[str, tuple[Kernel, str]] = {}
    fwd_steps, fwd_used = _render_steps(env, ctx, graph, forward, kernels, layout.stream, _train_only(forward, logits))
    train_steps, train_used = _render_steps(env, ctx, graph, training, kernels)
    guard_after = _guard_position(training, loss_node)
    ctx.act(logits)
    ctx.fp(LOSS)

    state, sram = _state_and_sram(ctx, graph, state_entries)
    constants = [{"name": c.name, "ctype": c.ctype, "count": c.values.size, "comment": c.comment,
                  "body": cformat.array_body(c.values)} for c in ctx.constants.values()]
    common = {
        "version": __version__,
        "model_name": cformat.comment(graph.name),
        "sha256": graph.source_sha256 or "(none: graph built in memory)",
        "arena_bytes": layout.arena_bytes,
        **_io(graph, offsets, image, logits),
        "uint8_input": graph.uint8_input, "uint8_output": graph.uint8_output,
        "arm_dsp": arm_dsp(options.target), "dsp_kernels": dsp_kernels(options.target),
        "fpv5": fpv5(options.target),
        "streamed_input": streamed_input(layout),
        **_state_file(state, state_entries),
        "stochastic": STEP_INPUT in graph.inputs,
        "target_floats": graph.tensors[TARGET].size if TARGET in graph.inputs else 0,
        "trainable_bytes": sum(a.values.nbytes for a in ctx.sram.values()),
    }
    files = {
        MODEL_HEADER: env.get_template("train_model.h.j2").render(
            **common, contract=header_contract(graph, image, logits, "TT_LOGITS")),
        MODEL_SOURCE: env.get_template("train_model.c.j2").render(
            **common, planner=layout.planner, kernels=[text for _, text in kernels.values()],
            constants=constants, sram=sram, loss_offset=offsets[LOSS] // 4,
            fwd_steps=fwd_steps, train_steps=train_steps, guard_after=guard_after,
            fwd_pointers=_pointer_decls(ctx, graph, fwd_used), train_pointers=_pointer_decls(ctx, graph, train_used),
            n_steps=len(graph.nodes), n_forward=len(forward), const_bytes=_flash_bytes(ctx, graph),
            integer_step="tt_i32a" in ctx.ctypes.values()),
    }
    files.update(runtime_files(TRAIN_RUNTIME_FILES))
    if choices is not None:
        choices.extend(ctx.choices)
    return files


def _io(graph: Graph, offsets: dict[str, int], image: str, logits: str) -> dict[str, dict]:
    """The template's values of the input image and the logits."""
    x, q = graph.tensors[image], graph.tensors[logits]
    return {"input": {"shape": cformat.shape(x.shape), "nbytes": x.nbytes, "offset": offsets[image], "zp": x.quant.zp,
                      "scale": repr(x.quant.s), "rows": x.shape[1] if len(x.shape) > 2 else 1,
                      "row_bytes": x.nbytes // x.shape[1] if len(x.shape) > 2 else x.nbytes},
            "logits": {"shape": cformat.shape(q.shape), "nbytes": q.nbytes, "offset": offsets[logits],
                       "zp": q.quant.zp, "scale": repr(q.quant.s), "classes": q.shape[-1]}}


def _state_file(state: list, layout) -> dict:
    """The template's values of the state file: its tensors, size, magic, version and layout fingerprint."""
    return {"state": state, "state_bytes": state_size(layout), "state_magic": MAGIC.decode("ascii"),
            "state_version": VERSION, "state_fingerprint": f"0x{fingerprint(layout):08X}u"}
