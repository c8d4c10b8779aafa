"""Flower's side of a fleet run: the server strategy, the device client and the simulation engine.

The global state travels as one tensor of raw bytes (``Parameters(tensor_type="tinytrain-state")``): exactly the
``tt_state_load`` format a device loads (codegen/state.py). ``FleetStrategy`` asks every device each round, gives
their replies (state, sha256, sample count, loss) to ``FleetServer.finish_round`` (screen, aggregate, persist,
score) and counts the devices that failed or dropped out. Flower numbers the rounds of a resumed run from 1
again: the strategy adds the rounds already persisted.
"""

from __future__ import annotations

from flwr.client import Client
from flwr.common import Code, FitIns, FitRes, Parameters, Status
from flwr.server.strategy import Strategy

from tinytrain.federated.client import Reply, run_device
from tinytrain.federated.server import FleetServer
from tinytrain.federated.task import FleetTask

TENSOR_TYPE = "tinytrain-state"


def to_parameters(state: bytes) -> Parameters:
    return Parameters(tensors=[state], tensor_type=TENSOR_TYPE)


class FleetStrategy(Strategy):
    def __init__(self, server: FleetServer) -> None:
        self.server = server

    def initialize_parameters(self, client_manager):
        return to_parameters(self.server.state)

    def configure_fit(self, server_round, parameters, client_manager):
        n = self.server.task.devices
        clients = client_manager.sample(num_clients=n, min_num_clients=n)
        ins = FitIns(parameters, {"round": self.server.round + 1})
        return [(c, ins) for c in clients]

    def aggregate_fit(self, server_round, results, failures):
        replies = [Reply(int(r.metrics["device"]), r.parameters.tensors[0], str(r.metrics["sha256"]),
                         int(r.num_examples), float(r.metrics["loss"])) for _, r in results]
        state = self.server.finish_round(replies, dropped=len(failures))
        return to_parameters(state), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class FleetDevice(Client):
    """One device (or a gateway's board, ``board``: a QEMU board name): ``client.run_device`` on the global state
    it is sent."""

    def __init__(self, task: FleetTask, device: int, faults: dict, board: str | None = None) -> None:
        self.task, self.device, self.faults, self.board = task, device, faults, board

    def fit(self, ins: FitIns) -> FitRes:
        reply = run_device(self.task, self.device, ins.parameters.tensors[0], int(ins.config["round"]), self.faults,
                           self.board)
        return FitRes(Status(Code.OK, ""), to_parameters(reply.state), reply.samples,
                      {"device": reply.device, "sha256": reply.sha256, "loss": reply.loss})


def client_app(task: FleetTask, faults: dict | None = None):
    from flwr.client import ClientApp

    def client_fn(context):
        return FleetDevice(task, int(context.node_config["partition-id"]), dict(faults or {})).to_client()

    return ClientApp(client_fn=client_fn)


def server_app(server: FleetServer):
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig

    def server_fn(context):
        return ServerAppComponents(strategy=FleetStrategy(server),
                                   config=ServerConfig(num_rounds=server.rounds - server.round))

    return ServerApp(server_fn=server_fn)


def simulate(server: FleetServer, faults: dict | None = None, cpus: int = 2) -> None:
    """The remaining rounds on Flower's simulation engine (Ray): one SuperNode per device, ``cpus`` at a time."""
    import os

    from flwr.simulation import run_simulation

    if server.round >= server.rounds:
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    run_simulation(server_app(server), client_app(server.task, faults), num_supernodes=server.task.devices,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": cpus, "include_dashboard": False}})
