"""The field study's machine-audio scenario (``machine-mount``, issue 41): the anomaly demo's synthesized machine
(benchmarks/ad_demo.py's ``machine_clip``, its front end and faults, reused) heard by ad01, the MLPerf Tiny
autoencoder, through the anomaly field runtime (tinytrain/field_runtime/anomaly.py) on the host C.

The stream (per stream order, its own clips): ``CLIPS`` normal clips of the machine as installed, then as many after
a new mounting (``remount``: a structural resonance near 2.4 kHz, +12 dB, and a noise floor eight times the old, the
same for every clip after the shift), 5 frames x 128 mels per window, every window of a clip; half the windows
(every other one) labelled normal (y 0: learn it), the rest scored only. Test: ``TEST_NORMAL`` normal clips and
``TEST_FAULTY`` of each of the demo's three faults, as installed and remounted (seed 1, the same for every order);
a clip's score is the mean of its windows' integer anomaly scores (the DCASE rule, ad_demo.clip_scores); ROC AUC of
normal vs anomalous clips. Configurations: ``none`` (no learning, the pretrained ToyCar model), ``learn`` (each
normal sample once, no buffer), ``learn+replay`` (and a reservoir of 64 normal windows, K 2). Offline: the same plan
from the same start, 3 shuffled epochs over the same labelled windows (tinytrain.train, host C). Drift delay: the
sample of the first alarm on the score after the shift, minus the shift's.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

import ad_demo
from tinytrain.field_runtime.anomaly import AnomalyRuntime, anomaly_program
from tinytrain.field_runtime.anomaly_run import run_anomaly_stream
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.step import SimStep
from tinytrain.metrics import roc_auc
from tinytrain.ops.sgd_update import Rounding
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import preset

CLIPS, TEST_NORMAL, TEST_FAULTY = 24, 20, 7
UPDATE, LR, EPOCHS = "last-k:2", 0.002, 3
CONFIGS = {"none": None, "learn": dict(replay=0, replay_k=0), "learn+replay": dict(replay=64, replay_k=2)}
DRIFT = dict(drift_warmup=128, guard=0)


def remount(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The machine after a new mounting: a resonance near 2.4 kHz (+12 dB at its peak) and a noise floor 8x the old."""
    f = np.fft.rfftfreq(len(audio), 1 / ad_demo.RATE)
    gain = 1 + (10 ** (12 / 20) - 1) * np.exp(-((f - 2400.0) / 250.0) ** 2)
    out = np.fft.irfft(np.fft.rfft(audio) * gain, len(audio))
    return out + rng.normal(0, 8 * 0.15 * 0.05 * 0.5, len(audio))


def clip_windows(graph, rng, kinds: list[str], shifted: bool, bank) -> list[np.ndarray]:
    """The quantizable windows of one clip per kind ("normal" or one of ad_demo.FAULTS)."""
    out = []
    for k in kinds:
        audio = ad_demo.machine_clip(rng, None if k == "normal" else k)
        audio = remount(audio, rng) if shifted else audio
        out.append(ad_demo.quantizable(ad_demo.windows(ad_demo.log_mel(audio, bank)), graph)[0])
    return out


def test_sets(graph, bank) -> dict:
    rng = np.random.default_rng(1)
    kinds = ["normal"] * TEST_NORMAL + [f for f in ad_demo.FAULTS for _ in range(TEST_FAULTY)]
    anomalous = np.array([k != "normal" for k in kinds], np.int64)
    return {name: (clip_windows(graph, rng, kinds, name == "remounted", bank), anomalous)
            for name in ("installed", "remounted")}


