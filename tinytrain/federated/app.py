"""The fleet as a Flower App for deployment: a ServerApp and a ClientApp on Flower's Message API, run by a SuperLink
and one SuperNode per gateway (docs/guide/fleet.md, "Deployment"; the App's folder is ``flower_app/``).

Both apps rebuild the same ``FleetTask`` from the run config (``task_from_config``: the keys of
``flower_app/pyproject.toml``, overridden by ``flwr run --run-config``). Each round the ServerApp sends the global
state (the ``tt_state_load`` bytes) and the round number in one ConfigRecord to every connected SuperNode; a
SuperNode trains the devices its node config names (``devices="0,1"``; ``board="qemu-m7"`` for the firmware on an
emulated board through the semihosting harness; ``transport="serial" port="URL[,URL...]"`` for boards over the serial
protocol, one port per device, gateway.py; else the host C step) and answers with one ConfigRecord per device (its state, sha256, sample count,
mean loss). The server side is ``FleetServer.finish_round``: the screening, aggregation, persistence and counters of
the simulation, so a deployed run ends with the state the in-process rounds give.
"""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from tinytrain.errors import UsageError
from tinytrain.federated.client import Reply, run_device
from tinytrain.federated.gateway import device_ports
from tinytrain.federated.run import fleet_task
from tinytrain.federated.server import FleetServer
from tinytrain.federated.task import FleetTask

APP_DIR = Path(__file__).resolve().parent / "flower_app"  # the Flower App's folder: `flwr run APP_DIR ...`
GLOBAL = "global"
TRAIN = "train"

serverapp = ServerApp()
clientapp = ClientApp()


def task_from_config(cfg) -> FleetTask:
    """The run's task from its run config (0 or "" means the option's default, as TOML has no null)."""
    def opt(key):
        return cfg.get(key) or None

    return fleet_task(str(cfg["model"]), str(cfg["data"]), plan=opt("plan"), update=opt("update"), lr=opt("lr"),
                      devices=int(cfg["devices"]), per_device=int(cfg["per-device"]),
                      classes_per_device=opt("classes-per-device"), local_epochs=int(cfg.get("local-epochs", 1)),
                      local_steps=opt("local-steps"), server_lr=str(cfg.get("server-lr", "1")),
                      new_head=opt("new-head"), seed=int(cfg.get("seed", 0)), lr_schedule=opt("lr-schedule"),
                      rounds=int(cfg["rounds"]))


@serverapp.main()
def server_main(grid: Grid, context: Context) -> None:
    """The remaining rounds of the run (resuming from ``state-dir`` when it holds this run's progress)."""
    cfg = context.run_config
    server = FleetServer(task_from_config(cfg), int(cfg["rounds"]), cfg.get("state-dir") or None)
    nodes = wait_for_nodes(grid, int(cfg["nodes"]), float(cfg.get("wait-seconds", 300)))
    while server.round < server.rounds:
        run_round(grid, server, nodes, float(cfg.get("round-seconds", 3600)))


def wait_for_nodes(grid: Grid, count: int, seconds: float) -> list[int]:
    """The ids of the first ``count`` SuperNodes connected (sorted), waiting up to ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes[:count]
        if time.monotonic() > end:
            raise UsageError(f"fleet: {len(nodes)} of {count} SuperNodes connected after {seconds:.0f} s; start "
                             "the gateways' flower-supernode processes (or lower the run config's nodes)")
        time.sleep(1.0)


def run_round(grid: Grid, server: FleetServer, nodes: list[int], seconds: float) -> None:
    """One round: the global state to every node, their devices' replies to ``finish_round``; a device that did
    not answer (its node failed, timed out or does not serve it) counts as dropped."""
    content = RecordDict({GLOBAL: ConfigRecord({"state": server.state, "round": server.round + 1})})
    messages = [Message(content, dst_node_id=n, message_type=TRAIN) for n in nodes]
    replies = []
    for message in grid.send_and_receive(messages, timeout=seconds):
        if message.has_content():
            replies += [Reply(int(r["device"]), bytes(r["state"]), str(r["sha256"]), int(r["samples"]),
                              float(r["loss"])) for r in message.content.config_records.values()]
    server.finish_round(replies, dropped=server.task.devices - len(replies))


@clientapp.train()
def gateway_train(message: Message, context: Context) -> Message:
    """The devices of this SuperNode (node config ``devices``, ``board``, ``transport``, ``port``) train on the global
    state they are sent."""

    task = task_from_config(context.run_config)
    devices = [int(d) for d in str(context.node_config["devices"]).split(",")]
    board = str(context.node_config.get("board", "")) or None
    ports = device_ports(context.node_config, devices)
    sent = message.content.config_records[GLOBAL]
    records = {}
    for device in devices:
        reply = run_device(task, device, bytes(sent["state"]), int(sent["round"]), {}, board, ports.get(device))
        records[f"device-{device}"] = ConfigRecord({"device": reply.device, "state": reply.state,
                                                    "sha256": reply.sha256, "samples": reply.samples,
                                                    "loss": reply.loss})
    return Message(RecordDict(records), reply_to=message)
