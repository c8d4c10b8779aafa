"""The trained-state files ``eval --state`` and ``train --state`` read, told apart by their content:

- ``train --state-out``'s .npz of ``step`` and every state tensor, byte-identical for identical states whatever
  the engine (members in name order, stored, with a fixed timestamp: np.savez stamps the current time);
- a board's saved state, ``tt_state.bin`` (``tt_state_save`` bytes, magic "TTS1": codegen/state.py), which holds
  only what the training step writes, in the order of its plan: reading it needs that plan (the one the firmware was
  compiled with), and its layout fingerprint is checked against it.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from tinytrain.codegen.state import MAGIC, unpack
from tinytrain.errors import UsageError
from tinytrain.ir import Graph
from tinytrain.outputs import write_file
from tinytrain.simulator import TrainState
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.train_graph import build_training_graph


def save_state(path: str | Path, state: TrainState) -> None:
    """Write ``state`` to ``path`` (all or nothing, never over a file that is not a state: tinytrain/outputs)."""

    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_STORED) as z:
        for name, value in [("step", np.int64(state.step)), *sorted(state.tensors.items())]:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(value), allow_pickle=False)
            z.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())
    write_file(path, data.getvalue(), "state")


def load_state(path: str | Path, graph: Graph, plan=None) -> TrainState:
    """A state file (either kind) as a TrainState for ``graph`` (the model it was trained from, same new head and
    seed); ``plan``: the training step's plan or step spec (training/spec.py: its momentum is part of the layout),
    which a board's state needs."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise UsageError(f"cannot read state {path}: {e.strerror}") from None
    if head == MAGIC:
        return _device_state(Path(path), graph, plan)
    if head[:2] != b"PK":
        raise UsageError(f"{path} is not a state file; give the STATE.npz of train --state-out or a board's "
                         "tt_state.bin")
    try:
        with np.load(path, allow_pickle=False) as f:
            saved = {k: f[k] for k in f.files if k != "step"}
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"cannot read state {path} ({e}); give the STATE.npz of train --state-out or a board's "
                         "tt_state.bin") from None
    tensors = {}
    for name, value in saved.items():
        param, _, kind = name.rpartition(".")
        if kind in ("momentum", "remainder") and param in saved:
            continue  # optimizer state (qas.add_updates names it PARAM.momentum, PARAM.remainder): not the model's
        t = graph.tensors.get(name)
        if t is None or not t.has_data or value.shape != t.shape or value.dtype != t.dtype.np:
            found = "not in the model" if t is None else f"{t.dtype.value}{t.shape} in the model"
            raise UsageError(f"{path}: {name} ({value.dtype}{value.shape}) is {found}; give the model (and "
                             f"--new-head / --seed) it was trained from")
        tensors[name] = value
    return TrainState(tensors)


def _device_state(path: Path, graph: Graph, plan) -> TrainState:
    """A board's tt_state.bin for ``graph`` trained under ``plan`` (training graph's layout, fingerprint checked)."""
    if plan is None:
        raise UsageError(f"{path} is a board's state (tt_state_save bytes): give the plan it was trained with, "
                         "--plan PLAN.json or --update PRESET (and --remainder-bits / --backward if not the default)")
    try:
        step = build_training_graph(graph, getattr(plan, "plan", plan), getattr(plan, "config", UpdateConfig()))
        return unpack(step, path.read_bytes())  # optimizer state: not the model's
    except ValueError as e:
        raise UsageError(f"{path}: {e}; give the model, --new-head and plan the firmware was compiled with") from None
