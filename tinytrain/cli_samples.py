"""``tinytrain samples``: the files a QEMU board's harness reads, from any DATA spec, and what it wrote, read back
(docs/guide/firmware.md "Running a QEMU board by hand"; formats: firmware/c/tt_samples.h, tt_harness_qemu.c).

    tinytrain samples MODEL --data DATA [--plan P] [--held-out F] [--steps N | --epochs E] [--seed S] -o DIR
        DIR/tt_train.bin: the training samples, one per step, in the order `train` uses (same --seed, --held-out,
        --split-seed; --seed defaults to the seed of the step --plan P names, as train's, else 0); DIR/tt_test.bin: the held-out samples (every sample without --held-out); DIR/tt_targets.bin
        for float targets. DIR is the firmware project of a QEMU board: then `make -C DIR run` (QEMU runs there).
    tinytrain samples MODEL --read DIR [--log RUN.txt]
        the accuracy (or reconstruction error) of DIR/tt_logits.bin against DIR/tt_test.bin, the losses of the
        harness's output saved in RUN.txt, and the state it saved (DIR/tt_state.bin: `eval --state`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tinytrain.api import load_model, sample_order, score_outputs
from tinytrain.cli_args import non_negative_int, positive_int
from tinytrain.cli_train import add_input_mapping_argument, add_input_size_argument
from tinytrain.data import Dataset
from tinytrain.engines.qemu import QemuError, parse_output
from tinytrain.engines.samples import default_loss, load_data, prepared
from tinytrain.errors import UsageError
from tinytrain.firmware import samples
from tinytrain.outputs import read_manifest, write_files
from tinytrain.splits import held_out_split
from tinytrain.training.resolve import read_step, seed_of
from tinytrain.training.spec import StepSpec


def cmd_samples(args: argparse.Namespace) -> None:
    if (args.output is None) == (args.read is None):
        raise UsageError("give -o DIR (write the sample files) or --read DIR (read what the harness wrote)")
    if args.read is not None:
        _read(args)
        return
    if args.data is None:
        raise UsageError("-o DIR writes the samples of --data DATA: give --data")
    _write(args)


def given_step(path: str | None) -> StepSpec | None:
    """The step ``--plan`` names: a plan file, or the output folder of a training ``tinytrain compile`` (its
    report.json's plan); None: none given."""
    if path is None:
        return None
    folder = Path(path)
    if not folder.is_dir():
        return read_step(path)
    try:
        obj = json.loads((folder / "report.json").read_text(encoding="utf-8"))["plan"]
    except (OSError, UnicodeError, ValueError, KeyError, TypeError):
        raise UsageError(f"--plan {path}: a folder, but not the output of a training `tinytrain compile` (no "
                         "report.json with its plan); give a plan file or that output") from None
    return read_step(obj)


def step_seed(args: argparse.Namespace) -> int:
    """The seed of the run: --seed, else that of the step --plan names (as ``train --plan``), else 0."""
    return seed_of(given_step(args.plan), {"seed": args.seed})


def _write(args: argparse.Namespace) -> None:
    out = Path(args.output)
    if not out.is_dir():
        raise UsageError(f"-o {out}: {'a file' if out.exists() else 'no such folder'}; give the folder the sample "
                         "files go to (the firmware project of a QEMU board, or a new folder you made)")
    made_by = (read_manifest(out) or {}).get("command")
    if made_by == "compile":  # the firmware made from it would not hold them: its harness reads its own folder
        raise UsageError(f"-o {out}: a `tinytrain compile` output, not a firmware project; make one (tinytrain "
                         f"firmware {out} --board qemu-m7 -o fw) and give it: -o fw")
    names = {out / "tt_train.bin": "samples", out / "tt_test.bin": "samples"}
    args.seed = step_seed(args)
    graph = load_model(args.model, new_head=args.new_head, seed=args.seed, input_size=args.input_size,
                       input_mapping=args.input_mapping)
    ds = load_data(args.data)
    loss = args.loss or default_loss(graph, ds)
    x, y = prepared(graph, ds, loss)
    labels = y if loss == "xent" else np.zeros(len(x), np.int64)
    parts = held_out_split(labels if loss == "xent" else np.zeros(len(x), np.int64), args.held_out, args.split_seed)
    rows, test = parts if parts else (np.arange(len(x)), np.arange(len(x)))
    steps = args.steps if args.steps is not None else args.epochs * len(rows)
    order = sample_order(rows, steps, args.seed)
    files = {out / "tt_train.bin": samples.encode(x[order], labels[order]),
             out / "tt_test.bin": samples.encode(x[test], labels[test])}
    if loss == "mse" and y is not None:  # float targets: the harness reads them beside the training samples
        names[out / "tt_targets.bin"] = "targets"
        files[out / "tt_targets.bin"] = np.ascontiguousarray(y[order], "<f4").tobytes()
    write_files(files, names, inputs=[p for p in (args.model, args.data) if p])
    print(f"wrote {out}/tt_train.bin ({len(order)} training steps) and tt_test.bin ({len(test)} samples)"
          + (", tt_targets.bin" if len(files) == 3 else "") + f"; run them: make -C {out} run > run.txt (in a firmware "
          f"project), then tinytrain samples MODEL --read {out} --log run.txt")


def _read(args: argparse.Namespace) -> None:
    folder = Path(args.read)
    graph = load_model(args.model, new_head=args.new_head, seed=step_seed(args), input_size=args.input_size)
    try:
        x, y = samples.decode((folder / "tt_test.bin").read_bytes())
        logits = np.fromfile(folder / "tt_logits.bin", np.int8)
    except (OSError, ValueError) as e:
        raise UsageError(f"{folder}: cannot read the harness's files ({e}); run the firmware there first") from None
    if len(y) == 0 or logits.size % len(y):
        raise UsageError(f"{folder}/tt_logits.bin holds {logits.size} bytes, not a whole output per test sample")
    shape = graph.tensors[graph.inputs[0]].shape[1:]
    x = x.reshape((len(y), *shape))
    loss = args.loss or default_loss(graph, Dataset(x, None, (), str(folder)))  # mse for an autoencoder
    result = score_outputs(graph, loss, x, logits.reshape(len(y), -1), y.astype(np.int64))
    out = {**result.to_json(), **_losses(args.log), "state": _state(folder)}
    if args.json:
        print(json.dumps(out))
        return
    what = f"accuracy {result.accuracy:.4f}" if result.errors is None else f"reconstruction error {result.error:.4f}"
    print(f"{what} on {result.n} samples of {folder}/tt_test.bin (the board's tt_logits.bin)")
    if "final_loss" in out:
        print(f"{out['steps']} training steps in {args.log}: mean loss {out['final_loss']:.4f}")
    if out["state"]:
        print(f"{out['state']}: the board's trained state (tinytrain eval MODEL --state {out['state']} --plan/--update "
              "as compiled)")


def _losses(log: str | None) -> dict:
    if log is None:
        return {}

    try:
        losses = parse_output(Path(log).read_text(errors="replace"))["losses"]
    except (OSError, QemuError) as e:
        raise UsageError(f"--log {log}: {e}") from None
    finite = losses[np.isfinite(losses)]
    return {"steps": int(len(losses)), "final_loss": float(finite.mean()) if len(finite) else None}


def _state(folder: Path) -> str | None:
    path = folder / "tt_state.bin"
    return str(path) if path.is_file() else None


def add_plan_seed_arguments(s, what: str) -> None:
    """``--plan`` (the step the board runs: its seed) and ``--seed`` of ``samples`` and ``stream``."""
    s.add_argument("--plan", metavar="PLAN", help="the plan file the board's firmware was compiled with, or that "
                   "compile's output folder: --seed defaults to its seed")
    s.add_argument("--seed", type=non_negative_int, help=f"{what}; default: the --plan's seed, else 0")


def add_samples_command(sub) -> None:
    s = sub.add_parser("samples", help="write the sample files a QEMU board's harness reads, or read what it wrote")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--data", help="DATA of the samples (as train --data)")
    s.add_argument("-o", "--output", metavar="DIR", help="write DIR/tt_train.bin and DIR/tt_test.bin (DIR exists: "
                   "the firmware project of a QEMU board, where `make run` runs)")
    s.add_argument("--read", metavar="DIR", help="read DIR/tt_logits.bin (and tt_state.bin) the harness wrote")
    s.add_argument("--log", metavar="RUN.txt", help="--read: the harness's output (make run > RUN.txt): its losses")
    s.add_argument("--new-head", type=positive_int, metavar="N", help="as train --new-head")
    add_plan_seed_arguments(s, "sample order and new-head init (as train)")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    s.add_argument("--loss", choices=("xent", "mse"), help="as train --loss")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--epochs", type=positive_int, default=1, help="passes over the training rows")
    n.add_argument("--steps", type=positive_int, help="steps instead of --epochs (the rows in order, then again)")
    s.add_argument("--held-out", type=float, metavar="FRACTION", help="tt_test.bin: this stratified fraction (as "
                   "train --held-out); tt_train.bin: the rest")
    s.add_argument("--split-seed", type=non_negative_int, default=0, help="seed of the --held-out split")
    s.add_argument("--json", action="store_true", help="--read: last line of stdout: one JSON object")
    s.set_defaults(func=cmd_samples)
