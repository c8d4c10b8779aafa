"""A zero-point PAD folded into the convolution it feeds (``fold_pads``, applied by ``load_model``).

The TFLite converter writes Keras' ``ZeroPadding2D`` (MobileNetV2 before each stride-2 depthwise convolution, and
before the first convolution) as an explicit PAD followed by a VALID convolution; LiteRT-torch does the same for
PyTorch's symmetric padding of stride-2 convolutions. Kept, the PAD materializes its larger output beside its input
(the 16 x 16 x 64 and 14 x 14 x 64 buffers of the benchmark's MobileNetV2, 28.3 KB of arena where the ONNX export of
the same network, whose Conv carries ``pads``, needs 8.8 KB) and stops the row streaming of the layers around it.

The PAD fills with its output's zero point, which equals its input's (both frontends check it), and a convolution
pads its input with that input's zero point (ops/conv2d/forward.py ``_centered_input``: a padded cell contributes
(zx - zx) * w = 0). So PAD (before, after) then a convolution with padding (top, left, bottom, right) is the
convolution of the unpadded input with padding (top + before_h, left + before_w, bottom + after_h, right + after_w):
the same accumulators, byte for byte, asymmetric or not (the kernels take the top / left padding and bound-check the
rest). Its backward is the convolution's input gradient over the unpadded input, which is what the PAD's
gradient (the padded gradient cut back) gave.

Folded only where exact and cheap to prove: a spatial PAD (no channel padding) of an NHWC tensor whose output is read
by one convolution alone, as its input, is no graph output, and carries the input's quantization; each folded side no
wider than the window's extent - 1 (every output window still reads the input).
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import Graph, Node


def _foldable(graph: Graph, pad: Node, consumers: dict[str, list[Node]]) -> Node | None:
    """The convolution ``pad`` folds into, or None."""
    pads = pad.attrs.pads
    y = pad.outputs[0]
    readers = consumers.get(y, [])
    if len(pads) != 3 or pads[2] != (0, 0) or y in graph.outputs or len(readers) != 1:
        return None
    conv = readers[0]
    if conv.op != "conv2d" or conv.inputs[0] != y or y in conv.inputs[1:]:
        return None
    x, out = graph.tensors[pad.inputs[0]], graph.tensors[y]
    if x.quant != out.quant or x.dtype != out.dtype:
        return None
    a = conv.attrs
    _, kh, kw, _ = graph.tensors[conv.inputs[1]].shape
    reach = ((kh - 1) * a.dilation[0], (kw - 1) * a.dilation[1])
    top, left, bottom, right = _summed(a.padding, pads)
    return conv if max(top, bottom) <= reach[0] and max(left, right) <= reach[1] else None


def _summed(padding: tuple[int, int, int, int], pads) -> tuple[int, int, int, int]:
    (ph0, ph1), (pw0, pw1) = pads[0], pads[1]
    top, left, bottom, right = padding
    return top + ph0, left + pw0, bottom + ph1, right + pw1


def fold_pads(graph: Graph) -> Graph:
    """``graph`` with every foldable PAD (module docstring) removed and its padding moved into the convolution."""
    consumers = graph.consumers()
    folded = {}  # conv name -> its node reading the unpadded input
    dropped = set()
    for node in graph.nodes:
        if node.op != "pad":
            continue
        conv = _foldable(graph, node, consumers)
        if conv is None:
            continue
        attrs = replace(conv.attrs, padding=_summed(conv.attrs.padding, node.attrs.pads))
        folded[conv.name] = replace(conv, inputs=(node.inputs[0],) + conv.inputs[1:], attrs=attrs)
        dropped.add(node.name)
    if not folded:
        return graph
    nodes = tuple(folded.get(n.name, n) for n in graph.nodes if n.name not in dropped)
    gone = {n.outputs[0] for n in graph.nodes if n.name in dropped}
    return replace(graph, nodes=nodes, tensors={k: t for k, t in graph.tensors.items() if k not in gone})
