"""An output file written all or nothing, replacing only a file of the kind it is (the package docstring)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

from tinytrain.errors import UsageError
from tinytrain.outputs.folder import TMP, umask


def _onnx_by_tinytrain(path: Path) -> bool:
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False).producer_name == "tinytrain"
    except Exception:  # noqa: BLE001 - anything unreadable is not ours
        return False


def _starts(magic: bytes) -> Callable[[Path], bool]:
    def check(path: Path) -> bool:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    return check


def _state_npz(path: Path) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return "step.npy" in z.namelist() and all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in z.infolist())
    except (OSError, zipfile.BadZipFile):
        return False


def _flash(path: Path) -> bool:
    """A board's flash file (--engine qemu --flash): its first slot holds a saved state or is erased."""
    with open(path, "rb") as f:
        head = f.read(4)
    return head in (b"", b"TTP1", b"\xff\xff\xff\xff")


def _json_with(*keys: str) -> Callable[[Path], bool]:
    def check(path: Path) -> bool:
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return False
        return isinstance(obj, dict) and all(k in obj for k in keys)
    return check


def _int_npy(path: Path) -> bool:
    import numpy as np

    try:
        with open(path, "rb") as f:
            fmt = np.lib.format
            read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
            return read(f)[2] in (np.dtype(np.int8), np.dtype(np.uint8))
    except (OSError, ValueError):
        return False


# kind -> (what it is, in a message; does an existing file hold one?)
FILE_KINDS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "onnx": ("an ONNX model written by tinytrain", _onnx_by_tinytrain),
    "state": ("a state file of `tinytrain train --state-out`", _state_npz),
    "device-state": ("a device state (tt_state_save bytes)", _starts(b"TTS1")),
    "samples": ("a sample file (tt_samples.h)", _starts(b"TTDS")),
    "flash": ("a board's flash file (firmware/c/tt_persist.h)", _flash),
    "targets": ("a float32 targets file (tt_targets.bin)", lambda path: path.stat().st_size % 4 == 0),
    "plan": ("a plan file", _json_with("version", "bias_last_k", "weights")),
    "search": ("a plan search report", _json_with("chosen", "finalists")),
    "npy": ("an int8 / uint8 .npy array", _int_npy),
    "fleet": ("a fleet run's fleet.json", _json_with("task", "round", "state")),
    "field": ("a field run's result (tinytrain field --json)", _json_with("engine", "checkpoints", "drift_alarms")),
}
# kind -> the suffixes its file takes; a kind not here (a device state: .bin, .tts) takes any but these
SUFFIXES: dict[str, tuple[str, ...]] = {"onnx": (".onnx",), "state": (".npz",), "plan": (".json",),
                                        "search": (".json",), "npy": (".npy",), "fleet": (".json",),
                                        "field": (".json",)}


def _suffix_contradicts(path: Path, kind: str) -> bool:
    """Does the suffix of ``path`` name another kind of file than ``kind`` (q.txt for an ONNX model, s.npz for a
    device state)? A name without one, or with a number after its last dot (mbv1-0.25), says nothing."""
    suffix = path.suffix.lower()
    if not re.fullmatch(r"\.[a-z]\w*", suffix):
        return False
    if kind in SUFFIXES:
        return suffix not in SUFFIXES[kind]
    return any(suffix in taken for taken in SUFFIXES.values())


def check_file(path: str | Path, kind: str, inputs=()) -> Path:
    """``path`` if writing a ``kind`` file there loses nothing (see the module docstring), else UsageError."""
    path = Path(path)
    real = path.resolve()
    what, ours = FILE_KINDS[kind]
    if any(real == Path(i).resolve() for i in inputs):
        raise UsageError(f"{path} is an input of this command; give another name for the output")
    if real.is_dir():
        raise UsageError(f"{path} is a folder; give a file name ({what})")
    if real.exists() and not ours(real):
        raise UsageError(f"{path} exists and is not {what}; tinytrain replaces only its own files: give another "
                         "name, or move it away")
    if _suffix_contradicts(path, kind):
        better = f"name it {path.with_suffix(SUFFIXES[kind][0])}" if kind in SUFFIXES else "give it another suffix"
        raise UsageError(f"{path} would hold {what}, not a {path.suffix} file: {better}")
    if not real.parent.is_dir():
        raise UsageError(f"cannot write {path}: its folder {path.parent} does not exist")
    if not os.access(real.parent, os.W_OK):  # known before the work, not after it (a long search, a training run)
        raise UsageError(f"cannot write {path}: its folder {path.parent} is not writable")
    return path


def write_file(path: str | Path, data: bytes, kind: str, inputs=()) -> None:
    """Write ``data`` to ``path`` (checked as ``check_file``) through a hidden temporary beside it."""
    write_files({Path(path): data}, kind, inputs)


def write_files(files: dict[Path, bytes], kind: str | dict[Path, str], inputs=()) -> None:
    """Write several files all or nothing: every one to its temporary first, then each renamed into place.
    ``kind``: one for all, or per path."""
    kinds = kind if isinstance(kind, dict) else {p: kind for p in files}
    for path in files:
        check_file(path, kinds[path], inputs)
    temps: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{TMP}", dir=path.resolve().parent)
            temps[path] = Path(tmp)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o666 & ~umask())
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except BaseException as e:  # an error, or Ctrl-C while writing: no temporary is left behind
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
        raise
