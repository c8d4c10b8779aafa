"""Searched plans of the four MLPerf Tiny reference models (issue 29): ``tinytrain plan --sram 256k`` on small data
with a cheap search budget, written to models/plans/mlperf/<model>-searched.json (+ .search.json, the search's
report, and provenance.json: the command and the data of each).

    python scripts/mlperf_plans.py [--models kws_ref_model,...] [--time-limit 150]

The data (what is synthetic is said here and in the provenance):
- pretrainedResnet_quant (IC): the first 160 Fashion-MNIST training images (Debian ``dataset-fashion-mnist``),
  32x32 RGB from the model's input shape (real images, the IC demo's task);
- kws_ref_model (KWS): synthetic MFCC-like features: 12 random class prototypes of the (49, 10, 1) input in
  int8, 12 noisy copies each (a learnable stand-in, not speech);
- ad01_int8 (AD): synthetic log-mel windows: one random profile plus Gaussian noise, 96 windows inside the
  input's range (the reconstruction loss, ``--loss`` mse from DATA without y);
- vww_96_int8 (VWW): the first 80 images of each class of ../shared/data/vww96/vww96_dev800.npz (real images).
The plans are for the engines' agreement tests (tests/test_mlperf_plans.py) and the peak table
(benchmarks/memory.py --study user-ops), not accuracy claims: a search on 160 rows and ~40-step fine-tunes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from the checkout: python scripts/mlperf_plans.py
SHARED = ROOT.parent / "shared"
OUT = ROOT / "models" / "plans" / "mlperf"
MODELS = ("pretrainedResnet_quant", "kws_ref_model", "ad01_int8", "vww_96_int8")
AD_SCALE, AD_ZP = 0.3910152316093445, 89  # ad01's input quantization


def kws_features(n_per_class: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    protos = rng.integers(-100, 100, (12, 49, 10, 1))
    y = np.repeat(np.arange(12), n_per_class)
    x = np.clip(protos[y] + rng.normal(0, 25, (len(y), 49, 10, 1)), -128, 127).astype(np.int8)
    return x, y.astype(np.int64)


def ad_windows(n: int = 96, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo, hi = (-128 - AD_ZP) * AD_SCALE, (127 - AD_ZP) * AD_SCALE
    x = rng.uniform(-30, 10, 640) + rng.normal(0, 2, (n, 640))
    return np.clip(x, lo, hi).astype(np.float32)


def data(name: str, work: Path) -> tuple[str, str]:
    """(DATA argument of tinytrain plan, its description)."""
    if name == "pretrainedResnet_quant":
        return "fashion-mnist:160", "the first 160 Fashion-MNIST training images (real), 32x32 RGB"
    path = work / f"{name}.npz"
    if name == "kws_ref_model":
        x, y = kws_features()
        np.savez(path, x=x, y=y)
        return str(path), "synthetic: 12 random int8 class prototypes x 12 noisy copies (kws_features, seed 0)"
    if name == "ad01_int8":
        np.savez(path, x=ad_windows())
        return str(path), "synthetic: 96 float32 windows, one random profile + noise (ad_windows, seed 0), no y"
    ds = np.load(SHARED / "data" / "vww96" / "vww96_dev800.npz")
    rows = np.sort(np.concatenate([np.flatnonzero(ds["y"] == c)[:80] for c in (0, 1)]))
    np.savez(path, x=ds["x"][rows], y=ds["y"][rows])
    return str(path), "the first 80 images of each class of ../shared/data/vww96/vww96_dev800.npz (real)"


def search(name: str, time_limit: float, work: Path) -> dict:
    spec, described = data(name, work)
    out = OUT / f"{name}-searched.json"
    argv = ["plan", f"../shared/models/{name}.tflite", "--data", spec, "--sram", "256k", "--ft-steps", "40",
            "--epochs", "1", "--repeats", "2", "--bias-k", "2,4,6", "--proposals", "2", "--max-rungs", "1",
            "--population", "30", "--generations", "8", "--lr", "0.005", "--noise-floor", "0",
            "--time-limit", str(time_limit), "--no-progress",
            "--cache", str((work / "cache").relative_to(ROOT)), "-o", str(out.relative_to(ROOT))]
    cmd = [sys.executable, "-m", "tinytrain.cli", *argv]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: tinytrain plan failed: {r.stderr.strip()[-2000:]}")
    print(r.stdout, flush=True)
    shown = ["tinytrain", *argv]
    shown[shown.index("--data") + 1] = spec if name == "pretrainedResnet_quant" else f"<{name}.npz>"
    report = json.loads(out.with_name(out.stem + ".search.json").read_text())
    return {"command": shlex.join(shown), "data": described, "chosen": report["chosen"],
            "peak_sram_bytes": report["peak_sram_bytes"], "seconds": report["seconds"],
            "made_by": "python scripts/mlperf_plans.py"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--time-limit", type=float, default=150.0)
    args = ap.parse_args()
    work = ROOT / "build" / "mlperf_plans"
    work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    prov_path = OUT / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    for name in args.models.split(","):
        prov[name] = search(name, args.time_limit, work)
        prov_path.write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
