"""Federated fine-tuning of the compiled training step across a fleet of devices, on Flower (docs/guide/fleet.md).

task.py (what every process rebuilds), shards.py (the devices' data), client.py (a device's round: the host C
step), gateway.py (a board over the serial protocol), aggregate.py (the rule), screen.py (what the server refuses),
checkpoint.py (persist / resume), server.py (a round without transport), strategy.py (Flower: strategy, client,
simulation), score.py (test accuracy), app.py (the deployed Flower App), run.py (``tinytrain.fleet``).
"""

from tinytrain.federated.run import FLEET_ENGINES, FleetResult, fleet, fleet_task

__all__ = ["FLEET_ENGINES", "FleetResult", "fleet", "fleet_task"]
