"""`tinytrain plan 2> plan.log`: the bars (tqdm's carriage returns) stay off a stderr that is not a terminal, as
train's do (cli_train.py); each phase's one line stays (`plan: NAME: done / total in S s`)."""

import io
import sys
import time

from tinytrain.search.phases import Clock


def test_no_bar_in_a_log_file_but_the_phase_line(monkeypatch):
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", log)
    clock = Clock(time.time(), None, progress=True)
    with clock.phase("finalists", 3) as phase:
        for _ in range(3):
            phase.update()
    text = log.getvalue()
    assert "\r" not in text and "it/s" not in text
    assert text.startswith("plan: finalists: 3 / 3 in ")
