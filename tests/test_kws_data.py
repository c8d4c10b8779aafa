"""The espeak-ng keyword-clip builder of the KWS demo (benchmarks/common/kws_data.py) on a tiny case."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from common import kws_data  # noqa: E402


def test_speakers_of_adaptation_and_test_share_no_voice():
    adapt, test = kws_data.speakers(kws_data.ADAPT_VARIANTS), kws_data.speakers(kws_data.TEST_VARIANTS)
    assert not set(adapt) & set(test)
    assert not {s.split("+")[1] for s in adapt} & {s.split("+")[1] for s in test}


def test_clip_plan_covers_every_class_per_speaker():
    clips = kws_data.plan_clips(["en-us+m1"], 2, "lights", 0)
    labels = np.bincount([c.label for c in clips], minlength=13)
    assert labels.tolist() == [2] * 13
    assert all(c.word in kws_data.UNKNOWN_WORDS for c in clips if c.label == kws_data.UNKNOWN)
    assert clips == kws_data.plan_clips(["en-us+m1"], 2, "lights", 0)  # reproducible


@pytest.mark.slow
def test_tiny_dataset_is_int8_mfccs_of_one_second_clips():
    if not kws_data.espeak_available():
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng; scripts/setup.sh installs it)")
    clips = [c for c in kws_data.plan_clips(["en-gb+f2"], 1, None, 3) if c.word in ("yes", "")]
    d = kws_data.build(clips, 0.584703, 83, workers=1)
    assert d["x"].shape == (2, 49, 10, 1) and d["x"].dtype == np.int8
    assert d["audio"].shape == (2, 16000) and d["audio"].dtype == np.int16
    assert d["y"].tolist() == [kws_data.LABELS.index("yes"), kws_data.SILENCE]
    word = np.abs(d["audio"][0].astype(np.float64))
    assert word.max() > 5000 and np.count_nonzero(word > 0.1 * word.max()) < 16000  # a spoken word, not noise
    assert np.array_equal(kws_data.build(clips, 0.584703, 83, workers=1)["x"], d["x"])  # deterministic
