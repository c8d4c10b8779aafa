"""The trained-state file of ``train --state-out`` / ``eval --state``: an .npz of ``step`` and every state tensor.

Byte-identical for identical states whatever the engine: members in name order, stored, with a fixed timestamp
(np.savez stamps the current time).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from tinytrain.errors import UsageError
from tinytrain.ir import Graph
from tinytrain.simulator import TrainState


def save_state(path: str | Path, state: TrainState) -> None:
    """Write ``state`` to ``path`` (all or nothing, never over a file that is not a state: tinytrain/outputs)."""
    from tinytrain.outputs import write_file

    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_STORED) as z:
        for name, value in [("step", np.int64(state.step)), *sorted(state.tensors.items())]:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(value), allow_pickle=False)
            z.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())
    write_file(path, data.getvalue(), "state")


def load_state(path: str | Path, graph: Graph) -> TrainState:
    """A state file as a TrainState for ``graph`` (the model it was trained from, same new head and seed)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            saved = {k: f[k] for k in f.files if k != "step"}
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read state {path} ({e})") from None
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
