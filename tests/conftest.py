from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_file(relative: str) -> Path:
    """A file from ../shared, or skip the test saying why."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only beside the project on developer and CI machines)")
    return path
