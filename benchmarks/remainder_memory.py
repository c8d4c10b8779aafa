"""Peak SRAM of the zoo models' shipped sparse plans with each weight state (issue 28): int8 weights only, 4-bit
remainders (half a byte per trained weight) and 8-bit remainders (a byte), beside the published engine's peaks.

    .venv/bin/python benchmarks/remainder_memory.py

The same trained tensors in every column (the plan's weights and biases); only ``remainder_bits`` changes. Peaks are
``tinytrain compile --sram 256k``'s (the planned arena + SRAM copies + optimizer state + runtime + stack). Writes
benchmarks/results/remainder_memory.{json,md}.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results"
MODELS = ("mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps")
PUBLISHED_KB = {"mbv2-w0.35": 141, "proxyless-w0.3": 135, "mcunet-5fps": 173}  # the Tiny Training Engine, int8 state
BITS = (0, 4, 8)


def peaks(model: str) -> dict[int, dict]:
    import tinytrain
    from tinytrain.training.sparse import load_plan

    graph = tinytrain.load_model(ROOT / "models" / f"{model}.onnx")
    plan = load_plan(ROOT / "models" / "plans" / f"{model}-sparse.json")
    out = {}
    for bits in BITS:
        report = tinytrain.compile(graph, sram="256k", plan=replace(plan, remainder_bits=bits)).report
        out[bits] = {"peak_sram_bytes": report.peak_sram_bytes, "remainder_bytes": report.remainder_bytes}
    return out


def main() -> None:
    t0 = time.time()
    rows = {m: peaks(m) for m in MODELS}
    result = {"command": "python benchmarks/remainder_memory.py", "seconds": round(time.time() - t0, 1),
              "published_kb": PUBLISHED_KB, "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "remainder_memory.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Peak SRAM of the shipped sparse plans by weight state", "",
             f"`{result['command']}`. The same trained tensors in every column; KB = 1024 bytes.", "",
             "| model | published (int8) | int8 only | 4-bit remainders | 8-bit remainders |", "|---|---:|---:|---:|---:|"]
    for m, r in rows.items():
        cells = [f"{r[b]['peak_sram_bytes'] / 1024:.1f}" + (f" (+{r[b]['remainder_bytes'] / 1024:.1f})" if b else "")
                 for b in BITS]
        lines.append(f"| {m} | {PUBLISHED_KB[m]} | " + " | ".join(cells) + " |")
    (OUT / "remainder_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
