"""The emitted C's byte-identity harness (issue 31): the sha256 of the model source and header that
``tinytrain compile`` emits for every zoo model (inference, and training with its shipped plans), the VWW TFLite
models (inference, and a last-layers training step) and a host build, for each target. ``emitted_c.json`` holds the
hashes recorded before the kernel selection was restructured; tests/codegen/test_emitted_c.py asserts the emitted C still
matches them. Runtime headers are left out (splitting them by kernel family changes the files, not the model C).

Regenerate (only when a change of the emitted C is intended, saying so in the commit):
    PYTHONPATH=. python tests/golden/emitted_c.py tests/golden/emitted_c.json
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
TARGETS = ("cortex-m4", "cortex-m7", "cortex-m55", "")  # "": a host build
ZOO = ("mbv1-0.25-vww", "mbv2-w0.35", "mcunet-5fps", "proxyless-w0.3")
PLANS = ("mbv2-w0.35-sparse", "mbv2-w0.35-wide", "mcunet-5fps-sparse", "proxyless-w0.3-sparse")
TFLITE = ("vww_96_int8", "mobilenet_v1_0.25_128_quant")
MODEL_FILES = ("tinytrain_model.c", "tinytrain_model.h")


def cases() -> list[tuple[str, str, dict]]:
    """(case name, model path, compile keywords) of every compile the harness hashes (per target)."""
    out = [(f"{m} inference", str(ROOT / "models" / f"{m}.onnx"), {}) for m in ZOO]
    out += [(f"{p} training", str(ROOT / "models" / f"{p.rsplit('-', 1)[0]}.onnx"),
             {"plan": str(ROOT / "models" / "plans" / f"{p}.json")}) for p in PLANS]
    for t in TFLITE:
        out.append((f"{t} inference", str(SHARED / "models" / f"{t}.tflite"), {}))
    out.append(("vww_96_int8 last-k:4 training", str(SHARED / "models" / "vww_96_int8.tflite"),
                {"update": "last-k:4"}))
    return out


def emitted_hashes(model: str, kwargs: dict, target: str) -> dict[str, str]:
    """The sha256 of the model source and header ``compile`` emits for one case and target."""
    from tinytrain import api

    files = api.compile(model, target=target, **kwargs).files
    return {f: hashlib.sha256(files[f].encode("utf-8")).hexdigest() for f in MODEL_FILES}


def key(name: str, target: str) -> str:
    return f"{name} @ {target or 'host'}"


def all_hashes(shared: bool = True) -> dict[str, dict[str, str]]:
    return {key(n, t): emitted_hashes(m, kw, t) for n, m, kw in cases()
            if shared or not m.startswith(str(SHARED)) for t in TARGETS}


def main(out: str) -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    body = {"provenance": {"commit": commit, "command": "PYTHONPATH=. python tests/golden/emitted_c.py "
                                                       "tests/golden/emitted_c.json"},
            "hashes": all_hashes()}
    Path(out).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
