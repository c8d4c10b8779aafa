"""The step a call asks for, resolved once from its arguments (training/spec.py): a plan (a StepSpec, a Plan, its
JSON object or a plan file) or an ``update`` preset, and the knobs (spec.KNOBS: lrs, schedule, momentum, rounding,
QAS, seed, remainder bits, backward, loss) that replace a plan's own. The API, the fleet and the plan search all
resolve through here.

    given = read_step(plan)                                   # the plan file's spec, before the model is built
    graph = ... (with seed_of(given, knobs), given's head and input size)
    spec = resolve_step(graph, given, update=..., **knobs)   # checked against the model, bound to it
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.errors import PlanError, UsageError, param
from tinytrain.ir import Graph
from tinytrain.lr_schedule import DEFAULT_FLOOR, Schedule, check_schedule
from tinytrain.training.sparse import (BACKWARDS, DEFAULT_LR, LOSSES, REMAINDER_BITS, Plan, check_plan, preset,
                                      read_plan_json)
from tinytrain.training.spec import KNOB_NAMES, ROUNDINGS, StepSpec, fingerprint, parse_spec

_OVERRIDES = ("momentum", "rounding", "qas", "seed")  # knobs that replace a plan file's own value


def read_step(plan) -> StepSpec | None:
    """The spec of a ``plan`` argument: a StepSpec, a Plan, its JSON object or a plan file (None: none given)."""
    if plan is None or isinstance(plan, StepSpec):
        return plan
    if isinstance(plan, Plan):
        return StepSpec(plan)
    if isinstance(plan, dict):
        return parse_spec(plan)
    return parse_spec(read_plan_json(plan), str(plan))


def seed_of(given: StepSpec | None, knobs: dict) -> int:
    """The run's seed: the knob's, else the plan file's, else 0."""
    if knobs.get("seed") is not None:
        return knobs["seed"]
    return 0 if given is None else given.seed


def resolve_step(graph: Graph, given: StepSpec | None, *, update: str | None = None, default: str | None = None,
                 new_head: int | None = None, source: str = "plan", **knobs) -> StepSpec | None:
    """The step of ``given`` (read_step's) or the preset ``update`` (else ``default``; None: no training step) on
    ``graph`` (built with ``new_head``; the spec records it and the graph's input size), with ``knobs`` (spec.KNOBS;
    None: the plan's own, else the default) in place of its own values."""
    unknown = sorted(set(knobs) - set(KNOB_NAMES))
    if unknown:
        raise UsageError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; the step "
                         f"takes {', '.join(KNOB_NAMES)}")
    _check_knobs(knobs)
    if given is not None and update:
        raise UsageError(f"give either {param('plan')} or {param('update')}, not both")
    if given is None and not (update or default):
        for name in KNOB_NAMES:
            if name != "seed" and knobs.get(name) is not None:  # (the seed also draws a new head's init)
                raise UsageError(f"{param(name)} sets the training step: give it with {param('plan')} or "
                                 f"{param('update')}")
        return None
    if given is not None:
        if any(knobs.get(k) for k in ("lr", "bias_lr", "head_lr")):
            raise UsageError(f"{param('lr')} / {param('bias_lr')} / {param('head_lr')} apply to {param('update')} "
                             "presets; a plan file carries its own")
        check_model(given, graph, source)
        spec = given
    else:
        spec = StepSpec(preset(update or default, graph, lr=knobs.get("lr") or DEFAULT_LR,
                               bias_lr=knobs.get("bias_lr"), head_lr=knobs.get("head_lr")))
    check_plan(spec.plan, graph, source)
    spec = replace(spec, **{k: knobs[k] for k in _OVERRIDES if knobs.get(k) is not None})
    spec = replace(spec, plan=_plan_knobs(spec.plan, knobs, given is not None))
    return replace(spec, new_head=new_head or spec.new_head).bind(graph)


def _check_knobs(knobs: dict) -> None:
    bits, backward, rounding = knobs.get("remainder_bits"), knobs.get("backward"), knobs.get("rounding")
    if bits is not None and bits not in REMAINDER_BITS:
        raise UsageError(f"{param('remainder_bits', bits)}: choose one of {', '.join(map(str, REMAINDER_BITS))}")
    if backward is not None and backward not in BACKWARDS:
        raise UsageError(f"{param('backward', backward)}: choose one of {', '.join(BACKWARDS)}")
    if rounding is not None and rounding not in ROUNDINGS:
        raise UsageError(f"{param('rounding', rounding)}: choose one of {', '.join(ROUNDINGS)}")
    momentum = knobs.get("momentum")
    if momentum is not None and not 0 <= momentum < 1:
        raise UsageError(f"{param('momentum', momentum)}: give a momentum in [0, 1)")
    check_schedule(knobs.get("lr_schedule"), knobs.get("warmup") or 0.0)
    floor = knobs.get("lr_floor")
    if floor is not None and not 0 <= floor <= 1:
        raise UsageError(f"{param('lr_floor', floor)}: give the fraction of the lrs kept, in [0, 1]")
    for name in ("lr_floor", "schedule_steps"):
        if knobs.get(name) is not None and knobs.get("lr_schedule") != "cosine":
            raise UsageError(f"{param(name)} applies to {param('lr_schedule', 'cosine')}; add it or drop "
                             f"{param(name)}")


