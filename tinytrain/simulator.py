"""The numpy simulator: the runnable spec every other engine is checked against.

Runs a graph on a batch of any size (graphs are built for batch 1) in chunks, each node through its
op's reference implementation. Training graphs (tinytrain/training/) run through the same executor:
``train`` feeds one sample per step (batch-1 semantics: every sample is a forward, a backward and an
in-place update, as on the device); the update nodes write the trainable int8 weights, int32 biases and
optimizer state of a :class:`TrainState`. The update rule itself is specified in ops/sgd_update.py:
per channel c of an int8 weight, w <- clamp(w - R(G * k[c]), -127, 127) with G the fp32 gradient of the
real weight, k[c] = lr / s_w[c] (QAS, training/qas.py) and R the stochastic (or nearest) rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from tinytrain.ir import DType, Graph, Role
from tinytrain.names import LABEL, LOSS, STEP_INPUT, TARGET
from tinytrain.ops import get_op, written_tensors
from tinytrain.training.finite import gradient_bounds


def forward(graph: Graph, inputs: Mapping[str, np.ndarray], chunk: int = 64) -> dict[str, np.ndarray]:
    """Graph outputs for internal (int8) inputs whose dimension 0 is the batch."""
    n = len(next(iter(inputs.values())))
    parts = [_forward_chunk(graph, {k: v[i : i + chunk] for k, v in inputs.items()}) for i in range(0, n, chunk)]
    return {name: np.concatenate([p[name] for p in parts]) for name in graph.outputs}


def _forward_chunk(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = execute(graph, inputs)
    return {name: values[name] for name in graph.outputs}


def execute(graph: Graph, inputs: Mapping[str, np.ndarray], state: dict[str, np.ndarray] | None = None,
            keep_all: bool = False) -> dict[str, np.ndarray]:
    """Run every node once. Tensors with data are read from ``state`` when it holds them (else their
    graph data); ops that write in place (``OpDef.writes``) store the new values into ``state``.
    Returns the graph outputs, or every computed tensor with ``keep_all``."""
    values: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        x = np.asarray(inputs[name])
        if x.dtype != t.dtype.np or x.shape[1:] != t.shape[1:]:
            raise ValueError(f"input {name}: expected {t.dtype.value} (N,{','.join(map(str, t.shape[1:]))}), got {x.dtype} {x.shape}")
        values[name] = x
    last_use = {i: k for k, node in enumerate(graph.nodes) for i in node.inputs}
    keep = set(graph.outputs)

    def array(name: str) -> np.ndarray:
        if state is not None and name in state:
            return state[name]
        t = graph.tensors[name]
        return t.data if t.has_data else values[name]

    for k, node in enumerate(graph.nodes):
        op = get_op(node.op)
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        arrays = [array(i) if i else None for i in node.inputs]
        outs = [graph.tensors[o] for o in node.outputs]
        results = op.reference(node.attrs, arrays, ins, outs)
        if op.writes:
            if state is None:
                raise ValueError(f"node {node.name} updates parameters: run it with a training state")
            for w, value in zip(op.writes, results, strict=True):
                if w < len(node.inputs) and node.inputs[w]:
                    state[node.inputs[w]] = value
            continue
        for name, value in zip(node.outputs, results, strict=True):
            values[name] = value
        if not keep_all:
            for i in node.inputs:
                if i in values and last_use.get(i) == k and i not in keep:
                    del values[i]
    return values if keep_all else {name: values[name] for name in graph.outputs}


def to_internal(graph: Graph, x: np.ndarray) -> np.ndarray:
    """A user's quantized input (the model's own dtype) -> the internal int8 form."""
    if graph.uint8_input:
        if x.dtype != np.uint8:
            raise ValueError(f"this model takes uint8 input, got {x.dtype}")
        return (x.astype(np.int16) - 128).astype(np.int8)
    return x


def to_external(graph: Graph, y: np.ndarray) -> np.ndarray:
    """An internal int8 output -> the model's own output dtype."""
    if graph.uint8_output and y.dtype == np.int8:
        return (y.astype(np.int16) + 128).astype(np.uint8)
    return y


def external_input_dtype(graph: Graph) -> np.dtype:
    t = graph.tensors[graph.inputs[0]]
    return np.dtype(np.uint8) if graph.uint8_input and t.dtype == DType.INT8 else t.dtype.np


# ---- training -------------------------------------------------------------------------------------------

@dataclass
class TrainState:
    """What a training run changes: the tensors update nodes write (trainable int8 weights, int32 biases,
    fp32 momentum buffers) and the step counter (the stochastic rounding's stream position). ``nonfinite``
    counts the steps not applied because their loss was NaN or Inf (not part of the state file)."""

    tensors: dict[str, np.ndarray]
    step: int = 0
    nonfinite: int = 0

    def copy(self) -> TrainState:
        return TrainState({k: v.copy() for k, v in self.tensors.items()}, self.step, self.nonfinite)


def init_state(graph: Graph) -> TrainState:
    """The initial state: copies of the graph data of every tensor the training graph writes. Refuses (PlanError) a
    graph whose gradients a finite loss does not prove finite (training/finite.py: the guard checks the loss)."""

    gradient_bounds(graph)
    return TrainState({name: graph.tensors[name].data.copy() for name in written_tensors(graph)})


