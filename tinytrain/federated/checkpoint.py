"""The server's persistence: the global state after every round, so a restarted server resumes where it stopped.

A run folder holds ``global-rN.tts`` (the state bytes after round N, the ``tt_state_load`` format a device loads)
and ``fleet.json`` (the task's identity, the round, that file's name and sha256, the fault counters and the per-round
history). Each round writes the state file first, then replaces fleet.json atomically, then deletes the older state
file: a server killed at any point finds a consistent pair.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tinytrain.errors import UsageError


@dataclass
class Progress:
    round: int
    state: bytes
    counts: dict = field(default_factory=dict)
    history: list = field(default_factory=list)


def task_id(task) -> str:
    return hashlib.sha256(repr(task).encode("utf-8")).hexdigest()[:16]


def save(folder: Path, task, progress: Progress) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"global-r{progress.round}.tts"
    _atomic(folder / name, progress.state)
    meta = {"task": task_id(task), "round": progress.round, "state": name,
            "sha256": hashlib.sha256(progress.state).hexdigest(), "counts": progress.counts,
            "history": progress.history}
    _atomic(folder / "fleet.json", (json.dumps(meta, indent=1) + "\n").encode("utf-8"))
    for old in folder.glob("global-r*.tts"):
        if old.name != name:
            old.unlink(missing_ok=True)


def load(folder: Path, task) -> Progress | None:
    """The persisted progress of ``task`` in ``folder``, or None when the folder holds none."""
    path = folder / "fleet.json"
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
        state = (folder / meta["state"]).read_bytes()
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"{folder}: cannot resume ({e}); remove the folder to start over") from None
    if meta["task"] != task_id(task):
        raise UsageError(f"{folder} holds another fleet run (other model, data, plan or options); give another "
                         "--state-dir or the same options")
    if hashlib.sha256(state).hexdigest() != meta["sha256"]:
        raise UsageError(f"{folder}/{meta['state']} does not match its sha256 in fleet.json; remove the folder")
    return Progress(int(meta["round"]), state, meta["counts"], meta["history"])


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(data)
    os.replace(tmp, path)
