"""The frozen prefix on the device (field_runtime/prefix.py): tt_learn_input / tt_observe_input given the model's
raw int8 inputs compute the latents with the emitted prefix (tt_prefix.c) and decide exactly as the simulator
given the latents: the host C build and qemu-m4, every result and the final tt_field_save bytes."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from test_field import CFG
from ir_builders import tiny_mobilenet
from tinytrain.field_runtime.host import field_files
from tinytrain.field_runtime.emit import field_memory
from tinytrain.field_runtime.prefix import PrefixMemory, render_prefix
from tinytrain.field_runtime.program import field_program
from tinytrain.field_runtime.qemu import qemu_field
from tinytrain.field_runtime.runtime import FieldRuntime
from tinytrain.field_runtime.step import SimStep
from tinytrain.training.sparse import preset

SOURCES = ("tinytrain_model.c", "tt_field.c", "tt_field_flash.c", "tt_prefix.c", "tt_field_input.c")


@pytest.fixture(scope="module")
def program():
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    return field_program(g, preset("last-k:1", g, lr=0.05), CFG)


def raw_stream(program, n: int = 40):
    """The model's int8 inputs and labels (-1: one in four unlabelled; classes 0..4)."""
    rng = np.random.default_rng(5)
    shape = program.graph.tensors[program.graph.inputs[0]].shape[1:]
    x = rng.integers(-128, 128, (n, *shape)).astype(np.int8)
    y = np.where(np.arange(n) % 4 == 3, -1, rng.integers(0, 5, n))
    return x, y


def simulated(program, x, y):
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    lat = program.latents(x)
    return [sim.learn(v, int(c)) if c >= 0 else sim.observe(v) for v, c in zip(lat, y)], sim.state_bytes()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_c_given_raw_inputs_equals_the_simulator_given_latents(program, tmp_path):
    for name, text in field_files(program).items():
        (tmp_path / name).write_text(text)
    subprocess.run(["gcc", "-std=c99", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-Wall", "-Werror",
                    "-o", "lib.so", *SOURCES, "-lm"], cwd=tmp_path, check=True)
    lib = ctypes.CDLL(str(tmp_path / "lib.so"))
    vp = ctypes.c_void_p
    lib.tt_learn_input.argtypes = [vp, ctypes.c_int]
    lib.tt_observe_input.argtypes = [vp, vp]
    lib.tt_field_save.argtypes, lib.tt_field_save.restype = [vp], ctypes.c_uint32
    lib.tt_field_init()
    lib.tt_field_input_init()
    x, y = raw_stream(program)
    got = [lib.tt_learn_input(x[i].ctypes.data, int(y[i])) if y[i] >= 0 else lib.tt_observe_input(
        x[i].ctypes.data, None) for i in range(len(y))]
    save = ctypes.create_string_buffer(field_memory(program).save)
    n = lib.tt_field_save(save)
    results, state = simulated(program, x, y)
    assert got == results and save.raw[:n] == state


def test_the_prefix_is_one_unit_with_renamed_functions_and_counted(program):
    files, mem = render_prefix(program)
    text = files["tt_prefix.c"]
    assert "#include \"tinytrain_model.h\"" not in text and "void tt_prefix_predict(" in text
    assert "void tt_predict(" not in text and "void tt_init(" not in text
    assert isinstance(mem, PrefixMemory) and mem.arena > 0 and mem.weights > 0


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_m4_given_raw_inputs_equals_the_simulator(program):
    x, y = raw_stream(program)
    run = qemu_field(program, x.reshape(len(x), -1), y, "qemu-m4", raw=True)
    results, state = simulated(program, x, y)
    assert run.results.tolist() == results and run.state == state
