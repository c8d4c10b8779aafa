"""The field study's domain-shift stream, shared by its scenarios (field_audio's kws-room, field_vww's vww-light)."""

from __future__ import annotations

import numpy as np


def shift_stream(lat: dict, seed: int, name: str, shifted: str, known: int) -> dict:
    """1,000 draws of the clean pool, then 2,000 of the pool under ``shifted``, 30 % labelled (the study's scenario
    dict); ``lat["pool"][h]`` is (latents, labels) per condition h."""
    rng = np.random.default_rng(2 + seed)
    (cx, cy), (sx, sy) = lat["pool"]["clean"], lat["pool"][shifted]
    d1, d2 = rng.integers(0, len(cy), 1000), rng.integers(0, len(sy), 2000)
    y = np.concatenate([cy[d1], sy[d2]])
    return dict(name=name, x=np.concatenate([cx[d1], sx[d2]]), y=np.where(rng.random(len(y)) < 0.3, y, -1),
                test=shifted, known=known, shift=1000)