def stream(graph, bank, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(float windows in arrival order, labels 0 / -1, the index of the first remounted window)."""
    rng = np.random.default_rng(100 + seed)
    before = np.concatenate(clip_windows(graph, rng, ["normal"] * CLIPS, False, bank))
    after = np.concatenate(clip_windows(graph, rng, ["normal"] * CLIPS, True, bank))
    x = np.concatenate([before, after])
    return x, np.where(np.arange(len(x)) % 2 == 0, 0, -1), len(before)


def clip_auc(rt, program, clips: list[np.ndarray], anomalous: np.ndarray) -> float:
    from tinytrain.data import model_inputs

    scores = rt.scores(model_inputs(program.graph, np.concatenate(clips)))
    return roc_auc(ad_demo.clip_scores(scores.astype(np.float64), clips), anomalous)


def _program(graph, cfg: dict | None):
    plan = replace(preset(UPDATE, graph, lr=LR), loss="mse")
    settings = dict(replay=0, replay_k=0) if cfg is None else cfg
    return anomaly_program(graph, plan, FieldConfig(**settings, **DRIFT), UpdateConfig(rounding=Rounding.STOCHASTIC))


def run_config(graph, name: str, xq: np.ndarray, y: np.ndarray, shift: int, tests: dict, engine: str = "c") -> dict:
    """One stream through one configuration: AUCs at the shift and at the end, drift delay, the saved bytes."""
    program = _program(graph, CONFIGS[name])
    labels = y if CONFIGS[name] is not None else np.full_like(y, -1)
    t0 = time.time()
    aucs = {}

    def at(rt, when: str) -> None:
        aucs.update({f"{k}_{when}": clip_auc(rt, program, *tests[k]) for k in tests})

    from tinytrain.field_runtime.anomaly_run import anomaly_runtime

    rt = anomaly_runtime(program, engine)
    first = run_anomaly_stream(program, xq[:shift], labels[:shift], _empty(program), rt=rt, every=shift)
    at(rt, "shift")
    res = run_anomaly_stream(program, xq[shift:], labels[shift:], _empty(program), rt=rt, every=len(y) - shift)
    at(rt, "end")
    alarms = first.alarms + [shift + a for a in res.alarms]
    after = [a for a in alarms if a >= shift]
    return {"scenario": "machine-mount", "config": name, **aucs, "labelled": int((labels == 0).sum()),
            "samples": len(y), "alarms": alarms, "delay": after[0] - shift if after else None,
            "false_alarms": len(alarms) - len(after), "state": res.state, "seconds": round(time.time() - t0, 1),
            "memory": res.memory}


def _empty(program):
    return np.zeros((0, program.width), np.int8), np.zeros(0, np.int64)


def offline(graph, xf: np.ndarray, y: np.ndarray, tests: dict) -> dict:
    """The same plan, 3 shuffled epochs over the labelled windows (tinytrain.train, host C), its test AUCs."""
    import tinytrain
    from tinytrain.api import evaluate

    trained = tinytrain.train(graph, (xf[y == 0], None), update=UPDATE, lr=LR, epochs=EPOCHS, loss="mse",
                              engine="c")
    out = {}
    for k, (clips, anomalous) in tests.items():
        errors = evaluate(graph, (np.concatenate(clips), None), state=trained.state, loss="mse", engine="c").errors
        out[f"{k}_offline"] = roc_auc(ad_demo.clip_scores(errors, clips), anomalous)
    return out


def machine_rows(graph, seeds: int, exact: bool) -> tuple[list[dict], list[dict]]:
    """(one row per stream order and configuration, the simulator == host C checks of the first order)."""
    from tinytrain.data import model_inputs

    bank = ad_demo.mel_filterbank()
    tests = test_sets(graph, bank)
    rows, checks = [], []
    for seed in range(seeds):
        xf, y, shift = stream(graph, bank, seed)
        xq = model_inputs(graph, xf)
        off = offline(graph, xf, y, tests)
        for name in CONFIGS:
            rows.append({**run_config(graph, name, xq, y, shift, tests), **off, "seed": seed})
            r = rows[-1]
            print(f"{seed} machine-mount {name:13} AUC remounted {r['remounted_shift']:.3f} -> {r['remounted_end']:.3f}"
                  f" (offline {r['remounted_offline']:.3f}) alarms {r['alarms']} ({r['seconds']} s)", flush=True)
        if exact and seed == 0:
            sim = _sim_state(graph, xq, y)
            checks.append({"scenario": "machine-mount", "identical": sim == rows[-1]["state"]})
            print("machine-mount simulator == host C:", checks[-1]["identical"], flush=True)
    return rows, checks


def _sim_state(graph, xq: np.ndarray, y: np.ndarray) -> bytes:
    program = _program(graph, CONFIGS["learn+replay"])
    rt = AnomalyRuntime(program, SimStep(program.graph, program.tg))
    for x, label in zip(xq, y):
        rt.learn(x, 0) if label == 0 else rt.observe(x)
    return rt.state_bytes()


def machine_study(graph, seeds: int, exact: bool, t0: float) -> dict:
    """The scenario over ``seeds`` stream orders, written to results/field_machine.{md,json}."""
    from common import write_results

    rows, checks = machine_rows(graph, seeds, exact)
    for r in rows:
        r.pop("state")
    lines = ["# Field study: machine audio (ad01, anomaly field runtime)", "",
             f"{seeds} stream orders, {CLIPS} normal clips installed then {CLIPS} remounted (windows of 640, every "
             f"other one labelled normal); test {TEST_NORMAL} normal + {3 * TEST_FAULTY} anomalous clips each way; "
             f"plan {UPDATE} lr {LR}; host C. Clip ROC AUC, mean over the orders (sd).", "",
             "| config | installed AUC at shift | remounted AUC at shift | remounted AUC at end | installed AUC at end "
             "| offline remounted | drift alarms (sample) | delay per order | false alarms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in CONFIGS:
        rs = [r for r in rows if r["config"] == name]
        m = {k: (np.mean([r[k] for r in rs]), np.std([r[k] for r in rs])) for k in
             ("installed_shift", "remounted_shift", "remounted_end", "installed_end", "remounted_offline")}
        cell = " | ".join(f"{a:.3f} ({b:.3f})" for a, b in m.values())
        lines.append(f"| {name} | {cell} | {'; '.join(str(r['alarms']) for r in rs)} | "
                     f"{'; '.join('none' if r['delay'] is None else str(r['delay']) for r in rs)} | "
                     f"{sum(r['false_alarms'] for r in rs)} |")
    lines += ["", f"Simulator == host C (learn+replay, first order, final tt_field_save bytes): "
              f"{sum(c['identical'] for c in checks)} of {len(checks)}.", "",
              f"Wall time {time.time() - t0:.0f} s.", ""]
    record = dict(rows=rows, exact=checks, seeds=seeds, seconds=round(time.time() - t0, 1))
    write_results("field_machine", "\n".join(lines), record)
    print("\n".join(lines))
    return record
