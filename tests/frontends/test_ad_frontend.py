"""The AD demo's log-mel front end (benchmarks/ad_demo.py): the Slaney mel scale, the filterbank's shape and
normalization, the STFT framing and the 5-frame windows' layout."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ad_demo  # noqa: E402


def test_slaney_mel_scale():
    assert ad_demo.hz_to_mel(1000.0) == pytest.approx(15.0)
    assert ad_demo.hz_to_mel(200.0) == pytest.approx(3.0)  # linear below 1 kHz
    assert ad_demo.hz_to_mel(6400.0) == pytest.approx(15.0 + 27.0)  # 27 mel per factor 6.4 above
    f = np.array([0.0, 440.0, 999.0, 1000.0, 3000.0, 8000.0])
    assert np.allclose(ad_demo.mel_to_hz(ad_demo.hz_to_mel(f)), f)


def test_filterbank_triangles_have_unit_area_in_hz():
    bank = ad_demo.mel_filterbank()
    assert bank.shape == (128, 513) and (bank >= 0).all()
    hz = np.linspace(0, 8000, 513)
    area = bank.sum(axis=1) * (hz[1] - hz[0])  # 2 / width x the triangle's area (width / 2) = 1
    assert np.allclose(area[20:], 1.0, rtol=0.1) and np.allclose(area[80:], 1.0, rtol=0.02)  # low ones: few bins
    assert (np.diff(bank.argmax(axis=1)) >= 0).all()  # centres rise with the band index


def test_log_mel_frames_and_windows():
    bank = ad_demo.mel_filterbank()
    t = np.arange(16000) / 16000
    mel = ad_demo.log_mel(np.sin(2 * np.pi * 1000 * t), bank)
    assert mel.shape == (1 + 16000 // 512, 128)  # centred frames
    peak = int(np.median(mel.argmax(axis=1)))
    assert abs(ad_demo.mel_to_hz(np.linspace(0, ad_demo.hz_to_mel(8000), 130))[peak + 1] - 1000) < 60
    w = ad_demo.windows(mel)
    assert w.shape == (len(mel) - 4, 640)
    assert np.array_equal(w[3, 128 * 2: 128 * 3], mel[5])  # frame-major: values 128 t.. are frame t of the window
