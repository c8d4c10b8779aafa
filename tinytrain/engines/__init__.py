"""The engines a training step runs on, behind one interface, and the run machinery the API, the plan search and
the fleet share.

    trainer.py  the Trainer interface (a step built for one engine, bound to its samples) and ``build_trainer``
    sim.py      the numpy simulator, the spec, on the frozen layers' outputs computed once per image (frozen.py)
    host_c.py   the emitted C built for the host (``CTrainer``, ``predict``), its frozen prefix cut (cut.py)
    qemu.py     that C as firmware on an emulated board (``QemuTrainer``)
    samples.py  what a run trains and scores on: int8 inputs, labels, float targets; the scores of outputs
    order.py    the batch-1 sample order

Every engine computes the same losses and states, bit for bit (docs/design.md §4); the default of ``train``,
``eval`` and the plan search is the fastest exact one available (``default_engine``).
"""

from __future__ import annotations

import shutil

ENGINES = ("sim", "c", "qemu")
HOST_ENGINES = ("sim", "c")  # no board: no SRAM budget, no flash file
HOST_CC = "gcc"


def default_engine() -> str:
    """``c`` (the emitted C built for the host, about ten times as fast as the simulator) when the host compiler is
    installed, else ``sim``: both are exact."""
    return "c" if shutil.which(HOST_CC) else "sim"
