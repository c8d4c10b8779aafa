"""Per quantizer, one float model through it (benchmarks/quantize_float.py --quantizers): does the int8 model import,
how far its forward is from the quantizer's own runtime (max LSB difference of the int8 logits on 500 test images
against onnxruntime's default and unoptimized sessions for an ONNX model, tflite-micro for a TFLite one), the int8
test accuracy, the peak SRAM of its last-k:2 step and a short fine-tune's gain.

The quantizers: onnxruntime quantize_static QDQ (what `tinytrain quantize` runs), quantize_static QOperator
(QLinearConv, uint8 activations), NNCF's ONNX backend and its torch backend (activations per tensor; the torch
one's quantizers set to export QuantizeLinear / DequantizeLinear, then torch.onnx.export) where NNCF is installed;
Brevitas where installed, quantization-aware: a
Brevitas copy of the network built from the float model's BatchNorm-folded weights (ReLU for ReLU6, per-channel
int8 weights, int32 biases), fine-tuned 1 epoch on the float model's training images, exported with
export_onnx_qcdq; the TFLite converter (a Keras copy with the folded weights, full int8) and LiteRT-torch (PT2E int8
of the PyTorch model itself), each run in its own environment (/work/venv-tf, /work/venv-litert) where it exists.
A quantizer that is absent is a row "skipped" with the reason. Every model is fed p / 255 (``input_mapping="unit"``,
what the float model was trained on): Brevitas's symmetric input quantizer does not say whether [0, 1] or [-1, 1].
"""

from __future__ import annotations

import importlib.util
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx

import tinytrain
from tinytrain.api import model_data
from tinytrain.engines.trainer import forward_outputs
from tinytrain.input_mapping import with_mapping

from common import quantizers_tflite, quantizers_torch

MAPPING = "unit"


def _real(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32) / np.float32(255)).transpose(0, 3, 1, 2)


