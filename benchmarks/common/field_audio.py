"""The field study's audio domain shift: the DS-CNN keyword model on synthesized speech, then a new room and a
new microphone (benchmarks/field_study.py).

Clips from kws_data (espeak-ng voices, every clip synthetic): 3 clips per word and adaptation speaker, 2 per test
speaker. The shift, on the waveform before the MFCC front end: a room (the clip convolved with a 0.3 s impulse
response: the direct sound and an exponentially decaying noise tail, RT60 0.3 s, seed 0) heard through a thin
microphone (a first difference, y[n] = x[n] - 0.9 x[n-1]: the bass cut), peak level kept. Splits: adaptation
speakers 0-5's clean clips pretrain the head; speakers 6-11 are the stream pool (clean, then shifted); the test
speakers' shifted clips are the test set. Latents are the DS-CNN's pooled 64 features (the head's input).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common import kws_data
from common.field_streams import shift_stream
from tinytrain.audio import mfcc, quantize_features

RATE = kws_data.RATE


def room(audio: np.ndarray, seed: int = 0) -> np.ndarray:
    """The int16 clips (N, 16000) in the new room through the new microphone."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(0.3 * RATE)) / RATE
    ir = rng.normal(0, 1, len(t)) * np.exp(-6.9 * t / 0.3) * 0.3
    ir[0] = 1.0
    out = []
    for a in audio.astype(np.float64) / 32768:
        y = np.convolve(np.convolve(a, ir)[: len(a)], [1.0, -0.9])[: len(a)]
        y = y / max(1e-9, np.abs(y).max()) * np.abs(a).max()
        out.append(np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16))
    return np.stack(out)


def clips(graph, work: Path) -> dict[str, dict[str, np.ndarray]]:
    """{adapt, test}: {clean, room: int8 MFCC inputs, y, speaker index}, cached in ``work``."""
    q = graph.tensors[graph.inputs[0]].quant
    out = {}
    sets = (("adapt", kws_data.ADAPT_VARIANTS, 1, 3), ("test", kws_data.TEST_VARIANTS, 2, 2))
    for name, variants, seed, reps in sets:
        path = work / f"kws-{name}-{reps}.npz"
        if not path.exists():
            d = kws_data.build(kws_data.plan_clips(kws_data.speakers(variants), reps, None, seed), q.s, q.zp)
            d["room"] = np.stack([quantize_features(mfcc(a), q.s, q.zp) for a in room(d["audio"])])[..., None]
            voices = kws_data.speakers(variants)
            d["speaker"] = np.array([voices.index(str(v)) for v in d["speaker"]])
            np.savez(path, **{k: d[k] for k in ("x", "room", "y", "speaker")})
        with np.load(path) as f:
            out[name] = dict(clean=f["x"], room=f["room"], y=f["y"], speaker=f["speaker"])
    return out


def latent_sets(program, data: dict) -> dict:
    """{pretrain, pool, test}: {clean, room: (latents, labels)} (pretrain: adaptation speakers 0-5, pool: 6-11)."""
    a, t = data["adapt"], data["test"]
    lat = {h: program.latents(a[h]) for h in ("clean", "room")}
    out = {}
    for split, rows in (("pretrain", a["speaker"] < 6), ("pool", a["speaker"] >= 6)):
        out[split] = {h: (lat[h][rows], a["y"][rows]) for h in ("clean", "room")}
    out["test"] = {h: (program.latents(t[h]), t["y"]) for h in ("clean", "room")}
    return out


def stream(lat: dict, seed: int) -> dict:
    """1,000 draws of the clean pool, then 2,000 of the shifted one, 30 % labelled (the study's scenario dict)."""
    return shift_stream(lat, seed, "kws-room", "room", known=int(lat["pool"]["clean"][1].max()) + 1)


def stationary(lat: dict, seed: int) -> dict:
    """10,000 draws of the clean pool, 10 % labelled (false alarms of the drift detector on audio)."""
    rng = np.random.default_rng(102 + seed)
    cx, cy = lat["pool"]["clean"]
    d = rng.integers(0, len(cy), 10000)
    return dict(name="kws-stationary", x=cx[d], y=np.where(rng.random(len(d)) < 0.1, cy[d], -1), test="clean",
                known=int(cy.max()) + 1, shift=None)
