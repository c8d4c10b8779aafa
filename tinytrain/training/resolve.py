"""The plan a call asks for, resolved once from its arguments: a plan (a Plan, its JSON object or a plan file) or an
``update`` preset, the preset's learning rates, and the options that replace a plan's own (remainder bits,
backward, loss). The API, the fleet and the plan search all resolve through here."""

from __future__ import annotations

from dataclasses import replace

from tinytrain.errors import UsageError, param
from tinytrain.ir import Graph
from tinytrain.training.sparse import BACKWARDS, LOSSES, REMAINDER_BITS, Plan, load_plan, parse_plan, preset


def resolve_plan(graph: Graph, *, plan=None, update: str | None = None, lr: float | None = None,
                 bias_lr: float | None = None, head_lr: float | None = None, default: str | None = None,
                 remainder_bits: int | None = None, backward: str | None = None,
                 loss: str | None = None) -> Plan | None:
    """The plan of ``plan`` or the preset ``update`` (else ``default``; None: no training step). ``remainder_bits``
    (None: the plan's own, or the default for a preset) sets the fraction bits every trained weight keeps (a
    layer's own bits in the plan included); ``backward`` ("fp32" / "int"; None: the plan's own) the step's
    arithmetic from the loss to the update; ``loss`` a preset's loss (a plan carries its own, which it must not
    contradict)."""
    if remainder_bits is not None and remainder_bits not in REMAINDER_BITS:
        raise UsageError(f"{param('remainder_bits', remainder_bits)}: choose one of "
                         f"{', '.join(map(str, REMAINDER_BITS))}")
    if backward is not None and backward not in BACKWARDS:
        raise UsageError(f"{param('backward', backward)}: choose one of {', '.join(BACKWARDS)}")
    chosen = _given(graph, plan, update, lr, bias_lr, head_lr, default)
    if chosen is None:
        for name, value in (("backward", backward), ("loss", loss)):
            if value is not None:
                raise UsageError(f"{param(name)} sets the training step's {'arithmetic' if name == 'backward' else name}: "
                                 f"give it with {param('plan')} or {param('update')}")
        return None
    if remainder_bits is not None:
        chosen = replace(chosen, remainder_bits=remainder_bits,
                         weights=tuple(replace(w, remainder_bits=None) for w in chosen.weights))
    if backward is not None:
        chosen = replace(chosen, backward=backward)
    return _with_loss(chosen, loss, plan is not None)


def _given(graph: Graph, plan, update: str | None, lr: float | None, bias_lr: float | None, head_lr: float | None,
           default: str | None) -> Plan | None:
    if plan is not None and update:
        raise UsageError(f"give either {param('plan')} or {param('update')}, not both")
    if plan is not None and (lr or bias_lr or head_lr):
        raise UsageError(f"{param('lr')} / {param('bias_lr')} / {param('head_lr')} apply to {param('update')} "
                         "presets; a plan file carries its own")
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return parse_plan(plan)
    if plan is not None:
        return load_plan(plan)
    if update or default:
        return preset(update or default, graph, lr=lr or 0.01, bias_lr=bias_lr, head_lr=head_lr)
    return None


def _with_loss(plan: Plan, loss: str | None, from_file: bool) -> Plan:
    if loss is None or loss == plan.loss:
        return plan
    if loss not in LOSSES:
        raise UsageError(f"{param('loss', loss)}: choose one of {', '.join(LOSSES)}")
    if from_file:
        raise UsageError(f"the plan's loss is {plan.loss}, {param('loss', loss)} contradicts it; edit the plan's "
                         "\"loss\" field")
    return replace(plan, loss=loss)
