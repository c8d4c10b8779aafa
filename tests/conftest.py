from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
# The test C programs' random numbers (tests/c/xorshift64.h), pasted into their sources.
XORSHIFT64 = (Path(__file__).parent / "c" / "xorshift64.h").read_text()


def shared_file(relative: str) -> Path:
    """A file from ../shared, or skip the test saying why."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only beside the project on developer and CI machines)")
    return path
