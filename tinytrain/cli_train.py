"""``tinytrain train`` and ``tinytrain eval`` (docs/design.md §5a), kept apart from cli.py's other commands.

train: fine-tune on the host with the device's arithmetic (``--engine sim``: the numpy simulator; ``--engine c``:
the emitted C training step built with the host compiler, engines/host_c.py, scored with its tt_predict), batch-1
SGD with QAS (``--no-qas``: plain int8 SGD, the paper's baseline) under a sparse-update plan; eval: accuracy
of the int8 forward pass. ``--held-out FRACTION`` (both commands, same ``--split-seed``) holds out a
stratified part of DATA: train learns on the rest and reports held-out accuracy before and after.
The work is ``tinytrain.train`` / ``tinytrain.evaluate`` (api.py); this module prints and writes the files.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from tinytrain import cli_args
from tinytrain.api import evaluate, train
from tinytrain.cli_args import non_negative_int, positive_int
from tinytrain.engines import ENGINES, HOST_ENGINES
from tinytrain.errors import UsageError
from tinytrain.firmware import BOARDS
from tinytrain.outputs import check_file
from tinytrain.state_file import save_state
from tinytrain.training.spec import KNOBS


def cmd_train(args: argparse.Namespace) -> None:
    _check_outputs(args)
    if args.sram and args.engine != "qemu":
        raise UsageError(f"--sram {args.sram} is the firmware's RAM on --engine qemu; the host engines have no "
                         "budget: drop it, or add --engine qemu (tinytrain compile --sram checks a budget)")
    with Progress.of(args, "train", "steps", args.steps) as progress:
        result = train(args.model, args.data, plan=args.plan, update=args.update, epochs=args.epochs or 1,
                       steps=args.steps, engine=args.engine, board=args.board, sram=args.sram or "256k",
                       flash=args.flash,
                       save_every=args.save_every, stop_after_saves=args.stop_after_saves, new_head=args.new_head,
                       held_out=args.held_out, split_seed=args.split_seed, input_size=args.input_size,
                       input_mapping=args.input_mapping, state=args.state, progress=progress, **step_knobs(args))
    if result is None:
        print(f"stopped the board after {args.stop_after_saves} saves; run the same command without "
              f"--stop-after-saves to resume from {args.flash}")
        return
    out = result.to_json()
    if args.state_out:
        save_state(args.state_out, result.state)
        out["state_out"] = args.state_out
    if args.output:  # the forward graph with the trained weights / biases (and new head), as int8 QDQ ONNX
        # lazy: writing ONNX loads onnx (about 0.6 s)
        from tinytrain.export_onnx import graph_to_onnx, save_onnx

        save_onnx(graph_to_onnx(result.trained_model()), args.output)
        out["output"] = args.output
    if args.json:
        print(json.dumps(out))
        return
    held, metric = result.held_out, "accuracy" if result.plan.loss == "xent" else "error"
    label = "accuracy" if metric == "accuracy" else "reconstruction error"
    if held:
        print(f"held-out {label} before training {held[metric + '_before']:.4f} on {held['n_held_out']} samples "
              f"(training on {held['n_train']})")
    if "insns_per_step" in out:
        print(f"{out['board']}: {out['insns_per_step'] / 1e6:.1f}M instructions per training step "
              "(QEMU -icount shift=0, SysTick)")
    print(f"step: {result.spec.recipe()}")
    tail = result.losses[-min(len(result.losses), result.n_train):]
    print(f"trained {result.steps} steps in {result.seconds:.1f} s: mean loss of the last "
          f"{int(np.isfinite(tail).sum())} steps {result.final_loss or float('nan'):.4f}, "
          f"training {label} {result.train_accuracy:.4f}")
    if result.state.nonfinite:
        print(f"{result.state.nonfinite} steps not applied: their loss was NaN or Inf")
    if held:
        after, change = held[metric + "_after"], held[metric + "_after"] - held[metric + "_before"]
        print(f"held-out {label} after training {after:.4f} on {held['n_held_out']} samples ("
              + (f"{100 * change:+.1f} points)" if metric == "accuracy" else f"{change:+.4f})"))
    if args.state_out:
        print(f"wrote {args.state_out}")
    if args.output:
        print(f"wrote {args.output} (int8 QDQ ONNX of the trained model)")


def _check_outputs(args: argparse.Namespace) -> None:
    """Before the work: --state-out, -o and the board's --flash may be written (tinytrain/outputs), and are not one
    file."""

    inputs = [p for p in (args.model, args.plan, args.data, args.state) if p]
    if args.flash:
        check_file(args.flash, "flash", inputs)
        inputs.append(args.flash)
    if args.state_out and args.output and Path(args.state_out).resolve() == Path(args.output).resolve():
        raise UsageError(f"--state-out and -o both name {args.output}; give each its own file")
    if args.state_out:
        check_file(args.state_out, "state", inputs)
    if args.output:
        check_file(args.output, "onnx", inputs)


def cmd_eval(args: argparse.Namespace) -> None:
    with Progress.of(args, "eval", "samples") as progress:
        result = evaluate(args.model, args.data, state=args.state, engine=args.engine, new_head=args.new_head,
                          seed=args.seed, held_out=args.held_out, split_seed=args.split_seed, loss=args.loss,
                          anomaly_labels=args.anomaly_labels, input_size=args.input_size,
                          input_mapping=args.input_mapping, plan=args.plan, update=args.update,
                          remainder_bits=args.remainder_bits, backward=args.backward, progress=progress)
    held = "held-out " if result.held_out is not None else ""
    if args.json:
        print(json.dumps(result.to_json()))
    elif result.errors is None:
        print(f"accuracy {result.accuracy:.4f} on {result.n} {held}samples")
    else:
        e = result.errors
        print(f"reconstruction error (mean squared, dequantized) {result.error:.4f} on {result.n} {held}samples "
              f"(min {e.min():.4f}, median {np.median(e):.4f}, max {e.max():.4f})")
        if result.auc is not None:
            print(f"anomaly ROC AUC {result.auc:.4f} ({result.n_anomalous} anomalous, "
                  f"{result.n - result.n_anomalous} normal)")


def add_train_commands(sub) -> None:
    s = sub.add_parser("train", help="fine-tune with the device's arithmetic (batch-1 SGD, QAS, sparse update)")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--data", required=True,
                   help=".npz (x: uint8 NHWC images or int8 / float32 features; y: labels, or none with --loss mse), a "
                        "class-folder tree, lfw or fashion-mnist[:test][:N]")
    s.add_argument("--plan", help="sparse-update plan file (version 1)")
    s.add_argument("--update", help=f"{UPDATE_HELP} (default bias-only)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--epochs", type=positive_int, help="passes over DATA (default 1)")
    n.add_argument("--steps", type=positive_int, help="training steps (instead of --epochs)")
    s.add_argument("--engine", choices=ENGINES,
                   help="sim: the numpy simulator; c: the emitted C built with the host compiler; qemu: that C as "
                        "firmware on an emulated Cortex-M (--board, --sram). Default: c when gcc is installed, "
                        "else sim (the fastest exact engine; every engine computes the same states)")
    s.add_argument("--board", default="qemu-m7", choices=tuple(n for n, b in BOARDS.items() if b.qemu),
                   help="--engine qemu: the emulated board (default qemu-m7)")
    s.add_argument("--sram", help="--engine qemu: SRAM budget = the firmware's RAM region (default 256k)")
    s.add_argument("--flash", metavar="FLASH.bin",
                   help="--engine qemu: the board's flash (a file kept between runs): the firmware saves its state there "
                        "every --save-every samples and, when it holds a state, resumes from it")
    s.add_argument("--save-every", type=non_negative_int, default=0, metavar="N", help="--engine qemu --flash: samples between saves")
    s.add_argument("--stop-after-saves", type=non_negative_int, default=0, metavar="K",
                   help="--engine qemu --flash: cut the board's power right after its K-th save (then run again to resume)")
    s.add_argument("--new-head", type=positive_int, metavar="N", help="replace the last layer by a new N-class head")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    add_step_arguments(s)
    _add_split_arguments(s, "train on the rest; report held-out accuracy before and after training")
    s.add_argument("--state", help="start from this state's weights and biases: STATE.npz of --state-out, or a "
                   "board's tt_state.bin (of this plan)")
    s.add_argument("--state-out", help="write the trained state (int8 weights, int32 biases) to STATE.npz")
    s.add_argument("-o", "--output", help="write the trained model as int8 QDQ ONNX (TRAINED.onnx)")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    add_progress_argument(s)
    s.set_defaults(func=cmd_train)
    _add_eval_command(sub)


def _add_eval_command(sub) -> None:
    s = sub.add_parser("eval", help="accuracy of the int8 model with the device's arithmetic")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--data", required=True)
    s.add_argument("--new-head", type=positive_int, metavar="N", help="with a new N-class head (as train --new-head)")
    s.add_argument("--seed", type=non_negative_int, default=0, help="new-head init (as train --seed)")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    s.add_argument("--state", help="evaluate the trained model: STATE.npz of train --state-out, or a board's "
                   "tt_state.bin (with the --plan / --update it was compiled with)")
    s.add_argument("--plan", help="--state tt_state.bin: the plan file the board's firmware was compiled with")
    s.add_argument("--update", help="--state tt_state.bin: the preset the board's firmware was compiled with")
    add_remainder_argument(s)
    add_backward_argument(s)
    s.add_argument("--engine", choices=HOST_ENGINES,
                   help="sim: the numpy simulator; c: the emitted C forward pass built with the host compiler. "
                        "Default: c when gcc is installed, else sim (both exact)")
    _add_split_arguments(s, "evaluate on the held-out part only (the same split as train's)")
    s.add_argument("--loss", choices=("xent", "mse"),
                   help="mse: report the reconstruction error per sample of an autoencoder (default for DATA without "
                        "y on a model whose output has its input's shape); xent: accuracy")
    s.add_argument("--anomaly-labels", metavar="FILE.npy",
                   help="--loss mse: 0 (normal) / 1 (anomalous) per sample; reports the ROC AUC of the reconstruction "
                        "error (default: the DATA .npz's 'anomaly' array, if any)")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object (mse: every error)")
    add_progress_argument(s)
    s.set_defaults(func=cmd_eval)


class Progress:
    """``progress(n)`` of train / eval on a terminal: one line on stderr, rewritten as the work goes on."""

    def __init__(self, label: str, unit: str, total: int | None) -> None:
        self.label, self.unit, self.total, self.done, self.t0 = label, unit, total, 0, time.time()

    @classmethod
    @contextlib.contextmanager
    def of(cls, args: argparse.Namespace, label: str, unit: str, total: int | None = None):
        """The progress callback (None: no progress in a pipe, with --json or with --no-progress); its line ends
        when the work does."""
        quiet = args.no_progress or getattr(args, "json", False) or not sys.stderr.isatty()
        progress = None if quiet else cls(label, unit, total)
        try:
            yield progress
        finally:
            if progress is not None and progress.done:
                sys.stderr.write("\n")

    def __call__(self, n: int) -> None:
        self.done += n
        seconds = time.time() - self.t0
        of = f"/{self.total}" if self.total else ""
        sys.stderr.write(f"\r{self.label}: {self.done}{of} {self.unit}, {seconds:.0f} s")
        sys.stderr.flush()


def add_progress_argument(s) -> None:
    s.add_argument("--no-progress", action="store_true", help="no progress line on stderr (shown on a terminal only)")


UPDATE_HELP = ("full | bias-only | last-k:N, or a plan search's finalist: classifier-only, 'bias-only (last K)', "
               "'last-k:N at 1/R'")


def add_step_arguments(s) -> None:
    """The step's knobs (training/spec.py KNOBS), as ``train`` and ``compile`` take them (default None: the plan's
    own, else the knob's default)."""
    for knob in KNOBS:
        kw = dict(knob.cli)
        if isinstance(kw.get("type"), str):
            kw["type"] = getattr(cli_args, kw["type"])
        s.add_argument(knob.flag, dest=knob.name, help=knob.help, **kw)