def _plan_knobs(plan: Plan, knobs: dict, from_file: bool) -> Plan:
    bits, backward, loss = knobs.get("remainder_bits"), knobs.get("backward"), knobs.get("loss")
    if bits is not None:
        plan = replace(plan, remainder_bits=bits, weights=tuple(replace(w, remainder_bits=None) for w in plan.weights))
    if backward is not None:
        plan = replace(plan, backward=backward)
    if knobs.get("lr_schedule") == "constant":
        plan = replace(plan, lr_schedule=None)
    elif knobs.get("lr_schedule") == "cosine" and knobs.get("schedule_steps"):
        plan = replace(plan, lr_schedule=_cosine(knobs, knobs["schedule_steps"]))
    if loss is None or loss == plan.loss:
        return plan
    if loss not in LOSSES:
        raise UsageError(f"{param('loss', loss)}: choose one of {', '.join(LOSSES)}")
    if from_file:
        raise UsageError(f"the plan's loss is {plan.loss}, {param('loss', loss)} contradicts it; edit the plan's "
                         "\"loss\" field")
    return replace(plan, loss=loss)


def _cosine(knobs: dict, steps: int) -> Schedule:
    floor = knobs.get("lr_floor")
    return Schedule.over(steps, knobs.get("warmup") or 0.0, DEFAULT_FLOOR if floor is None else floor)


def over_run(spec: StepSpec, knobs: dict, steps: int) -> StepSpec:
    """``train``'s spec: ``--lr-schedule cosine`` without ``schedule_steps`` spans the run's ``steps``."""
    if knobs.get("lr_schedule") != "cosine" or knobs.get("schedule_steps"):
        return spec
    return replace(spec, plan=replace(spec.plan, lr_schedule=_cosine(knobs, steps)))


def needs_steps(knobs: dict) -> None:
    """``compile``: a cosine the device runs needs the steps it spans."""
    if knobs.get("lr_schedule") == "cosine" and not knobs.get("schedule_steps"):
        raise UsageError(f"{param('lr_schedule', 'cosine')} on the device: give {param('schedule_steps')}, the "
                         "steps its decay spans (train: the run's steps)")


def check_model(given: StepSpec, graph: Graph, source: str) -> None:
    """A plan file made for a model applies to that model only: its head, its input size, its fingerprint."""
    classes = graph.tensors[graph.outputs[0]].shape[-1]
    if given.new_head is not None and classes != given.new_head:
        raise PlanError(f"{source} was made for the model with a new {given.new_head}-class head; give "
                        f"{param('new_head', given.new_head)}")
    size = tuple(graph.tensors[graph.inputs[0]].shape[1:3])
    if given.input_size is not None and size != given.input_size:
        h, w = given.input_size
        raise PlanError(f"{source} was made for {h}x{w} inputs, the model takes {size[0]}x{size[1]}; give "
                        f"{param('input_size', f'{h}x{w}')}")
    if given.model is not None and given.model != fingerprint(graph):
        names = ", ".join(f"#{n.node} {n.name}" for n in given.layers[:2])
        raise PlanError(f"{source} was made for another model (fingerprint {given.model}, this one "
                        f"{fingerprint(graph)}" + (f"; its layers {names}..." if names else "") + ")")


def resolve_plan(graph: Graph, *, plan=None, update: str | None = None, lr: float | None = None,
                 bias_lr: float | None = None, head_lr: float | None = None, default: str | None = None,
                 remainder_bits: int | None = None, backward: str | None = None,
                 loss: str | None = None) -> Plan | None:
    """The Plan of ``resolve_step`` (the fleet's and eval's)."""
    spec = resolve_step(graph, read_step(plan), update=update, default=default, lr=lr, bias_lr=bias_lr,
                        head_lr=head_lr, remainder_bits=remainder_bits, backward=backward, loss=loss)
    return None if spec is None else spec.plan
