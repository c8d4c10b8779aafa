"""``tinytrain fleet`` (docs/guide/fleet.md): a federated run of the compiled training step over simulated devices.

The work is ``tinytrain.fleet`` (federated/run.py); this module parses, prints and writes the global state.
"""

from __future__ import annotations

import argparse
import json

from tinytrain.cli_args import non_negative_int, positive_float, positive_int
from tinytrain.cli_train import add_input_mapping_argument, add_input_size_argument, add_remainder_argument, add_schedule_arguments
from tinytrain.outputs import check_file, write_file


def cmd_fleet(args: argparse.Namespace) -> None:
    # lazy: the fleet loads Flower; nothing else needs it
    from tinytrain.federated import fleet

    inputs = [p for p in (args.model, args.data, args.test, args.plan) if p]
    if args.state_out:
        check_file(args.state_out, "device-state", inputs)
    result = fleet(args.model, args.data, rounds=args.rounds, test=args.test, state_dir=args.state_dir,
                   engine=args.engine, cpus=args.cpus, plan=args.plan, update=args.update, lr=args.lr,
                   devices=args.devices, per_device=args.per_device,
                   classes_per_device=args.classes_per_device or None, local_epochs=args.local_epochs,
                   local_steps=args.local_steps, server_lr=args.server_lr,
                   new_head=args.new_head, seed=args.seed, remainder_bits=args.remainder_bits,
                   input_size=args.input_size, lr_schedule=args.lr_schedule, warmup=args.warmup,
                   input_mapping=args.input_mapping)
    if args.state_out:
        write_file(args.state_out, result.state, "device-state", inputs)
    if args.json:
        print(json.dumps({**result.to_json(), "state_out": args.state_out}))
        return
    if result.resumed_from is not None:
        print(f"resumed after round {result.resumed_from} from {args.state_dir}")
    for h in result.history:
        acc = f", test accuracy {h['accuracy']:.4f}" if "accuracy" in h else ""
        print(f"round {h['round']}: {h['ok']} states averaged ({h['dropped']} dropped, {h['corrupt']} corrupt, "
              f"{h['nonfinite']} non-finite, {h['refused']} refused){acc}")
    print(f"{result.rounds} rounds of {args.devices} devices in {result.seconds:.1f} s; {len(result.state)} bytes "
          "per device per round each way")
    if args.state_out:
        print(f"wrote {args.state_out} (the global state, tt_state_load format)")


def add_fleet_command(sub) -> None:
    s = sub.add_parser("fleet", help="federated fine-tuning of the compiled training step over simulated devices "
                                     "(Flower)")
    s.add_argument("model", help="an int8 ONNX (QDQ or QOperator) or TFLite model")
    s.add_argument("--data", required=True, help="DATA spec of the training pool the devices' shards come from "
                                                 "(e.g. fashion-mnist:20000)")
    s.add_argument("--test", help="DATA spec the global model is scored on after every round")
    s.add_argument("--plan", help="sparse-update plan file (version 1)")
    s.add_argument("--update", help="full | bias-only | last-k:N (default last-k:1: the last layer)")
    s.add_argument("--lr", type=positive_float, help="learning rate of an --update preset (default 0.01)")
    s.add_argument("--devices", type=positive_int, default=20, help="simulated devices (default 20)")
    s.add_argument("--per-device", type=positive_int, default=200, help="training samples on each device (default 200)")
    s.add_argument("--classes-per-device", type=int, default=2, metavar="K",
                   help="non-IID shards: K classes per device (default 2; 0: IID, every class)")
    s.add_argument("--rounds", type=int, default=10, help="federated rounds (default 10)")
    s.add_argument("--local-epochs", type=int, default=1, help="epochs over its shard each device trains per round")
    s.add_argument("--local-steps", type=positive_int, metavar="K",
                   help="steps each device trains per round instead of --local-epochs (the first K of a new "
                        "permutation of its shard each round)")
    s.add_argument("--server-lr", default="1", metavar="A/B",
                   help="server lr on the averaged step from the previous global state, a fraction a/b or a "
                        "decimal (default 1: the plain sample-weighted mean)")
    add_schedule_arguments(s, "the fleet's rounds (each device's step counter is the global state's)")
    s.add_argument("--new-head", type=positive_int, metavar="N", help="replace the last layer by a new N-class head")
    add_input_size_argument(s)
    add_input_mapping_argument(s)
    add_remainder_argument(s)
    s.add_argument("--seed", type=non_negative_int, default=0, help="new-head init, rounding stream, shards and sample order")
    s.add_argument("--engine", choices=("flower", "local"), default="flower",
                   help="flower: Flower's simulation engine (Ray), one SuperNode per device; local: the same rounds "
                        "in this process")
    s.add_argument("--cpus", type=positive_int, default=2, help="--engine flower: devices training at a time (default 2)")
    s.add_argument("--state-dir", help="persist the global state every round here; resume from it when it holds "
                                       "this run's progress")
    s.add_argument("--state-out", metavar="STATE.tts",
                   help="write the final global state in the tt_state_load format (what a device loads)")
    s.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    s.set_defaults(func=cmd_fleet)
