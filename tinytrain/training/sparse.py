"""Sparse-update plans (docs/design.md §5b): the version-1 plan file, the presets, channel selection, and the
pass that applies a plan to a training graph.

A plan names layers by their index among the model's convolution / fully-connected nodes in topological
order (``layers``). It updates the biases of the last ``bias_last_k`` layers and, for each entry of
``weights``, the weights of a fraction ``ratio`` of that layer's output channels, chosen by
``select_channels`` — the one function the search, the simulator and the code generator all use.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from tinytrain.errors import PlanError
from tinytrain.ir import Graph, Node
from tinytrain.names import LOSS, grad_name
from tinytrain.ops import get_op
from tinytrain.training.autodiff import param_gradients
from tinytrain.lr_schedule import Schedule, parse_schedule

VERSION = 1
RATIOS = (1.0, 0.5, 0.25, 0.125)
CHANNEL_RULES = ("first",)
DEFAULT_LR = 0.01
FIELDS = ("version", "bias_last_k", "weights", "channels", "lr", "bias_lr", "head_lr", "lr_schedule", "loss",
          "remainder_bits", "backward")
LOSSES = ("xent", "mse")  # softmax cross-entropy on the logits; mean squared error reconstructing the input
# Fraction bits each trained int8 weight keeps below its LSB (ops/sgd_update.py); 0 keeps int8 weights only.
REMAINDER_BITS = (0, 4, 8)
DEFAULT_REMAINDER_BITS = 4
# A plan file's fields of the step spec beyond the plan (training/spec.py reads them)
SPEC_FIELDS = ("momentum", "rounding", "qas", "seed", "new_head", "input_size", "model", "layers")
# The arithmetic from the loss to the update: float32, or integers only (training/integer_step.py)
BACKWARDS = ("fp32", "int")


@dataclass(frozen=True)
class WeightUpdate:
    """Layer ``conv``'s weights, the first ``ratio`` of its output channels; ``remainder_bits`` this layer's own
    fraction bits (None: the plan's)."""

    conv: int
    ratio: float
    remainder_bits: int | None = None

    def to_json(self) -> dict:
        d = {"conv": self.conv, "ratio": self.ratio}
        if self.remainder_bits is not None:
            d["remainder_bits"] = self.remainder_bits
        return d


@dataclass(frozen=True)
class Plan:
    """A validated version-1 plan: ``lr`` for weights, ``bias_lr`` for biases (None: ``lr``), ``head_lr`` for the
    last layer's weights and bias — the classifier, a new head (None: the other two apply to it as well);
    ``lr_schedule`` scales every lr by a factor of the device's step count (None: constant lrs). ``head_lr`` and
    ``lr_schedule`` are optional, so files written before they existed load unchanged. ``loss``: "xent" (softmax
    cross-entropy, the default) or "mse" (reconstruction of the input, ops/mse.py). ``remainder_bits``: the
    fraction bits every trained int8 weight keeps between steps (a byte beside each, or half of one for 4 bits:
    ops/sgd_update.py); absent from a file, the default (``DEFAULT_REMAINDER_BITS``, chosen by
    benchmarks/remainders.py); a weight entry's own ``remainder_bits`` overrides it for that layer.
    ``backward``: "fp32" (the default) or "int", the integer-only step (training/integer_step.py); absent from a
    file, "fp32"."""

    bias_last_k: int = 0
    weights: tuple[WeightUpdate, ...] = ()
    channels: str = "first"
    lr: float = DEFAULT_LR
    bias_lr: float | None = None
    head_lr: float | None = None
    lr_schedule: Schedule | None = None
    loss: str = "xent"
    remainder_bits: int = DEFAULT_REMAINDER_BITS
    backward: str = "fp32"

    @property
    def effective_bias_lr(self) -> float:
        return self.lr if self.bias_lr is None else self.bias_lr

    def to_json(self) -> dict:
        d = {"version": VERSION, "bias_last_k": self.bias_last_k,
             "weights": [w.to_json() for w in self.weights],
             "channels": self.channels, "lr": self.lr}
        if self.bias_lr is not None:
            d["bias_lr"] = self.bias_lr
        if self.head_lr is not None:
            d["head_lr"] = self.head_lr
        if self.lr_schedule is not None:
            d["lr_schedule"] = self.lr_schedule.to_json()
        if self.loss != "xent":
            d["loss"] = self.loss
        d["remainder_bits"] = self.remainder_bits
        if self.backward != "fp32":
            d["backward"] = self.backward
        return d


@dataclass(frozen=True)
class ParamUpdate:
    """One parameter a plan updates: ``channels`` None means all output channels."""

    param: str
    layer: int
    is_bias: bool
    channels: tuple[int, ...] | None
    lr: float
    remainder_bits: int = 0  # the fraction bits kept below an int8 weight's LSB (its layer's, or the plan's)


def select_channels(c_out: int, ratio: float, rule: str = "first") -> tuple[int, ...] | None:
    """The output channels whose weights a plan updates; None when all are.

    "first": channels 0 .. n-1 with n = max(1, floor(c_out * ratio)).
    """
    if rule not in CHANNEL_RULES:
        raise PlanError(f'unknown channel rule "{rule}"; version 1 knows: {", ".join(CHANNEL_RULES)}')
    n = max(1, math.floor(c_out * ratio))
    return None if n >= c_out else tuple(range(n))


def layers(graph: Graph) -> list[Node]:
    """Convolution and fully-connected nodes in topological order: the ``conv`` indices of a plan."""
    return [n for n in graph.nodes if get_op(n.op).layer]


# ---- the plan file -------------------------------------------------------------------------------------

def _number(value, what: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PlanError(f"{source}: {what} must be a positive number, got {json.dumps(value)}")
    return float(value)


def _int(value, what: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{source}: {what} must be a non-negative integer, got {json.dumps(value)}")
    return value


def parse_plan(obj, source: str = "plan", more_fields: tuple[str, ...] = ()) -> Plan:
    """Validate a decoded version-1 plan; every problem raises PlanError naming the field (``more_fields``: the
    step spec's, training/spec.py, read there and passed over here)."""
    if not isinstance(obj, dict):
        raise PlanError(f"{source}: a plan is a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FIELDS) - set(more_fields))
    if unknown:
        raise PlanError(f"{source}: unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                        f"a version-1 plan has: {', '.join(FIELDS + more_fields)}")
    if "version" not in obj:
        raise PlanError(f'{source}: missing "version" (this tinytrain reads version {VERSION})')
    if obj["version"] != VERSION or isinstance(obj["version"], bool):
        raise PlanError(f"{source}: plan version {json.dumps(obj['version'])} is not supported; "
                        f"this tinytrain reads version {VERSION}")
    bias_last_k = _int(obj.get("bias_last_k", 0), '"bias_last_k"', source)
    entries = obj.get("weights", [])
    if not isinstance(entries, list):
        raise PlanError(f'{source}: "weights" must be a list of {{"conv": index, "ratio": r}}')
    weights = [_weight_entry(e, f"weights[{k}]", source) for k, e in enumerate(entries)]
    seen: set[int] = set()
    for k, w in enumerate(weights):
        if w.conv in seen:
            raise PlanError(f"{source}: weights[{k}]: conv {w.conv} appears twice")
        seen.add(w.conv)
    channels = obj.get("channels", "first")
    if channels not in CHANNEL_RULES:
        raise PlanError(f'{source}: "channels" must be one of {", ".join(CHANNEL_RULES)}, got {json.dumps(channels)}')
    lr = _number(obj.get("lr", DEFAULT_LR), '"lr"', source)
    bias_lr = _number(obj["bias_lr"], '"bias_lr"', source) if "bias_lr" in obj else None
    head_lr = _number(obj["head_lr"], '"head_lr"', source) if "head_lr" in obj else None
    schedule = parse_schedule(obj["lr_schedule"], source) if "lr_schedule" in obj else None
    loss = obj.get("loss", "xent")
    if loss not in LOSSES:
        raise PlanError(f'{source}: "loss" must be one of {", ".join(LOSSES)}, got {json.dumps(loss)}')
    bits = _bits(obj.get("remainder_bits", DEFAULT_REMAINDER_BITS), '"remainder_bits"', source)
    backward = obj.get("backward", "fp32")
    if backward not in BACKWARDS:
        raise PlanError(f'{source}: "backward" must be one of {", ".join(BACKWARDS)}, got {json.dumps(backward)}')
    return Plan(bias_last_k, tuple(sorted(weights, key=lambda w: w.conv)), channels, lr, bias_lr, head_lr, schedule,
                loss=loss, remainder_bits=bits, backward=backward)


def _bits(value, what: str, source: str) -> int:
    if isinstance(value, bool) or value not in REMAINDER_BITS:
        raise PlanError(f'{source}: {what} must be one of {", ".join(map(str, REMAINDER_BITS))}, '
                        f"got {json.dumps(value)}")
    return value


def _weight_entry(e, where: str, source: str) -> WeightUpdate:
    """One entry of "weights": {"conv": index, "ratio": r} and optionally the layer's own "remainder_bits"."""
    if not isinstance(e, dict) or not {"conv", "ratio"} <= set(e) <= {"conv", "ratio", "remainder_bits"}:
        raise PlanError(f'{source}: {where} must be {{"conv": index, "ratio": r}} (and optionally "remainder_bits"), '
                        f"got {json.dumps(e)}")
    conv = _int(e["conv"], f"{where}.conv", source)
    ratio = e["ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or float(ratio) not in RATIOS:
        raise PlanError(f"{source}: {where}.ratio must be one of 1, 0.5, 0.25, 0.125, got {json.dumps(ratio)}")
    bits = _bits(e["remainder_bits"], f"{where}.remainder_bits", source) if "remainder_bits" in e else None
    return WeightUpdate(conv, float(ratio), bits)


def load_plan(path: str | Path) -> Plan:
    """The plan of a plan file (its step spec's own fields, training/spec.py, aside)."""
    return parse_plan(read_plan_json(path), str(path), more_fields=SPEC_FIELDS)


def read_plan_json(path: str | Path):
    """A plan file's decoded JSON."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise PlanError(f"cannot read plan {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a plan file (not text); give the PLAN.json `tinytrain plan` wrote") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return obj


PRESETS = ("full", "bias-only", "last-k:N", "classifier-only", "bias-only (last K)", "last-k:N at 1/R")


def preset(spec: str, graph: Graph, lr: float = DEFAULT_LR, bias_lr: float | None = None,
           head_lr: float | None = None, remainder_bits: int = DEFAULT_REMAINDER_BITS) -> Plan:
    """--update full | bias-only | last-k:N (the last N layers: biases and all weights), and the names of the plan
    search's finalists (search/candidates.py): classifier-only (= last-k:1), "bias-only (last K)" (the biases of the
    last K layers and the classifier's weights), "last-k:N at 1/R" (the last N layers' biases, the weights of the
    first 1/R of each one's output channels, the classifier's in full); a " @rB" suffix: B remainder bits."""
    n = len(layers(graph))
    name, _, bits = spec.partition(" @r")
    if bits:
        if not bits.isdigit() or int(bits) not in REMAINDER_BITS:
            raise PlanError(f"--update {spec}: @rB names the remainder bits, one of "
                            f"{', '.join(map(str, REMAINDER_BITS))}")
        remainder_bits = int(bits)
    lrs = dict(lr=lr, bias_lr=bias_lr, head_lr=head_lr, remainder_bits=remainder_bits)
    if name == "full":
        return Plan(n, tuple(WeightUpdate(i, 1.0) for i in range(n)), **lrs)
    if name == "bias-only":
        return Plan(n, **lrs)
    if name == "classifier-only":
        name = "last-k:1"
    if name.startswith("bias-only (last ") and name.endswith(")"):
        k = _count(name[len("bias-only (last "):-1], spec, n)
        return Plan(k, (WeightUpdate(n - 1, 1.0),), **lrs)
    if name.startswith("last-k:"):
        k, _, ratio = name[len("last-k:"):].partition(" at 1/")
        k, r = _count(k, spec, n), 1.0 if not ratio else _ratio(ratio, spec)
        ws = [WeightUpdate(i, r) for i in range(n - k, n - 1)] + [WeightUpdate(n - 1, 1.0)]
        return Plan(k, tuple(ws), **lrs)
    raise PlanError(f"--update {spec}: expected {', '.join(PRESETS)}{_did_you_mean(name)}")


def _did_you_mean(name: str) -> str:
    """"; did you mean last-k:2?" for a mistyped preset (lastk:2, last_k:2, bias_only)."""
    import difflib

    head, sep, tail = name.partition(":")
    best = difflib.get_close_matches(head, ("full", "bias-only", "classifier-only", "last-k"), n=1, cutoff=0.6)
    if not best:
        return ""
    return f"; did you mean {best[0]}{sep + tail if best[0] == 'last-k' else ''}?"


def _count(text: str, spec: str, n: int) -> int:
    if not text.isdigit() or not 1 <= int(text) <= n:
        raise PlanError(f"--update {spec}: N must be an integer from 1 to {n} (the model's layer count)")
    return int(text)


def _ratio(text: str, spec: str) -> float:
    ratios = [round(1 / r) for r in RATIOS if r < 1]
    if not text.isdigit() or int(text) not in ratios:
        raise PlanError(f"--update {spec}: 1/R is one of {', '.join(f'1/{r}' for r in ratios)}")
    return 1 / int(text)


def with_lr_schedule(plan: Plan, kind: str | None, warmup: float, steps: int, floor: float = 0.0) -> Plan:
    """The plan with the lr schedule a run asks for: "cosine" spans the run's ``steps`` (``warmup``: the fraction
    of them warming up; ``floor``: the fraction of the lrs kept after them), "constant" drops the plan's schedule,
    None keeps it."""
    if kind is None:
        return plan
    return replace(plan, lr_schedule=Schedule.over(steps, warmup, floor) if kind == "cosine" else None)


OTHER_MODEL = "a plan made for another model? (`tinytrain plan MODEL` searches one for this model)"


def check_plan(plan: Plan, graph: Graph, source: str = "plan") -> list[Node]:
    """The plan's layer indices fit the model; returns the model's layers."""
    ls = layers(graph)
    n = len(ls)
    if plan.bias_last_k > n:
        raise PlanError(f"{source}: bias_last_k = {plan.bias_last_k} but the model has {n} convolution / "
                        f"fully-connected layers; {OTHER_MODEL}")
    for w in plan.weights:
        if w.conv >= n:
            raise PlanError(f"{source}: weights conv {w.conv} does not exist; the model's layers are 0..{n - 1}; "
                            f"{OTHER_MODEL}")
    return ls


def updated_params(plan: Plan, graph: Graph) -> list[ParamUpdate]:
    """What the plan updates, in layer order (weights before the bias of each layer), each with its lr."""
    ls = check_plan(plan, graph)
    entries = {w.conv: w for w in plan.weights}
    result = []
    for k, node in enumerate(ls):
        head = plan.head_lr if k == len(ls) - 1 else None
        if k in entries:
            w, c_out = entries[k], graph.tensors[node.inputs[1]].shape[0]
            bits = plan.remainder_bits if w.remainder_bits is None else w.remainder_bits
            result.append(ParamUpdate(node.inputs[1], k, False, select_channels(c_out, w.ratio, plan.channels),
                                      head or plan.lr, bits))
        has_bias = len(node.inputs) > 2 and node.inputs[2]
        if k >= len(ls) - plan.bias_last_k and has_bias:
            result.append(ParamUpdate(node.inputs[2], k, True, None, head or plan.effective_bias_lr))
    return result


def apply_plan(graph: Graph, plan: Plan) -> Graph:
    """Keep only the gradients the plan updates, restricted to the selected channels.

    Takes the output of ``autodiff.differentiate``. Invariant: the outputs become (loss, the gradients of
    exactly the plan's parameters, in ``updated_params`` order); the node computing a partially updated
    weight's gradient has its ``channels`` set, so its output has exactly the selected output channels.
    Nothing else changes (``prune`` removes what no longer contributes).
    """
    grads = param_gradients(graph)
    updates = updated_params(plan, graph)
    producers = graph.producers()
    tensors, nodes = dict(graph.tensors), list(graph.nodes)
    for u in updates:
        if u.param not in grads:
            raise PlanError(f"the plan updates {u.param} but the training graph has no gradient for it")
        if u.channels is None:
            continue
        node = producers[grads[u.param]]
        if not hasattr(node.attrs, "channels"):
            raise PlanError(f"{node.op} cannot compute a gradient for a subset of channels")
        new = replace(node, attrs=replace(node.attrs, channels=u.channels))
        nodes[nodes.index(node)] = new
        g = tensors[grads[u.param]]
        tensors[g.name] = replace(g, shape=(len(u.channels),) + g.shape[1:])
    outputs = (LOSS,) + tuple(grad_name(u.param) for u in updates)
    return replace(graph, tensors=tensors, nodes=tuple(nodes), outputs=outputs)
