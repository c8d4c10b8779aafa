"""Reverse-mode autodiff: the backward pass of a training step as IR nodes, from the per-op rules.

The walk knows nothing about any op: it visits forward nodes in reverse order and calls each op's
``OpDef.backward`` rule with the gradients of the node's outputs; the rule emits fp32 backward nodes
(tinytrain/ops/<op>.py) and returns the gradients of the node's inputs. Where a tensor has several
readers its gradients are summed with ``grad_accumulate``. Gradients are of the dequantized (real)
values; the backward reads the saved int8 activations and dequantizes them on the fly.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, Role
from tinytrain.names import GRAD_SUFFIX, LABEL, LOSS, RESERVED, TARGET, grad_name
from tinytrain.ops import get_op
from tinytrain.ops.grad_accumulate import GradAccumulateAttrs
from tinytrain.ops.mse import MseAttrs
from tinytrain.ops.softmax_xent import SoftmaxXentAttrs
from tinytrain.builder import GraphBuilder

def param_gradients(graph: Graph) -> dict[str, str]:
    """{parameter: its gradient} for every parameter gradient among the graph outputs."""
    return {o[: -len(GRAD_SUFFIX)]: o for o in graph.outputs
            if o.endswith(GRAD_SUFFIX) and o[: -len(GRAD_SUFFIX)] in graph.tensors}


def trainable_params(graph: Graph) -> list[str]:
    """Weights and biases read by nodes that have a backward rule, in node order."""
    params: list[str] = []
    for node in graph.nodes:
        if get_op(node.op).backward is None:
            continue
        for i in node.inputs:
            if i and graph.tensors[i].role in (Role.WEIGHT, Role.BIAS) and i not in params:
                params.append(i)
    return params


def logits_of(graph: Graph) -> str:
    """The int8 logits: output 0, looking through a final softmax / dequantize."""
    producers = graph.producers()
    name = graph.outputs[0]
    while name in producers and get_op(producers[name].op).after_logits:
        name = producers[name].inputs[0]
    t = graph.tensors[name]
    if t.dtype != DType.INT8 or t.quant is None:
        raise UnsupportedModelError(f"cannot train: the logits {name} are not an int8 tensor")
    return name


def is_forward(graph: Graph, node: Node) -> bool:
    """Forward nodes produce int8/int32 activations; loss, backward and update nodes produce fp32 or nothing."""
    return bool(node.outputs) and all(
        graph.tensors[o].dtype != DType.FLOAT32 and graph.tensors[o].role in (Role.ACTIVATION, Role.SAVED, Role.OUTPUT)
        for o in node.outputs)


def mark_saved(graph: Graph) -> Graph:
    """Role SAVED for exactly the forward activations some training node reads, ACTIVATION for the others."""
    read_by_training = {i for n in graph.nodes if not is_forward(graph, n) for i in n.inputs if i}
    tensors = dict(graph.tensors)
    for name, t in graph.tensors.items():
        if t.role in (Role.ACTIVATION, Role.SAVED):
            role = Role.SAVED if name in read_by_training else Role.ACTIVATION
            if role is not t.role:
                tensors[name] = replace(t, role=role)
    return replace(graph, tensors=tensors)


def differentiate(graph: Graph, wrt: Sequence[str] | None = None, loss: str = "xent", targets: bool = False) -> Graph:
    """Append the loss and the gradients of ``wrt`` (default: every trainable parameter).

    Invariant: the forward nodes and tensors are kept as they are, in order; after them come the loss
    ``softmax_xent(logits, label)`` (``loss`` "xent") or ``mse(output, input)`` (``loss`` "mse": the
    reconstruction of the model's int8 input; the label is then read by nothing; with ``targets``: against the
    float32 input ``target`` of the output's shape, which the inputs gain after the label) (output ``loss``), its gradient
    seed and the backward nodes in reverse
    forward order; the inputs gain ``label`` (int32 (N,)); the outputs become (loss, grad_name(p) for p in
    wrt). A gradient is computed only for tensors that depend on a parameter in ``wrt``; forward
    activations the backward reads have role SAVED.
    """
    for reserved in RESERVED:
        if reserved in graph.tensors:
            raise UnsupportedModelError(f"the model has a tensor named {reserved!r}, a name training graphs reserve")
    wrt = list(trainable_params(graph) if wrt is None else wrt)
    for p in wrt:
        if p not in graph.tensors or graph.tensors[p].role not in (Role.WEIGHT, Role.BIAS):
            raise ValueError(f"cannot differentiate with respect to {p}: not a weight or bias of the graph")
    requires = set(wrt)
    for node in graph.nodes:
        if any(i in requires for i in node.inputs):
            requires.update(node.outputs)
    b = GraphBuilder(graph, frozenset(requires))
    logits = logits_of(graph)
    n_batch = graph.tensors[logits].shape[0]
    label = b.add_tensor(LABEL, (n_batch,), DType.INT32, Role.INPUT)
    b.inputs.append(label)
    seed = _emit_loss(b, graph, logits, label, loss, targets)
    pending: dict[str, list[str]] = {logits: [seed]}

    def total(name: str) -> str | None:
        parts = pending.pop(name, [])
        if not parts:
            return None
        g = parts[0]
        for k, other in enumerate(parts[1:], 1):
            g = b.emit("grad_accumulate", [g, other], GradAccumulateAttrs(), f"{name}.grad_sum{k}")[0]
        return g

    for node in reversed(graph.nodes):
        out_grads = [total(o) for o in node.outputs]
        if all(g is None for g in out_grads) or not any(b.needs_grad(i) for i in node.inputs):
            continue
        rule = get_op(node.op).backward
        if rule is None:
            raise UnsupportedModelError(f"cannot train through {node.op} node {node.name}: it has no backward rule; "
                                        "update only layers after it")
        in_grads = rule(b, node, out_grads)
        for i, g in zip(node.inputs, in_grads, strict=True):
            if g is not None:
                pending.setdefault(i, []).append(g)
    b.outputs = [LOSS]
    for p in wrt:
        g = total(p)
        if g is None:
            raise UnsupportedModelError(f"parameter {p} does not affect the loss; it cannot be trained")
        _rename(b, g, grad_name(p))
        b.outputs.append(grad_name(p))
    return mark_saved(b.build())


def _emit_loss(b: GraphBuilder, graph: Graph, logits: str, label: str, loss: str, targets: bool) -> str:
    """The loss node (output ``loss``) and its gradient's (returned): softmax cross-entropy against the label, or the
    mean squared error against the model's input (same shape as the output: reconstruction)."""
    if loss == "xent":
        b.emit("softmax_xent", [logits, label], SoftmaxXentAttrs(), LOSS, role=Role.OUTPUT)
        return b.emit("softmax_xent_grad", [logits, label], SoftmaxXentAttrs(), "loss.grad_logits")[0]
    if loss != "mse":
        raise ValueError(f"unknown loss {loss!r}")
    if targets:
        target = b.add_tensor(TARGET, graph.tensors[logits].shape, DType.FLOAT32, Role.INPUT)
        b.inputs.append(target)
    else:
        target = graph.inputs[0]
        if graph.tensors[target].shape != graph.tensors[logits].shape:
            raise UnsupportedModelError(f"--loss mse reconstructs the input: the output {graph.tensors[logits].shape} "
                                        f"must have the input's shape {graph.tensors[target].shape}")
    b.emit("mse", [logits, target], MseAttrs(), LOSS, role=Role.OUTPUT)
    return b.emit("mse_grad", [logits, target], MseAttrs(), "loss.grad_output")[0]


def _rename(b: GraphBuilder, old: str, new: str) -> None:
    """Give a freshly computed gradient its final name (it has exactly one producer and no reader yet)."""
    if new in b.tensors:
        raise ValueError(f"tensor {new} already exists")
    b.tensors[new] = replace(b.tensors.pop(old), name=new)
    for k, n in enumerate(b.nodes):
        if old in n.inputs:
            raise AssertionError(f"{old} is already read by {n.name}")
        if old in n.outputs:
            b.nodes[k] = replace(n, outputs=tuple(new if o == old else o for o in n.outputs))
