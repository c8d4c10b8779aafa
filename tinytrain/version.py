"""The version of tinytrain (one place: the package, pyproject.toml and every emitted file read it here)."""

__version__ = "0.1.0"