def qoperator(float_path: Path, calib: np.ndarray, out: Path) -> Path:
    """quantize_static QOperator: per-channel int8 weights, uint8 activations, after quant_pre_process."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(_real(calib)[:, None])

        def get_next(self):
            x = next(self.items, None)
            return None if x is None else {"image": x}

    pre = out.with_suffix(".pre.onnx")
    quant_pre_process(str(float_path), str(pre))
    quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QOperator, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    return out


def nncf_onnx(float_path: Path, calib: np.ndarray, out: Path) -> Path:
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, QuantizationParameters

    logging.getLogger("nncf").setLevel(logging.ERROR)
    advanced = AdvancedQuantizationParameters(activations_quantization_params=QuantizationParameters(per_channel=False))
    dataset = nncf.Dataset(list(_real(calib)), lambda x: {"image": x[None]})
    model = onnx.load(str(float_path))
    onnx.save(nncf.quantize(model, dataset, subset_size=len(calib), advanced_parameters=advanced), str(out))
    return out


def _runtime(path: Path, x: np.ndarray, optimized: bool) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimized:  # the model's own float DQ -> op -> Q semantics, no fused integer kernels
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name, real = session.get_inputs()[0].name, _real(x)
    return np.concatenate([session.run(None, {name: real[i:i + 1]})[0] for i in range(len(x))]).reshape(len(x), -1)


def lsb_difference(path: Path, x: np.ndarray) -> dict:
    """tinytrain's int8 logits (simulator) against onnxruntime's default session of the int8 model (fused integer
    kernels: what users run) and its unoptimized one (the graph's own float DQ -> op -> Q), each re-quantized with
    the model's output quantization where it is float."""
    graph = with_mapping(tinytrain.load_model(path), MAPPING)
    xq, _ = model_data(graph, (x, np.zeros(len(x), np.int64)))
    ours = forward_outputs(graph, xq, "sim").reshape(len(x), -1).astype(np.int64)
    oq = graph.tensors[graph.outputs[0]].quant
    result = {"n": int(len(x))}
    for key, optimized in (("default", True), ("unoptimized", False)):
        y = _runtime(path, x, optimized)
        if y.dtype == np.uint8:  # tinytrain's internal int8 form of a uint8 output
            theirs = y.astype(np.int64) - 128
        elif y.dtype == np.int8:
            theirs = y.astype(np.int64)
        else:
            theirs = np.clip(np.rint(y / np.float32(oq.s)) + oq.zp, -128, 127).astype(np.int64)
        diff = np.abs(ours - theirs)
        result[key] = {"max_lsb": int(diff.max()), "equal_fraction": float((diff == 0).mean())}
    return result


def measure(name: str, path: Path, test, val) -> dict:
    """Import, exactness, test accuracy, last-k:2 peak SRAM and a 1-epoch fine-tune on 2,000 validation images."""
    exactness = quantizers_tflite.lsb_difference if path.suffix == ".tflite" else lsb_difference
    try:
        graph = with_mapping(tinytrain.load_model(path), MAPPING)
    except tinytrain.TinyTrainError as e:
        return {"quantizer": name, "imports": False, "refusal": str(e)}
    xq, _ = model_data(graph, (test[0], test[1]))
    accuracy = float((forward_outputs(graph, xq, "c").reshape(len(test[1]), -1).argmax(1) == test[1]).mean())
    compiled = tinytrain.compile(path, update="last-k:2", sram="256k", input_mapping=MAPPING)
    peak = compiled.to_json()["peak_sram_bytes"]
    run = tinytrain.train(path, (val[0][:2000], val[1][:2000]), update="last-k:2", engine="c", held_out=0.25,
                          input_mapping=MAPPING)
    return {"quantizer": name, "imports": True, "exactness": exactness(path, test[0][:500]),
            "test_int8": accuracy, "fits_256k": compiled.plan is not None, "sram_peak_bytes": int(peak),
            "held_out_before": run.held_out["accuracy_before"], "held_out_after": run.held_out["accuracy_after"],
            "n_held_out": run.held_out["n_held_out"]}


def _makers(model, float_path: Path, qdq_path: Path, calib: np.ndarray, train, tmp: Path) -> dict:
    """name -> the maker of its int8 model at a path, or the reason the quantizer is skipped."""
    installed = {m: importlib.util.find_spec(m) is not None for m in ("nncf", "brevitas", "onnxoptimizer")}
    nncf = None if installed["nncf"] else "NNCF is not installed"
    makers = {"onnxruntime QDQ (tinytrain quantize)": lambda p: qdq_path,
              "onnxruntime QOperator (uint8 activations)": lambda p: qoperator(float_path, calib, p),
              "NNCF ONNX backend (activations per tensor)": nncf or (lambda p: nncf_onnx(float_path, calib, p)),
              "NNCF torch backend (activations per tensor, QDQ export)": nncf or (
                  lambda p: quantizers_torch.nncf_torch(model, calib, p)),
              "Brevitas QCDQ (QAT, 1 epoch)": (
                  "Brevitas is not installed" if not installed["brevitas"] else
                  "onnxoptimizer (Brevitas's ONNX export needs it) is not installed" if not installed["onnxoptimizer"]
                  else (lambda p: quantizers_torch.brevitas_qat(model, train, p)))}
    return makers | quantizers_tflite.makers(model, calib, tmp)


def run_quantizers(model, float_path: Path, qdq_path: Path, calib: np.ndarray, train, test, val) -> list[dict]:
    """Every quantizer's row (``model``: the float PyTorch model of ``float_path``; ``qdq_path``: tinytrain
    quantize's model of it; ``train``: the float model's training images, for the quantization-aware one)."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for k, (name, make) in enumerate(_makers(model, float_path, qdq_path, calib, train, tmp).items()):
            if isinstance(make, str):
                rows.append({"quantizer": name, "imports": None, "skipped": make})
                continue
            try:
                path = make(tmp / f"q{k}.onnx")
            except Exception as e:  # the quantizer itself failed: the row says how, never a number
                rows.append({"quantizer": name, "imports": None, "skipped": f"{type(e).__name__}: {e}"[:300]})
                continue
            rows.append(measure(name, path, test, val) | {"quantizer": name})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| quantizer | imports | max LSB vs its runtime: onnxruntime default session / tflite-micro (fraction "
             "equal) | onnxruntime unoptimized session | int8 test accuracy | last-k:2 peak SRAM | fine-tune held-out "
             "before -> after |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["imports"] is None:
            lines.append(f"| {r['quantizer']} | skipped: {r['skipped']} | | | | | |")
            continue
        if not r["imports"]:
            lines.append(f"| {r['quantizer']} | no: {r['refusal']} | | | | | |")
            continue
        d, u = r["exactness"]["default"], r["exactness"].get("unoptimized")
        other = f"{u['max_lsb']} ({u['equal_fraction']:.4f})" if u else "(TFLite)"
        lines.append(f"| {r['quantizer']} | yes | {d['max_lsb']} ({d['equal_fraction']:.4f}) | {other} | "
                     f"{r['test_int8']:.4f} | {r['sram_peak_bytes'] / 1024:.1f} KB | {r['held_out_before']:.4f} -> "
                     f"{r['held_out_after']:.4f} (n {r['n_held_out']}) |")
    return "\n".join(lines) + "\n"
