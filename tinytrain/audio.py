"""The MLPerf Tiny keyword-spotting MFCC front end in numpy (docs/guide/keyword-spotting-demo.md).

What the DS-CNN reference model (``kws_ref_model.tflite``, input 49x10x1) was trained on: mlcommons/tiny
``keyword_spotting/get_dataset.py``, its TensorFlow path without ``audio_microfrontend``:

1. a clip of int16 samples at 16 kHz is divided by its maximum (``wav / reduce_max(wav)``) and zero-padded or cut
   to 1 s (16,000 samples);
2. frames of 30 ms (480 samples) every 20 ms (320 samples), no padding: 49 frames; a periodic Hann window;
   a 512-point real FFT (the next power of two), the magnitude ``|X|`` (not the power): 257 bins;
3. 40 triangular mel filters between 20 and 4000 Hz on the HTK mel scale (1127 ln(1 + f / 700)), built as
   ``tf.signal.linear_to_mel_weight_matrix`` builds them: bin k sits at k * 8000 / 256 Hz, the DC bin gets no
   weight, the triangles are linear in mel;
4. ``log(mel + 1e-6)``;
5. ``tf.signal.mfccs_from_log_mel_spectrograms``: an unnormalized DCT-II (2 sum x_n cos(pi k (2n + 1) / 2N)) times
   1 / sqrt(2N), N = 40; the first 10 coefficients.

The result (49, 10) float32 is what the model's input quantization (scale, zero point) turns into int8
(``quantize_features``). TensorFlow computes in float32, this module in float64: a feature can differ in its
last float32 bits, and rarely by one LSB after quantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import UsageError


@dataclass(frozen=True)
class MfccConfig:
    """The MLPerf Tiny KWS settings (get_dataset.py / kws_util.py defaults)."""

    sample_rate: int = 16000
    clip_samples: int = 16000  # 1 s
    window: int = 480  # 30 ms
    step: int = 320  # 20 ms
    fft: int = 512
    mel_bins: int = 40
    lower_hz: float = 20.0
    upper_hz: float = 4000.0
    coefficients: int = 10
    log_offset: float = 1e-6

    @property
    def frames(self) -> int:
        return 1 + (self.clip_samples - self.window) // self.step


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """The HTK mel scale, as tf.signal uses it."""
    return 1127.0 * np.log1p(np.asarray(f, np.float64) / 700.0)


def mel_matrix(cfg: MfccConfig = MfccConfig()) -> np.ndarray:
    """(fft/2 + 1, mel_bins) weights: tf.signal.linear_to_mel_weight_matrix in float64."""
    bins = cfg.fft // 2 + 1
    hz = np.linspace(0.0, cfg.sample_rate / 2, bins)[1:]  # the DC bin is left out, then given zero weight
    mels = hz_to_mel(hz)[:, None]
    edges = np.linspace(hz_to_mel(cfg.lower_hz), hz_to_mel(cfg.upper_hz), cfg.mel_bins + 2)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    weights = np.maximum(0.0, np.minimum((mels - lower) / (center - lower), (upper - mels) / (upper - center)))
    return np.vstack([np.zeros((1, cfg.mel_bins)), weights])


def dct_matrix(cfg: MfccConfig = MfccConfig()) -> np.ndarray:
    """(mel_bins, coefficients): mfccs_from_log_mel_spectrograms' DCT-II scaled by 1 / sqrt(2 N)."""
    n = np.arange(cfg.mel_bins)[:, None]
    k = np.arange(cfg.coefficients)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * cfg.mel_bins)) / np.sqrt(2.0 * cfg.mel_bins)


def normalized_clip(samples: np.ndarray, cfg: MfccConfig = MfccConfig()) -> np.ndarray:
    """int16 (or float) samples -> float64, divided by their maximum, zero-padded or cut to clip_samples."""
    x = np.asarray(samples, np.float64).ravel()
    if x.size == 0:
        raise UsageError("audio clip: no samples")
    peak = x.max()
    if peak <= 0:
        raise UsageError("audio clip: its largest sample is not positive; the reference divides by it")
    x = x[: cfg.clip_samples] / peak
    return np.pad(x, (0, cfg.clip_samples - len(x)))


def mfcc(samples: np.ndarray, cfg: MfccConfig = MfccConfig()) -> np.ndarray:
    """One clip of 16 kHz samples -> (frames, coefficients) float32 MFCCs (the module docstring's steps)."""
    x = normalized_clip(samples, cfg)
    starts = np.arange(cfg.frames) * cfg.step
    frames = x[starts[:, None] + np.arange(cfg.window)[None, :]]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(cfg.window) / cfg.window)  # periodic
    magnitude = np.abs(np.fft.rfft(frames * hann, cfg.fft))
    log_mel = np.log(magnitude @ mel_matrix(cfg) + cfg.log_offset)
    return (log_mel @ dct_matrix(cfg)).astype(np.float32)


def quantize_features(features: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float features -> int8 with a model input's quantization: clamp(round(f / scale) + zero_point), ties
    away from zero (TFLite's Quantize)."""
    v = np.asarray(features, np.float64) / scale
    q = np.sign(v) * np.floor(np.abs(v) + 0.5) + zero_point
    return np.clip(q, -128, 127).astype(np.int8)
