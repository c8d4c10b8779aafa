"""The ``tinytrain`` command line (docs/design.md §5a). Errors become one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import difflib
import io
import os
import re
import sys
import warnings
from pathlib import Path

import numpy as np

from tinytrain.api import compile
from tinytrain.cli_args import positive_int
from tinytrain.cli_field import add_field_command, add_field_options, prepare_field
from tinytrain.cli_firmware import add_firmware_commands
from tinytrain.cli_fleet import add_fleet_command
from tinytrain.cli_plan import add_plan_command
from tinytrain.cli_quantize import add_quantize_command
from tinytrain.cli_samples import add_samples_command
from tinytrain.cli_train import UPDATE_HELP, add_force_argument, add_step_arguments, step_knobs
from tinytrain.cli_train import add_input_mapping_argument, add_input_size_argument, add_train_commands
from tinytrain.codegen.bindings.conv2d.forward import explain_text
from tinytrain.cores import CORE_TARGETS, CORES, DEFAULT_CORE
from tinytrain.describe import describe
from tinytrain.errors import ModelError, Notice, TinyTrainError, UnsupportedModelError, UsageError
from tinytrain.firmware.boards import BOARDS
from tinytrain.firmware.emulator import ending_on_signals, restore_signals
from tinytrain.firmware.fit import check_board
from tinytrain.input_mapping import from_model, with_mapping
from tinytrain.outputs import OutputDir, check_file, write_file
from tinytrain.simulator import external_input_dtype, forward, to_external, to_internal
from tinytrain.sizes import format_size
from tinytrain.version import __version__


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors as one line (a UsageError) that names the closest match of a mistyped
    command, option or choice."""

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # one line instead of usage + message
        command = _command(self)
        raise UsageError(f"{message}{_did_you_mean(self, command, message)} (see '{command.prog} --help')")


def _closest(word: str, candidates) -> str | None:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return match[0] if match else None


