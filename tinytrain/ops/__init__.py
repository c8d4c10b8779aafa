"""The op registry: one module per op, each exporting ``OP``, an :class:`OpDef`.

An op module holds everything about its op: attribute dataclass, shape rule, numpy reference
(the spec), MAC count and backward rule. A forward op's backward kernels (``conv2d_grad_input``, ...)
live in its module too, which then exports them all in ``OPS``; so do its integer forms (the integer step's ops
live beside the float op they replace). The registry is collected from the package's modules: adding an op adds its
module here, its C binding (``codegen/bindings/``) and its kernel templates (docs/design.md §11).

The rest of the compiler finds what it needs to know of an op here too, never in a list of its own: the
``OpDef`` hooks (``integer``, ``resize``, ``export``, ``twin``, ``doc``, below) and the importers' handlers, which
an op module declares by the name its source format uses (``ONNX``, ``ONNX_QOPERATOR``: ONNX op type -> handler;
``TFLITE``: builtin operator -> :class:`TfliteRead`), collected by :func:`declared`. A hook receives the pass that
calls it (the ONNX converter, the TFLite importer, the exporter, the integer rewrite) and uses only the methods
that pass documents for its hooks: the ops import no frontend, the frontends import the ops. Module names starting
with ``_`` hold what several op modules share and define no op.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from tinytrain.ir import Node, Tensor

ShapeRule = Callable[[Any, Sequence[Tensor | None]], list[tuple[int, ...]]]
Reference = Callable[[Any, Sequence[np.ndarray | None], Sequence[Tensor | None], Sequence[Tensor]], list[np.ndarray]]
MacCount = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor]], int]
# backward(builder, forward_node, output_gradient_names) -> one gradient name (or None) per node input.
# The builder is tinytrain.builder.GraphBuilder: it emits fp32 backward nodes and says which
# inputs need a gradient (``needs_grad``). Gradients are with respect to the dequantized (real) values.
Backward = Callable[[Any, Node, Sequence[str | None]], list[str | None]]
# min_read(attrs, in_tensors, out_tensors, k) -> for each element of output 0 in C order, the lowest C-order
# element index of input k it reads; None when output 0 may not share input k's bytes.
MinRead = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor], int], "np.ndarray | None"]
# scratch(attrs, in_tensors, out_tensors) -> bytes of temporary memory one call of the C kernel needs.
Scratch = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor]], int]
# overwrites(attrs, in_tensors, out_tensors) -> the input whose bytes output 0 may take over exactly, or None.
Overwrites = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor]], "int | None"]
# bound(attrs, in_tensors, in_bounds) -> for each output, an upper bound of |element| in exact arithmetic, given for
# each input computed in fp32 by the backward an upper bound of |element| (None for the other inputs: the rule reads
# weights from their tensor data and int8 activations from their quantization, so any int8 value is covered). An
# update op (``writes``) returns the bounds of the gradient it applies and of the momentum it keeps (0 without).
Bound = Callable[[Any, Sequence[Tensor | None], Sequence["float | None"]], list[float]]


@dataclass(frozen=True)
class RowWindow:
    """The rows of an NHWC input that output row r reads: [r * stride + offset, r * stride + offset + extent),
    clipped to the input (rows outside it are padding)."""

    stride: int
    offset: int
    extent: int

    def first(self, r: int) -> int:
        return r * self.stride + self.offset

    def end(self, r: int) -> int:
        return r * self.stride + self.offset + self.extent

    @property
    def aligned(self) -> bool:
        """Output row r reads exactly input row r (elementwise and 1x1 stride-1 ops)."""
        return (self.stride, self.offset, self.extent) == (1, 0, 1)


# rows(attrs, in_tensors, out_tensors, k) -> the input rows of input k that an output row reads; None for an input
# not read by rows (a constant).
Rows = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor], int], "RowWindow | None"]


# integer(node, rewrite) -> the node's integer form (training/integer_step.py: ``rewrite`` is its ``IntegerRewrite``).
Integer = Callable[[Node, Any], Node]
# export(exporter, node) -> None: writes the node as ONNX (export_onnx.py: the exporter's ``dq``, ``q``, ``clip``, ...).
Export = Callable[[Any, Node], None]
# twin(torch_ops, node, inputs, params, clamp) -> the node's fp32 output in PyTorch (benchmarks/common/fp32.py):
# ``torch_ops`` has ``torch`` and ``F`` (torch.nn.functional), ``inputs`` the float inputs (NCHW), ``params`` the
# node's dequantized constants as parameters, ``clamp`` the real range of its int8 output.
Twin = Callable[[Any, Node, Sequence[Any], Sequence[Any], tuple[float, float]], Any]


@dataclass(frozen=True)
class Resize:
    """How an op takes another input size (frontends/resize.py). ``stride(attrs, input_shape)``: the stride of a
    window whose padding depends on the input size (None: not such a window, e.g. a global pool); ``features``: its
    weights fix the number of values it reads (a classifier, a flatten); ``adapt(attrs, old_input, new_input,
    output)``: its attrs at the new size (a global pool's window, a folded mean's scale)."""

    stride: Callable[[Any, tuple[int, ...]], "tuple[int, int] | None"] | None = None
    features: bool = False
    adapt: Callable[[Any, Tensor, Tensor, Tensor], Any] | None = None


@dataclass(frozen=True)
class OpDoc:
    """The op's row of docs/guide/ops.md (generated: scripts/ops_doc.py): what it imports from, its arithmetic, its
    backward and what the backward saves; ``streamed`` / ``in_place`` say more than the OpDef's promises give
    (empty: "yes" or "no" from ``rows`` and ``min_read``)."""

    tflite: str
    onnx: str
    arithmetic: str
    backward: str
    saves: str
    streamed: str = ""
    in_place: str = ""


@dataclass(frozen=True)
class TfliteRead:
    """A TFLite builtin operator's reader (frontends/tflite/): ``read(importer, operator)`` adds its IR nodes;
    ``options``: its BuiltinOptions union type and fields ((name, slot, struct format, default), ...);
    ``required``: how many leading inputs it must have; ``constants``: the input
    positions its reader takes from buffers (weights, shapes)."""

    read: Callable[[Any, Any], None]
    options: "tuple[int, tuple[tuple[str, int, str, Any], ...]] | None" = None
    required: int = 1
    constants: tuple[int, ...] = ()


@dataclass(frozen=True)
class OpDef:
    """What the compiler knows about one op.

    ``reference(attrs, arrays, in_tensors, out_tensors)`` computes the outputs from input arrays whose
    dimension 0 is the batch (any size); tensors give shapes and quantization (batch 1).
    ``view``: output 0 is input 0's bytes under another shape (no copy); the memory planner gives both
    one buffer and the code generator one pointer.
    ``backward`` is the op's gradient rule (None: gradients do not flow through it). ``writes`` lists the
    inputs the op updates in place (the optimizer's update ops); such an op has no outputs and its
    ``reference`` returns the new values of those inputs, in that order.
    ``min_read`` makes the op an in-place candidate. It promises that the C kernel writes output 0's elements
    in increasing C order, each one after reading every input element it needs, and that element q reads
    input k only at indices >= ``min_read(...)[q]``; the planner (memory/inplace.py) then derives how far
    before input k the output may start so that no element is overwritten before its last read — e.g. a
    stride-2 depthwise output can start exactly on its input, a 3x3 stride-1 one a row + a pixel before it.
    ``scratch`` is the kernel's request for temporary memory (CMSIS-NN's ``*_get_buffer_size``); the planner
    reserves it in the arena for the node's step (None: no scratch).
    ``rows`` makes the op row-streamable (memory/stream.py): its NHWC output 0 can be computed one row at a time,
    row r reading only the input rows ``rows(...)`` names; its C binding then runs a band of output rows — an
    op whose windows are all ``aligned`` on one-row views of its tensors, any other through a ``band`` of the
    emitter's context (codegen/emit_stream.py).
    ``overwrites`` is the other in-place promise, for kernels that do not write in C order: output 0 may occupy
    exactly the bytes of the input it names (same size), the kernel reading each block of that input into its
    scratch before writing the block's outputs (e.g. a depthwise input gradient a few channels at a time).
    ``bound`` is a backward op's magnitude rule: ``training/finite.py`` composes the rules from the loss gradient
    (bounded by 1) to prove that no gradient of a step with a finite loss overflows float32.
    ``integer`` rewrites a node of this (backward, update or loss) op into its integer form for the integer step
    (None: the op has none, and the integer step refuses it); ``resize`` says how the op takes another input size
    (None: its output follows its input's shape rule); ``export`` writes it as ONNX (None: it does not export);
    ``twin`` computes it in PyTorch's fp32 (None: the twin refuses it); ``doc`` is its row of the ops page (None: a
    backward op, listed by its forward op). ``layer``: the op holds trainable weights (a weight at input 1, an
    optional bias at input 2: what a plan trains, a head replaces); ``loss``: the op computes a training step's loss;
    ``after_logits``: a forward op that may follow a classifier's logits (the loss reads through it).
    """

    name: str
    attrs_type: type
    infer_shapes: ShapeRule
    reference: Reference
    macs: MacCount
    view: bool = False
    backward: Backward | None = None
    writes: tuple[int, ...] = ()
    min_read: MinRead | None = None
    scratch: Scratch | None = None
    rows: Rows | None = None
    overwrites: Overwrites | None = None
    bound: Bound | None = None
    integer: Integer | None = None
    resize: Resize | None = None
    export: Export | None = None
    twin: Twin | None = None
    doc: OpDoc | None = None
    layer: bool = False
    loss: bool = False
    after_logits: bool = False


def elementwise_min_read(attrs: Any, ins: Sequence[Tensor | None], outs: Sequence[Tensor], k: int) -> np.ndarray:
    """``min_read`` of an op whose output element q reads element q of each input (same shape)."""
    return np.arange(outs[0].size, dtype=np.int64)


def min_gap(min_read: np.ndarray, out_itemsize: int, in_itemsize: int) -> int:
    """The smallest delta (bytes, may be negative) for which writing the output in order is safe."""
    min_read = np.asarray(min_read, np.int64)
    if min_read.size <= 1:
        return -(1 << 62)
    later = np.minimum.accumulate(min_read[::-1])[::-1][1:]  # R(q + 1) for q = 0 .. n-2
    q1 = np.arange(1, min_read.size, dtype=np.int64)
    return int((q1 * out_itemsize - later * in_itemsize).max())


def elementwise_rows(attrs: Any, ins: Sequence[Tensor | None], outs: Sequence[Tensor], k: int) -> RowWindow | None:
    """``rows`` of an op whose output element q reads element q of each input (same NHWC shape)."""
    return RowWindow(1, 0, 1) if len(outs[0].shape) == 4 and ins[k] is not None else None


def op_modules() -> list[Any]:
    """Every op module of this package, by name (``_`` modules hold shared helpers and define no op)."""
    infos = sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
    return [importlib.import_module(f"{__name__}.{info.name}") for info in infos if not info.name.startswith("_")]


def _registry() -> dict[str, OpDef]:
    """Op name -> OpDef, from every module of this package (each exports ``OP``, or ``OPS`` when it defines several)."""
    found: dict[str, OpDef] = {}
    for module in op_modules():
        info_name = module.__name__.rsplit(".", 1)[1]
        for op in getattr(module, "OPS", None) or (module.OP,):
            if op.name in found:
                raise AssertionError(f"two ops named {op.name!r} (ops/{info_name}.py and another)")
            found[op.name] = op
    return found


_OPS: dict[str, OpDef] = {}


def get_op(name: str) -> OpDef:
    if not _OPS:
        _OPS.update(_registry())
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    """Op name -> OpDef of every registered op."""
    if not _OPS:
        _OPS.update(_registry())
    return dict(_OPS)


def loss_ops() -> tuple[str, ...]:
    """The ops that compute a training step's loss (``OpDef.loss``)."""
    return tuple(name for name, op in all_ops().items() if op.loss)


