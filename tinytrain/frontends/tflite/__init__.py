"""TFLite frontend: an int8 (or TF1-style uint8) .tflite model -> the IR: importer.py (the driver and the float
boundary), tensors.py (what the operator readers use), reader.py (the flatbuffer); the operators' readers are their
op modules' (``TFLITE`` of ``tinytrain/ops/<op>.py``)."""

from tinytrain.frontends.tflite.importer import graph_from_tflite
from tinytrain.frontends.tflite.tensors import padding_values

__all__ = ["graph_from_tflite", "padding_values"]
