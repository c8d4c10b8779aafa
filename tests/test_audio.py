"""The MLPerf Tiny KWS MFCC front end (tinytrain/audio.py) against a float64 formula written out term by term."""

import math

import numpy as np
import pytest

from tinytrain.audio import MfccConfig, mel_matrix, mfcc, quantize_features
from tinytrain.errors import UsageError


def _tri(mel: float, lo: float, mid: float, hi: float) -> float:
    return max(0.0, min((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)))


def _formula(samples: np.ndarray, cfg: MfccConfig) -> np.ndarray:
    """The reference pipeline one frame, one bin, one coefficient at a time (plain DFT sums, no matrices)."""
    x = [float(v) for v in samples[: cfg.clip_samples]]
    peak = max(x)
    x = [v / peak for v in x] + [0.0] * (cfg.clip_samples - len(x))
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)  # noqa: E731
    edges = [mel(cfg.lower_hz) + i * (mel(cfg.upper_hz) - mel(cfg.lower_hz)) / (cfg.mel_bins + 1)
             for i in range(cfg.mel_bins + 2)]
    n_bins = cfg.fft // 2 + 1
    out = np.zeros((cfg.frames, cfg.coefficients))
    for t in range(cfg.frames):
        frame = [x[t * cfg.step + i] * (0.5 - 0.5 * math.cos(2 * math.pi * i / cfg.window)) for i in range(cfg.window)]
        spectrum = []
        for k in range(n_bins):
            re = sum(v * math.cos(2 * math.pi * k * i / cfg.fft) for i, v in enumerate(frame))
            im = sum(v * math.sin(2 * math.pi * k * i / cfg.fft) for i, v in enumerate(frame))
            spectrum.append(math.hypot(re, im))
        log_mel = []
        for m in range(cfg.mel_bins):
            energy = sum(spectrum[k] * _tri(mel(k * cfg.sample_rate / cfg.fft), *edges[m: m + 3])
                         for k in range(1, n_bins))
            log_mel.append(math.log(energy + cfg.log_offset))
        for c in range(cfg.coefficients):
            s = sum(2 * v * math.cos(math.pi * c * (2 * n + 1) / (2 * cfg.mel_bins)) for n, v in enumerate(log_mel))
            out[t, c] = s / math.sqrt(2 * cfg.mel_bins)
    return out


def test_mfcc_equals_the_term_by_term_formula():
    cfg = MfccConfig(clip_samples=800)  # 2 frames keep the pure-Python formula fast; every other setting is MLPerf's
    rng = np.random.default_rng(0)
    t = np.arange(1200) / 16000
    samples = (8000 * np.sin(2 * np.pi * 440 * t) + rng.normal(0, 500, t.size)).astype(np.int16)[:700]
    got = mfcc(samples, cfg)
    assert got.shape == (2, 10) and got.dtype == np.float32
    np.testing.assert_allclose(got, _formula(samples, cfg), rtol=1e-5, atol=1e-4)  # float32 output of float64 work


def test_mlperf_shape_and_a_tone_lands_in_its_mel_band():
    cfg = MfccConfig()
    assert cfg.frames == 49 and mel_matrix(cfg).shape == (257, 40)
    assert np.all(mel_matrix(cfg)[0] == 0)  # no weight on DC
    t = np.arange(16000) / 16000
    tone = (10000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    assert mfcc(tone).shape == (49, 10)
    spectrum = np.abs(np.fft.rfft(np.sin(2 * np.pi * 1000 * t[:480]) * np.hanning(482)[1:-1], 512))
    centers = np.argmax(mel_matrix(cfg), axis=0) * 16000 / 512
    assert abs(centers[np.argmax(spectrum @ mel_matrix(cfg))] - 1000) < 100


def test_short_clips_are_padded_and_the_peak_normalizes():
    t = np.arange(8000) / 16000
    half = (3000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    np.testing.assert_array_equal(mfcc(half), mfcc((half.astype(np.int32) * 2).astype(np.int16)))  # scale-free
    np.testing.assert_array_equal(mfcc(half), mfcc(np.r_[half, np.zeros(8000, np.int16)]))
    with pytest.raises(UsageError, match="no samples"):
        mfcc(np.zeros(0, np.int16))
    with pytest.raises(UsageError, match="largest sample"):
        mfcc(np.zeros(100, np.int16))


def test_quantize_features_rounds_half_away_and_clamps():
    q = quantize_features(np.array([0.25, -0.25, 0.75, 100.0, -100.0]), 0.5, 3)
    assert q.tolist() == [4, 2, 5, 127, -128]


def test_the_clip_normalization_is_a_shift_of_coefficient_0():
    """What docs/guide/keyword-spotting-demo.md tells a streaming firmware: features of the raw samples, then
    coefficient 0 minus sqrt(80) * log(peak), equal the reference's peak-normalized ones (away from the 1e-6 floor)."""
    from tinytrain.audio import dct_matrix

    cfg = MfccConfig()
    x = np.random.default_rng(1).normal(0, 3000, 16000).astype(np.int16)
    raw = x.astype(np.float64)
    frames = raw[np.arange(cfg.frames)[:, None] * cfg.step + np.arange(cfg.window)[None, :]]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(cfg.window) / cfg.window)
    streamed = np.log(np.abs(np.fft.rfft(frames * hann, cfg.fft)) @ mel_matrix(cfg) + cfg.log_offset) @ dct_matrix(cfg)
    streamed[:, 0] -= np.sqrt(80) * np.log(raw.max())
    np.testing.assert_allclose(streamed, mfcc(x), atol=1e-4)
