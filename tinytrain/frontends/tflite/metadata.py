"""A TFLite model's input normalization, from its metadata (metadata_schema.fbs of the TFLite Support library):
the model's ``metadata`` entry named ``TFLITE_METADATA`` names a buffer holding a ``ModelMetadata`` flatbuffer;
the first input tensor's ``NormalizationOptions`` process unit says x = (p - mean[c]) / std[c] for a pixel p.
Read with the checked reader of reader.py, so a damaged buffer is a one-line ModelError.

Slot numbers are the field indices of the schemas (vtable entry = 4 + 2 * index):
    Model: buffers 4, metadata 6;  Metadata: name 0, buffer 1;  Buffer: data 0
    ModelMetadata: subgraph_metadata 3;  SubGraphMetadata: input_tensor_metadata 2
    TensorMetadata: process_units 4;  ProcessUnit: options_type 0 (NormalizationOptions = 1), options 1
    NormalizationOptions: mean 0, std 1
"""

from __future__ import annotations

from tinytrain.errors import ModelError
from tinytrain.frontends.tflite.reader import _Reader
from tinytrain.input_mapping import InputMapping

METADATA_NAME = "TFLITE_METADATA"
NORMALIZATION = 1  # ProcessUnitOptions union: NormalizationOptions


def _metadata_buffer(data: bytes) -> bytes | None:
    r = _Reader(data)
    model = r.root()
    for entry in r.tables(model, 6, "metadata"):
        if r.string(entry, 0, "metadata name") == METADATA_NAME:
            buffers = r.tables(model, 4, "buffers")
            index = r.scalar(entry, 1, "<I", 0, "metadata buffer")
            if index >= len(buffers):
                raise ModelError(f"{METADATA_NAME} names buffer {index}; the model has {len(buffers)}")
            raw = r.numbers(buffers[index], 0, "u1", "metadata buffer data")
            return None if raw is None else raw.tobytes()
    return None


def input_normalization(data: bytes) -> InputMapping | None:
    """The input mapping of the model's normalization metadata (scale 1/std, offset -mean/std), or None."""
    meta = _metadata_buffer(data)
    if not meta:
        return None
    r = _Reader(meta)
    subgraphs = r.tables(r.root(), 3, "subgraph metadata")
    inputs = r.tables(subgraphs[0], 2, "input tensor metadata") if subgraphs else []
    for unit in r.tables(inputs[0], 4, "process units") if inputs else []:
        if r.scalar(unit, 0, "<B", 0, "process unit type") != NORMALIZATION:
            continue
        options = r.subtable(unit, 1, "normalization options")
        mean = r.numbers(options, 0, "<f4", "normalization mean") if options else None
        std = r.numbers(options, 1, "<f4", "normalization std") if options else None
        if mean is None or std is None or len(mean) != len(std) or not len(mean) or (std == 0).any():
            raise ModelError("the input's NormalizationOptions need as many non-zero std as mean values")
        return InputMapping(tuple(float(1 / s) for s in std), tuple(float(-m / s) for m, s in zip(mean, std)))
    return None
