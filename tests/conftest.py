import shutil
import sys
from pathlib import Path

import pytest

# The tests live in folders named like the package they test (tests/codegen/ for tinytrain/codegen/, ...); some
# import another folder's helpers by module name (test_codegen_train.check_step), so every folder is importable.
for _folder in sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    sys.path.insert(1, str(_folder))

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
# The test C programs' random numbers (tests/c/xorshift64.h), pasted into their sources.
XORSHIFT64 = (Path(__file__).parent / "c" / "xorshift64.h").read_text()


def alternating(names: list[str], cases: list, variants: dict[str, object]) -> list:
    """The cross product of ``cases`` (named by ``names``) and ``variants`` as pytest params: every case once by
    default, the variants taking turns so that each is covered; the rest carries the ``full`` marker (a member of an
    equivalence class the default run already has a representative of; ``make test-full`` runs them too)."""
    params = []
    for i, (name, case) in enumerate(zip(names, cases)):
        for j, (variant, value) in enumerate(variants.items()):
            marks = () if j == i % len(variants) else (pytest.mark.full,)
            params.append(pytest.param(*case, value, marks=marks, id=f"{name}-{variant}"))
    return params


def shared_file(relative: str) -> Path:
    """A file from ../shared, or skip the test saying why."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only beside the project on developer and CI machines)")
    return path


# The tools a marked test needs (pyproject.toml declares the markers; scripts/setup.sh installs the tools): a test
# marked ``cross`` builds with the Arm cross compiler, one marked ``qemu`` also runs the firmware on QEMU. Without
# them the test is skipped, saying which tool is missing; ``pytest -m "not qemu and not cross"`` runs the rest.
TOOLS = {"cross": ("arm-none-eabi-gcc",), "qemu": ("arm-none-eabi-gcc", "qemu-system-arm")}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, tools in TOOLS.items():
            missing = [t for t in tools if shutil.which(t) is None]
            if item.get_closest_marker(marker) and missing:
                item.add_marker(pytest.mark.skip(reason=f"{' and '.join(missing)} not installed (scripts/setup.sh)"))
