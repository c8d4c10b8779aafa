"""The anomaly field runtime's C (codegen/templates/field_anomaly.*.j2, ``tt_field.h`` / ``tt_field.c`` of an
autoencoder) and its host build: ``AnomalyHost`` has the ``AnomalyRuntime`` calls through ctypes, the simulator's
results bit for bit (tests/field/test_field_anomaly.py)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from tinytrain.codegen import MODEL_SOURCE, render_project
from tinytrain.codegen.context import environment
from tinytrain.field_runtime.anomaly import AnomalyProgram, anomaly_save_bytes
from tinytrain.field_runtime.emit import FIELD_HEADER, FIELD_SOURCE
from tinytrain.field_runtime.host import FieldLibrary
from tinytrain.memory.report import memory_report
from tinytrain.training.device_step import device_schedule
from tinytrain.version import __version__


@dataclass(frozen=True)
class AnomalyMemory:
    """Bytes the anomaly runtime adds: SRAM of its statics (the buffer of normal inputs, statistics) and what
    ``tt_field_save`` writes."""

    buffer: int
    statistics: int
    save: int

    @property
    def sram(self) -> int:
        return self.buffer + self.statistics

    def as_dict(self) -> dict:
        return {**self.__dict__, "sram": self.sram, "guard": 0, "states": 0}


def anomaly_memory(program: AnomalyProgram) -> AnomalyMemory:
    d = program.width
    return AnomalyMemory(program.cfg.replay * d + 8, 4 + 80 + 12 + d, anomaly_save_bytes(program))


def render_anomaly(program: AnomalyProgram) -> dict[str, str]:
    """File name -> text: the whole model's training step and the anomaly field runtime."""
    schedule = device_schedule(program.tg)
    files = dict(render_project(schedule, memory_report(schedule, 1 << 62, 1 << 62)))
    return {**files, **anomaly_runtime_files(program)}


def anomaly_runtime_files(program: AnomalyProgram) -> dict[str, str]:
    """tt_field.h / tt_field.c of the anomaly runtime (beside a training step emitted elsewhere: a firmware's)."""
    a, zo, b, zx = program.score_constants
    mem = anomaly_memory(program)
    ctx = dict(version=__version__, cfg=program.cfg, width=program.width, replay=program.cfg.replay,
               seed=program.cfg.seed, a=a, zo=zo, b=b, zx=zx, sram_bytes=mem.sram, save_bytes=mem.save)
    env = environment()
    return {FIELD_HEADER: env.get_template("field_anomaly.h.j2").render(**ctx),
            FIELD_SOURCE: env.get_template("field_anomaly.c.j2").render(**ctx)}


def anomaly_output(program: AnomalyProgram) -> tuple[dict[str, str], dict, str]:
    """(files, field.json, what compile's line says) of ``compile --replay N`` for an autoencoder."""
    m = anomaly_memory(program).as_dict()
    report = {"kind": "anomaly", "sample_bytes": program.width, "score_constants": program.score_constants,
              "config": program.cfg.__dict__, "memory": m}
    return render_anomaly(program), report, (
        f"the anomaly field runtime (tt_field.c/h) beside the whole model's training step: it adds {m['sram']} B "
        f"SRAM (buffer of normal inputs {m['buffer']}, statistics {m['statistics']})")


class AnomalyHost(FieldLibrary):
    """The anomaly field runtime on the host: the whole model's step and tt_field.c; ``learn`` / ``observe`` take
    inputs."""

    def __init__(self, program: AnomalyProgram) -> None:
        self.program = program
        files = render_anomaly(program)
        files[MODEL_SOURCE] += f'\n#include "{FIELD_SOURCE}"\n'  # one translation unit
        super().__init__(files, (("tt_field_score", [ctypes.c_void_p], ctypes.c_int32),),
                         anomaly_memory(program).save)

    def scores(self, xs: np.ndarray) -> np.ndarray:
        xs = np.ascontiguousarray(xs, np.int8)
        return np.array([self._lib.tt_field_score(xs[i].ctypes.data) for i in range(len(xs))], np.int64)