def step_knobs(args: argparse.Namespace) -> dict:
    """The knobs the command line gave (None: not given)."""
    return {k.name: getattr(args, k.name) for k in KNOBS if getattr(args, k.name) is not None}


def add_force_argument(s) -> None:
    s.add_argument("--force", action="store_true",
                   help="-o names a folder with files of its own: write beside them (never replacing or deleting a "
                        "file tinytrain did not write)")


def add_input_mapping_argument(s) -> None:
    s.add_argument("--input-mapping", metavar="MAPPING",
                   help="how a pixel p becomes the model's input: unit (p/255), symmetric ((p-128)/128), imagenet "
                        "((p/255 - mean)/std), raw (p), SCALE,OFFSET or per channel S1,S2,S3:O1,O2,O3 (default: the "
                        "model's metadata, else its input quantization's range; docs/guide/data.md)")


def add_input_size_argument(s) -> None:
    s.add_argument("--input-size", metavar="N|HxW",
                   help="run the model's layers on N x N (or H x W) images instead of its own size, where the graph "
                        "allows it (docs/guide/input-size.md); the data are resized to it")


def add_remainder_argument(s) -> None:
    s.add_argument("--remainder-bits", type=int, choices=(0, 4, 8), metavar="F",
                   help="fraction bits every trained int8 weight keeps below its LSB between steps: 0 (int8 only), 4 "
                        "(half a byte per trained weight) or 8 (a byte). Default: the plan's own, else 4")


def add_backward_argument(s) -> None:
    s.add_argument("--backward", choices=("fp32", "int"),
                   help="the step's arithmetic from the loss to the update: fp32 (float gradients) or int (integers "
                        "only, for cores without an FPU: docs/guide/integer-step.md). Default: the plan's own, else "
                        "fp32")


def add_schedule_arguments(s, span: str, default: str = "the plan's own; presets: constant", floor: str = "0") -> None:
    s.add_argument("--lr-schedule", choices=("constant", "cosine"),
                   help=f"cosine: warm-up, then cosine decay of every lr to {floor} over {span}, computed by the "
                        f"device from its step count; constant: one lr throughout (default: {default})")
    s.add_argument("--warmup", type=float, default=0.0, metavar="FRACTION",
                   help="--lr-schedule cosine: the fraction of the steps that warms the lrs up linearly (default 0)")


def _add_split_arguments(s, what: str) -> None:
    s.add_argument("--held-out", type=float, metavar="FRACTION",
                   help=f"hold out this fraction of DATA (stratified by class): {what}")
    s.add_argument("--split-seed", type=non_negative_int, default=0, help="seed of the --held-out split")
