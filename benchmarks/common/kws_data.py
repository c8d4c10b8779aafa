"""Synthetic keyword-spotting clips from espeak-ng, as the DS-CNN's int8 MFCC inputs (benchmarks/kws_demo.py).

Every clip is synthetic: espeak-ng (a formant synthesizer, Debian package ``espeak-ng``) speaks one word in a voice
(an English accent + a voice variant), at a pitch and a speed drawn per clip; the word is placed at a random offset
in a 1 s window at 16 kHz and mixed with white or brown noise at a drawn signal-to-noise ratio (or none). Silence
clips are noise alone. A speaker is one (accent, variant) pair; the adaptation and test speakers share no variant.
Features: tinytrain.audio.mfcc, quantized with the model's input scale and zero point.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# the model's class order (mlcommons/tiny keyword_spotting get_dataset.py word_labels: tfds speech_commands)
LABELS = ("down", "go", "left", "no", "off", "on", "right", "stop", "up", "yes", "silence", "unknown")
KEYWORDS = LABELS[:10]
SILENCE, UNKNOWN = 10, 11
UNKNOWN_WORDS = ("bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow")
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029",
           "en-us-nyc")
ADAPT_VARIANTS = ("m1", "m3", "m5", "m7", "f1", "f3", "f5", "klatt2", "adam", "edward", "linda", "steph")
TEST_VARIANTS = ("m2", "m4", "m6", "f2", "f4", "klatt", "klatt3", "john", "travis", "max", "robert", "belinda")
SNR_DB = (None, 20.0, 10.0)  # None: no noise
RATE = 16000
ESPEAK_RATE = 22050


@dataclass(frozen=True)
class Clip:
    word: str  # "" for silence
    label: int
    speaker: str  # accent+variant
    pitch: int
    speed: int
    snr_db: float | None
    seed: int


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def speakers(variants: tuple[str, ...]) -> list[str]:
    """One accent per variant, cycling through ACCENTS: (accent)+(variant) espeak-ng voice names."""
    return [f"{ACCENTS[i % len(ACCENTS)]}+{v}" for i, v in enumerate(variants)]


def plan_clips(voices: list[str], reps: int, new_word: str | None, seed: int) -> list[Clip]:
    """Per speaker: each keyword ``reps`` times, ``reps`` unknown words, ``reps`` silences (and the new word)."""
    rng = np.random.default_rng(seed)
    clips = []
    for voice in voices:
        words = [(w, LABELS.index(w)) for w in KEYWORDS for _ in range(reps)]
        words += [(str(w), UNKNOWN) for w in rng.choice(UNKNOWN_WORDS, reps, replace=False)]
        words += [("", SILENCE)] * reps
        words += [(new_word, len(LABELS))] * reps if new_word else []
        for word, label in words:
            clips.append(Clip(word, label, voice, int(rng.integers(25, 76)), int(rng.integers(120, 201)),
                              SNR_DB[int(rng.integers(len(SNR_DB)))], int(rng.integers(2**31))))
    return clips


def speak(clip: Clip, work: Path) -> np.ndarray:
    """The word as float samples at 16 kHz, leading and trailing silence trimmed (espeak-ng's 22.05 kHz output
    resampled)."""
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    out = work / f"{clip.seed}.wav"
    subprocess.run(["espeak-ng", "-v", clip.speaker, "-p", str(clip.pitch), "-s", str(clip.speed), "-w", str(out),
                    clip.word], check=True, capture_output=True)
    rate, x = wavfile.read(out)
    out.unlink()
    assert rate == ESPEAK_RATE, f"espeak-ng wrote {rate} Hz"
    x = resample_poly(x.astype(np.float64) / 32768, 160, 441)
    loud = np.flatnonzero(np.abs(x) > 0.02 * np.abs(x).max())
    return x[loud[0]: loud[-1] + 1] if len(loud) else x


def noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    w = rng.normal(0, 1, n)
    if kind == "brown":
        w = np.cumsum(w)
        w -= np.linspace(w[0], w[-1], n)
    return w / np.sqrt(np.mean(w**2))


def render(clip: Clip, work: Path) -> np.ndarray:
    """The clip's 1 s of int16 samples: the word at a random offset, plus noise at its SNR (silence: noise only)."""
    rng = np.random.default_rng(clip.seed)
    x = np.zeros(RATE)
    if clip.word:
        w = speak(clip, work)[:RATE]
        start = int(rng.integers(0, RATE - len(w) + 1))
        x[start: start + len(w)] = w / np.abs(w).max() * rng.uniform(0.3, 0.9)
        if clip.snr_db is not None:
            power = np.mean(x[start: start + len(w)] ** 2)  # the word's power where it is spoken
            x += noise(str(rng.choice(["white", "brown"])), RATE, rng) * np.sqrt(power / 10 ** (clip.snr_db / 10))
    else:
        x += noise(str(rng.choice(["white", "brown"])), RATE, rng) * rng.uniform(0.001, 0.05)
    return np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)


def build(clips: list[Clip], scale: float, zero_point: int, workers: int = 2) -> dict[str, np.ndarray]:
    """The clips as an .npz's arrays: ``x`` int8 (N,49,10,1) MFCCs quantized with (scale, zero_point), ``y``
    labels, ``speaker`` and ``word`` per clip, ``audio`` int16 (N,16000)."""
    from tinytrain.audio import mfcc, quantize_features

    with tempfile.TemporaryDirectory(prefix="kws_") as tmp, ThreadPoolExecutor(workers) as pool:
        audio = np.stack(list(pool.map(lambda c: render(c, Path(tmp)), clips)))
    x = np.stack([quantize_features(mfcc(a), scale, zero_point) for a in audio])[..., None]
    return {"x": x, "y": np.array([c.label for c in clips], np.int64), "speaker": np.array([c.speaker for c in clips]),
            "word": np.array([c.word for c in clips]), "audio": audio}
