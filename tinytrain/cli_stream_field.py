"""``tinytrain stream MODEL --port PORT --field STREAM.npz``: a stream through a board's field runtime over its
serial port (the firmware of ``tinytrain firmware --field`` or ``field_runtime.board.serial_firmware``: T learn,
P observe, R predict, D drift, Q status, S state frames of firmware/protocol.py). The options the compile fixed
(``--replay``, ``--update``, ``--lr``, ...) come from the board's info (field_runtime/options.py); one given here
must agree with them. The board computes the latents (raw=1; else the host does) and everything else; the report
is ``tinytrain field``'s, the same numbers as its ``--engine sim`` for the same options."""

from __future__ import annotations

import argparse
import json

from tinytrain.cli_args import positive_float, positive_int
from tinytrain.cli_field import add_field_options
from tinytrain.cli_samples import step_seed
from tinytrain.errors import UsageError
from tinytrain.field_runtime.api import field
from tinytrain.field_runtime.board import SerialField
from tinytrain.field_runtime.options import SETTINGS, board_options, merged
from tinytrain.firmware.protocol import Board
from tinytrain.outputs import check_file, write_file


def add_stream_field_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("field runtime on the board (--field; docs/guide/field-learning.md); the options "
                             "below default to those the board's firmware was compiled with (its info)")
    g.add_argument("--field", metavar="STREAM.npz", help="drive the board's field runtime with this stream (x in "
                   "arrival order, y labels, -1 for none) instead of training on --data")
    g.add_argument("--test", metavar="DATA", help="--field: DATA scored at every checkpoint")
    g.add_argument("--update", help="--field: full | bias-only | last-k:N (default: the firmware's)")
    g.add_argument("--lr", type=positive_float, help="--field: the learning rate of an --update preset (default: the "
                   "firmware's)")
    g.add_argument("--checkpoints", type=positive_int, default=10, help="--field: test this many times (default 10)")
    g.add_argument("--field-json", metavar="OUT.json", help="--field: write the result as JSON")
    add_field_options(s, group=g)


def _options(args: argparse.Namespace, board: Board) -> dict:
    """``tinytrain.field``'s keywords: the board's options, and those given that agree with them."""
    given = {"plan": args.plan, "update": args.update, "lr": args.lr, "max_classes": args.max_classes,
             "known_classes": args.known_classes, "seed": args.seed,
             **{n: getattr(args, n) for n in SETTINGS}}
    opts = merged(given, board_options(board.info), args.port)
    opts.setdefault("seed", step_seed(args))
    return opts


def stream_field(args: argparse.Namespace, port) -> None:
    """The --field stream through the board on the open serial ``port``; prints tinytrain field's report."""
    inputs = [p for p in (args.model, args.field, args.test, args.plan) if p]
    if args.field_json:
        check_file(args.field_json, "field", inputs)
    board = Board(port)
    if board.info.get("field") != "1":
        raise UsageError(f"{args.port}: the board runs no field runtime (its firmware's info: {board.info}); build "
                         "it with `tinytrain firmware BUILD --board B --field` from `tinytrain compile --replay N`")
    result = field(args.model, args.field, args.test, engine=f"board {board.info.get('board', '?')}",
                   checkpoints=args.checkpoints, runtime=lambda p: SerialField(p, board, args.model),
                   **_options(args, board))
    print(result.text())
    if args.field_json:
        write_file(args.field_json, (json.dumps(result.to_json(), indent=1) + "\n").encode(), "field", inputs)
        print(f"wrote {args.field_json}")
