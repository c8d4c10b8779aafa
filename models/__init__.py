"""tinytrain model zoo: plain-PyTorch definitions of the MCU networks the compiler targets.

``build_model(name, num_classes)`` is the one entry point; ``ZOO[name]`` holds the static
facts (input size, ONNX file name, published figures) the builder and the tests use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from . import mbv1, mbv2, mbv3, mcunet, proxyless
from .common import count_deploy_params, count_macs, count_params, fold_bn, layer_macs, make_divisible


@dataclass(frozen=True)
class ZooEntry:
    name: str
    factory: Callable[..., nn.Module]
    input_size: int          # square H = W of the NCHW float input, batch 1
    onnx_file: str           # file name under models/
    published: dict = field(default_factory=dict)


ZOO: dict[str, ZooEntry] = {
    "mbv2-w0.35": ZooEntry("mbv2-w0.35", mbv2.mobilenet_v2, mbv2.INPUT_SIZE, "mbv2-w0.35.onnx", mbv2.PUBLISHED),
    "proxyless-w0.3": ZooEntry("proxyless-w0.3", proxyless.proxyless_nas, proxyless.INPUT_SIZE,
                               "proxyless-w0.3.onnx", proxyless.PUBLISHED),
    "mcunet-5fps": ZooEntry("mcunet-5fps", mcunet.mcunet_5fps, mcunet.INPUT_SIZE, "mcunet-5fps.onnx",
                            mcunet.PUBLISHED),
    "mbv1-0.25-vww": ZooEntry("mbv1-0.25-vww", mbv1.mobilenet_v1, mbv1.INPUT_SIZE, "mbv1-0.25-vww.onnx",
                              mbv1.PUBLISHED),
}

# Built by the same script (``python -m models.build --only NAME``) but kept out of ``ZOO``, whose four image
# classifiers the zoo-wide tests and tables cover: the MobileNetV3-Small-like model of issue 29 (hard-swish,
# squeeze-and-excitation), tested by tests/frontends/test_user_ops_model.py.
EXTRA: dict[str, ZooEntry] = {
    "mbv3s-w0.5": ZooEntry("mbv3s-w0.5", mbv3.mobilenet_v3_small, mbv3.INPUT_SIZE, "mbv3s-w0.5.onnx",
                           mbv3.PUBLISHED),
}
ENTRIES: dict[str, ZooEntry] = {**ZOO, **EXTRA}

MODEL_NAMES = tuple(ZOO)


def build_model(name: str, num_classes: int = 2, **kwargs) -> nn.Module:
    """Build a freshly initialised float model (with BatchNorm) by zoo name."""
    try:
        entry = ENTRIES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(ENTRIES)}") from None
    return entry.factory(num_classes=num_classes, **kwargs)


def input_size(name: str) -> int:
    return ZOO[name].input_size


__all__ = ["ZOO", "EXTRA", "ENTRIES", "ZooEntry", "MODEL_NAMES", "build_model", "input_size", "fold_bn", "count_params",
           "count_deploy_params", "count_macs", "layer_macs", "make_divisible"]
