"""Run a model's layers at another input size: ``resize_input(graph, (H, W))`` (docs/guide/input-size.md).

The pass changes the image input's height and width and re-infers every shape with the ops' own shape rules.
Weights, biases and quantization stay as they are, so the int8 arithmetic of each element is unchanged; what
changes is how many elements there are. Three rules keep the result the network a converter would have built
at the new size:

- every strided window (a convolution or pool with stride s) sees an extent that differs from the original
  by a multiple of s, so its explicit padding is still what SAME (or VALID) padding gives at the new size;
  other sizes are refused, naming the layer;
- a global average pool (an ``avg_pool2d`` whose unpadded window is exactly its whole input, output 1x1)
  stays global: its window becomes the new map (what the converter writes at that size; at the original size
  it is the same node). A fixed window larger than the new map is refused;
- a mean keeps averaging the whole map; an ONNX mean that folded 1/count into its scale gets the scale of the
  new count, rounded as the frontend rounds it (``mean_requant``).

A reshape or fully-connected layer that would receive a different number of features (a flatten of a spatial
map into the classifier) is refused: its weights fix the size.

Each op says which of these it is (``OpDef.resize``: a strided window, a fixed number of features, attrs that adapt
to the size); an op without one just follows its shape rule.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tinytrain.errors import UsageError
from tinytrain.ir import Graph, Node, Tensor
from tinytrain.ops import Resize, get_op

_NONE = Resize()


def parse_input_size(spec: int | str | tuple[int, int]) -> tuple[int, int]:
    """``128``, ``"128"``, ``"128x96"`` or ``(128, 96)`` -> (height, width)."""
    if isinstance(spec, int):
        spec = (spec, spec)
    if isinstance(spec, str):
        m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", spec)
        if not m:
            raise UsageError(f"--input-size {spec}: give N or HxW in pixels (e.g. 128 or 128x96)")
        spec = (int(m[1]), int(m[2] or m[1]))
    h, w = (int(v) for v in spec)
    if h <= 0 or w <= 0:
        raise UsageError(f"--input-size {h}x{w}: the height and width must be positive")
    return h, w


def resize_input(graph: Graph, size: int | str | tuple[int, int]) -> Graph:
    """``graph`` with its image input H x W = ``size`` and every shape re-inferred (the module docstring)."""
    h, w = parse_input_size(size)
    x = graph.tensors[graph.inputs[0]]
    if len(x.shape) != 4:
        raise UsageError(f"{graph.name}: --input-size needs an image model (input N,H,W,C); its input is {x.shape}")
    if x.shape[1:3] == (h, w):
        return graph
    tensors = dict(graph.tensors)
    tensors[x.name] = replace(x, shape=(x.shape[0], h, w, x.shape[3]))
    nodes = tuple(_resized_node(graph, node, tensors, (h, w)) for node in graph.nodes)
    return replace(graph, tensors=tensors, nodes=nodes)


def _resized_node(graph: Graph, node: Node, tensors: dict[str, Tensor], size: tuple[int, int]) -> Node:
    """``node`` at the new size (its attrs adapted); its outputs' new shapes written into ``tensors``."""
    old_ins = [graph.tensors[i] if i else None for i in node.inputs]
    ins = [tensors[i] if i else None for i in node.inputs]
    rule = get_op(node.op).resize or _NONE
    attrs = node.attrs
    if rule.adapt is not None:
        try:
            attrs = rule.adapt(node.attrs, old_ins[0], ins[0], graph.tensors[node.outputs[0]])
        except ValueError as e:
            raise UsageError(f"{_at(graph, size)}: layer {node.name} ({node.op}) {e}") from None
    try:
        shapes = get_op(node.op).infer_shapes(attrs, ins)
    except ValueError as e:
        raise _refusal(graph, node, rule, old_ins[0], ins[0], size, e) from None
    stride = _stride(node, rule, old_ins[0].shape)
    if stride is not None:
        _check_strides(graph, node, stride, old_ins[0].shape, ins[0].shape, size)
    for name, shape in zip(node.outputs, shapes):
        tensors[name] = replace(tensors[name], shape=tuple(shape))
    return replace(node, attrs=attrs)


def _stride(node: Node, rule: Resize, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The stride of a window whose padding depends on the input size, or None."""
    return None if rule.stride is None else rule.stride(node.attrs, shape)


def _check_strides(graph: Graph, node: Node, stride: tuple[int, int], old: tuple, new: tuple,
                   size: tuple[int, int]) -> None:
    """A strided window must see an extent that differs by a multiple of its stride (padding stays SAME/VALID)."""
    for axis, s in zip((1, 2), stride):
        if (new[axis] - old[axis]) % s:
            what = "rows" if axis == 1 else "columns"
            raise UsageError(f"{_at(graph, size)}: layer {node.name} (stride {s}) would see {new[axis]} {what} "
                             f"instead of {old[axis]}, which shifts its windows against the padding; choose a size "
                             f"that differs from {_size(graph)} by a multiple of {_total_stride(graph, axis)}")


def _total_stride(graph: Graph, axis: int) -> int:
    total = 1
    for node in graph.nodes:
        stride = _stride(node, get_op(node.op).resize or _NONE, graph.tensors[node.inputs[0]].shape)
        if stride is not None:
            total *= stride[axis - 1]
    return total


def _refusal(graph: Graph, node: Node, rule: Resize, old: Tensor, new: Tensor, size: tuple[int, int],
             e: ValueError) -> UsageError:
    """The one line for a layer that cannot take its input at the new size."""
    if rule.features and old.size != new.size:
        return UsageError(f"{_at(graph, size)}: layer {node.name} ({node.op}) takes {old.shape[1:]} = {old.size} "
                          f"values at the model's size but would get {new.shape[1:]} = {new.size}; its weights fix "
                          f"the number of features, so this model runs only at {_size(graph)}")
    if rule.stride is not None:
        return UsageError(f"{_at(graph, size)}: too small for layer {node.name} ({node.op}, input "
                          f"{new.shape[1]}x{new.shape[2]}: {e}); give a larger --input-size")
    return UsageError(f"{_at(graph, size)}: layer {node.name} ({node.op}) does not take its input at this size ({e})")


def _at(graph: Graph, size: tuple[int, int]) -> str:
    return f"{graph.name} at input size {size[0]}x{size[1]}"


def _size(graph: Graph) -> str:
    _, h, w, _ = graph.tensors[graph.inputs[0]].shape
    return f"{h}x{w}"
