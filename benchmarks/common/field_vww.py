"""The field study's camera domain shift (``vww-light``, issue 41): the MLPerf Tiny Visual Wake Words model
(``vww_96_int8.tflite``, MobileNetV1-0.25 96x96, its own 2-class person head) on real VWW images, then the same
camera at night (benchmarks/field_study.py).

Data: ../shared/data/vww96/vww96_dev800.npz (800 COCO images, 400 person / 400 not), read in place. Split once
(seed 0, class-balanced): a stream pool of 400 images (200 a class), 100 validation images (the lr is chosen on them)
and 300 test images, never in a stream. The shift (``light``), deterministic: the exposure cut to 30 % and the gain's
sensor noise, x' = clip(round(0.3 x + n), 0, 255) with n ~ N(0, 8) per pixel and channel from a generator of seed 1
drawn over all 800 images at once (each image's shifted copy is fixed). Latents are the backbone's pooled 256
features (the head's input), computed once by the C forward. The stream (per stream order): 1,000 draws of the
clean pool, then 2,000 of the same pool in low light, 30 % labelled; the 400 pool images recur (a fixed camera
sees the same scenes again), which the drift detector's warm-up (256 samples, then 256 to calibrate) needs.
``vww-stationary``: 10,000 draws of the clean pool, 10 % labelled, for false alarms.
"""

from __future__ import annotations

import numpy as np

from common import SHARED
from common.field_streams import shift_stream

DATA = SHARED / "data" / "vww96" / "vww96_dev800.npz"
MODEL = SHARED / "models" / "vww_96_int8.tflite"
POOL, VAL = 200, 50  # per class; the rest of each class (150) is the test split
SHIFTS = ("clean", "light")


def light(x: np.ndarray) -> np.ndarray:
    """The uint8 images (N, 96, 96, 3) at night: 30 % of the exposure plus sensor noise (sigma 8, seed 1)."""
    noise = np.random.default_rng(1).normal(0, 8, x.shape)
    return np.clip(np.round(x.astype(np.float64) * 0.3 + noise), 0, 255).astype(np.uint8)


def splits(y: np.ndarray) -> dict[str, np.ndarray]:
    """Row indices of the pool / validation / test splits (class-balanced, seed 0)."""
    rng = np.random.default_rng(0)
    out = {"pool": [], "val": [], "test": []}
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        out["pool"].append(rows[:POOL]), out["val"].append(rows[POOL:POOL + VAL]), out["test"].append(rows[POOL + VAL:])
    return {k: np.sort(np.concatenate(v)) for k, v in out.items()}


def latent_sets(program, graph) -> dict:
    """{pool, val, test}: {clean, light: (latents, labels)}."""
    from tinytrain.data import model_inputs

    with np.load(DATA) as f:
        x, y = f["x"], f["y"]
    lat = {"clean": program.latents(model_inputs(graph, x)), "light": program.latents(model_inputs(graph, light(x)))}
    return {split: {h: (lat[h][rows], y[rows]) for h in SHIFTS} for split, rows in splits(y).items()}


def stream(lat: dict, seed: int) -> dict:
    """1,000 draws of the clean pool, then 2,000 of the pool in low light, 30 % labelled (the study's scenario)."""
    return shift_stream(lat, seed, "vww-light", "light", known=2)


def stationary(lat: dict, seed: int) -> dict:
    """10,000 draws of the clean pool, 10 % labelled (false alarms: the camera sees no change)."""
    rng = np.random.default_rng(50 + seed)
    x, y = lat["pool"]["clean"]
    d = rng.integers(0, len(y), 10000)
    return dict(name="vww-stationary", x=x[d], y=np.where(rng.random(len(d)) < 0.1, y[d], -1), test="clean", known=2,
                shift=None)


def describe(v: dict, epochs: int) -> str:
    """The scenario and its lr sweep in words, for the result file (``v``: field_study.vww's record)."""
    sweep = "; ".join(f"{r['lr']}: {100 * r['replay']:.1f} / {100 * r['offline']:.1f}" for r in v["lr_sweep"])
    return (f"vww-light (the MLPerf Tiny VWW model vww_96_int8, its shipped person head, last-k:1 at lr {v['lr']}; "
            "real VWW images, benchmarks/common/field_vww.py: 800 images split into a 400-image stream pool, 100 "
            "validation and 300 test images; 1,000 clean draws of the pool, then 2,000 of the pool at night (30 % "
            "exposure, sensor noise sigma 8), 30 % labelled; scored on the 300 test images at night; offline: the "
            f"same plan from the shipped head, {epochs} shuffled epochs over the same labelled samples) lr sweep, "
            "validation accuracy % on the 100 validation images at night, replay / offline, means over 3 tuning "
            f"stream orders the table does not use: {sweep}; the lr of the best replay run is the lr used. Each row "
            "is the mean over the stream orders (accuracy ± its sd over them); field - offline with the runs' paired "
            "95 % intervals (over the 300 test images) combined. The shipped head before learning: "
            f"{100 * v['start']['clean']:.1f} % on the test images, {100 * v['start']['light']:.1f} % on them at "
            "night. vww-stationary: 10,000 draws of the clean pool, 10 % labelled, scored on the clean test images "
            "(false alarms).")
