"""Deployment over the network: the fleet's server and its gateways as separate processes on Flower's gRPC
transport (docs/guide/fleet.md, "Deployment").

``serve`` runs the rounds of a ``FleetServer`` with ``FleetStrategy`` at an address and waits for every device;
``join`` connects one gateway's device (``FleetDevice``: the host C step, or with ``board`` the same step as
firmware on an emulated board, engine_qemu) and serves its rounds until the server ends the run. Both use Flower's
``start_server`` / ``start_client`` (its original gRPC transport, deprecated in Flower 1.42 in favour of
SuperLink / SuperNode processes, which load the apps from a packaged Flower App instead).
"""

from __future__ import annotations

from tinytrain.federated.server import FleetServer
from tinytrain.federated.task import FleetTask


def serve(server: FleetServer, address: str) -> None:
    """The remaining rounds of ``server``, its devices connecting to ``address`` (host:port)."""
    from flwr.server import ServerConfig, start_server

    from tinytrain.federated.strategy import FleetStrategy

    if server.round < server.rounds:
        start_server(server_address=address, config=ServerConfig(num_rounds=server.rounds - server.round),
                     strategy=FleetStrategy(server))


def join(task: FleetTask, device: int, address: str, faults: dict | None = None, board: str | None = None) -> None:
    """Device ``device`` of ``task`` serving the rounds of the server at ``address`` until it ends the run
    (``board``: on that QEMU board instead of the host C engine)."""
    from flwr.client import start_client

    from tinytrain.federated.strategy import FleetDevice

    start_client(server_address=address, client=FleetDevice(task, device, dict(faults or {}), board).to_client(),
                 insecure=True)
