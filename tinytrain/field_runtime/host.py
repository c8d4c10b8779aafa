"""The field runtime's emitted C built for the host: the cut model's training step and tt_field.c in one library.

``HostField`` has the ``FieldRuntime`` calls (``learn``, ``observe``, ``predict``, ``status``, ``state_bytes``)
through ctypes (``FieldLibrary``: the calls the anomaly runtime's host build shares); its results are the simulator's, bit for bit (tests/field/test_field.py).
"""

from __future__ import annotations

import ctypes

import numpy as np

from tinytrain.codegen import MODEL_SOURCE, render_project
from tinytrain.field_runtime.emit import FIELD_SOURCE, FLASH_FILES, field_memory, render_field
from tinytrain.engines.host_c import TRAIN_CFLAGS, _private_copy, compile_files
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.status import STATUS
from tinytrain.memory.report import memory_report
from tinytrain.training.device_step import device_schedule


def field_files(program: FieldProgram) -> dict[str, str]:
    """The emitted project: the cut model's training step and the field runtime (tt_field.c / .h)."""
    schedule = device_schedule(program.tg)
    files = dict(render_project(schedule, memory_report(schedule, 1 << 62, 1 << 62)))
    files.update(render_field(program))
    return files


UNITY = (FIELD_SOURCE, *(n for n in FLASH_FILES if n.endswith(".c")))


class FieldLibrary:
    """A field runtime's C built for the host (``files``, one translation unit) with the calls every runtime has
    (tt_field_init, tt_field_start, tt_learn, tt_observe, tt_field_status, tt_field_save) and ``more`` (name,
    argument types, result type) through ctypes; ``save_bytes``: what tt_field_save writes."""

    def __init__(self, files: dict[str, str], more: tuple, save_bytes: int) -> None:
        lib = self._lib = _private_copy(compile_files(files, cflags=TRAIN_CFLAGS))
        vp, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
        for name, args, res in (("tt_field_init", [], None), ("tt_learn", [vp, i32], i32),
                                ("tt_observe", [vp, vp], i32), ("tt_field_save", [vp], u32),
                                ("tt_field_status", [vp], None), ("tt_field_start", [vp], i32), *more):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        self._save = ctypes.create_string_buffer(save_bytes)
        lib.tt_field_init()

    def start(self, state: bytes) -> None:
        """Start from the model state ``state`` (tt_state_load bytes of the runtime's training step)."""
        if self._lib.tt_field_start(state) != 0:
            raise ValueError("the library refused the state (magic, version or layout differ)")

    def learn(self, x: np.ndarray, label: int) -> int:
        return int(self._lib.tt_learn(np.ascontiguousarray(x, np.int8).ctypes.data, int(label)))

    def observe(self, x: np.ndarray) -> int:
        return int(self._lib.tt_observe(np.ascontiguousarray(x, np.int8).ctypes.data, None))

    def status(self) -> dict:
        out = np.zeros(8, np.int32)
        self._lib.tt_field_status(out.ctypes.data)
        return dict(zip(STATUS, (int(v) for v in out)))

    def state_bytes(self) -> bytes:
        n = self._lib.tt_field_save(self._save)
        return self._save.raw[:n]


class HostField(FieldLibrary):
    """The classifier field runtime: the cut model's training step and tt_field.c; ``learn`` / ``observe`` take
    latents."""

    def __init__(self, program: FieldProgram) -> None:
        self.program = program
        files = field_files(program)
        unity = dict(files)  # one translation unit: the runtime calls the step's functions
        unity[MODEL_SOURCE] = files[MODEL_SOURCE] + "".join(f'\n#include "{n}"' for n in UNITY) + "\n"
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        super().__init__(unity, (("tt_drift", [vp], i32), ("tt_field_predict", [vp], i32)),
                         field_memory(program).save)

    def predict(self, latents: np.ndarray) -> np.ndarray:
        xs = np.ascontiguousarray(latents, np.int8)
        return np.array([self._lib.tt_field_predict(xs[i].ctypes.data) for i in range(len(xs))], np.int64)
