"""The training step of every zoo model with its shipped plan and of the VWW TFLite models, built for the host with
AddressSanitizer and UndefinedBehaviorSanitizer (gcc -fsanitize=address,undefined, every report fatal): a few steps
run clean, and the state they leave is byte for byte the one the ordinary build (engine_c.CTrainer) leaves on the
same samples."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from test_firmware_qemu import VWW_PLAN
from tinytrain.engines.host_c import CTrainer
from tinytrain.frontends import load_model
from tinytrain.training.sparse import load_plan, parse_plan
from tinytrain.training.train_graph import build_training_graph

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "models" / "plans").glob("*.json"))
SANITIZE = ("-std=c99", "-O1", "-g", "-ffp-contract=off", "-fno-delete-null-pointer-checks", "-Wall", "-Wextra",
            "-Werror", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
VWW_TFLITE = ("vww_96_int8.tflite", "person_detect.tflite")
STEPS = 2


def lcg_samples(n_steps: int, image_bytes: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels tests/c/sanitize_main.c draws (x = low byte of lcg >> 8, per byte; then the label)."""
    state, xs, ys = 12345, [], []
    for _ in range(n_steps):
        img = np.empty(image_bytes, np.uint8)
        for i in range(image_bytes):
            state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
            img[i] = (state >> 8) & 0xFF
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        xs.append(img.view(np.int8))
        ys.append((state >> 8) % n_classes)
    return np.stack(xs), np.array(ys)


def _model_of(plan: Path) -> Path:
    """models/plans/MODEL-KIND.json is a plan of models/MODEL.onnx."""
    return ROOT / "models" / (plan.stem.rsplit("-", 1)[0] + ".onnx")


def check_sanitized_step(graph, plan, tmp_path) -> None:
    """STEPS steps of ``graph``'s training step under ``plan`` run clean under the sanitizers and leave the state
    the ordinary build leaves on the same samples."""
    tg = build_training_graph(graph, plan)
    host = CTrainer(tg)
    for name, text in host.files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "sanitize_main.c").write_bytes((ROOT / "tests" / "c" / "sanitize_main.c").read_bytes())
    subprocess.run(["gcc", *SANITIZE, "-o", "sanitize", "sanitize_main.c", "tinytrain_model.c"], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    r = subprocess.run([str(tmp_path / "sanitize"), str(STEPS), "state.bin"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    x = graph.tensors[graph.inputs[0]]
    n_classes = graph.tensors[graph.outputs[0]].shape[-1]
    xs, ys = lcg_samples(STEPS, x.nbytes, n_classes)
    host.train(xs.reshape((STEPS,) + tuple(x.shape[1:])), ys)
    assert (tmp_path / "state.bin").read_bytes() == host.state_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_zoo_training_step_is_clean_under_sanitizers(plan, tmp_path):
    check_sanitized_step(load_model(_model_of(plan)), load_plan(str(plan)), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("model", VWW_TFLITE)
def test_vww_tflite_training_step_is_clean_under_sanitizers(model, tmp_path):
    """The MLPerf VWW model and TFLite Micro's person detection model (../shared/models, skipped when absent) with
    the VWW sparse plan of the QEMU tests (the biases of the last 12 layers, parts of three pointwise layers)."""
    check_sanitized_step(load_model(shared_file(f"models/{model}")), parse_plan(VWW_PLAN), tmp_path)
