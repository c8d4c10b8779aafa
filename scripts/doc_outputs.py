"""The printed output the README and the guide show is what the program prints: a ``text`` block right after a line
``<!-- output of: COMMAND -->`` is COMMAND's stdout then stderr, run with bash in a scratch folder like the
checkout (``models/`` linked, ``tinytrain`` on the PATH running this checkout) where the README's quick-start compile
has run. Only what must vary is normalised: times (``0.1 s``) and the scratch folder's path.

    .venv/bin/python scripts/doc_outputs.py            # rewrites every output block from the program
    .venv/bin/python scripts/doc_outputs.py --check    # exit 1 if a block differs (tests/test_docs.py checks it)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").rglob("*.md")))
MARKER = re.compile(r"<!-- output of: (.+?) -->")
SETUP = "tinytrain compile models/mbv1-0.25-vww.onnx --sram 256k --new-head 2 --update last-k:2 -o build"
TIME = re.compile(r"\b\d+(?:\.\d+)? s\b")


@dataclass(frozen=True)
class Output:
    page: Path
    line: int      # the block's first line of text (1-based), after its fence
    end: int       # the closing fence's line (1-based)
    command: str
    text: str


def outputs(page: Path) -> list[Output]:
    lines = page.read_text().splitlines()
    found = []
    for k, line in enumerate(lines[:-1]):
        m = MARKER.fullmatch(line.strip())
        if m and lines[k + 1].startswith("```"):
            end = next(j for j in range(k + 2, len(lines)) if lines[j].startswith("```"))
            found.append(Output(page, k + 3, end + 1, m.group(1), "\n".join(lines[k + 2:end]) + "\n"))
    return found


def normalise(text: str) -> str:
    """What may differ between two runs of one command: the times."""
    return TIME.sub("T s", text)


def scratch(folder: Path) -> dict:
    """``folder`` made like the checkout (models/ linked); the environment with ``tinytrain`` running this checkout."""
    (folder / "models").symlink_to(ROOT / "models")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "tinytrain"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinytrain.cli "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "120",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def run(command: str, folder: Path, env: dict) -> str:
    """What ``command`` prints (stdout, then stderr), the scratch folder's path as ``.``."""
    r = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return (r.stdout + r.stderr).replace(str(folder) + "/", "").replace(str(folder), ".")


def printed(folder: Path, pages=PAGES) -> list[tuple[Output, str]]:
    """Every output block of ``pages`` with what its command prints now (in a scratch ``folder``)."""
    env = scratch(folder)
    subprocess.run(["bash", "-e", "-c", SETUP], cwd=folder, env=env, capture_output=True, check=True, timeout=300)
    return [(o, run(o.command, folder, env)) for page in pages for o in outputs(page)]


def rewrite(results: list[tuple[Output, str]]) -> None:
    for page in {o.page for o, _ in results}:
        lines = page.read_text().splitlines()
        for o, now in sorted(((o, t) for o, t in results if o.page == page), key=lambda r: -r[0].line):
            lines[o.line - 1:o.end - 1] = now.rstrip("\n").splitlines()
        page.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as d:
        results = printed(Path(d))
    stale = [f"{o.page.relative_to(ROOT)}:{o.line}: {o.command}" for o, now in results
             if normalise(now) != normalise(o.text)]
    if "--check" in argv:
        print("\n".join(stale) or "every output block is what its command prints", file=sys.stderr)
        return 1 if stale else 0
    rewrite(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
