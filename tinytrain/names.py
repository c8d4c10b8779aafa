"""Names: the ones a training graph reserves for its own tensors (training/train_graph.py builds them; the
simulator, the emitters and the engines read them): the loss output, the label and step-counter inputs, and the
suffix of a parameter's gradient (a model that already has a tensor of one of these names is refused,
training/autodiff.py); and ``unique_name``, how every builder of names (graphs, C identifiers, ONNX values) avoids
the ones taken.
"""

from __future__ import annotations

from typing import Container

LOSS = "loss"         # output: the step's loss (softmax cross-entropy or mean squared error), fp32 (1,)
LABEL = "label"       # input: the sample's class, int32 (1,)
STEP_INPUT = "step"   # input: the step counter, int32 (1,) (the stochastic rounding's stream position)
TARGET = "target"     # input: the sample's float32 target of the output's shape (--loss mse with y; sim only)
RESERVED = (LOSS, LABEL, STEP_INPUT, TARGET)
GRAD_SUFFIX = ".grad"


def grad_name(param: str) -> str:
    """The name of a parameter's gradient in a training graph."""
    return param + GRAD_SUFFIX


def unique_name(base: str, taken: Container[str], separator: str = "_", first: int = 1) -> str:
    """``base``, or the first of ``base<separator>first``, ``base<separator>first+1``, ... not in ``taken``."""
    name, k = base, first
    while name in taken:
        name, k = f"{base}{separator}{k}", k + 1
    return name
