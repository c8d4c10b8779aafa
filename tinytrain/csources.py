"""Where the C half of the product lives: the top-level ``codegen/`` and ``firmware/`` folders.

``codegen/`` holds the kernel templates and the runtime headers of every emitted project, ``firmware/`` the board
support (startup, harnesses, drivers, linker and project templates). In a checkout (editable install, or the
repository on ``PYTHONPATH``) they sit beside the ``tinytrain`` package; a wheel ships them inside it, as
``tinytrain/_c/codegen`` and ``tinytrain/_c/firmware`` (pyproject.toml ``package-dir``). The installed copy wins
when both exist.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

Folder = Literal["codegen", "firmware"]


def c_folder(name: Folder) -> Path:
    """The folder ``name`` (``codegen`` or ``firmware``) of the installed wheel, else of the checkout."""
    package = Path(str(resources.files("tinytrain")))
    installed = package / "_c" / name
    return installed if installed.is_dir() else package.parent / name


def codegen_templates() -> Path:
    """The emitted project's jinja2 templates (``codegen/templates``, kernels under ``kernels/``)."""
    return c_folder("codegen") / "templates"


def codegen_runtime() -> Path:
    """The hand-written runtime headers copied into every emitted project (``codegen/runtime``)."""
    return c_folder("codegen") / "runtime"


def firmware_sources() -> Path:
    """The firmware's C: startup, tick counter, harnesses, UART and flash drivers (``firmware/c``)."""
    return c_folder("firmware") / "c"


def firmware_templates() -> Path:
    """The firmware project's jinja2 templates: linker script, Makefile, platformio.ini, board header."""
    return c_folder("firmware") / "templates"
