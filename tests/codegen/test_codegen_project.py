"""The emitted project: deterministic, laid out by the memory planner, compiles for Cortex-M, clean under sanitizers."""

import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest

from codegen_graphs import GraphBuilder, every_op_graph
from tinytrain import simulator
from tinytrain.engines import host_c as engine_c
from tinytrain.codegen import MODEL_SOURCE, arena_offsets, emit_project, render_project
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Graph, Node, Role, Tensor
from tinytrain.memory.report import forward_memory_report
from tinytrain.ops.dequantize import DequantizeAttrs
from tinytrain.version import __version__

SHA = "5a" * 32
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]


def _plan(g, planner="greedy"):
    return forward_memory_report(g, 1 << 30, 1 << 30, planner=planner)


@pytest.fixture(scope="module")
def every_op():
    return dataclasses.replace(every_op_graph(), source_sha256=SHA)


@pytest.fixture(scope="module")
def project(every_op, tmp_path_factory):
    out = tmp_path_factory.mktemp("project")
    emit_project(every_op, _plan(every_op), out)
    return out


def test_same_inputs_give_byte_identical_files(project, tmp_path):
    again = dataclasses.replace(every_op_graph(), source_sha256=SHA)  # rebuilt from scratch
    written = emit_project(again, _plan(again), tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in project.iterdir())
    for p in written:
        assert p.read_bytes() == (project / p.name).read_bytes(), p.name


def test_header_names_version_and_model_hash(project):
    for name in ("tinytrain_model.c", "tinytrain_model.h"):
        head = (project / name).read_text().split("*/")[0]
        assert f"tinytrain {__version__}" in head and SHA in head


def test_weights_const_and_one_aligned_arena(project, every_op):
    src = (project / MODEL_SOURCE).read_text()
    assert len(re.findall(r"^static int8_t tt_arena\[TT_ARENA_BYTES\] __attribute__\(\(aligned\(16\)\)\);$", src, re.M)) == 1
    assert re.search(rf"#define TT_ARENA_BYTES {_plan(every_op).arena_bytes}\n", (project / "tinytrain_model.h").read_text())
    arrays = re.findall(r"^static (const )?\w+ (\w+)\[", src, re.M)
    assert all(const for const, name in arrays if name != "tt_arena")
    n_weights = sum(1 for t in every_op.constants())
    assert sum(1 for _, name in arrays if name != "tt_arena") >= n_weights


@pytest.mark.parametrize("planner", ["greedy", "linear"])
def test_pointers_are_the_planner_offsets(every_op, planner):
    plan = _plan(every_op, planner)
    src = render_project(every_op, plan)[MODEL_SOURCE]
    declared = re.findall(r"int8_t \*const a\d+ = tt_arena \+ (\d+);\s+/\* \(([\d,]+)\) \w+ (\S+) \*/", src)
    assert len(declared) == sum(1 for t in every_op.tensors.values() if not t.is_constant)  # all used here
    offsets = arena_offsets(every_op, plan)
    for offset, _, name in declared:
        assert int(offset) == offsets[name]
    reshape = next(n for n in every_op.nodes if n.op == "reshape")
    assert offsets[reshape.outputs[0]] == offsets[reshape.inputs[0]]  # a view, no copy
    assert not any("reshape" in line for line in src.splitlines() if line.strip().startswith("tt_"))


def test_linear_plan_runs_the_same(every_op, tmp_path):
    x = GraphBuilder(7).inputs_batch(every_op, 5)
    want = simulator.forward(every_op, {every_op.inputs[0]: x})[every_op.outputs[0]]
    for planner in ("greedy", "linear"):
        np.testing.assert_array_equal(engine_c.predict(every_op, x, cache_dir=tmp_path, planner=planner), want)


def test_engine_builds_once_per_content(tmp_path):
    g1, g2 = every_op_graph(), every_op_graph()  # equal content, distinct objects
    x = GraphBuilder(9).inputs_batch(g1, 2)
    y1 = engine_c.predict(g1, x, cache_dir=tmp_path)
    y2 = engine_c.predict(g2, x, cache_dir=tmp_path)
    np.testing.assert_array_equal(y1, y2)
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 1
    engine_c.predict(every_op_graph(seed=1), x, cache_dir=tmp_path)
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 2


def test_view_as_graph_output_and_view_of_the_input(tmp_path):
    b = GraphBuilder(4)
    x = b.input((1, 2, 3, 4))
    flat = b.reshape(x, (24,))
    g = b.build(b.reshape(b.fully_connected(flat, 6), (2, 3)))
    xs = b.inputs_batch(g, 3)
    plan = _plan(g)
    assert len(plan.buffers) == 2  # input (+ its view) and the fc output (+ its view)
    np.testing.assert_array_equal(engine_c.predict(g, xs, cache_dir=tmp_path), simulator.forward(g, {g.inputs[0]: xs})[g.outputs[0]])


def test_plan_of_another_graph_is_rejected(every_op):
    other = GraphBuilder(1)
    x = other.input((1, 4, 4, 2))
    g = other.build(other.conv(x, 3, 3))
    with pytest.raises(ValueError, match="memory plan"):
        render_project(every_op, _plan(g))


def test_op_without_kernel_is_a_clear_error():
    b = GraphBuilder(2)
    x = b.input((1, 4))
    b.tensors["y"] = Tensor("y", (1, 4), DType.FLOAT32, Role.OUTPUT)
    g = Graph("deq", b.tensors, (Node("dq", "dequantize", (x,), ("y",), DequantizeAttrs()),), (x,), ("y",))
    with pytest.raises(UnsupportedModelError, match="dequantize"):
        render_project(g, _plan(g))


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7", "cortex-m55"])
def test_compiles_for_cortex_m(project, cpu, tmp_path):
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs it)")
    r = subprocess.run([cc, f"-mcpu={cpu}", "-mthumb", *WARNINGS, "-O2", "-ffp-contract=off", "-c",
                        str(project / MODEL_SOURCE), "-o", str(tmp_path / "model.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


SANITIZER_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tinytrain_model.h"

int main(int argc, char **argv) {
    static int8_t x[TT_INPUT_BYTES], y[TT_OUTPUT_BYTES];
    const int n = argc > 1 ? atoi(argv[1]) : 0;
    tt_init();
    for (int i = 0; i < n; i++) {
        if (fread(x, 1, TT_INPUT_BYTES, stdin) != TT_INPUT_BYTES) return 2;
        tt_predict(x, y);
        fwrite(y, 1, TT_OUTPUT_BYTES, stdout);
    }
    return 0;
}
"""


def test_host_build_is_clean_under_address_and_undefined_sanitizers(project, every_op, tmp_path):
    (tmp_path / "main.c").write_text(SANITIZER_MAIN)
    exe = tmp_path / "run"
    r = subprocess.run(["gcc", *WARNINGS, "-O1", "-g", "-ffp-contract=off", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=all", f"-I{project}", str(project / MODEL_SOURCE), str(tmp_path / "main.c"),
                        "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    x = GraphBuilder(3).inputs_batch(every_op, 6)
    r = subprocess.run([str(exe), str(len(x))], input=x.tobytes(), capture_output=True)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    got = np.frombuffer(r.stdout, np.int8).reshape((len(x),) + every_op.tensors[every_op.outputs[0]].shape[1:])
    np.testing.assert_array_equal(got, simulator.forward(every_op, {every_op.inputs[0]: x})[every_op.outputs[0]])