def train_step(graph: Graph, state: TrainState, x, label: int, keep_all: bool = False,
               target: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One training step on one sample: forward, loss, backward, update.

    ``x`` is the (1,H,W,C) internal int8 image, or a mapping of every image-derived graph input (a suffix
    graph of ``split_frozen``). Mutates ``state`` and returns the graph outputs (``loss`` first), or every
    tensor with ``keep_all``. The non-finite guard: a step whose loss is NaN or Inf is not applied (the state
    is untouched, ``state.nonfinite`` counts it), as in the C (train_model.c.j2); a finite loss implies finite
    gradients (training/finite.py, checked by ``init_state``).
    """

    inputs = dict(x) if isinstance(x, Mapping) else {graph.inputs[0]: x}
    if any(len(v) != 1 for v in inputs.values()):
        raise ValueError(f"a training step takes one sample, got a batch of {max(len(v) for v in inputs.values())}")
    inputs[LABEL] = np.array([label], np.int32)
    if TARGET in graph.inputs:  # an mse loss against a float target (``target``: the sample's, output-shaped)
        inputs[TARGET] = np.asarray(target, np.float32)[None]
    if STEP_INPUT in graph.inputs:
        inputs[STEP_INPUT] = np.array([state.step], np.int32)
    trial = dict(state.tensors)  # update nodes replace entries (never write arrays in place): no copy needed
    with np.errstate(all="ignore"):  # a non-finite step's casts are discarded below
        values = execute(graph, inputs, trial, keep_all)
    if np.all(np.isfinite(values[LOSS])):
        state.tensors.update(trial)
        state.step += 1
    else:
        state.nonfinite += 1
    return values


def split_frozen(graph: Graph, live: Iterable[str] = ()) -> tuple[Graph, Graph]:
    """(prefix, suffix) of a training graph: the prefix holds the nodes no update can change (they read no
    written tensor, label or step, directly or not); its outputs are what the suffix reads of them. Running
    the prefix once per image and the suffix every step is bit-identical to running the whole graph.
    ``live`` adds tensors that change (the written tensors of a training graph, to split its forward graph
    the same way)."""
    from dataclasses import replace


    live = set(written_tensors(graph)) | {LABEL, STEP_INPUT, TARGET} | set(live)
    frozen, rest = [], []
    for node in graph.nodes:
        if get_op(node.op).writes or any(i in live for i in node.inputs):
            live.update(node.outputs)
            rest.append(node)
        else:
            frozen.append(node)
    produced = {o for n in frozen for o in n.outputs} | set(graph.inputs[:1])
    frontier = tuple(dict.fromkeys(i for n in rest for i in n.inputs if i in produced))
    prefix = replace(graph, nodes=tuple(frozen), inputs=graph.inputs[:1], outputs=frontier)
    suffix = replace(graph, nodes=tuple(rest), inputs=frontier + graph.inputs[1:])
    return prefix, suffix


def train(graph: Graph, state: TrainState, xs: np.ndarray, labels: np.ndarray, order=None,
          frozen_cache: bool = True, features: Mapping[str, np.ndarray] | None = None,
          targets: np.ndarray | None = None) -> np.ndarray:
    """Batch-1 SGD, one update per sample, in ``order`` (default: as given); returns the per-sample losses.

    With ``frozen_cache`` the frozen prefix (``split_frozen``) runs once per image, batched. ``features``
    gives the prefix's outputs for every row of ``xs`` instead (computed once by the caller, e.g. for several
    runs on the same images); the prefix is then not run. ``targets``: each sample's float target (a graph with
    the input ``target``)."""

    order = np.arange(len(xs)) if order is None else np.asarray(order)
    used = np.unique(order)  # images actually visited; row r of feats is image used[r]
    if features is not None:
        prefix, suffix = split_frozen(graph)
        feats = {k: np.asarray(features[k])[used] for k in prefix.outputs}
    elif frozen_cache:
        prefix, suffix = split_frozen(graph)
        feats = forward(prefix, {prefix.inputs[0]: xs[used]}) if prefix.nodes else {prefix.inputs[0]: xs[used]}
        feats = {k: v for k, v in feats.items() if k in suffix.inputs}
    else:
        suffix, feats = graph, {graph.inputs[0]: xs[used]}
    losses = np.empty(len(order), np.float32)
    for j, k in enumerate(order):
        r = int(np.searchsorted(used, k))
        sample = {name: v[r : r + 1] for name, v in feats.items()}
        target = None if targets is None else targets[k]
        losses[j] = train_step(suffix, state, sample, int(labels[k]), target=target)[LOSS][0]
    return losses


def with_state(graph: Graph, state: TrainState) -> Graph:
    """The (forward) graph with its trainable tensors replaced by the state's values."""
    from dataclasses import replace

    tensors = dict(graph.tensors)
    for name, value in state.tensors.items():
        if name in tensors and tensors[name].role is not Role.OPTIMIZER_STATE:
            tensors[name] = replace(tensors[name], data=value.copy())
    return replace(graph, tensors=tensors)
