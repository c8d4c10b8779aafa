"""tinytrain: an ahead-of-time compiler for on-device training of int8 MobileNets on microcontrollers.

The Python API (tinytrain/api.py): ``load_model``, ``compile``, ``plan``, ``train``, ``evaluate`` and
``fleet`` (tinytrain/federated/run.py), ``field`` (tinytrain/field_runtime/api.py) and ``quantize``
(tinytrain/quantizer.py: a float ONNX model to int8); errors are the
classes of tinytrain/errors.py (``TinyTrainError`` and its subclasses).
"""

from tinytrain.errors import (BudgetError, ModelError, PlanError, TinyTrainError, UnsupportedModelError,
                              UsageError)
from tinytrain.version import __version__

API = ("load_model", "compile", "plan", "train", "evaluate", "fleet", "field", "quantize")
__all__ = [*API, "__version__", "BudgetError", "ModelError", "PlanError", "TinyTrainError", "UnsupportedModelError",
           "UsageError"]


def __getattr__(name: str):
    # lazy, all four: the API loads on first use, so `import tinytrain` stays light
    if name == "fleet":  # federated/run.py: it builds on api.py, so api.py does not import it
        from tinytrain.federated import fleet

        return fleet
    if name == "field":  # field_runtime/api.py builds on api.py too
        from tinytrain.field_runtime.api import field

        return field
    if name == "quantize":  # onnxruntime's quantizer takes seconds to load
        from tinytrain.quantizer import quantize

        return quantize
    if name in API:
        from tinytrain import api

        return getattr(api, name)
    raise AttributeError(f"module 'tinytrain' has no attribute {name!r}")
