"""``tinytrain field`` (docs/guide/field-learning.md) and the field runtime's ``compile`` options.

    tinytrain field MODEL --stream STREAM.npz [--test DATA] [--engine sim|c] [--json OUT.json] ...
    tinytrain compile MODEL --update last-k:1 --replay N [--replay-k K] [--max-classes C] ... -o OUT

The work is ``tinytrain.field`` (field_runtime/api.py); ``compile --replay`` adds OUT/field/: the cut model's training
step, tt_field.c / tt_field.h and field.json (what the runtime adds to SRAM).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinytrain.cli_args import non_negative_int, positive_float, positive_int
from tinytrain.cli_samples import step_seed
from tinytrain.field_runtime.emit import field_memory
from tinytrain.field_runtime.anomaly import AnomalyProgram
from tinytrain.field_runtime.anomaly_host import anomaly_output
from tinytrain.field_runtime.api import field, field_model
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.host import field_files
from tinytrain.field_runtime.options import compile_options
from tinytrain.firmware import BOARDS
from tinytrain.outputs import OutputDir, check_file, write_file

QEMU_BOARDS = tuple(name for name, b in BOARDS.items() if b.qemu)  # the semihosting harness's boards

_DEFAULTS = FieldConfig()
_SETTINGS = {  # option -> (help); every default is FieldConfig's
    "guard-every": "every Nth labelled sample of an established class is held back for the guard",
    "guard-period": "learning steps between guard checks",
    "guard-drop": "roll back when the state scores more than this many guard samples below the last good one",
    "imprint": "a new class's head row is imprinted from the buffer at each of its first N examples",
    "drift-shift": "the feature-mean EMA's weight is 2^-N",
    "drift-warmup": "samples before the drift reference is taken (and as many to calibrate the threshold)",
    "drift-factor": "the drift threshold is this times the largest score seen while calibrating",
    "drift-min": "the smallest drift threshold (mean squared standardized shift, 1/4096 spread^2)",
    "drift-rebase": "samples after an alarm when the drift detector restarts",
}


def add_field_options(s: argparse.ArgumentParser, compile_command: bool = False, group=None) -> None:
    """The field runtime's sizes and thresholds (compile: only with --replay); in ``group`` (stream --field's:
    every default None, the board's firmware has them)."""
    g = group or s.add_argument_group("field runtime" + (" (with --replay: OUT/field/, docs/guide/field-learning.md)"
                                                         if compile_command else ""))

    def default(value):
        return None if group is not None else value

    fixed = "the firmware's, else " if group is not None else ""

    g.add_argument("--replay", type=non_negative_int, default=None if compile_command else default(_DEFAULTS.replay),
                   metavar="N", help=f"replay buffer slots (latents at the frozen prefix's output; default "
                   f"{fixed}{_DEFAULTS.replay}{'; compile: emit the field runtime' if compile_command else ''})")
    if compile_command:
        g.add_argument("--replay-storage", choices=("sram", "flash"), default="sram",
                       help="where `firmware --field` keeps the replay buffer and the last good state: sram (lost at a "
                       "reboot) or flash too (the board's last sectors: a reboot resumes from both; default sram)")
    g.add_argument("--replay-k", type=non_negative_int, default=default(_DEFAULTS.replay_k), metavar="K",
                   help=f"replayed samples per learned one (default {fixed}{_DEFAULTS.replay_k})")
    g.add_argument("--max-classes", type=positive_int, metavar="C",
                   help="head rows (default: the model's outputs, or --new-head's; another count: a new head)")
    g.add_argument("--known-classes", type=non_negative_int, metavar="N",
                   help="classes 0..N-1 known at the start (default all; none with a new head)")
    g.add_argument("--guard", type=non_negative_int, default=default(_DEFAULTS.guard), metavar="N",
                   help=f"guard set slots (0: no guard; default {fixed}{_DEFAULTS.guard})")
    for name, text in _SETTINGS.items():
        value = getattr(_DEFAULTS, name.replace("-", "_"))
        g.add_argument(f"--{name}", type=non_negative_int, default=default(value), metavar="N",
                       help=f"{text} (default {fixed}{value})")


def _settings(args: argparse.Namespace) -> dict:
    return {name.replace("-", "_"): getattr(args, name.replace("-", "_")) for name in _SETTINGS}


