"""Generated C == numpy simulator on real int8 models (MLPerf Tiny VWW) and real images."""

from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from tinytrain import engine_c, simulator

FRONTENDS = Path(__file__).resolve().parents[1] / "tinytrain" / "frontends"


def _load(path: Path, frontend: str):
    if not (FRONTENDS / f"{frontend}.py").exists():
        pytest.skip(f"tinytrain/frontends/{frontend}.py is absent: the {frontend} frontend is not merged yet")
    from tinytrain.frontends import load_model

    return load_model(path)


@pytest.mark.slow
def test_vww_int8_tflite_on_200_images(tmp_path):
    graph = _load(shared_file("models/vww_96_int8.tflite"), "tflite")
    with np.load(shared_file("data/vww96/vww96_dev800.npz")) as data:
        x = (data["x"][:200].astype(np.int16) - 128).astype(np.int8)  # input q = pixel - 128
    want = simulator.forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    got = engine_c.predict(graph, x, cache_dir=tmp_path)
    mismatched = np.flatnonzero((got != want).reshape(len(x), -1).any(axis=1))
    assert mismatched.size == 0, (f"{mismatched.size} of {len(x)} images differ, first {mismatched[0]}: "
                                  f"C {got[mismatched[0]]} vs simulator {want[mismatched[0]]}")
    assert len(np.unique(got.reshape(len(x), -1).argmax(axis=1))) == 2  # both classes occur: not a constant output


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mobilenet_v1_0.25_128_quant.tflite", "person_detect.tflite"])
def test_other_tflite_models(model, tmp_path):
    """uint8 per-tensor weights (non-zero weight zero points, half-up average pool) and grayscale input."""
    graph = _load(shared_file(f"models/{model}"), "tflite")
    shape = graph.tensors[graph.inputs[0]].shape[1:]
    x = np.random.default_rng(0).integers(-128, 128, (6, *shape)).astype(np.int8)
    want = simulator.forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    np.testing.assert_array_equal(engine_c.predict(graph, x, cache_dir=tmp_path), want)
