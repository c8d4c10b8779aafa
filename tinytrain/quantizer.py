"""``tinytrain.quantize`` (in quantizer.py: a module named quantize would shadow the function): a float ONNX model
quantized to the int8 QDQ form tinytrain trains best from (docs/guide/bring-your-own-model.md).

The settings: onnxruntime's ``quantize_static`` in the QDQ format, int8 weights per output channel (symmetric),
int8 activations (asymmetric: a zero point per tensor, so a [0, 1] input keeps all 256 levels), calibrated on the
user's images through the input mapping ``train`` uses (tinytrain/input_mapping.py: given, else the float model's
own ``tinytrain.input_mapping`` metadata, else ``unit``, stated) and that mapping recorded in the output's metadata,
so ``train`` / ``eval`` feed the images the same way. Before quantizing, onnxruntime's ``quant_pre_process`` folds
each BatchNormalization into its convolution and a symbolic batch dimension is fixed to 1 (both stated). The
result is imported by the ONNX frontend before it is written: a model tinytrain cannot train is refused, and
nothing is written.

Calibration methods (``calibration=``): ``minmax`` (the default: each activation's range is the range it took on the
calibration images), ``percentile`` (99.999th percentile of the absolute values), ``entropy`` (the range minimising
the KL divergence of the int8 histogram). benchmarks/quantize_float.py compares them.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tinytrain.calibration import CALIBRATIONS
from tinytrain.data import dataset_from_arrays, images_for_shape, load_dataset, state_conversion
from tinytrain.errors import ModelError, Notice, UnsupportedModelError, UsageError
from tinytrain.frontends.onnx import QDQ_MARKERS, convert_onnx, parse_model
from tinytrain.frontends.onnx.parse import graph_inputs
from tinytrain.input_mapping import KEY, NAMED, InputMapping, from_json, parse, to_json
from tinytrain.outputs import check_file, write_file
from tinytrain.version import __version__

QUANTIZED_BY = "tinytrain.quantized_by"
MIN_IMAGES = 10  # fewer calibration images leave most ranges to chance


@dataclass(frozen=True)
class Quantized:
    """What ``quantize`` wrote: the int8 model, and how."""

    path: Path
    calibration: str
    images: int
    mapping: InputMapping
    ops: int  # ops of the imported int8 graph

    def text(self) -> str:
        return (f"wrote {self.path}: int8 QDQ ONNX (onnxruntime quantize_static: per-channel int8 weights, int8 "
                f"activations, {self.calibration} calibration on {self.images} images), {self.ops} ops; input "
                f"mapping {self.mapping.describe()} in its metadata")


def quantize(model: str | Path, data, output: str | Path, *, calibration: str = "minmax",
             input_mapping: InputMapping | str | None = None) -> Quantized:
    """Quantize the float ONNX ``model`` on the images of ``data`` (a DATA spec or (images, labels)) and write
    the int8 model to ``output`` (never over a file tinytrain did not write, nor an input)."""
    if calibration not in CALIBRATIONS:
        raise UsageError(f"calibration={calibration}: choose one of {', '.join(CALIBRATIONS)}")
    model, output = Path(model), Path(output)
    inputs = [model] + ([data] if isinstance(data, (str, Path)) and Path(data).exists() else [])
    check_file(output, "onnx", inputs=inputs)
    proto = _float_model(model)
    shape = _input_shape(proto, model.stem)
    mapping = _mapping(proto, input_mapping)
    x = _calibration_inputs(data, shape, mapping)
    with tempfile.TemporaryDirectory(prefix="tinytrain-quantize-") as tmp:
        raw = _run_quantizer(proto, x, calibration, Path(tmp), model.name)
    q = _finish(raw, mapping, calibration)
    data_bytes = q.SerializeToString()
    graph, _ = convert_onnx(data_bytes, output.stem)  # refused here rather than by `train` later
    write_file(output, data_bytes, "onnx", inputs=inputs)
    return Quantized(output, calibration, len(x), mapping, len(graph.nodes))


def _float_model(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise UsageError(f"{path}: no such file; give the path of a float .onnx model")
    data = path.read_bytes()
    if data[4:8] == b"TFL3":
        raise UsageError(f"{path}: a TFLite model; quantize it with the TensorFlow Lite converter (full int8, "
                         f"a representative dataset) and give the .tflite to train")
    proto = parse_model(data, path.stem)
    _load_external_data(proto, path)
    ops = {n.op_type for n in proto.graph.node}
    if ops & (QDQ_MARKERS | {"QLinearConv", "QLinearMatMul", "QGemm"}):
        raise UsageError(f"{path}: already quantized ({', '.join(sorted(ops & QDQ_MARKERS)) or 'QLinear ops'}); "
                         f"give it to compile / train as it is")
    return proto


def _load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """The weights of a model saved with external data (``torch.onnx.export``'s default writes ``NAME.onnx.data``)
    read from beside it, so the model quantized is the one the user exported."""
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    files = sorted({next((e.value for e in t.external_data if e.key == "location"), "?")
                    for t in proto.graph.initializer if uses_external_data(t)})
    if not files:
        return
    try:
        load_external_data_for_model(proto, str(path.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{path}: its weights are in {', '.join(files)}, which cannot be read beside it "
                         f"({type(e).__name__}); keep the .onnx and its data file together") from None


def _input_shape(proto: onnx.ModelProto, name: str) -> tuple[int, int, int, int]:
    """(1, C, H, W) of the model's one float image input; a symbolic batch dimension is fixed to 1 (stated)."""
    inputs = graph_inputs(proto.graph)
    if len(inputs) != 1:
        raise UnsupportedModelError(f"{name}: the model has {len(inputs)} inputs; tinytrain quantizes models with "
                                    f"exactly one image input")
    vi = inputs[0]
    if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise UnsupportedModelError(f"{name}: input '{vi.name}' is not float32; give the float model")
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != 4 or any(not d.HasField("dim_value") for d in dims[1:]):
        raise UnsupportedModelError(f"{name}: input '{vi.name}' is not a fixed-size NCHW image (N, C, H, W); "
                                    f"export it with a fixed input size")
    if not dims[0].HasField("dim_value") or dims[0].dim_value != 1:
        warnings.warn(Notice(f"{name}: batch dimension of input '{vi.name}' fixed to 1 (tinytrain trains one image "
                             f"at a time)"))
        dims[0].Clear()
        dims[0].dim_value = 1
        for out in proto.graph.output:
            if out.type.tensor_type.shape.dim:
                out.type.tensor_type.shape.dim[0].Clear()
                out.type.tensor_type.shape.dim[0].dim_value = 1
    return 1, dims[1].dim_value, dims[2].dim_value, dims[3].dim_value


def _mapping(proto: onnx.ModelProto, given: InputMapping | str | None) -> InputMapping:
    if given is not None:
        return parse(given) if isinstance(given, str) else given
    carried = {p.key: p.value for p in proto.metadata_props}.get(KEY)
    if carried is not None:
        return from_json(carried)
    warnings.warn(Notice("input mapping: pixel / 255 (unit; a float model does not say how pixels become its "
                         "input: --input-mapping to give another)"))
    return NAMED["unit"]


def _calibration_inputs(data, shape: tuple[int, int, int, int], mapping: InputMapping) -> np.ndarray:
    """The float32 NCHW inputs of the calibration images, as ``train`` would feed them."""
    x = dataset_from_arrays(*data).x if isinstance(data, tuple) else load_dataset(data).x
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 4:
        raise UsageError("quantize: the calibration data must be uint8 images (N, H, W, C)")
    if len(x) < MIN_IMAGES:
        raise UsageError(f"quantize: {len(x)} calibration images; give at least {MIN_IMAGES} (a few hundred "
                         f"representative ones)")
    _, c, h, w = shape
    state_conversion(x.shape[1:], (h, w, c))  # as train says it of the same images
    images = images_for_shape(x, (h, w, c))
    mapping.channels(c)
    return np.ascontiguousarray(mapping.real(images).transpose(0, 3, 1, 2), np.float32)


class _Reader:
    """onnxruntime's CalibrationDataReader: one image per batch."""

    def __init__(self, name: str, x: np.ndarray):
        self.name, self.x, self.i = name, x, 0

    def get_next(self):
        if self.i >= len(self.x):
            return None
        self.i += 1
        return {self.name: self.x[self.i - 1: self.i]}

    def rewind(self) -> None:
        self.i = 0


def _run_quantizer(proto: onnx.ModelProto, x: np.ndarray, calibration: str, tmp: Path,
                   name: str) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, pre, out = tmp / "float.onnx", tmp / "pre.onnx", tmp / "int8.onnx"
    onnx.save(proto, str(src))
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    except Exception as e:  # noqa: BLE001 - onnxruntime's optimizer raises whatever its C++ raised
        raise ModelError(f"{name}: onnxruntime cannot optimize the float model ({str(e).splitlines()[0]}); "
                         f"check it runs in onnxruntime") from None
    method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
              "entropy": CalibrationMethod.Entropy}[calibration]
    name = graph_inputs(proto.graph)[0].name
    with contextlib.redirect_stdout(io.StringIO()):  # the entropy calibrator prints its histogram sizes
        quantize_static(str(pre), str(out), _Reader(name, x), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=method,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    return onnx.load(str(out))


def _finish(q: onnx.ModelProto, mapping: InputMapping, calibration: str) -> onnx.ModelProto:
    """The quantized model with the input mapping and its provenance in its metadata, written by tinytrain."""
    kept = [p for p in q.metadata_props if p.key not in (KEY, QUANTIZED_BY)]
    del q.metadata_props[:]
    q.metadata_props.extend(kept)
    for key, value in ((KEY, to_json(mapping)),
                       (QUANTIZED_BY, f"onnxruntime quantize_static QDQ, per-channel int8 weights, int8 activations, "
                                      f"{calibration} calibration")):
        q.metadata_props.add(key=key, value=value)
    q.producer_name, q.producer_version = "tinytrain", __version__
    return q
