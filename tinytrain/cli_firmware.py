"""``tinytrain firmware`` and ``tinytrain stream`` (docs/design.md §5a), kept apart from cli.py's other commands.

firmware: a `tinytrain compile` output folder -> a firmware project for a board (tinytrain/firmware/).
stream: the host side of the real boards' serial protocol (tinytrain/firmware/protocol.py): send labelled
images (or an autoencoder's samples, with a label its loss does not read) to train on, then samples to evaluate
(accuracy, or the reconstruction error of the outputs the board returns), and fetch the trained state.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tinytrain.api import load_model, score_outputs
from tinytrain.cli_args import non_negative_int, positive_float, positive_int
from tinytrain.cli_samples import add_plan_seed_arguments, step_seed
from tinytrain.cli_stream_field import add_stream_field_options, stream_field
from tinytrain.cli_train import add_force_argument, add_input_mapping_argument
from tinytrain.engines.order import sample_order
from tinytrain.engines.samples import anomaly_labels, default_loss, load_data, prepared
from tinytrain.errors import UsageError
from tinytrain.firmware import BOARDS, get_board, render_firmware
from tinytrain.firmware.emulator import PREFIX, emulated
from tinytrain.firmware.project import DEFAULT_BAUD, write_project
from tinytrain.firmware.protocol import Board
from tinytrain.cores import PORTABLE_STACK_BYTES, STACK_BYTES
from tinytrain.outputs import OutputDir, check_file, write_file
from tinytrain.sizes import parse_size
from tinytrain.splits import held_out_split

if TYPE_CHECKING:
    from tinytrain.ir import Graph


def cmd_firmware(args: argparse.Namespace) -> None:
    board = get_board(args.board)
    target = OutputDir(args.output, "firmware", force=args.force, inputs=(args.dir,))
    files = render_firmware(Path(args.dir), board, baud=args.baud, stack_bytes=parse_size(args.stack, "stack") if args.stack else None,
                            save_every=args.save_every, field=args.field)
    out = Path(args.output)
    write_project(files, target)
    report = json.loads(files["report.json"])
    print(f"wrote {out}: firmware for {board.name} ({board.core}), RAM region {report['sram_budget_bytes']} bytes "
          f"(the SRAM budget), {len(files)} files" + ("; main: the field runtime's serial harness (raw samples)"
                                                     if args.field else ""))
    if args.field:
        port = "socket://127.0.0.1:5555" if board.emulator else "PORT"
        run = f"`make -C {out} run PORT=5555`, then: " if board.emulator else f"upload ({board.pio.note}), then: "
        print(f"build: make -C {out}; {run}tinytrain stream MODEL --port {port} --field STREAM.npz --test DATA "
              "(the field options: the firmware's, from its info)")
        return
    if board.qemu:
        print(f"build: make -C {out}; run: put tt_train.bin / tt_test.bin (format: src/tt_samples.h) in {out} and "
              f"`make -C {out} run`, or let `tinytrain train ... --engine qemu --board {board.name}` do all of it")
    elif board.emulator:
        print(f"build: make -C {out} (firmware.bin, the image as flashed); run it on QEMU ({board.emulator}): "
              f"`make -C {out} run PORT=5555`, then: tinytrain stream MODEL --port socket://127.0.0.1:5555 --data DATA")
    else:
        print(f"build: make -C {out} ({board.tools.prefix}gcc) or `pio run -d {out}`; upload: {board.pio.note}; "
              f"then: tinytrain stream MODEL --port PORT --data DATA ({board.uart})")


def cmd_stream(args: argparse.Namespace) -> None:
    try:
        import serial
    except ImportError:
        raise UsageError("tinytrain stream needs pyserial: pip install pyserial") from None
    if args.field is None and args.data is None:
        raise UsageError("tinytrain stream needs --data DATA (train on it) or --field STREAM.npz (the field runtime)")
    if args.field is not None:
        with _port_url(args.port) as url:
            with _open(serial, url, args) as port:
                stream_field(args, port)
        return
    if args.state_out:  # before the run: a name that loses a file or contradicts the bytes is known now
        check_file(args.state_out, "device-state", inputs=(args.model, args.data))
    graph = load_model(args.model, input_mapping=args.input_mapping)
    data = _stream_data(graph, args)
    parts = held_out_split(data.y, args.held_out, args.split_seed)
    rows = parts[0] if parts else np.arange(len(data.y))
    test_rows = parts[1] if parts else rows
    steps = args.steps if args.steps is not None else args.epochs * len(rows)
    if steps < 0:
        raise UsageError("--steps / --epochs must not be negative")
    order = sample_order(rows, steps, step_seed(args))
    with _port_url(args.port) as url:  # qemu:PROJECT: QEMU for this command only, stopped however it ends
        try:
            port = serial.serial_for_url(url, baudrate=args.baud, timeout=args.timeout)
        except (serial.SerialException, ValueError) as e:
            raise UsageError(f"cannot open {args.port}: {e}") from None
        try:
            with port:
                result = _stream(args, Board(port), data, rows, test_rows, order, steps)
        except serial.SerialException as e:
            raise UsageError(f"{args.port}: {e}") from None
    if args.json:
        print(json.dumps(result))
        return
    if data.loss == "mse":
        auc = f", anomaly ROC AUC {result['roc_auc']:.4f}" if "roc_auc" in result else ""
        print(f"reconstruction error (mean squared, dequantized) {result['reconstruction_error']:.4f}{auc} on "
              f"{len(test_rows)} samples after {steps} steps on {result['board']}")
    else:
        print(f"accuracy {result['accuracy']:.4f} on {len(test_rows)} samples after {steps} steps on {result['board']}")
    if args.state_out:
        print(f"wrote {args.state_out}")


def _open(serial, url: str, args: argparse.Namespace):
    try:
        return serial.serial_for_url(url, baudrate=args.baud, timeout=args.timeout)
    except (serial.SerialException, ValueError) as e:
        raise UsageError(f"cannot open {args.port}: {e}") from None


def _port_url(port: str):
    """The pyserial URL of --port, in a context: ``qemu:PROJECT`` runs the project under QEMU meanwhile."""
    from contextlib import nullcontext


    return emulated(port[len(PREFIX):]) if port.startswith(PREFIX) else nullcontext(port)


@dataclass(frozen=True)
class _StreamData:
    """What `stream` sends: the int8 inputs, their labels (an autoencoder's: zeros, which its loss does not read),
    the loss, the anomaly labels (an autoencoder's ROC AUC) or None."""

    graph: Graph
    x: np.ndarray
    y: np.ndarray
    loss: str
    anomaly: np.ndarray | None


def _stream_data(graph: Graph, args: argparse.Namespace) -> _StreamData:
    """DATA as `train` and `eval` read it; float targets are refused (the protocol carries a sample and a label)."""

    ds = load_data(args.data)
    loss = args.loss or default_loss(graph, ds)
    if loss == "mse" and ds.y is not None and not ds.labelled:
        raise UsageError(f"{ds.source}: float targets y do not go over the serial protocol (a sample and a class "
                         "label); train them with `tinytrain train --engine c` or `qemu`, or drop y to reconstruct")
    x, y = prepared(graph, ds, loss)
    anomaly = anomaly_labels(ds, args.anomaly_labels, loss)
    return _StreamData(graph, x, np.zeros(len(x), np.int64) if loss == "mse" else y, loss, anomaly)


def _stream(args, board, data: _StreamData, rows, test_rows, order, steps) -> dict:
    """Train on x[order] and evaluate x[test_rows] on the board; the result JSON of `stream` (eval's keys: accuracy,
    or an autoencoder's reconstruction errors and their ROC AUC)."""

    x, y = data.x, data.y
    if board.input_bytes != x[0].nbytes:
        raise UsageError(f"the board's model takes {board.input_bytes}-byte inputs, {args.model} "
                         f"{x[0].nbytes}: flash the firmware of this model")
    losses, cycles = [], []
    t0 = time.time()
    for k, i in enumerate(order):
        loss, ticks = board.train(x[i], int(y[i]))
        losses.append(loss)
        cycles.append(ticks)
        if not args.json:
            label = f" label {int(y[i])}" if data.loss == "xent" else ""
            print(f"step {k}{label} loss {loss:.6f} cycles {ticks}", flush=True)
    outs, predict_cycles = [], []
    for i in test_rows:
        _, ticks, out = board.predict(x[i], int(y[i]) if data.loss == "xent" else -1)
        outs.append(np.frombuffer(out, np.int8))
        predict_cycles.append(ticks)
    anomaly = None if data.anomaly is None else data.anomaly[test_rows]
    scored = score_outputs(data.graph, data.loss, x[test_rows], np.stack(outs), y[test_rows], anomaly=anomaly)
    losses = np.array(losses, np.float32)  # the board's float32 losses, averaged as `train` does
    tail = losses[-min(len(losses), len(rows)):]
    result = {"steps": int(steps), "final_loss": float(tail.mean()) if steps else None, **scored.to_json(),
              "board": board.info.get("board"),
              "seconds": round(time.time() - t0, 3),
              "cycles_per_step": float(np.mean(cycles)) if cycles else None,
              "cycles_per_inference": float(np.mean(predict_cycles))}
    if args.state_out:
        write_file(args.state_out, board.state(), "device-state")
        result["state_out"] = args.state_out
    return result


def add_firmware_commands(sub) -> None:
    s = sub.add_parser("firmware", help="a firmware project (QEMU board or PlatformIO) from a compile output folder")
    s.add_argument("dir", help="the output folder of `tinytrain compile`")
    s.add_argument("--board", required=True, choices=tuple(BOARDS), help="the board (docs/guide/firmware.md)")
    s.add_argument("-o", "--output", required=True, help="project folder")
    add_force_argument(s)
    s.add_argument("--baud", type=positive_int, default=DEFAULT_BAUD, help=f"serial boards: UART baud rate (default {DEFAULT_BAUD})")
    s.add_argument("--stack", help=f"stack reserved in the RAM region (default: the board's core's, {STACK_BYTES}; "
                   f"{PORTABLE_STACK_BYTES} on Cortex-M3, M0+ and RISC-V)")
    s.add_argument("--save-every", type=non_negative_int, default=0, metavar="N",
                   help="training builds: save the trained state to the board's flash every N samples (two slots, "
                        "power-loss safe) and load it at boot (default 0: state in SRAM only)")
    s.add_argument("--field", action="store_true",
                   help="the field runtime's serial firmware (a compile with --replay N): main runs tt_learn / "
                        "tt_observe on raw samples over the serial protocol, for `tinytrain stream --field`")
    s.set_defaults(func=cmd_firmware)

    s = sub.add_parser("stream", help="train and evaluate on a real board over its serial port")
    s.add_argument("model", help="the model the board's firmware was built from (for the input pipeline)")
    s.add_argument("--port", required=True, help="serial port (e.g. /dev/ttyACM0), a pyserial URL, or qemu:PROJECT: "
                   "run that firmware project of an emulated board (netduinoplus2) under QEMU for this command")
    s.add_argument("--data",
                   help=".npz (x: uint8 NHWC images or int8 / float32 features of the input shape; y labels, or none "
                        "for an autoencoder), a "
                        "class-folder tree, lfw or fashion-mnist[:test][:N] (docs/guide/data.md)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--epochs", type=int, default=1, help="passes over the training rows")
    n.add_argument("--steps", type=int, help="steps instead of --epochs (the rows in order, then again)")
    s.add_argument("--held-out", type=float, help="evaluate on this stratified fraction, train on the rest")
    s.add_argument("--split-seed", type=non_negative_int, default=0)
    add_plan_seed_arguments(s, "sample order")
    s.add_argument("--loss", choices=("xent", "mse"),
                   help="the firmware's loss: xent (classifier) or mse (an autoencoder's reconstruction of its input; "
                        "reports the reconstruction error; default for DATA without y on a model whose output has its "
                        "input's shape)")
    s.add_argument("--anomaly-labels", metavar="FILE.npy",
                   help="--loss mse: 0 (normal) / 1 (anomalous) per sample; reports the ROC AUC of the reconstruction "
                        "error (default: the DATA .npz's 'anomaly' array, if any)")
    s.add_argument("--baud", type=positive_int, default=DEFAULT_BAUD)
    add_input_mapping_argument(s)
    s.add_argument("--timeout", type=positive_float, default=60.0, help="seconds to wait for one reply")
    s.add_argument("--state-out", help="write the board's trained state (tt_state_save bytes) here")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    add_stream_field_options(s)
    s.set_defaults(func=cmd_stream, new_head=None)
