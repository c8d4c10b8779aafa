"""The server's persistence: the global state after every round, so a restarted server resumes where it stopped.

A run folder holds ``global-rN.tts`` (the state bytes after round N, the ``tt_state_load`` format a device loads)
and ``fleet.json`` (the task's identity, the round, that file's name and sha256, the fault counters and the per-round
history). Each round writes the state file first, then replaces fleet.json atomically, then deletes the older state
file: a server killed at any point finds a consistent pair.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from tinytrain.errors import UsageError
from tinytrain.outputs import write_file


@dataclass
class Progress:
    round: int
    state: bytes
    counts: dict = field(default_factory=dict)
    history: list = field(default_factory=list)


def task_id(task) -> str:
    return hashlib.sha256(repr(task).encode("utf-8")).hexdigest()[:16]


def save(folder: Path, task, progress: Progress) -> None:
    """Persist ``progress``; of the folder's files only the ones this run wrote are replaced or deleted."""

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write {folder}: {e.strerror or e}") from None
    previous = _previous_state(folder)
    name = f"global-r{progress.round}.tts"
    write_file(folder / name, progress.state, "device-state")
    meta = {"task": task_id(task), "round": progress.round, "state": name,
            "sha256": hashlib.sha256(progress.state).hexdigest(), "counts": progress.counts,
            "history": progress.history}
    write_file(folder / "fleet.json", (json.dumps(meta, indent=1) + "\n").encode("utf-8"), "fleet")
    if previous is not None and previous != name:
        (folder / previous).unlink(missing_ok=True)


def _previous_state(folder: Path) -> str | None:
    """The state file the folder's fleet.json names (this run's, written by an earlier round), or None."""
    try:
        name = json.loads((folder / "fleet.json").read_text())["state"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) and Path(name).name == name and name.startswith("global-r") else None


def load(folder: Path, task) -> Progress | None:
    """The persisted progress of ``task`` in ``folder``, or None when the folder holds none."""
    path = folder / "fleet.json"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--state-dir {folder} is a file; give a folder (a new one, or one of an earlier run)")
    if not path.exists():
        if folder.exists() and any(folder.iterdir()):
            raise UsageError(f"--state-dir {folder} holds files and no fleet.json (not a fleet run's folder); give a "
                             "new or empty folder")
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