def cmd_field(args: argparse.Namespace) -> None:
    inputs = [p for p in (args.model, args.stream, args.test, args.plan) if p]
    if args.json:
        check_file(args.json, "field", inputs)
    result = field(args.model, args.stream, args.test, plan=args.plan, update=args.update, lr=args.lr,
                   max_classes=args.max_classes, known_classes=args.known_classes, replay=args.replay,
                   replay_k=args.replay_k, guard=args.guard, engine=args.engine, checkpoints=args.checkpoints,
                   seed=args.seed, board=args.board, **_settings(args))
    print(result.text())
    if args.json:
        write_file(args.json, (json.dumps(result.to_json(), indent=1) + "\n").encode(), "field", inputs)
        print(f"wrote {args.json}")


def add_field_command(sub) -> None:
    s = sub.add_parser("field", help="run a stream through the field runtime: replay, drift, new classes, guard")
    s.add_argument("model")
    s.add_argument("--stream", required=True, metavar="STREAM.npz",
                   help="x: the samples in arrival order (any DATA kind train takes); y: labels, -1 for none "
                   "(an autoencoder's: 0 normal, -1 none)")
    s.add_argument("--test", metavar="DATA", help="DATA spec scored at every checkpoint (e.g. fashion-mnist:test)")
    s.add_argument("--plan", help="sparse-update plan file (version 1)")
    s.add_argument("--update", help="full | bias-only | last-k:N (default last-k:1: the head)")
    s.add_argument("--lr", type=positive_float, help="learning rate of an --update preset (default 0.01)")
    add_field_options(s)
    s.add_argument("--engine", choices=("sim", "c", "qemu"), help="sim: the simulator (the spec); c: the emitted C "
                   "on the host (default with gcc); qemu: that C on --board; the same decisions, states and buffer")
    s.add_argument("--board", choices=QEMU_BOARDS, default="qemu-m4", help="--engine qemu: the emulated board (any "
                   "semihosting QEMU board; the stream is baked into its firmware)")
    s.add_argument("--checkpoints", type=positive_int, default=10, help="test accuracy this many times (default 10)")
    s.add_argument("--seed", type=non_negative_int, default=0, help="new-head init and rounding stream")
    s.add_argument("--json", metavar="OUT.json", help="write the result as JSON")
    s.set_defaults(func=cmd_field)


def prepare_field(args: argparse.Namespace):
    """compile --replay N: check the field runtime's options now and return what writes OUT/field/ after the
    compile's output (None without --replay)."""
    if getattr(args, "replay", None) is None:
        return None

    heads = args.max_classes or args.new_head  # compile's new head is the field head
    seed = step_seed(args)
    program = field_model(args.model, plan=args.plan, update=args.update, lr=args.lr, max_classes=heads,
                          known_classes=args.known_classes, replay=args.replay, replay_k=args.replay_k,
                          guard=args.guard, seed=seed, **_settings(args))
    if isinstance(program, AnomalyProgram):
        files, report, line = anomaly_output(program)
    else:
        files, report, line = _classifier_output(program)
        report["options"] = {**compile_options(program, plan=args.plan, update=args.update, lr=args.lr, seed=seed),
                             "storage": args.replay_storage}
    target = OutputDir(Path(args.output) / "field", "compile-field", inputs=[args.model])

    def write() -> None:
        with target as tmp:
            for name, body in files.items():
                (tmp / name).write_bytes(body.encode("utf-8"))
            (tmp / "field.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.output}/field/: {line}")

    return write


def _classifier_output(program) -> tuple[dict[str, str], dict, str]:
    """(files, field.json, what the line says) of a classifier's field runtime."""
    m = field_memory(program).as_dict()
    report = {"cut": program.cut, "latent_bytes": program.width, "classes": program.classes,
              "config": program.cfg.__dict__, "memory": m}
    return field_files(program), report, (
        f"the field runtime (tt_field.c/h) beside the training step of the model "
        f"from {program.cut}; it adds {m['sram']} B SRAM (buffer {m['buffer']}, guard {m['guard']}, "
        f"states {m['states']}); flash, 4 KB sectors: at least {m['flash_buffer']} B for the buffer's log, "
        f"{m['flash_state']} B for the last good state's ring; the frozen prefix (tt_prefix.c, raw input): "
        f"{m['prefix_arena']} B SRAM, {m['prefix_weights']} B of weights")
