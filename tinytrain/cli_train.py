"""``tinytrain train`` and ``tinytrain eval`` (design.md §5a), kept apart from cli.py's other commands.

train: fine-tune on the host with the device's arithmetic (``--engine sim``: the numpy simulator), batch-1
SGD with QAS under a sparse-update plan; eval: accuracy of the int8 forward pass.
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


def cmd_train(args: argparse.Namespace) -> None:
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.simulator import init_state, train, with_state
    from tinytrain.training.qas import UpdateConfig
    from tinytrain.training.sparse import load_plan, preset
    from tinytrain.training.train_graph import build_training_graph

    if args.engine != "sim":
        raise UsageError(f"--engine {args.engine} is not available yet; use --engine sim")
    if args.output:
        raise UsageError("-o TRAINED.onnx is not available yet; use --state-out STATE.npz")
    if args.plan and args.update:
        raise UsageError("give either --plan or --update, not both")
    graph = _model(args)
    plan = load_plan(args.plan) if args.plan else preset(args.update or "bias-only", graph, lr=args.lr or 0.01)
    if args.lr and args.plan:
        raise UsageError("--lr applies to --update presets; a plan file carries its own lr")
    config = UpdateConfig(momentum=args.momentum, rounding=Rounding(args.rounding), seed=args.seed)
    tg = build_training_graph(graph, plan, config)
    x, y = _data(graph, args.data)
    rng = np.random.default_rng(args.seed)
    steps = args.steps if args.steps is not None else args.epochs * len(y)
    if steps <= 0:
        raise UsageError("nothing to do: --steps / --epochs must be positive")
    order = np.concatenate([rng.permutation(len(y)) for _ in range(-(-steps // len(y)))])[:steps]
    state = init_state(tg)
    t0 = time.time()
    losses = train(tg, state, x, y, order)
    seconds = time.time() - t0
    tail = losses[-min(len(losses), len(y)):]
    result = {"final_loss": float(tail.mean()), "steps": int(steps), "seconds": round(seconds, 3),
              "engine": args.engine, "plan": plan.to_json(), "rounding": config.rounding.value,
              "train_accuracy": accuracy(with_state(graph, state), x, y)}
    if args.state_out:
        _save_state(Path(args.state_out), state)
        result["state_out"] = args.state_out
    if not args.json:
        print(f"trained {steps} steps in {seconds:.1f} s: mean loss of the last {len(tail)} steps "
              f"{result['final_loss']:.4f}, training accuracy {result['train_accuracy']:.3f}")
        if args.state_out:
            print(f"wrote {args.state_out}")
    else:
        print(json.dumps(result))


def _save_state(path: Path, state) -> None:
    import os

    tmp = path.with_name(path.name + ".partial.npz")
    try:
        np.savez(tmp, step=np.int64(state.step), **{k: v for k, v in sorted(state.tensors.items())})
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


def cmd_eval(args: argparse.Namespace) -> None:
    graph = _model(args)
    x, y = _data(graph, args.data)
    acc = accuracy(graph, x, y)
    if args.json:
        print(json.dumps({"accuracy": acc, "n": int(len(y))}))
    else:
        print(f"accuracy {acc:.4f} on {len(y)} samples")


def add_train_commands(sub) -> None:
    s = sub.add_parser("train", help="fine-tune with the device's arithmetic (batch-1 SGD, QAS, sparse update)")
    s.add_argument("model")
    s.add_argument("--data", required=True, help=".npz (x uint8 NHWC, y labels), a class-folder tree, or lfw")
    s.add_argument("--plan", help="sparse-update plan file (version 1)")
    s.add_argument("--update", help="full | bias-only | last-k:N (default bias-only)")
    s.add_argument("--lr", type=float, help="learning rate of an --update preset (default 0.01)")
    n = s.add_mutually_exclusive_group()
    n.add_argument("--epochs", type=int, default=1)
    n.add_argument("--steps", type=int)
    s.add_argument("--engine", choices=("sim", "c", "qemu"), default="sim")
    s.add_argument("--new-head", type=int, metavar="N", help="replace the last layer by a new N-class head")
    s.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (costs 4 bytes per updated weight)")
    s.add_argument("--rounding", choices=("stochastic", "nearest"), default="stochastic")
    s.add_argument("--seed", type=int, default=0, help="sample order, rounding stream and new-head init")
    s.add_argument("--state-out", help="write the trained state (int8 weights, int32 biases) to STATE.npz")
    s.add_argument("-o", "--output", help="TRAINED.onnx (not available yet)")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("eval", help="accuracy of the int8 model with the device's arithmetic")
    s.add_argument("model")
    s.add_argument("--data", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_eval)