def _command(parser: _Parser) -> argparse.ArgumentParser:
    """The parser of the command the argv names: argparse reports a command's unknown options from the top-level
    parser."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions there, and nowhere public
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            name = next((a for a in getattr(parser, "_argv", ()) if a in action.choices), None)
            if name is not None:
                return action.choices[name]
    return parser


def _did_you_mean(parser: _Parser, command: argparse.ArgumentParser, message: str) -> str:
    """"; did you mean ...?" for a bad choice (a command is one) or an option the command does not have."""
    choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
    if choice:
        choices = re.findall(r"'([^']*)'", choice.group(2))
        best = _closest(choice.group(1), choices)
        later = next((a for a in getattr(parser, "_argv", ()) if a in choices), None)
        if not best and later and message.startswith("argument command"):  # tinytrain --sram 256k compile M
            return f"; the command comes first, its options after it: tinytrain {later} MODEL [options]"
        return f"; did you mean '{best}'?" if best else ""
    options = [o for a in command._actions for o in a.option_strings if o.startswith("--")]  # noqa: SLF001
    for word in getattr(parser, "_argv", ()):
        word = word.split("=")[0]
        if word.startswith("--") and not any(o.startswith(word) for o in options):  # not an option or its prefix
            best = _closest(word, options)
            if best:
                return f"; {word}: did you mean {best}?"
    return ""


def _load(path: str):
    # lazy: the importers load onnx (about 0.6 s); only reading a model needs them
    from tinytrain.frontends import load_model

    return load_model(path)


def cmd_inspect(args: argparse.Namespace) -> None:
    print(describe(_load(args.model)))


def cmd_run(args: argparse.Namespace) -> None:
    check_file(args.output, "npy", inputs=(args.input, args.model))
    graph = _load(args.model)
    try:
        x = np.load(args.input, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read input {args.input}: {e}; give a .npy array") from None
    if not isinstance(x, np.ndarray):
        x.close()
        raise UsageError(f"input {args.input} is an .npz archive; give one .npy array (numpy.save)")
    t = graph.tensors[graph.inputs[0]]
    want = external_input_dtype(graph)
    if x.dtype != want or x.ndim != len(t.shape) or x.shape[1:] != t.shape[1:]:
        raise UsageError(f"input {args.input} is {x.dtype} {x.shape}; the model takes {want} "
                         f"(N,{','.join(map(str, t.shape[1:]))}), quantized, NHWC")
    y = forward(graph, {graph.inputs[0]: to_internal(graph, x)})[graph.outputs[0]]
    buffer = io.BytesIO()
    np.save(buffer, to_external(graph, y))
    write_file(args.output, buffer.getvalue(), "npy", inputs=(args.input, args.model))


def cmd_compile(args: argparse.Namespace) -> None:
    """Plan the training step (with --plan / --update) or, without, the inference forward pass."""

    target = OutputDir(args.output, "compile", force=args.force, inputs=[p for p in (args.model, args.plan) if p])
    board = None if args.board is None else BOARDS[args.board]
    core = args.target or (DEFAULT_CORE if board is None else board.core)
    compiled = compile(args.model, sram=args.sram, flash=args.flash, plan=args.plan, update=args.update,
                       target=core, new_head=args.new_head, planner=args.planner, reorder=not args.no_reorder,
                       inplace=not args.no_inplace, input_size=args.input_size, input_mapping=args.input_mapping,
                       classes=args.classes.split(",") if args.classes else None, clock_mhz=args.clock_mhz,
                       **step_knobs(args))
    links = None if board is None else check_board(compiled.to_json(), board)
    out = Path(args.output)
    write_field = prepare_field(args)  # compile --replay: the field runtime (cli_field.py), checked before writing
    compiled.write(target)
    print(compiled.text())
    if links is not None:
        print(f"links on {links.board}: its firmware needs {format_size(links.total)} of the {format_size(links.region)}"
              " RAM region (step, stack, the harness's heap and statics)")
    if args.explain:
        print(explain_text(compiled.kernel_choices))
    if compiled.note:
        print(compiled.note)
    persist = f", {out}/persist/ (tt_persist: the learned state in flash)" if compiled.plan and compiled.files else ""
    print(f"wrote {out}/report.json, report.txt, memory_timeline.png" + (", the C project" if compiled.files else "")
          + persist)
    if write_field:
        write_field()


def cmd_convert(args: argparse.Namespace) -> None:
    # lazy: writing ONNX loads onnx (about 0.6 s)
    from tinytrain.export_onnx import graph_to_onnx, save_onnx


    check_file(args.output, "onnx", inputs=(args.model,))
    graph = with_mapping(_load(args.model), args.input_mapping)
    save_onnx(graph_to_onnx(graph), args.output)
    note = " (uint8 model exported as int8: uint8 value - 128)" if graph.uint8_input or graph.uint8_output else ""
    mapping = from_model(graph)
    kept = f"; input mapping {mapping.describe()} in its metadata" if mapping else ""
    print(f"wrote {args.output}: int8 QDQ ONNX, opset 18, {len(graph.nodes)} ops{note}{kept}")


def _cores(dsp: bool) -> str:
    """The cores with (without) the Arm DSP extension, short: m4/m7/..."""
    return "/".join(c.name.removeprefix("cortex-") for c in CORES.values() if c.dsp == dsp)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tinytrain", description="Compile int8 MobileNets for on-device training on microcontrollers.")
    p.add_argument("--version", action="version", version=f"tinytrain {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_model_commands(sub)
    _add_compile_command(sub)
    add_train_commands(sub)
    add_firmware_commands(sub)
    add_plan_command(sub)
    add_fleet_command(sub)
    add_samples_command(sub)
    add_field_command(sub)
    add_quantize_command(sub)
    return p


def _add_model_commands(sub) -> None:
    """inspect and run: what a model is and what it computes."""
    s = sub.add_parser("inspect", help="ops, shapes, quantization, params, MACs, memory estimate")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("run", help="int8 forward pass of a quantized input batch (.npy, NHWC)")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--input", required=True, help="X.npy: quantized input batch in the model's input dtype")
    s.add_argument("--output", required=True, help="Y.npy: quantized output batch")
    s.set_defaults(func=cmd_run)


def _add_compile_command(sub) -> None:
    """compile (the training step or the forward pass as C) and convert (the model as QDQ ONNX)."""

    s = sub.add_parser("compile", help="plan memory against the budgets and emit the C project")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--sram", default="256k", help="SRAM budget, e.g. 256k, 256KB, 262144 (default 256k)")
    s.add_argument("--flash", default="1m", help="flash budget (default 1m)")
    s.add_argument("--plan", help="sparse-update plan file (version 1): plan the training step")
    s.add_argument("--update", help=f"{UPDATE_HELP}: plan the training step of a preset (without --plan / "
                   "--update: the inference forward pass)")
    s.add_argument("--target", choices=CORE_TARGETS,
                   help=f"the core the C is for (default {DEFAULT_CORE}, or --board's): Arm DSP instructions on "
                   f"{_cores(True)}, their C models on {_cores(False)} (docs/guide/boards.md); the flash figure counts "
                   "the kernels and tables chosen for it")
    s.add_argument("--board", choices=tuple(BOARDS), help="refuse, before writing anything, a step whose firmware "
                   "would not link on this board (its core, SRAM, flash; docs/guide/firmware.md)")
    s.add_argument("--new-head", type=positive_int, metavar="N", help="replace the last layer by a new N-class head")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    s.add_argument("--classes", metavar="NAMES", help="comma-separated class names, one per output in label order, "
                   "written into the C header (TT_CLASS_NAMES)")
    s.add_argument("--planner", choices=("greedy", "linear"), default="greedy",
                   help="memory planner: greedy-by-size (several orders, seeded perturbations) or linear")
    s.add_argument("--no-reorder", action="store_true", help="keep every update after the whole backward pass")
    s.add_argument("--no-inplace", action="store_true", help="give every output its own buffer")
    add_step_arguments(s)
    s.add_argument("--clock", dest="clock_mhz", type=float, metavar="MHZ", help="the core's clock for the report's "
                   "time estimate (default: a common part's top clock, tinytrain/cores.py; docs/guide/memory-report.md)")
    s.add_argument("--explain", action="store_true", help="print each convolution's kernel variant and why not the "
                   "earlier ones (docs/design.md: kernel selection)")
    s.add_argument("-o", "--output", required=True, help="output folder")
    add_force_argument(s)
    add_field_options(s, compile_command=True)
    s.set_defaults(func=cmd_compile)

    s = sub.add_parser("convert", help="write the model as an int8 QDQ ONNX file (onnxruntime quantize_static form)")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("-o", "--output", required=True, help="OUT.onnx")
    add_input_mapping_argument(s)
    s.set_defaults(func=cmd_convert)


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # all but the newline (compiler output)
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # a model's error is one line, whatever its names


def _options(parser: argparse.ArgumentParser, command: str | None):
    """option(name): the option of ``command`` that sets the API parameter ``name`` (its dest, or ``no_`` + it for a
    negated flag), None without one: how an error's parameters are spelled here (errors.param)."""
    actions = parser._actions
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction) and command in a.choices:
            actions = a.choices[command]._actions
    options = {a.dest: max(a.option_strings, key=len) for a in actions if a.option_strings}
    return lambda name: options.get(name) or options.get(f"no_{name}")


