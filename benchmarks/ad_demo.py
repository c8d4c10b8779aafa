"""The MLPerf Tiny anomaly-detection demo (issue 29): the autoencoder ad01 learns a new machine's normal sound on
the device (host C engine, MSE loss) and its anomaly ROC AUC is measured before and after.

    PYTHONPATH=. .venv/bin/python benchmarks/ad_demo.py [--lr 0.002] [--epochs 2]

What is synthetic (everything but the model): the machine sounds are made in numpy, reproducibly (seed 0). A
machine = a rotation frequency f0 with harmonics under a fixed amplitude profile, a resonance, and coloured noise;
each clip draws a load (f0 ±2 %), a noise level (x0.7-1.4), a gain (±4 dB) and the harmonics' phases and levels
(±5 %). Anomalies are three kinds of fault: shifted harmonics (f0 up 5 %, the 3rd-5th harmonics 1.6 times
louder), clicks (4 short decaying impulses at random times), and bearing-like modulation (a 3.1 kHz resonance
switched on and off at 37 Hz, a ball-pass rate). The pretrained ad01
(MLPerf Tiny, trained on DCASE 2020 ToyCar) has never heard this machine.

Front end (the model's own, the DCASE 2020 task 2 baseline's, in numpy): 16 kHz audio; STFT with a periodic Hann
window of n_fft = 1024, hop 512, centred frames (the signal padded with n_fft/2 zeros at each end); power
spectrum |X|^2; 128 mel bands from a Slaney-style filterbank (``mel_filterbank``: the Slaney mel scale, linear
below 1 kHz and logarithmic above, triangular filters between 0 Hz and 8 kHz, each scaled by 2 / its width in Hz,
as librosa's default ``norm='slaney'``); log-mel = 10 log10(mel power + 1e-10) (DCASE: 20 / power * log10 with
power 2); 5 consecutive frames side by side -> 640 values (frame-major: values 128 t .. 128 t + 127 are frame
t of the window); every window of a clip (hop one frame). The float windows are quantized with the model's input
scale and zero point by tinytrain's DATA loader; the few values outside the model's input range are clipped
here first (counted in the results). A clip's anomaly score is the mean reconstruction error of its windows.

Writes benchmarks/results/ad_demo.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
MODEL = ROOT.parent / "shared" / "models" / "ad01_int8.tflite"
OUT = ROOT / "benchmarks" / "results"
RATE, N_FFT, HOP, N_MELS, FRAMES = 16000, 1024, 512, 128, 5
SECONDS = 1.0
F0 = 97.0  # the new machine's rotation frequency, Hz
FAULTS = ("shifted harmonics", "clicks", "bearing modulation")


def hz_to_mel(f):
    """The Slaney mel scale: linear (3 mel per 200 Hz) below 1 kHz, logarithmic (27 mel per factor 6.4) above."""
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(f, 1e-12) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, lin)


def mel_to_hz(m):
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((m - 15.0) * (np.log(6.4) / 27.0)), m * (200.0 / 3))


def mel_filterbank(rate: int = RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters, equally spaced on the Slaney mel scale from 0 to rate / 2,
    each scaled by 2 / (its upper edge - its lower edge) in Hz (equal area)."""
    fft_hz = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(rate / 2), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rise = (fft_hz - lower) / (centre - lower)
    fall = (upper - fft_hz) / (upper - centre)
    return np.maximum(0, np.minimum(rise, fall)) * (2.0 / (upper - lower))


