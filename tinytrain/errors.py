"""Errors a user can hit. The CLI turns each into one line on stderr and exit code 2.

A message names the parameters it is about with ``param``: the API's words (``plan=``, ``update=last-k:2``) in
``str(error)``, the command line's (``--plan``, ``--update last-k:2``) in ``error.render(flag)``, where ``flag``
maps a parameter to its option (cli.py: from the command's parser). One message, two spellings, no rewriting.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_MARK = "\x1d"  # a control character: never part of a user's text (cli.py shows those as "?")
_PARAM = re.compile(f"{_MARK}([A-Za-z_][A-Za-z0-9_]*){_MARK}(.*?){_MARK}")
_NO_VALUE = "\x1e"


def param(name: str, value: object = None) -> str:
    """A parameter (its keyword in the API) named in an error message, with the value given, if any."""
    return f"{_MARK}{name}{_MARK}{_NO_VALUE if value is None else value}{_MARK}"


def _api(name: str, value: str) -> str:
    return f"{name}=" if value == _NO_VALUE else f"{name}={value}"


class TinyTrainError(Exception):
    """Base class: the message says what is wrong and what to do."""

    @property
    def message(self) -> str:
        """The message with its parameters marked (``param``): what a wrapping error puts into its own."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return _PARAM.sub(lambda m: _api(*m.groups()), self.message)

    def render(self, flag: Callable[[str], str | None]) -> str:
        """The message with each parameter spelled ``flag(name)`` (and its value after a space); a parameter
        without a flag keeps the API's spelling."""
        def one(m: re.Match) -> str:
            name, value = m.groups()
            option = flag(name)
            if option is None:
                return _api(name, value)
            return option if value == _NO_VALUE else f"{option} {value}"

        return _PARAM.sub(one, self.message)


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
