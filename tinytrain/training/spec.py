"""The step spec: what the user asked of the training step, in one typed object resolved once (resolve.py) from the
command line, the API or a plan file, and read by ``train``, ``compile``, ``plan`` and the fleet.

    StepSpec
      plan          the sparse update (training/sparse.py): which layers, lr / bias lr / head lr, the lr schedule,
                    loss, remainder bits, backward
      momentum, rounding, qas, seed       the update's arithmetic (training/qas.py UpdateConfig)
      new_head, input_size                the model the step was made for: its head and input size
      model, layers                       that model's fingerprint and the names of the layers the plan touches

The plan file is a StepSpec's JSON: the version-1 plan's fields (sparse.py ``Plan.to_json``) and, when they differ
from their defaults, the fields of ``SPEC_FIELDS``; a file written before them loads unchanged.

``KNOBS`` are the options a user tunes (the same names for the API's keywords, the command line's options of
``train`` and ``compile`` (cli_args.py), and the plan file's fields): a new knob is a row here, a field of
StepSpec or Plan, its consumer and its test.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

from tinytrain.errors import PlanError
from tinytrain.ir import Graph
from tinytrain.ops.sgd_update import Rounding
from tinytrain.training.qas import UpdateConfig
from tinytrain.lr_schedule import DEFAULT_FLOOR
from tinytrain.training.sparse import (BACKWARDS, LOSSES, REMAINDER_BITS, SPEC_FIELDS, Plan, layers, parse_plan,
                                      updated_params)

ROUNDINGS = tuple(r.value for r in Rounding)


@dataclass(frozen=True)
class Knob:
    """One option of the step: ``name`` (API keyword, plan-file field; ``--name-with-dashes`` on the command line),
    its argparse keywords (``cli``; "type" names an argument type of cli_args.py) and help."""

    name: str
    help: str
    cli: dict = field(default_factory=dict)

    @property
    def flag(self) -> str:
        return "--no-qas" if self.name == "qas" else "--" + self.name.replace("_", "-")


KNOBS = (
    Knob("lr", "learning rate (default: the plan's own; presets 0.01)", {"type": "positive_float", "metavar": "LR"}),
    Knob("bias_lr", "learning rate of the biases (default: the plan's own; presets --lr)",
         {"type": "positive_float", "metavar": "LR"}),
    Knob("head_lr", "learning rate of the last layer, weights and bias (default: the plan's own; presets --lr, "
         "--bias-lr)", {"type": "positive_float", "metavar": "LR"}),
    Knob("lr_schedule", "cosine: warm-up, then cosine decay of every lr to --lr-floor over --schedule-steps (train: "
         "default this run's steps), computed by the device from its step count, then --lr-floor for good; "
         "constant: one lr throughout (default: the plan's own; presets constant)",
         {"choices": ("constant", "cosine")}),
    Knob("warmup", "--lr-schedule cosine: the fraction of its steps that warms the lrs up linearly (default 0)",
         {"type": "fraction", "metavar": "FRACTION"}),
    Knob("lr_floor", f"--lr-schedule cosine: the fraction of the lrs kept after the decay, for good (default "
         f"{DEFAULT_FLOOR:g}; 0 stops learning after --schedule-steps)", {"type": "unit_float", "metavar": "FRACTION"}),
    Knob("schedule_steps", "--lr-schedule cosine: the steps the decay spans (compile: required; train: default "
         "this run's steps)", {"type": "positive_int", "metavar": "N"}),
    Knob("momentum", "SGD momentum (costs 4 bytes per updated weight; default: the plan's own, else 0)",
         {"type": "fraction", "metavar": "MU"}),
    Knob("rounding", "rounding of each update to the int8 grid (default: the plan's own, else stochastic)",
         {"choices": ROUNDINGS}),
    Knob("qas", "plain int8 SGD on the int8 gradient (no quantization-aware scaling; the paper's baseline)",
         {"action": "store_const", "const": False}),
    Knob("seed", "sample order, rounding stream and new-head init (default: the plan's own, else 0)",
         {"type": "non_negative_int", "metavar": "N"}),
    Knob("remainder_bits", "fraction bits every trained int8 weight keeps below its LSB between steps: 0 (int8 "
         "only), 4 (half a byte per trained weight) or 8 (a byte). Default: the plan's own, else 4",
         {"type": int, "choices": REMAINDER_BITS, "metavar": "F"}),
    Knob("backward", "the step's arithmetic from the loss to the update: fp32 (float gradients) or int (integers "
         "only, for cores without an FPU: docs/guide/integer-step.md). Default: the plan's own, else fp32",
         {"choices": BACKWARDS}),
    Knob("loss", "xent: softmax cross-entropy against the labels (default); mse: mean squared error of the "
         "dequantized output reconstructing the input (an autoencoder; DATA without y). A plan file carries its own",
         {"choices": LOSSES}),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)


@dataclass(frozen=True)
class LayerName:
    """A layer the plan touches: its ``conv`` index (the plan's), its ``#`` in ``tinytrain inspect`` and its name."""

    conv: int
    node: int
    name: str

    def to_json(self) -> dict:
        return {"conv": self.conv, "#": self.node, "name": self.name}


@dataclass(frozen=True)
class StepSpec:
    """What the user asked of the training step (the module's docstring). ``model`` / ``layers``: recorded when
    the spec is bound to its model (``bind``), checked when it is applied to one (resolve.py)."""

    plan: Plan
    momentum: float = 0.0
    rounding: str = "stochastic"
    qas: bool = True
    seed: int = 0
    new_head: int | None = None
    input_size: tuple[int, int] | None = None
    model: str | None = None
    layers: tuple[LayerName, ...] = ()

    @property
    def config(self) -> UpdateConfig:
        return UpdateConfig(momentum=self.momentum, rounding=Rounding(self.rounding), qas=self.qas, seed=self.seed)

    @property
    def loss(self) -> str:
        return self.plan.loss

    def bind(self, graph: Graph) -> StepSpec:
        """The spec with ``graph``'s fingerprint, input size and the names of the layers its plan touches."""
        ls, nodes = layers(graph), {n.name: k for k, n in enumerate(graph.nodes)}
        touched = sorted({u.layer for u in updated_params(self.plan, graph)})
        size = tuple(graph.tensors[graph.inputs[0]].shape[1:3])
        return replace(self, model=fingerprint(graph), input_size=size if len(size) == 2 else None,
                       layers=tuple(LayerName(k, nodes[ls[k].name], ls[k].name) for k in touched))

    def recipe(self) -> str:
        """One line: the lrs, the schedule and the update's arithmetic."""
        p = self.plan
        lrs = f"lr {p.lr:g}" + (f", bias lr {p.bias_lr:g}" if p.bias_lr is not None else "") \
            + (f", head lr {p.head_lr:g}" if p.head_lr is not None else "")
        sched = "constant" if p.lr_schedule is None else p.lr_schedule.describe()
        arith = [f"{self.rounding} rounding", "QAS" if self.qas else "no QAS", f"{p.remainder_bits} remainder bits",
                 f"{p.backward} backward"] + ([f"momentum {self.momentum:g}"] if self.momentum else []) \
            + ([f"seed {self.seed}"] if self.seed else []) + ([f"loss {p.loss}"] if p.loss != "xent" else [])
        return f"{lrs}; schedule {sched}; " + ", ".join(arith)

    def to_json(self) -> dict:
        d = self.plan.to_json()
        defaults = StepSpec(self.plan)
        for name in ("momentum", "rounding", "qas", "seed", "new_head"):
            if getattr(self, name) != getattr(defaults, name):
                d[name] = getattr(self, name)
        if self.input_size is not None:
            d["input_size"] = list(self.input_size)
        if self.model is not None:
            d["model"] = self.model
        if self.layers:
            d["layers"] = [n.to_json() for n in self.layers]
        return d


def fingerprint(graph: Graph) -> str:
    """sha256 (16 hex digits) of the graph's structure: its ops, node names and tensor shapes and types, in order
    (not the weights' values, so a trained copy of a model is the same model)."""
    h = hashlib.sha256()
    for n in graph.nodes:
        shapes = [(t, graph.tensors[t].shape, graph.tensors[t].dtype.value) for t in (*n.inputs, *n.outputs) if t]
        h.update(json.dumps([n.op, n.name, [s[1:] for s in shapes]]).encode())
    return h.hexdigest()[:16]


def parse_spec(obj, source: str = "plan") -> StepSpec:
    """A plan file's object: the version-1 plan and the spec's fields (every problem a PlanError naming it)."""
    if not isinstance(obj, dict):
        return StepSpec(parse_plan(obj, source))
    rest = {k: v for k, v in obj.items() if k not in SPEC_FIELDS}
    plan = parse_plan(rest, source, more_fields=SPEC_FIELDS)
    momentum = obj.get("momentum", 0.0)
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise PlanError(f'{source}: "momentum" must be a number in [0, 1), got {json.dumps(momentum)}')
    rounding = obj.get("rounding", "stochastic")
    if rounding not in ROUNDINGS:
        raise PlanError(f'{source}: "rounding" must be one of {", ".join(ROUNDINGS)}, got {json.dumps(rounding)}')
    qas = obj.get("qas", True)
    if not isinstance(qas, bool):
        raise PlanError(f'{source}: "qas" must be true or false, got {json.dumps(qas)}')
    seed, head = obj.get("seed", 0), obj.get("new_head")
    for name, v, low in (("seed", seed, 0), ("new_head", 2 if head is None else head, 2)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise PlanError(f'{source}: "{name}" must be an integer of at least {low}, got {json.dumps(v)}')
    return StepSpec(plan, float(momentum), rounding, qas, seed, head, _size(obj.get("input_size"), source),
                    _model(obj.get("model"), source), _layers(obj.get("layers", []), source))


def _size(v, source: str) -> tuple[int, int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in v):
        raise PlanError(f'{source}: "input_size" must be [H, W], got {json.dumps(v)}')
    return (v[0], v[1])


def _model(v, source: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise PlanError(f'{source}: "model" must be the model\'s fingerprint (a string), got {json.dumps(v)}')
    return v


def _layers(v, source: str) -> tuple[LayerName, ...]:
    ok = isinstance(v, list) and all(isinstance(e, dict) and set(e) == {"conv", "#", "name"} for e in v)
    if not ok:
        raise PlanError(f'{source}: "layers" must be a list of {{"conv": index, "#": node, "name": name}}, '
                        f"got {json.dumps(v)[:80]}")
    return tuple(LayerName(e["conv"], e["#"], e["name"]) for e in v)
