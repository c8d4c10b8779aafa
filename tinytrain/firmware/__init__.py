"""Firmware for the QEMU Cortex-M boards and real boards (docs/design.md §5a ``tinytrain firmware``).

``render_firmware`` / ``write_firmware`` turn a ``tinytrain compile`` output folder into a project
(boards.py lists the boards); ``samples`` is the host <-> QEMU sample file format, ``protocol`` the
serial framing of the real boards. The C (startup, harnesses, drivers) and templates are the top-level
``firmware/`` folder (``tinytrain.csources``).
"""

from tinytrain.firmware.boards import BOARDS, Board, get_board
from tinytrain.firmware.project import has_training_api, render_firmware, write_firmware

__all__ = ["BOARDS", "Board", "get_board", "has_training_api", "render_firmware", "write_firmware"]