class _QuietWhenClosed:
    """sys.stdout / sys.stderr that, once its reader has gone (``tinytrain ... | head -3``), drops what is printed
    instead of raising BrokenPipeError: the command finishes its work and writes its files, quietly, as a Unix
    tool's output into a closed pipe ends without a word."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_null()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_null()

    def _to_null(self) -> None:  # later writes, and the interpreter's last flush, go nowhere
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _QuietWhenClosed(sys.stdout), _QuietWhenClosed(sys.stderr)
    ends = ending_on_signals()  # SIGTERM / SIGHUP run the finally blocks: no temporary folder, no QEMU left
    try:
        with warnings.catch_warnings():
            _print_notices()
            return _main(argv)
    finally:
        restore_signals(ends)
        sys.stdout.flush()
        sys.stdout, sys.stderr = streams


def _print_notices() -> None:
    """Every Notice (what a command assumed: an input mapping, a resize, the class names) as one line ``note: ...``
    on stdout, in order with the results, each text once (stderr stays the one line of an error); other warnings as
    Python shows them."""
    shown, show = set(), warnings.showwarning
    warnings.simplefilter("always", Notice)

    def note(message, category, *args, **kwargs) -> None:
        if not issubclass(category, Notice):
            show(message, category, *args, **kwargs)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"note: {_CONTROL_ALL.sub('?', str(message))}", flush=True)

    warnings.showwarning = note


def _main(argv: list[str] | None) -> int:
    parser, args = build_parser(), None
    try:
        args = parser.parse_args(argv)
        with np.errstate(all="ignore"):  # hostile inputs (a 1e-45 scale): the error says it, not a numpy warning
            args.func(args)
    except TinyTrainError as e:  # names from a hostile file may hold control characters: shown as "?"
        control = _CONTROL_ALL if isinstance(e, (ModelError, UnsupportedModelError)) else _CONTROL
        text = e.render(_options(parser, getattr(args, "command", None)))
        print(f"tinytrain: error: {control.sub('?', text)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tinytrain: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not the user's fault: still one line, traceback on request
        if os.environ.get("TINYTRAIN_DEBUG"):
            raise
        print(f"tinytrain: internal error: {type(e).__name__}: {e} "
              "(set TINYTRAIN_DEBUG=1 for a traceback and please report it)", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