def declared(attr: str) -> dict[str, Any]:
    """The entries of the dict ``attr`` (``ONNX``, ``ONNX_QOPERATOR``, ``TFLITE``) of every op module merged: a
    source format's name -> the op module's handler of it. Two modules declaring one name is a bug."""
    found: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for module in op_modules():
        for key, value in getattr(module, attr, {}).items():
            if key in found:
                raise AssertionError(f"{attr} {key!r} is declared by {owner[key]} and {module.__name__}")
            found[key], owner[key] = value, module.__name__
    return found


def written_tensors(graph) -> list[str]:
    """The tensors a training graph updates in place (its nodes' ``writes`` inputs), in node order."""
    names = []
    for node in graph.nodes:
        for w in get_op(node.op).writes:
            if w < len(node.inputs) and node.inputs[w]:
                names.append(node.inputs[w])
    return names


def integer_form(op: str, scale: Callable[[Any, Node, float], float] | None = None) -> Integer:
    """The ``integer`` rule of a backward op whose integer form ``op`` computes on the integer gradient at input 0:
    its output gets the real scale ``scale(rewrite, node, s_g)`` (default: the gradient's s_g) and the gradient's
    run-time exponent."""
    def rule(node: Node, rewrite) -> Node:
        s = rewrite.scale(node.inputs[0], node)
        rewrite.int_output(node.outputs[0], s if scale is None else scale(rewrite, node, s))
        new = replace(node, op=op)
        rewrite.pass_exponent(new)
        return new
    return rule


def keep(node: Node, rewrite) -> Node:
    """The ``integer`` rule of a node the integer step keeps as it is (the reported loss, read by nothing)."""
    return node


def same_bound(attrs: Any, ins: Sequence[Tensor | None], bounds: Sequence[float | None]) -> list[float]:
    """``bound`` of an op whose output elements are input 0's elements or zeros (masks, pads, views)."""
    return [bounds[0]]


def no_macs(attrs: Any, ins: Sequence[Tensor | None], outs: Sequence[Tensor]) -> int:
    return 0
