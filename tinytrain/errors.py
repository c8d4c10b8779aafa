"""Errors a user can hit. The CLI turns each into one line on stderr and exit code 2."""


class TinyTrainError(Exception):
    """Base class: the message says what is wrong and what to do."""


class ModelError(TinyTrainError):
    """The model file is malformed or inconsistent (truncated, bad quantization, cycle, ...)."""


class UnsupportedModelError(TinyTrainError):
    """The model is valid but uses something tinytrain does not support (op, dtype, dynamic shape, ...)."""


class Notice(UserWarning):
    """What a command assumed or changed, said rather than done silently (a guessed input mapping, resized
    images): a warning of the API, one line ``note: ...`` on stdout from the command line."""


class UsageError(TinyTrainError):
    """Bad command-line arguments or input files."""


class BudgetError(TinyTrainError):
    """The model or plan does not fit the SRAM / flash budget."""


class PlanError(UsageError):
    """A sparse-update plan (file or --update preset) is malformed or does not fit the model."""
