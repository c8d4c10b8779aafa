"""The frozen-prefix cut of the host C engine: the layers below the first one a plan touches run once per image.

The device recomputes the frozen layers at every step, with the same result; the host C engine (``train``, the
plan search's fine-tunes) runs them once per image with the C forward pass and trains the model cut there
(``suffix_model``) on their output: the same training step, bit for bit, on the cut tensor. The loss keeps what
it reads below the cut: an autoencoder's reconstruction of the model's input becomes an mse against that input's
real values (ops/mse.py ``dequantized``, the very float32 values the whole step's loss computes), given as float
targets (``tt_set_target``), so its cut step is the whole step's too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinytrain.engines.host_c import predict
from tinytrain.engines.samples import Samples
from tinytrain.errors import PlanError
from tinytrain.ir import Graph, Role
from tinytrain.ops.mse import dequantized
from tinytrain.training.finite import gradient_bounds
from tinytrain.training.sparse import Plan, layers
from tinytrain.training.train_graph import build_training_graph


def suffix_model(graph: Graph, plan: Plan) -> tuple[Graph, Plan, str | None]:
    """(model cut just below the first layer the plan touches, the plan re-indexed for it, the cut tensor).

    The cut model's input is the (int8, quantized) input tensor of that layer; training it on that tensor's
    values is the same training step as training the whole model on the images (the loss permitting: ``step``).
    Returns the model itself (cut None) when the plan touches layer 0 or a later node reads another tensor from
    below the cut (a residual crossing it)."""
    ls = layers(graph)
    first = min([len(ls) - plan.bias_last_k] + [w.conv for w in plan.weights])
    if first <= 0:
        return graph, plan, None
    start = graph.nodes.index(ls[first])
    cut = ls[first].inputs[0]
    below = {o for n in graph.nodes[:start] for o in n.outputs} | set(graph.inputs)
    nodes = graph.nodes[start:]
    if cut not in below or any(i in below and i != cut for n in nodes for i in n.inputs):
        return graph, plan, None
    used = {cut} | set(graph.outputs) | {i for n in nodes for i in (*n.inputs, *n.outputs) if i}
    tensors = {k: t for k, t in graph.tensors.items() if k in used}
    tensors[cut] = replace(tensors[cut], role=Role.INPUT)
    g = replace(graph, nodes=nodes, inputs=(cut,), tensors=tensors)
    p = replace(plan, weights=tuple(replace(w, conv=w.conv - first) for w in plan.weights))
    return g, p, cut


def stretch(graph: Graph, src: str, src_start: int, stop: int, cut: str) -> Graph:
    """The frozen layers ``graph.nodes[src_start:stop]`` as a model from the tensor ``src`` (the model's input or
    a cut: nothing from ``src_start`` on reads another tensor from below it) to ``cut``."""
    nodes = graph.nodes[src_start:stop]
    used = {src, cut} | {i for n in nodes for i in (*n.inputs, *n.outputs) if i}
    tensors = {k: t for k, t in graph.tensors.items() if k in used}
    tensors[src] = replace(tensors[src], role=Role.INPUT)
    return replace(graph, nodes=nodes, inputs=(src,), outputs=(cut,), tensors=tensors)


def reconstruction_targets(graph: Graph, x: np.ndarray) -> np.ndarray:
    """The float32 targets an autoencoder's cut step reconstructs: the real values of its int8 inputs ``x``."""
    return dequantized(x, graph.tensors[graph.inputs[0]]).reshape(x.shape)


def cut_features(graph: Graph, g: Graph, cut: str, x: np.ndarray) -> np.ndarray:
    """The cut tensor's values for every image of ``x``: the C forward of the frozen layers below the cut model
    ``g`` (``host_c.predict``, bit-identical to the simulator's)."""
    return predict(stretch(graph, graph.inputs[0], 0, len(graph.nodes) - len(g.nodes), cut), x)


def step(graph: Graph, plan: Plan, config, samples: Samples) -> tuple[Graph, Samples]:
    """(training graph, its samples) of the host C engine: the step of the layers from the first one ``plan``
    touches, on their input tensor (``cut_features``), the whole step's results bit for bit; or, for a plan
    without a cut (layer 0 trained, a residual across the cut), the whole step on the images."""
    g, p, cut = suffix_model(graph, plan)
    targets = samples.targets
    if cut is None:
        return build_training_graph(graph, plan, config, targets is not None), samples
    reconstruct = plan.loss == "mse" and targets is None
    if reconstruct:
        targets = reconstruction_targets(graph, samples.x)
    tg = build_training_graph(g, p, config, targets is not None)
    if reconstruct:
        try:  # a float target's bound is looser than the int8 input's: the whole step when it proves nothing
            gradient_bounds(tg)
        except PlanError:
            return build_training_graph(graph, plan, config), samples
    return tg, Samples(cut_features(graph, g, cut, samples.x), samples.y, targets)
