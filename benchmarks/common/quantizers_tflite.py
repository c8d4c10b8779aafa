"""The TFLite rows of the per-quantizer benchmark: the TFLite converter (TensorFlow in /work/venv-tf) and LiteRT-torch
(PT2E int8, in /work/venv-litert), each run as a subprocess of export_tflite.py in its own environment where that
environment exists (their pins conflict with the project's), and the max LSB of tinytrain's int8 logits against
tflite-micro's (the runtime of a TFLite model on a microcontroller).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

import tinytrain
from tinytrain.engines.trainer import forward_outputs

SCRIPT = Path(__file__).resolve().parent / "export_tflite.py"
VENVS = {"tf": Path("/work/venv-tf"), "litert": Path("/work/venv-litert")}
PROBE = {"tf": "import tensorflow", "litert": "import litert_torch"}


def unavailable(kind: str) -> str | None:
    """Why the ``kind`` export cannot run here (its environment absent or broken), else None."""
    python = VENVS[kind] / "bin" / "python"
    if not python.exists():
        return f"{VENVS[kind]} does not exist (see benchmarks/common/export_tflite.py)"
    probe = subprocess.run([str(python), "-c", PROBE[kind]], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{PROBE[kind]} fails in {VENVS[kind]}: {probe.stderr.strip().splitlines()[-1]}"
    return None


def export(kind: str, model: Path, calib: Path, out: Path) -> Path:
    """export_tflite.py ``kind`` in its environment; raises RuntimeError with its last stderr line on failure."""
    run = subprocess.run([str(VENVS[kind] / "bin" / "python"), str(SCRIPT), kind, str(model), str(calib), str(out)],
                         capture_output=True, text=True)
    if run.returncode != 0 or not out.exists():
        raise RuntimeError(f"export_tflite.py {kind}: {(run.stderr.strip().splitlines() or ['no output'])[-1]}")
    return out


def _tflm(data: bytes, real: np.ndarray, xq: np.ndarray) -> np.ndarray:
    """tflite-micro's output per image (one invoke each, as on a device), fed int8 or float as the model takes."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_bytes(data, arena_size=4 << 20)
    detail = interp.get_input_details(0)
    feed = real if detail["dtype"] == np.float32 else xq.astype(detail["dtype"])
    outs = []
    for item in feed:
        interp.set_input(np.ascontiguousarray(item.reshape(tuple(detail["shape"]))), 0)
        interp.invoke()
        outs.append(interp.get_output(0).copy().reshape(-1))
    return np.stack(outs)


def lsb_difference(path: Path, x: np.ndarray) -> dict:
    """tinytrain's int8 logits (simulator) against tflite-micro's on the same int8 input (TFLite's quantization of
    p / 255: round half up); a float output (LiteRT-torch's DEQUANTIZE) re-quantized with the model's scale."""
    graph = tinytrain.load_model(path)
    q, oq = graph.tensors[graph.inputs[0]].quant, graph.tensors[graph.outputs[0]].quant
    real = x.reshape(len(x), 28, 28, 1).astype(np.float32) / np.float32(255)
    xq = np.clip(np.floor(real / np.float32(q.s) + 0.5) + q.zp, -128, 127).astype(np.int8)
    shape = (len(x), *graph.tensors[graph.inputs[0]].shape[1:])  # one channel: any layout, the same bytes
    ours = forward_outputs(graph, xq.reshape(shape), "sim").reshape(len(x), -1).astype(np.int64)
    y = _tflm(path.read_bytes(), real, xq)
    theirs = (np.rint(y / np.float32(oq.s)) + oq.zp if y.dtype == np.float32 else y).astype(np.int64)
    diff = np.abs(ours - theirs)
    return {"n": int(len(x)), "runtime": "tflite-micro",
            "default": {"max_lsb": int(diff.max()), "equal_fraction": float((diff == 0).mean())}}


def makers(model, calib_images: np.ndarray, tmp: Path) -> dict:
    """name -> (maker of the .tflite at a path, or the reason it is skipped) for the TFLite converter and
    LiteRT-torch, from the float PyTorch ``model`` (its weights, BatchNorm folded for Keras)."""
    import torch

    from common import mbv2_tiny

    np.savez(tmp / "weights.npz", **mbv2_tiny.folded_weights(model))
    torch.save(model.state_dict(), tmp / "state.pt")
    np.savez(tmp / "calib_tflite.npz", x=calib_images)
    names = {"tf": "TFLite converter (Keras, full int8)", "litert": "LiteRT-torch (PT2E int8)"}
    inputs = {"tf": tmp / "weights.npz", "litert": tmp / "state.pt"}
    out = {}
    for kind, name in names.items():
        reason = unavailable(kind)
        out[name] = reason or (lambda p, k=kind: export(k, inputs[k], tmp / "calib_tflite.npz", p.with_suffix(".tflite")))
    return out
