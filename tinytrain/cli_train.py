"""``tinytrain train`` and ``tinytrain eval`` (docs/design.md §5a), kept apart from cli.py's other commands.

train: fine-tune on the host with the device's arithmetic (``--engine sim``: the numpy simulator; ``--engine c``:
the emitted C training step built with the host compiler, engine_c.CTrainer, scored with its tt_predict), batch-1
SGD with QAS (``--no-qas``: plain int8 SGD, the paper's baseline) under a sparse-update plan; eval: accuracy
of the int8 forward pass. ``--held-out FRACTION`` (both commands, same ``--split-seed``) holds out a
stratified part of DATA: train learns on the rest and reports held-out accuracy before and after.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from tinytrain.errors import UsageError


def _data(graph, spec: str):
    from tinytrain.data import load_dataset, model_inputs

    ds = load_dataset(spec)
    n_out = graph.tensors[graph.outputs[0]].shape[-1]
    if len(ds.y) == 0:
        raise UsageError(f"{spec}: no samples")
    if ds.y.min() < 0 or ds.y.max() >= n_out:
        raise UsageError(f"{spec}: labels go up to {ds.y.max()} but the model has {n_out} outputs; "
                         f"train a new classifier with --new-head {ds.y.max() + 1}")
    return model_inputs(graph, ds.x), ds.y


def _model(args):
    from tinytrain.frontends import load_model

    graph = load_model(args.model)
    if getattr(args, "new_head", None):
        from tinytrain.training.head import new_head

        graph = new_head(graph, args.new_head, seed=args.seed)
    return graph


def accuracy(graph, x: np.ndarray, y: np.ndarray) -> float:
    from tinytrain.simulator import forward

    out = forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    return float((out.reshape(len(y), -1).argmax(axis=1) == y).mean())


def _split(args, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(train rows, held-out rows) of ``--held-out FRACTION --split-seed S`` (stratified), or None."""
    from tinytrain.data import stratified_split

    if args.held_out is None:
        return None
    train_rows, test_rows = stratified_split(y, args.held_out, args.split_seed)
    if len(train_rows) == 0 or len(test_rows) == 0:
        raise UsageError(f"--held-out {args.held_out} of {len(y)} samples leaves {len(train_rows)} to train on and "
                         f"{len(test_rows)} held out; both must be non-empty")
    return train_rows, test_rows


_PREFIX_OUTPUTS: dict[str, dict[str, np.ndarray]] = {}  # content digest -> outputs (a few entries, in-process)


def _prefix_outputs(prefix, x: np.ndarray) -> dict[str, np.ndarray]:
    """``forward(prefix, x)``, remembered by content (nodes, tensors, images) so that several runs in one
    process (benchmarks, tests) on the same frozen layers and images compute it once."""
    import hashlib
    import pickle

    from tinytrain.simulator import forward

    if not prefix.nodes:
        return {name: x for name in prefix.outputs}
    h = hashlib.sha256(pickle.dumps((prefix.nodes, prefix.inputs, prefix.outputs)))
    for name in sorted({i for n in prefix.nodes for i in (*n.inputs, *n.outputs) if i}):
        h.update(pickle.dumps(prefix.tensors[name]))
    h.update(pickle.dumps((x.shape, x.dtype.str)) + np.ascontiguousarray(x).tobytes())
    key = h.hexdigest()
    if key not in _PREFIX_OUTPUTS:
        while len(_PREFIX_OUTPUTS) >= 4:
            _PREFIX_OUTPUTS.pop(next(iter(_PREFIX_OUTPUTS)))
        _PREFIX_OUTPUTS[key] = forward(prefix, {prefix.inputs[0]: x})
    return _PREFIX_OUTPUTS[key]


def _frozen(graph, tg, x: np.ndarray):
    """(features, forward suffix) of a training run: the outputs, for every image of ``x``, of the layers no
    update of the training graph ``tg`` can change (simulator.split_frozen) — what the training graph's suffix
    reads at each step and what the forward graph's suffix needs to score an image. Scoring through the
    suffix is bit-identical to the whole forward pass."""
    from dataclasses import replace

    from tinytrain.ops import written_tensors
    from tinytrain.simulator import split_frozen

    t_prefix, _ = split_frozen(tg)
    f_prefix, f_suffix = split_frozen(graph, live=written_tensors(tg))
    produced = {o for n in f_prefix.nodes for o in n.outputs} | set(graph.inputs[:1])
    both = tuple(dict.fromkeys(t_prefix.outputs + f_prefix.outputs))
    if produced.issuperset(both):  # the usual case: one pass over the frozen forward layers serves both
        return _prefix_outputs(replace(f_prefix, outputs=both), x), f_suffix
    return {**_prefix_outputs(t_prefix, x), **_prefix_outputs(f_prefix, x)}, f_suffix