def log_mel(audio: np.ndarray, bank: np.ndarray) -> np.ndarray:
    """(frames, 128) log-mel of a clip: centred frames (zero padding), periodic Hann, |STFT|^2, mel, 10 log10."""
    padded = np.pad(audio, N_FFT // 2)
    n = 1 + (len(padded) - N_FFT) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    frames = np.stack([padded[i * HOP: i * HOP + N_FFT] for i in range(n)]) * window
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return 10.0 * np.log10(power @ bank.T + 1e-10)


def windows(mel: np.ndarray) -> np.ndarray:
    """Every 5 consecutive frames side by side: (frames - 4, 640), frame-major."""
    n = len(mel) - FRAMES + 1
    return np.stack([mel[i: i + FRAMES].reshape(-1) for i in range(n)])


def machine_clip(rng: np.random.Generator, fault: str | None = None) -> np.ndarray:
    """One second of the machine: harmonics of f0 under a fixed profile, a resonance and coloured noise, at a load
    (f0 ±2 %), noise level (x0.7-1.4) and gain (±4 dB) drawn per clip; with a fault, one of FAULTS."""
    t = np.arange(int(RATE * SECONDS)) / RATE
    f0 = F0 * (1 + rng.uniform(-0.02, 0.02)) * (1.05 if fault == "shifted harmonics" else 1.0)
    k = np.arange(1, 40)
    profile = 1.0 / k ** 0.8 * (1 + 0.5 * np.exp(-((k * F0 - 1200) / 300.0) ** 2))
    if fault == "shifted harmonics":
        profile = profile * np.where((k >= 3) & (k <= 5), 1.6, 1.0)
    profile = profile * (1 + rng.uniform(-0.05, 0.05, len(k)))
    phases = rng.uniform(0, 2 * np.pi, len(k))
    keep = k * f0 < RATE / 2
    audio = (profile[keep, None] * np.sin(2 * np.pi * f0 * k[keep, None] * t + phases[keep, None])).sum(axis=0)
    noise = np.cumsum(rng.normal(0, 1, len(t))) * 0.02
    noise = noise - np.convolve(noise, np.ones(64) / 64, "same") + rng.normal(0, 0.15, len(t))
    audio = audio + noise * rng.uniform(0.7, 1.4)
    if fault == "clicks":
        for start in rng.integers(0, len(t) - 400, 4):
            audio[start: start + 400] += 1.5 * rng.normal(0, 1, 400) * np.exp(-np.arange(400) / 60.0)
    if fault == "bearing modulation":
        carrier = np.sin(2 * np.pi * 3100 * t) * (1 + np.sign(np.sin(2 * np.pi * 37 * t))) * 0.2
        audio = audio + carrier * (1 + 0.3 * rng.normal(0, 1, len(t)))
    return audio * 0.05 * 10 ** (rng.uniform(-4, 4) / 20)


def clip_set(rng, n_normal: int, n_faulty: int, bank) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """(the windows of each clip, its anomaly label, its kind): n_normal normal clips, n_faulty of each fault."""
    kinds = ["normal"] * n_normal + [f for f in FAULTS for _ in range(n_faulty)]
    clips = [windows(log_mel(machine_clip(rng, None if k == "normal" else k), bank)) for k in kinds]
    return clips, np.array([k != "normal" for k in kinds], np.int64), kinds


def quantizable(x: np.ndarray, graph) -> tuple[np.ndarray, int]:
    """The windows clipped to the model's input range (the DATA loader refuses values outside it): (x, clipped)."""
    q = graph.tensors[graph.inputs[0]].quant
    lo, hi = (np.float32((v - q.zp) * q.s) for v in (-128, 127))
    x = x.astype(np.float32)
    clipped = int(((x < lo) | (x > hi)).sum())
    return np.clip(x, lo, hi), clipped


def clip_scores(errors: np.ndarray, clips: list[np.ndarray]) -> np.ndarray:
    """A clip's anomaly score: the mean reconstruction error of its windows."""
    bounds = np.cumsum([0] + [len(c) for c in clips])
    return np.array([errors[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])])


def scores(graph, state, x, clips, kinds, anomaly) -> dict:
    """Per-window errors, per-clip scores and the ROC AUCs (all faults, and each fault against the normal clips)."""
    from tinytrain.api import evaluate
    from tinytrain.metrics import roc_auc

    result = evaluate(graph, (x, None), state=state, loss="mse", engine="c")
    per_clip = clip_scores(result.errors, clips)
    kinds = np.array(kinds)
    by_fault = {f: roc_auc(per_clip[(kinds == f) | (kinds == "normal")], anomaly[(kinds == f) | (kinds == "normal")])
                for f in FAULTS}
    return {"window_error_mean": float(result.errors.mean()), "clip_scores": per_clip.tolist(),
            "auc": roc_auc(per_clip, anomaly), "auc_by_fault": by_fault,
            "normal_error": float(per_clip[anomaly == 0].mean()), "anomalous_error": float(per_clip[anomaly == 1].mean())}


