"""The options a compiled field runtime fixed, written where the host can read them back: ``compile --replay``
keeps them in OUT/field/field.json (``options``), ``firmware --field`` puts them into the serial firmware's info
(firmware/protocol.py's I reply, ``info_text``: ``replay=8 guard=4 ... fingerprint=1a2b3c4d``), and ``tinytrain
stream --field`` takes them from the board instead of the command line, refusing an option given there that differs
(one line).

The options are ``tinytrain.field``'s keywords: ``max_classes``, ``known_classes``, every ``FieldConfig`` setting of
the command line (``replay``, ``replay_k``, ``guard``, ...), the ``update`` preset and its ``lr`` (or ``plan``: 1
when a plan file chose the step, which the host is then given again), ``seed``, and the ``fingerprint`` of the cut
model's state layout (codegen/state.py), which catches a model other than the firmware's; the compile's also
``storage`` (``--replay-storage``: sram, or flash where the serial firmware attaches the buffer and the state).
"""

from __future__ import annotations

from tinytrain.codegen.state import fingerprint, state_layout
from tinytrain.errors import UsageError, param
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.training.sparse import DEFAULT_LR

# FieldConfig's settings the command line sets (its xorshift seed is a constant; known is known_classes)
SETTINGS = tuple(n for n in FieldConfig.__dataclass_fields__ if n not in ("seed", "known"))
_INT = ("max_classes", "known_classes", "seed", "plan", *SETTINGS)


def program_options(program) -> dict:
    """What ``program`` (a FieldProgram) itself fixes: its head's classes, its settings, its state's fingerprint."""
    return {"max_classes": program.classes, "known_classes": program.cfg.known,
            **{n: getattr(program.cfg, n) for n in SETTINGS},
            "fingerprint": f"{fingerprint(state_layout(program.tg)):08x}"}


def compile_options(program, *, plan, update: str | None, lr: float | None, seed: int) -> dict:
    """``program_options`` and the step the compile chose: the ``update`` preset and its ``lr`` (the preset's
    default when none was given), or ``plan`` 1 (a plan file, its lr unless ``lr`` overrode it), and ``seed``."""
    step = {"plan": 1} if plan is not None else {"update": update or "last-k:1"}
    if lr is not None or plan is None:
        step["lr"] = lr if lr is not None else DEFAULT_LR
    return {**program_options(program), **step, "seed": seed}


def board_options(info: dict[str, str]) -> dict:
    """The options a board's info carries (none from a firmware that predates them), typed as ``field`` takes
    them (``fingerprint`` a hex string, ``plan`` 1)."""
    out = {}
    for key, value in info.items():
        if key in _INT:
            out[key] = int(value)
        elif key == "lr":
            out[key] = float(value)
        elif key in ("update", "fingerprint", "storage"):
            out[key] = value
    return out


def merged(given: dict, fixed: dict, where: str) -> dict:
    """``field``'s keywords: the ``fixed`` options (a board's, ``board_options``) with the ``given`` ones (None: not
    given) that do not contradict them; a contradiction is a UsageError naming both values and the fix."""
    out = {k: v for k, v in fixed.items() if k not in ("fingerprint", "plan", "storage")}
    for key, value in given.items():
        if value is None:
            continue
        if key == "plan":
            if "update" in fixed:
                raise UsageError(f"{param('plan', value)}: the firmware on {where} was compiled with --update "
                                 f"{fixed['update']}, not a plan file; drop --plan or rebuild the firmware")
        elif key in fixed and fixed[key] != value:
            raise UsageError(f"{param(key, value)}: the firmware on {where} was compiled with {param(key, fixed[key])}"
                             f"; drop the option (the board's is used) or rebuild the firmware")
        elif key == "update" and fixed.get("plan"):
            raise UsageError(f"{param('update', value)}: the firmware on {where} was compiled with a plan file; "
                             f"give that file with {param('plan')} instead")
        out[key] = value
    if fixed.get("plan") and given.get("plan") is None:
        raise UsageError(f"the firmware on {where} was compiled with a plan file: give it again with {param('plan')}")
    return out


def check_fingerprint(program, fixed: dict, model: str) -> None:
    """UsageError when ``program`` (the host's, of ``model``) is not the one the board's ``fixed`` options name."""
    theirs = fixed.get("fingerprint")
    mine = program_options(program)["fingerprint"]
    if theirs is not None and theirs != mine:
        raise UsageError(f"{model} is not the model of the board's firmware (its training state's layout "
                         f"{theirs}, this model's {mine} with these options): give the model it was compiled from")
