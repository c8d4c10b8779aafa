"""A new classifier head (``--new-head N``): the last layer replaced by a fresh int8 one with N outputs.

The replaced layer is the model's last fully-connected layer, or its last convolution when that is a
1x1 convolution on a 1x1 map (TF1 MobileNets). Initialization is deterministic and platform independent:
W = a (2u - 1) with a = 1/sqrt(K) (PyTorch's Linear bound), u the stochastic-rounding hash draws of
ops/sgd_update.py (seed, step 0, stream HEAD_STREAM), bias 0.

Quantization, chosen so learning is not stuck at zero: the weight scale is s_W = 4a / 127 (the initial
weights use a quarter of the int8 range, leaving room to grow 4x), so a QAS step lr G / s_W of a typical
gradient is about lr |g x| 32 sqrt(K) LSB — about one LSB for lr = 0.01 and K = 32, several for K >= 256;
a coarser scale would round most early steps to zero. Logits are quantized with s = 1/8, zp = 0
(range [-16, 15.875], wide enough for a confident softmax). Bias scale s_x s_W, requantization per channel,
rounded as the replaced layer's was (the base graph's origin: TFLite's double rounding, or an ONNX import's
float32 rounding of onnxruntime, ``Requant.fp32``, or single rounding), so the head computes like the rest of
the model and like the runtime the model came from.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tinytrain.errors import UnsupportedModelError, UsageError
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.conv2d import Conv2dAttrs
from tinytrain.ops.fully_connected import FullyConnectedAttrs
from tinytrain.ops.reshape import ReshapeAttrs
from tinytrain.ops.softmax import SoftmaxAttrs
from tinytrain.ops.sgd_update import uniform
from tinytrain.quant import Requant

HEAD_STREAM = 0x48454144  # "HEAD"
LOGIT_SCALE = 0.125
WEIGHT_RANGE = 4.0  # the int8 range spans WEIGHT_RANGE x the init bound


def head_weights(n: int, k: int, seed: int) -> tuple[np.ndarray, float]:
    """(int8 (n, k) weights, their scale): the deterministic initialization described above."""
    a = 1.0 / math.sqrt(k)
    s_w = float(np.float32(WEIGHT_RANGE * a / 127.0))
    u = uniform(seed, 0, HEAD_STREAM, n * k).astype(np.float64).reshape(n, k)
    w = np.clip(np.rint(a * (2.0 * u - 1.0) / s_w), -127, 127).astype(np.int8)
    return w, s_w


def new_head(graph: Graph, n_classes: int, seed: int = 0) -> Graph:
    """Replace the last layer by a new int8 layer with ``n_classes`` outputs.

    Invariant: every node before the replaced layer and its tensors are unchanged; the nodes after it
    (only reshape, softmax, dequantize are allowed) are re-shaped to the new class count, a softmax gets
    the new logit scale; the old weight and bias disappear.
    """
    if n_classes < 2:
        raise UsageError(f"--new-head {n_classes}: a classifier needs at least 2 classes")
    k_last = max((k for k, n in enumerate(graph.nodes) if get_op(n.op).layer), default=None)
    if k_last is None:
        raise UnsupportedModelError("the model has no convolution or fully-connected layer to replace")
    node = graph.nodes[k_last]
    x = graph.tensors[node.inputs[0]]
    old_out = graph.tensors[node.outputs[0]]
    if node.op == "conv2d":
        w_shape = graph.tensors[node.inputs[1]].shape
        if x.shape[1:3] != (1, 1) or w_shape[1:3] != (1, 1) or node.attrs.groups != 1:
            raise UnsupportedModelError(f"the last layer {node.name} is not fully connected (nor a 1x1 conv on a 1x1 map)")
    k = x.shape[-1]
    w, s_w = head_weights(n_classes, k, seed)
    s_b = np.float32(x.quant.s) * np.float32(s_w)
    tensors = {n: t for n, t in graph.tensors.items() if n not in node.inputs[1:]}
    w_name, b_name = f"{node.name}.new_head.weight", f"{node.name}.new_head.bias"
    w_quant = QuantParams((s_w,) * n_classes, (0,) * n_classes, 0)
    if node.op == "conv2d":
        w = w.reshape(n_classes, 1, 1, k)
    tensors[w_name] = Tensor(w_name, w.shape, DType.INT8, Role.WEIGHT, w_quant, w)
    tensors[b_name] = Tensor(b_name, (n_classes,), DType.INT32, Role.BIAS,
                             QuantParams((float(s_b),) * n_classes, (0,) * n_classes, 0), np.zeros(n_classes, np.int32))
    y_quant = QuantParams.per_tensor(LOGIT_SCALE, 0)
    requant = _head_requant(node.attrs.requant, float(np.float32(s_b) / np.float32(LOGIT_SCALE)), n_classes)
    if node.op == "conv2d":
        attrs = Conv2dAttrs((1, 1), (0, 0, 0, 0), requant)
    else:
        attrs = FullyConnectedAttrs(requant)
    tensors[old_out.name] = replace(old_out, shape=old_out.shape[:-1] + (n_classes,), quant=y_quant)
    nodes = list(graph.nodes)
    nodes[k_last] = Node(node.name, node.op, (node.inputs[0], w_name, b_name), node.outputs, attrs)
    for j in range(k_last + 1, len(nodes)):
        nodes[j] = _reshape_after(nodes[j], tensors, n_classes)
    return replace(graph, tensors=tensors, nodes=tuple(nodes))


def _head_requant(old: Requant, scale: float, n_classes: int) -> Requant:
    """The new head's requantization, rounded like the layer it replaces. ``scale`` = float32(s_b / s_y), as
    onnxruntime computes it (s_y = LOGIT_SCALE is a power of two, so the division is exact)."""
    if old.fp32:
        return Requant.from_scales([scale] * n_classes, fp32=True)
    return Requant.from_scales([scale] * n_classes, old.single_rounding)


def _reshape_after(node: Node, tensors: dict[str, Tensor], n_classes: int) -> Node:
    x = tensors[node.inputs[0]]
    out = tensors[node.outputs[0]]
    if node.op == "reshape":
        attrs = ReshapeAttrs(node.attrs.shape[:-1] + (n_classes,))
        tensors[out.name] = replace(out, shape=(out.shape[0],) + attrs.shape, quant=x.quant)
        return replace(node, attrs=attrs)
    if node.op == "softmax":
        tensors[out.name] = replace(out, shape=x.shape)
        return replace(node, attrs=SoftmaxAttrs.from_scale(node.attrs.beta, x.quant.s))
    if node.op == "dequantize":
        tensors[out.name] = replace(out, shape=x.shape, quant=None)
        return node
    raise UnsupportedModelError(f"cannot put a new head before {node.op} node {node.name}; only reshape, softmax "
                                "and dequantize may follow the last layer")
