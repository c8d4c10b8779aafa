"""tinytrain: an ahead-of-time compiler for on-device training of int8 MobileNets on microcontrollers.

The Python API (tinytrain/api.py): ``load_model``, ``compile``, ``plan``, ``train``, ``evaluate``; errors are the
classes of tinytrain/errors.py (``TinyTrainError`` and its subclasses).
"""

__version__ = "0.1.0"

from tinytrain.errors import (BudgetError, ModelError, PlanError, TinyTrainError,  # noqa: E402
                              UnsupportedModelError, UsageError)

API = ("load_model", "compile", "plan", "train", "evaluate")
__all__ = [*API, "__version__", "BudgetError", "ModelError", "PlanError", "TinyTrainError", "UnsupportedModelError",
           "UsageError"]


def __getattr__(name: str):
    # The API loads on first use: modules import ``tinytrain.__version__`` while tinytrain.api imports them.
    if name in API:
        from tinytrain import api

        return getattr(api, name)
    raise AttributeError(f"module 'tinytrain' has no attribute {name!r}")