def figure(before: dict, after: dict, anomaly: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    for ax, res, title in ((axes[0], before, "before (pretrained ad01)"), (axes[1], after, "after on-device training")):
        s = np.array(res["clip_scores"])
        bins = np.linspace(s.min(), s.max(), 30)
        ax.hist(s[anomaly == 0], bins, alpha=0.6, label="normal clips")
        ax.hist(s[anomaly == 1], bins, alpha=0.6, label="anomalous clips")
        ax.set_title(f"{title}: ROC AUC {res['auc']:.3f}")
        ax.set_xlabel("anomaly score (mean reconstruction error of a clip's windows)")
        ax.legend()
    axes[0].set_ylabel("clips")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--update", default="last-k:2")
    ap.add_argument("--train-clips", type=int, default=40)
    ap.add_argument("--test-clips", type=int, default=30, help="normal test clips (and as many of each fault / 3)")
    args = ap.parse_args()
    import tinytrain

    t0 = time.time()
    graph = tinytrain.load_model(MODEL)
    bank, rng = mel_filterbank(), np.random.default_rng(0)
    train_clips, _, _ = clip_set(rng, args.train_clips, 0, bank)
    test_clips, anomaly, kinds = clip_set(rng, args.test_clips, args.test_clips // 3, bank)
    x_train, clipped_train = quantizable(np.concatenate(train_clips), graph)
    x_test, clipped_test = quantizable(np.concatenate(test_clips), graph)
    before = scores(graph, None, x_test, test_clips, kinds, anomaly)
    trained = tinytrain.train(graph, (x_train, None), update=args.update, lr=args.lr, epochs=args.epochs,
                              loss="mse", engine="c")
    after = scores(graph, trained.state, x_test, test_clips, kinds, anomaly)
    memory = tinytrain.compile(graph, update=args.update, loss="mse", sram="256k").report
    command = "PYTHONPATH=. .venv/bin/python benchmarks/ad_demo.py " + " ".join(sys.argv[1:])
    result = {"command": command.strip(), "model": "ad01_int8.tflite (MLPerf Tiny AD, FC 640-128x4-8-128x4-640)",
              "update": args.update, "lr": args.lr, "epochs": args.epochs, "engine": "c", "loss": "mse",
              "train_clips": args.train_clips, "train_windows": int(len(x_train)), "steps": trained.steps,
              "test_clips": {k: kinds.count(k) for k in ("normal", *FAULTS)}, "test_windows": int(len(x_test)),
              "clipped_values": {"train": clipped_train, "test": clipped_test,
                                 "of": int(x_train.size + x_test.size)},
              "final_loss": trained.final_loss, "train_seconds": trained.seconds,
              "peak_sram_bytes": memory.peak_sram_bytes, "fits_256k": memory.fits,
              "before": before, "after": after, "seconds": round(time.time() - t0, 1)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ad_demo.json").write_text(json.dumps(result, indent=1) + "\n")
    figure(before, after, anomaly, OUT / "ad_demo.png")
    (OUT / "ad_demo.md").write_text(report(result))
    print(report(result))


def report(r: dict) -> str:
    b, a = r["before"], r["after"]
    rows = [f"| all faults | {b['auc']:.3f} | {a['auc']:.3f} |"]
    rows += [f"| {f} | {b['auc_by_fault'][f]:.3f} | {a['auc_by_fault'][f]:.3f} |" for f in FAULTS]
    return "\n".join([
        "# Anomaly detection on the device: ad01 learns a new machine's normal",
        "",
        f"Command: `{r['command']}` ({r['seconds']} s on the host). Synthetic machine audio (numpy, seed 0; "
        "benchmarks/ad_demo.py says what is synthetic), the model's log-mel front end (128 mels, n_fft 1024, "
        "hop 512, 5 frames -> 640 values), the pretrained MLPerf Tiny autoencoder trained on the device's "
        f"arithmetic (host C engine, `--loss mse`, `--update {r['update']}`, lr {r['lr']}, {r['epochs']} epochs = "
        f"{r['steps']} batch-1 steps over {r['train_windows']} windows of {r['train_clips']} normal clips). "
        f"Peak SRAM of that training step: {r['peak_sram_bytes'] / 1024:.1f} KB (fits 256 KB: {r['fits_256k']}).",
        "",
        f"Test: {r['test_clips']} clips ({r['test_windows']} windows); a clip's score is the mean reconstruction "
        "error of its windows. ROC AUC of the clip scores:",
        "",
        "| anomalies | before | after |",
        "|---|---|---|",
        *rows,
        "",
        f"Mean clip score, normal / anomalous: before {b['normal_error']:.2f} / {b['anomalous_error']:.2f}, "
        f"after {a['normal_error']:.2f} / {a['anomalous_error']:.2f}. "
        f"Values clipped to the model's input range before quantization: {r['clipped_values']['train']} + "
        f"{r['clipped_values']['test']} of {r['clipped_values']['of']}.",
        "",
        "![before / after](ad_demo.png)",
        "",
    ])


if __name__ == "__main__":
    main()
