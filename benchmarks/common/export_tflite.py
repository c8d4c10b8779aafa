"""Export the MobileNetV2-style network to int8 TFLite in another framework's own environment (its pins conflict
with the project's): run as a subprocess by quantizers_tflite.py, never imported by it.

    /work/venv-tf/bin/python benchmarks/common/export_tflite.py tf WEIGHTS.npz CALIB.npz OUT.tflite
    /work/venv-litert/bin/python benchmarks/common/export_tflite.py litert STATE.pt CALIB.npz OUT.tflite

The environments: ``python3.11 -m venv /work/venv-tf && /work/venv-tf/bin/pip install tensorflow-cpu==2.21.0``
(TensorFlow 2.21.0 with numpy 2.4; about a minute here), and LiteRT-torch's as tests/quantizers/make_litert.py says.

``tf``: the Keras model of mbv2_tiny.keras_model (the BatchNorm-folded float weights) through the TFLite converter,
full int8 (``TFLITE_BUILTINS_INT8``, int8 input and output, a representative dataset of the calibration images).
``litert``: the PyTorch model (its state dict) through LiteRT-torch's PT2E int8 recipe (tests/quantizers/
make_litert.py: symmetric per-channel config, the calibration images, ``convert_pt2e(fold_quantize=False)``). The
calibration images: CALIB.npz ``x`` (N, 28, 28, 1) uint8, fed as p / 255.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mbv2_tiny  # noqa: E402


def tf_converter(weights: Path, calib: np.ndarray) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    model = mbv2_tiny.keras_model(dict(np.load(weights)))
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([x[None]] for x in calib)
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type, c.inference_output_type = tf.int8, tf.int8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return c.convert()


def litert_torch(state: Path, calib: np.ndarray) -> bytes:
    import litert_torch
    import torch
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e import quantize_pt2e

    model = mbv2_tiny.mobilenet_v2_tiny()
    model.load_state_dict(torch.load(state))
    args = (torch.zeros(1, 1, 28, 28),)
    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    m = quantize_pt2e.prepare_pt2e(torch.export.export(model.eval(), args).module(), quantizer)
    for x in calib:
        m(torch.from_numpy(x.transpose(2, 0, 1)[None].copy()))
    m = quantize_pt2e.convert_pt2e(m, fold_quantize=False)
    return bytes(litert_torch.convert(m, args, quant_config=QuantConfig(pt2e_quantizer=quantizer)).model_content())


def main(kind: str, model: str, calib: str, out: str) -> None:
    images = np.load(calib)["x"].astype(np.float32) / np.float32(255)
    data = (tf_converter if kind == "tf" else litert_torch)(Path(model), images)
    Path(out).write_bytes(data)


if __name__ == "__main__":
    main(*sys.argv[1:5])
