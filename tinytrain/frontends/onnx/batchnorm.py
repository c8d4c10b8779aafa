"""The converter's handler of a BatchNormalization left after a quantized convolution: folded into it (fold.py)."""

from __future__ import annotations

import numpy as np
import onnx

from tinytrain.frontends.onnx.convert import Converter, Handler
from tinytrain.frontends.onnx.parse import attrs_of, node_label


def h_batch_normalization(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    if a.get("training_mode", 0):
        raise cv.unsupported(f"{node_label(node)} is in training mode; export the model in eval mode")
    gamma, beta, mean, var = (np.asarray(cv.const(node, i, f"input {i}"), np.float64).ravel() for i in range(1, 5))
    g = gamma / np.sqrt(var + float(a.get("epsilon", 1e-5)))
    cv.fold_affine(node, cv.value(node, 0), g, beta - mean * g, "normalizes", per_channel=True)


HANDLERS: dict[str, Handler] = {"BatchNormalization": h_batch_normalization}
