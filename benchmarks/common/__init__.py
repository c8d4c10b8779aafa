"""What every benchmark shares: where things are, the statistics of an accuracy comparison, and writing a result so
that it names the command that produced it.

A benchmark is ``python benchmarks/NAME.py [ARGS]`` from the checkout; it writes ``benchmarks/results/NAME.md``
(a table for people, its first line the command) and ``benchmarks/results/NAME.json`` (the numbers, with
``"command"``). The README and the guide quote figures from those files; tests/test_docs.py checks each quoted
figure against its file (benchmarks/figures.py lists them). Importing this module puts the checkout on sys.path, so
``import tinytrain`` and ``import models`` work without PYTHONPATH; it loads no numpy (a benchmark may fix its BLAS
threads after importing it).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SHARED = ROOT.parent / "shared"  # the VWW data and the public TFLite models, read in place (never copied)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def command(argv: list[str] | None = None) -> str:
    """The command line this process was started with, as a user types it from the checkout."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = argv[0]
    return " ".join(["python", script_text, *map(shlex.quote, argv[1:])])


def accuracy_ci(correct) -> tuple[float, float]:
    """Accuracy of 0/1 outcomes and the half-width of its 95 % normal-approximation interval."""
    p = sum(map(float, correct)) / len(correct)
    return p, 1.96 * math.sqrt(p * (1 - p) / len(correct))


def paired(a, b) -> tuple[float, float]:
    """Mean of a − b over the same test items and the half-width of its paired 95 % interval (1.96 standard
    errors of the mean difference): how two models are compared on one test split."""
    import numpy as np  # not at the top: a benchmark fixes its BLAS threads before numpy loads, after this import

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return float(d.mean()), 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d))


def write_results(name: str, markdown: str, data: dict, cmd: str | None = None, folder: Path = RESULTS) -> str:
    """``folder``/NAME.md (its first line names the command) and NAME.json (with ``"command"``); returns the
    command recorded."""
    cmd = cmd or command()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"command": cmd, **data}, indent=1) + "\n")
    header = f"<!-- produced by: {cmd} -->\n"
    (folder / f"{name}.md").write_text(markdown if markdown.startswith(header) else header + markdown)
    return cmd
