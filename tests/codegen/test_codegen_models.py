"""Generated C == numpy simulator, bit for bit, on every shipped model and every int8/uint8 TFLite model of
../shared, each on 200 real VWW images (50 for MobileNetV2 1.0 at 224x224, 300 M MACs an image in the simulator),
resized and quantized for the model by tinytrain.data: the portable C and the C of a Cortex-M7 compile (tt_simd.h's
Arm DSP path, on C models of its instructions)."""

from pathlib import Path

import numpy as np
import pytest

from conftest import alternating, shared_file
from tinytrain import simulator
from tinytrain.engines import host_c as engine_c
from tinytrain.data import load_dataset, model_inputs
from tinytrain.frontends import load_model

ROOT = Path(__file__).resolve().parents[2]
ZOO = sorted(p.name for p in (ROOT / "models").glob("*.onnx"))
SHARED_TFLITE = ["vww_96_int8.tflite", "person_detect.tflite", "person_detect_litert.tflite",
                 "mobilenet_v1_0.25_128_quant.tflite", "mobilenet_v1_0.5_160_quant.tflite",
                 "mobilenet_v2_1.0_224_quant.tflite"]
FEWER_IMAGES = {"mobilenet_v2_1.0_224_quant.tflite": 50}  # the suite's time: 400 s for 200 images on 2 cores


def _check_images(model_path: Path, cache_dir: Path, arm_dsp: bool, n: int = 200) -> None:
    from test_codegen_ops import _predict_arm_dsp

    graph = load_model(model_path)
    images = load_dataset(shared_file("data/vww96/vww96_dev800.npz")).x[:n]
    x = model_inputs(graph, images)
    want = simulator.forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    got = _predict_arm_dsp(graph, x, cache_dir) if arm_dsp else engine_c.predict(graph, x, cache_dir=cache_dir)
    differ = np.flatnonzero((got != want).reshape(len(x), -1).any(axis=1))
    assert differ.size == 0, (f"{differ.size} of {len(x)} images differ, first {differ[0]}: "
                              f"C {got[differ[0]][:8]} vs simulator {want[differ[0]][:8]}")
    assert len(np.unique(got.reshape(len(x), -1).argmax(axis=1))) > 1  # not a constant output


KERNELS = {"arm-dsp": True, "portable": False}


def _models(models: list[str]):
    """Each model with one kind of C by default (the portable C and the Arm DSP C's taking turns), both under
    ``make test-full``."""
    return pytest.mark.parametrize("model, arm_dsp", alternating(models, [(m,) for m in models], KERNELS))


@pytest.mark.slow
@_models(ZOO)
def test_shipped_model_on_200_images(model, arm_dsp, tmp_path):
    _check_images(ROOT / "models" / model, tmp_path, arm_dsp)


@pytest.mark.slow
@_models(SHARED_TFLITE)
def test_shared_tflite_model_on_200_images(model, arm_dsp, tmp_path):
    """Covers per-channel int8 (VWW), grayscale input (person detection), TF1 uint8 models (non-zero
    weight zero points, half-up average pooling) and residual adds (MobileNetV2 1.0 at 224x224)."""
    _check_images(shared_file(f"models/{model}"), tmp_path, arm_dsp, FEWER_IMAGES.get(model, 200))