def _suffix_accuracy(suffix, features, rows: np.ndarray, y: np.ndarray, state=None) -> float:
    from tinytrain.simulator import forward, with_state

    g = suffix if state is None else with_state(suffix, state)
    out = forward(g, {k: features[k][rows] for k in g.inputs})[g.outputs[0]]
    return float((out.reshape(len(rows), -1).argmax(axis=1) == y[rows]).mean())


def cmd_train(args: argparse.Namespace) -> None:
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.simulator import init_state, train
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import load_plan, preset, with_lr_schedule
    from tinytrain.training.train_graph import build_training_graph

    if args.output and not Path(args.output).resolve().parent.is_dir():
        raise UsageError(f"cannot write {args.output}: its folder does not exist")
    if args.plan and args.update:
        raise UsageError("give either --plan or --update, not both")
    check_schedule_arguments(args)
    graph = _model(args)
    logits = graph.tensors[graph.outputs[0]].shape
    if any(d != 1 for d in logits[1:-1]):
        raise UsageError(f"{args.model}: the output {logits} is not class logits (1, C); training needs a classifier")
    if args.plan and (args.lr or args.bias_lr or args.head_lr):
        raise UsageError("--lr / --bias-lr / --head-lr apply to --update presets; a plan file carries its own")
    plan = load_plan(args.plan) if args.plan else preset(args.update or "bias-only", graph, lr=args.lr or 0.01,
                                                         bias_lr=args.bias_lr, head_lr=args.head_lr)
    _check_persist_arguments(args)
    config = UpdateConfig(momentum=args.momentum, rounding=Rounding(args.rounding), qas=not args.no_qas,
                          seed=args.seed)
    x, y = _data(graph, args.data)
    split = _split(args, y)
    rows = split[0] if split else np.arange(len(y))  # the training rows of x
    rng = np.random.default_rng(args.seed)
    steps = args.steps if args.steps is not None else args.epochs * len(rows)
    if steps <= 0:
        raise UsageError("nothing to do: --steps / --epochs must be positive")
    plan = with_lr_schedule(plan, args.lr_schedule, args.warmup, steps)
    tg = build_training_graph(graph, plan, config)  # the C and QEMU engines run its device_schedule
    order = rows[np.concatenate([rng.permutation(len(rows)) for _ in range(-(-steps // len(rows)))])[:steps]]
    result = {}
    if args.engine in ("c", "qemu"):
        t0 = time.time()
        if args.engine == "qemu":  # the firmware of the training step on an emulated board (engine_qemu.py)
            from tinytrain.engine_qemu import QemuTrainer
            from tinytrain.sizes import parse_size

            trainer = QemuTrainer(tg, board=args.board, sram_budget=parse_size(args.sram), save_every=args.save_every,
                                  flash=args.flash)
        else:
            from tinytrain.engine_c import CTrainer

            trainer = CTrainer(tg)
        result["build_seconds"] = round(time.time() - t0, 3)

        def score(rows_, state_=None):  # the device's prediction: argmax of tt_predict's int8 logits
            return float((trainer.predict(x[rows_]).argmax(axis=1) == y[rows_]).mean())
    else:
        features, suffix = _frozen(graph, tg, x)

        def score(rows_, state_=None):
            return _suffix_accuracy(suffix, features, rows_, y, state_)
    if split:
        result.update(n_train=int(len(rows)), n_held_out=int(len(split[1])), held_out=args.held_out,
                      split_seed=args.split_seed, accuracy_before=score(split[1]))
        if not args.json:
            print(f"held-out accuracy before training {result['accuracy_before']:.4f} on {len(split[1])} samples "
                  f"(training on {len(rows)})", flush=True)
    t0 = time.time()
    if args.stop_after_saves:
        trainer.train(x, y, order, stop_after_saves=args.stop_after_saves)
        print(f"stopped the board after {args.stop_after_saves} saves; run the same command without "
              f"--stop-after-saves to resume from {args.flash}")
        return
    if args.engine in ("c", "qemu"):
        losses = trainer.train(x, y, order)
        state = trainer.state()
        if args.engine == "qemu":
            result.update(board=args.board, insns_per_step=float(np.mean(trainer.step_insns)))
            if not args.json:
                print(f"{args.board}: {result['insns_per_step'] / 1e6:.1f}M instructions per training step "
                      "(QEMU -icount shift=0, SysTick)")
    else:
        state = init_state(tg)
        losses = train(tg, state, x, y, order, features=features)
    seconds = time.time() - t0
    tail = losses[-min(len(losses), len(rows)):]
    tail = tail[np.isfinite(tail)]  # the non-finite guard's steps were not applied
    result = {"final_loss": float(tail.mean()) if len(tail) else None, "steps": int(steps), "seconds": round(seconds, 3),
              "engine": args.engine, "plan": plan.to_json(), "rounding": config.rounding.value, "qas": config.qas,
              "train_accuracy": score(rows, state), "nonfinite_steps": int(state.nonfinite), **result}
    if split:
        result["accuracy_after"] = score(split[1], state)
    if args.state_out:
        _save_state(Path(args.state_out), state)
        result["state_out"] = args.state_out
    if args.output:  # the forward graph with the trained weights / biases (and new head), as int8 QDQ ONNX
        from tinytrain.export_onnx import graph_to_onnx, save_onnx
        from tinytrain.simulator import with_state

        save_onnx(graph_to_onnx(with_state(graph, state)), args.output)
        result["output"] = args.output
    if not args.json:
        print(f"trained {steps} steps in {seconds:.1f} s: mean loss of the last {len(tail)} steps "
              f"{result['final_loss'] or float('nan'):.4f}, training accuracy {result['train_accuracy']:.3f}")
        if state.nonfinite:
            print(f"{state.nonfinite} steps not applied: their loss was NaN or Inf")
        if split:
            change = 100 * (result["accuracy_after"] - result["accuracy_before"])
            print(f"held-out accuracy after training {result['accuracy_after']:.4f} on {len(split[1])} samples "
                  f"({change:+.1f} points)")
        if args.state_out:
            print(f"wrote {args.state_out}")
        if args.output:
            print(f"wrote {args.output} (int8 QDQ ONNX of the trained model)")
    else:
        print(json.dumps(result))


def _check_persist_arguments(args: argparse.Namespace) -> None:
    if (args.flash or args.save_every or args.stop_after_saves) and args.engine != "qemu":
        raise UsageError("--flash, --save-every and --stop-after-saves need --engine qemu")
    if bool(args.flash) != (args.save_every > 0):
        raise UsageError("give --flash FILE and --save-every N (N > 0) together")
    if args.stop_after_saves < 0 or (args.stop_after_saves and not args.flash):
        raise UsageError("--stop-after-saves K needs --flash and a positive K")


def _save_state(path: Path, state) -> None:
    """An .npz (``step`` and every state tensor, by name), byte-identical for identical states whatever the
    engine: members in name order, stored, with a fixed timestamp (np.savez stamps the current time)."""
    import io
    import os
    import zipfile

    tmp = path.with_name(path.name + ".partial.npz")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
            for name, value in [("step", np.int64(state.step)), *sorted(state.tensors.items())]:
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.asanyarray(value), allow_pickle=False)
                z.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


def _load_state(path: str, graph):
    """A ``--state-out`` file as a TrainState for ``graph`` (the model it was trained from, same --new-head/--seed)."""
    from tinytrain.simulator import TrainState

    try:
        with np.load(path, allow_pickle=False) as f:
            saved = {k: f[k] for k in f.files if k != "step"}
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read state {path} ({e})") from None
    tensors = {}
    for name, value in saved.items():
        if name.endswith(".momentum") and name[: -len(".momentum")] in saved:
            continue  # optimizer state (qas.add_updates names it PARAM.momentum): not part of the model
        t = graph.tensors.get(name)
        if t is None or not t.has_data or value.shape != t.shape or value.dtype != t.dtype.np:
            found = "not in the model" if t is None else f"{t.dtype.value}{t.shape} in the model"
            raise UsageError(f"{path}: {name} ({value.dtype}{value.shape}) is {found}; give the model (and "
                             f"--new-head / --seed) it was trained from")
        tensors[name] = value
    return TrainState(tensors)


def cmd_eval(args: argparse.Namespace) -> None:
    from tinytrain.simulator import with_state

    graph = _model(args)
    if args.state:
        graph = with_state(graph, _load_state(args.state, graph))
    x, y = _data(graph, args.data)
    split = _split(args, y)
    result = {}
    if split:
        x, y = x[split[1]], y[split[1]]
        result.update(held_out=args.held_out, split_seed=args.split_seed)
    if args.engine == "c":  # the emitted int8 forward pass, built with the host compiler (bit-identical to sim)
        from tinytrain.engine_c import predict

        out = predict(graph, x)
        acc = float((out.reshape(len(y), -1).argmax(axis=1) == y).mean())
    else:
        acc = accuracy(graph, x, y)
    if args.json:
        print(json.dumps({"accuracy": acc, "n": int(len(y)), **result}))
    else:
        print(f"accuracy {acc:.4f} on {len(y)} {'held-out ' if split else ''}samples")


def add_train_commands(sub) -> None:
    s = sub.add_parser("train", help="fine-tune with the device's arithmetic (batch-1 SGD, QAS, sparse update)")
    s.add_argument("model")
    s.add_argument("--data", required=True,
                   help=".npz (x uint8 NHWC, y labels), a class-folder tree, lfw or fashion-mnist[:test][:N]")
    s.add_argument("--plan", help="sparse-update plan file (version 1)")
    s.add_argument("--update", help="full | bias-only | last-k:N (default bias-only)")
    s.add_argument("--lr", type=float, help="learning rate of an --update preset (default 0.01)")
    s.add_argument("--bias-lr", type=float, help="learning rate of an --update preset's biases (default: --lr)")
    s.add_argument("--head-lr", type=float,
                   help="learning rate of an --update preset's last layer, weights and bias (default: --lr, --bias-lr)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--epochs", type=int, default=1)
    n.add_argument("--steps", type=int)
    s.add_argument("--engine", choices=("sim", "c", "qemu"), default="sim",
                   help="sim: the numpy simulator; c: the emitted C built with the host compiler; qemu: that C as "
                        "firmware on an emulated Cortex-M (--board, --sram)")
    s.add_argument("--board", default="qemu-m7", choices=("qemu-m4", "qemu-m7", "qemu-m55"),
                   help="--engine qemu: the emulated board (default qemu-m7)")
    s.add_argument("--sram", default="256k", help="--engine qemu: SRAM budget = the firmware's RAM region (default 256k)")
    s.add_argument("--flash", metavar="FLASH.bin",
                   help="--engine qemu: the board's flash (a file kept between runs): the firmware saves its state there "
                        "every --save-every samples and, when it holds a state, resumes from it")
    s.add_argument("--save-every", type=int, default=0, metavar="N", help="--engine qemu --flash: samples between saves")
    s.add_argument("--stop-after-saves", type=int, default=0, metavar="K",
                   help="--engine qemu --flash: cut the board's power right after its K-th save (then run again to resume)")
    s.add_argument("--new-head", type=int, metavar="N", help="replace the last layer by a new N-class head")
    s.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (costs 4 bytes per updated weight)")
    s.add_argument("--rounding", choices=("stochastic", "nearest"), default="stochastic")
    s.add_argument("--no-qas", action="store_true",
                   help="plain int8 SGD on the int8 gradient (no quantization-aware scaling; the paper's baseline)")
    add_schedule_arguments(s, "this run's steps")
    _add_split_arguments(s, "train on the rest; report held-out accuracy before and after training")
    s.add_argument("--seed", type=int, default=0, help="sample order, rounding stream and new-head init")
    s.add_argument("--state-out", help="write the trained state (int8 weights, int32 biases) to STATE.npz")
    s.add_argument("-o", "--output", help="write the trained model as int8 QDQ ONNX (TRAINED.onnx)")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("eval", help="accuracy of the int8 model with the device's arithmetic")
    s.add_argument("model")
    s.add_argument("--data", required=True)
    s.add_argument("--new-head", type=int, metavar="N", help="with a new N-class head (as train --new-head)")
    s.add_argument("--seed", type=int, default=0, help="new-head init (as train --seed)")
    s.add_argument("--state", help="STATE.npz from train --state-out: evaluate the trained model")
    s.add_argument("--engine", choices=("sim", "c"), default="sim",
                   help="sim: the numpy simulator; c: the emitted C forward pass built with the host compiler")
    _add_split_arguments(s, "evaluate on the held-out part only (the same split as train's)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_eval)


def check_schedule_arguments(args: argparse.Namespace) -> None:
    if args.warmup and args.lr_schedule != "cosine":
        raise UsageError("--warmup applies to --lr-schedule cosine; add it or drop --warmup")
    if not 0 <= args.warmup < 1:
        raise UsageError(f"--warmup {args.warmup}: give the fraction of the steps that warms up, in [0, 1)")


def add_schedule_arguments(s, span: str) -> None:
    s.add_argument("--lr-schedule", choices=("constant", "cosine"),
                   help=f"cosine: warm-up, then cosine decay of every lr to 0 over {span}, computed by the device "
                        "from its step count; constant: one lr throughout (default: the plan's own; presets: constant)")
    s.add_argument("--warmup", type=float, default=0.0, metavar="FRACTION",
                   help="--lr-schedule cosine: the fraction of the steps that warms the lrs up linearly (default 0)")


def _add_split_arguments(s, what: str) -> None:
    s.add_argument("--held-out", type=float, metavar="FRACTION",
                   help=f"hold out this fraction of DATA (stratified by class): {what}")
    s.add_argument("--split-seed", type=int, default=0, help="seed of the --held-out split")
