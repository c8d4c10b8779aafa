"""Writing user-visible outputs so that a failure leaves nothing behind (docs/design.md §5: no partial output)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tinytrain.errors import UsageError


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a partial file next to it, renamed into place on success."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


class AtomicDir:
    """Build an output folder next to its destination and move it into place only on success."""

    def __init__(self, dest: Path) -> None:
        self.dest = Path(dest)

    def __enter__(self) -> Path:
        parent = self.dest.resolve().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.", dir=parent))
        except OSError as e:
            raise UsageError(f"cannot create {self.dest}: {e.strerror}") from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.dest.exists():
            shutil.rmtree(self.dest)
        os.replace(self.tmp, self.dest)
