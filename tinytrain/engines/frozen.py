"""The frozen layers of a simulator run: what no update of the training step can change, computed once per image.

``simulator.split_frozen`` cuts a graph into the nodes no update can change and the rest; their outputs, for every
image, are what the training graph's suffix reads at each step and what the forward graph's suffix needs to score
an image. Scoring or training through the suffix is bit-identical to the whole graph. The outputs are remembered
by content (nodes, tensors, images) in this process, so several runs on the same frozen layers and images
(benchmarks, tests) compute them once.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import replace

import numpy as np

from tinytrain.ir import Graph
from tinytrain.ops import written_tensors
from tinytrain.simulator import forward, split_frozen, with_state

_OUTPUTS: dict[str, dict[str, np.ndarray]] = {}  # content digest -> outputs (a few entries, in-process)
_KEEP = 4


def prefix_outputs(prefix: Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """``forward(prefix, x)`` (every output of the frozen ``prefix``), remembered by content."""
    if not prefix.nodes:
        return {name: x for name in prefix.outputs}
    h = hashlib.sha256(pickle.dumps((prefix.nodes, prefix.inputs, prefix.outputs)))
    for name in sorted({i for n in prefix.nodes for i in (*n.inputs, *n.outputs) if i}):
        h.update(pickle.dumps(prefix.tensors[name]))
    h.update(pickle.dumps((x.shape, x.dtype.str)) + np.ascontiguousarray(x).tobytes())
    key = h.hexdigest()
    if key not in _OUTPUTS:
        while len(_OUTPUTS) >= _KEEP:
            _OUTPUTS.pop(next(iter(_OUTPUTS)))
        _OUTPUTS[key] = forward(prefix, {prefix.inputs[0]: x})
    return _OUTPUTS[key]


def frozen_features(graph: Graph, tg: Graph, x: np.ndarray) -> tuple[dict[str, np.ndarray], Graph]:
    """(features, forward suffix) of a run of the training graph ``tg`` of ``graph``: the outputs, for every image
    of ``x``, of the layers no update of ``tg`` can change — what ``tg``'s suffix reads and what the forward
    graph's suffix (returned) needs to score an image."""
    t_prefix, _ = split_frozen(tg)
    f_prefix, f_suffix = split_frozen(graph, live=written_tensors(tg))
    produced = {o for n in f_prefix.nodes for o in n.outputs} | set(graph.inputs[:1])
    both = tuple(dict.fromkeys(t_prefix.outputs + f_prefix.outputs))
    if produced.issuperset(both):  # the usual case: one pass over the frozen forward layers serves both
        return prefix_outputs(replace(f_prefix, outputs=both), x), f_suffix
    return {**prefix_outputs(t_prefix, x), **prefix_outputs(f_prefix, x)}, f_suffix


def suffix_outputs(suffix: Graph, features: dict[str, np.ndarray], rows: np.ndarray, state=None) -> np.ndarray:
    """The forward graph's int8 output for ``rows`` from their frozen features (with the weights of ``state``)."""
    g = suffix if state is None else with_state(suffix, state)
    return forward(g, {k: features[k][rows] for k in g.inputs})[g.outputs[0]]
