"""The emitted training step (C, built for the host) against the simulator, the spec (docs/design.md §4).

Per step, from an identical state (the simulator's state loaded into the C with tt_state_load), every tensor
the C step computed is read back from its arena (linear memory plan: nothing is overwritten) and compared:

- integer work, exactly: every int8 forward activation; every updated int8 weight / int32 bias (and momentum)
  equals ``sgd_update``'s reference applied to the C's own fp32 gradient and the pre-step state;
- fp32 work, each op given the C's own inputs, bit for bit too (docs/design.md §3b): the references sum in float32
  in the kernels' order with the kernels' fused multiply-adds (tinytrain/f32.py), tt_expf / tt_logf included —
  every conv2d_grad_input / conv2d_grad_weight variant (regular, depthwise, pointwise), fully_connected_grad_*,
  bias_grad, avg_pool2d_grad, softmax_xent and its gradient, the masks, pads, pools and tables. Free-running from
  the same initial state, the simulator's and the C's losses and states are then identical too.
"""

import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest

from ir_builders import ModelBuilder
from tinytrain.codegen import MODEL_HEADER, MODEL_SOURCE, arena_offsets, render_project
from tinytrain.codegen.state import pack, unpack
from tinytrain.engines.host_c import CTrainer
from tinytrain.ir import DType
from tinytrain.ops import get_op
from tinytrain.ops.sgd_update import Rounding
from tinytrain.simulator import init_state, train_step
from tinytrain.training.device_step import device_schedule
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.fuse_masks import fuse_mean_masks
from tinytrain.training.masks import save_masks
from tinytrain.training.qas import UpdateConfig
from tinytrain.lr_schedule import Schedule
from tinytrain.training.sparse import Plan, WeightUpdate, preset
from tinytrain.training.train_graph import build_training_graph
from tinytrain.version import __version__

SHA = "7e" * 32
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]


def train_ops_model(seed: int = 0):
    """Every training kernel variant: 3x3 stride-2 padded, pad, depthwise multiplier 2 (valid), pointwise,
    dilated 3x3, residual add, requantize, overlapping average pool, mean, fully connected."""
    mb = ModelBuilder("train_ops", seed)
    x = mb.input((12, 12, 3))
    h = mb.conv(x, 8, 3, 2)
    h = mb.pad(h, ((1, 0), (0, 1), (0, 0)))
    h = mb.conv(h, 16, 3, 1, depthwise=True, padding=0)
    h = mb.conv(h, 8, 1)
    h = mb.add(h, mb.conv(h, 8, 3, dilation=2, act=None))
    h = mb.requantize(h, 1.5)
    h = mb.avg_pool(h, 3, 1, padding=(1, 1, 1, 1))
    h = mb.conv(h, 16, 1)
    h = mb.reshape(mb.mean(h), (16,))
    return dataclasses.replace(mb.build(mb.fc(h, 5)), source_sha256=SHA), mb


CONFIGS = {
    "full": lambda g: (preset("full", g, lr=0.05), UpdateConfig()),
    "channels+momentum+nearest": lambda g: (
        Plan(bias_last_k=4, weights=(WeightUpdate(0, 0.5), WeightUpdate(1, 0.5), WeightUpdate(3, 0.25),
                                     WeightUpdate(5, 0.5)), lr=0.05, remainder_bits=0),
        UpdateConfig(momentum=0.9, rounding=Rounding.NEAREST, seed=3)),
    # warm-up (steps 0, 1), cosine decay (2 .. 6), then the floor: every branch of the lr factor
    "channels+cosine": lambda g: (
        Plan(bias_last_k=3, weights=(WeightUpdate(2, 0.25), WeightUpdate(4, 0.5), WeightUpdate(5, 1.0)), lr=0.05,
             lr_schedule=Schedule(2, 7, 0.25), remainder_bits=4),
        UpdateConfig(seed=5)),
    # each layer its own remainder bits: a byte, none, and the plan's packed nibbles in one step
    "per-layer remainder bits": lambda g: (
        Plan(bias_last_k=3, weights=(WeightUpdate(2, 0.25, 8), WeightUpdate(4, 0.5, 0), WeightUpdate(5, 1.0)),
             lr=0.05, remainder_bits=4),
        UpdateConfig(seed=7)),
}
# remainder_bits: 4 (the default: "full", packed nibbles), 0 (int8 only), 8 (a byte) and all three in one plan


@pytest.fixture(scope="module")
def model():
    return train_ops_model()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def setup(request, model, tmp_path_factory):
    g, mb = model
    plan, config = CONFIGS[request.param](g)
    tg = build_training_graph(g, plan, config)
    cache = tmp_path_factory.mktemp("cache")
    return tg, mb, cache


def check_step(tg, trainer: CTrainer, state, x: np.ndarray, label: int) -> set[str]:
    """One C step from ``state`` (then advanced by the simulator); asserts the contract (every tensor bit for bit),
    returns the fp32 ops checked (a convolution's gradient with its variant)."""
    pre = state.copy()
    trainer.load_state(pre)
    loss_c = trainer.step(x, label)
    post_c = trainer.state()
    sim = train_step(tg, state, x[None], label, keep_all=True)
    arena, g = trainer.arena(), trainer.schedule
    offsets = arena_offsets(g, trainer.memory)

    def c_value(name):
        t = g.tensors[name]
        return np.frombuffer(arena, t.dtype.np, t.size, offsets[name]).reshape(t.shape)

    def value(name):
        if not name:
            return None
        if name == "label":
            return np.array([label], np.int32)
        if name == "step":
            return np.array([pre.step], np.int32)
        if name in pre.tensors:
            return pre.tensors[name]
        t = g.tensors[name]
        return t.data if t.has_data else c_value(name)

    checked: set[str] = set()
    for node in g.nodes:
        op = get_op(node.op)
        ins = [g.tensors[i] if i else None for i in node.inputs]
        arrays = [value(i) for i in node.inputs]
        outs = [g.tensors[o] for o in node.outputs]
        if op.writes:
            want = op.reference(node.attrs, arrays, ins, outs)
            for w, new in zip(op.writes, want):
                if w < len(node.inputs) and node.inputs[w]:
                    np.testing.assert_array_equal(post_c.tensors[node.inputs[w]], new, err_msg=node.name)
            continue
        if op.view:
            continue
        got = c_value(node.outputs[0])
        if outs[0].dtype != DType.FLOAT32:  # int8 forward: bit for bit with the simulator
            np.testing.assert_array_equal(got, sim[node.outputs[0]], err_msg=node.name)
            continue
        want = op.reference(node.attrs, arrays, ins, outs)[0]
        assert np.array_equal(got.view(np.uint32), np.asarray(want, np.float32).reshape(got.shape).view(np.uint32)), \
            (node.name, int(np.sum(got != want.reshape(got.shape))))
        if node.op == "softmax_xent":
            assert loss_c == got[0]
        checked.add(node.op if node.op not in ("conv2d_grad_input", "conv2d_grad_weight") else
                    f"{node.op}/{'depthwise' if node.attrs.groups > 1 else 'regular'}")
    for name, v in pre.tensors.items():  # the C and the simulator updated from the same state: the same state
        assert name in post_c.tensors
        np.testing.assert_array_equal(post_c.tensors[name], state.tensors[name], err_msg=name)
    return checked


@pytest.mark.parametrize("masks", [False, True], ids=["int8-saved", "bit-masks"])
def test_each_step_from_identical_state_agrees_per_op(setup, masks):
    """``masks``: the clamp masks saved as bits (training/masks.py): packed bit for bit, applied exactly, the mean's
    gradient fused with one (training/fuse_masks.py)."""
    tg, mb, cache = setup
    if masks:
        tg = fuse_mean_masks(save_masks(tg))
        assert {"pack_clamp_mask", "clamp_mask_packed", "mean_grad_masked"} <= {n.op for n in tg.nodes}
    trainer = CTrainer(tg, cache, planner="linear", inplace=False, reorder=False)
    state = init_state(tg)
    x = mb.calibration_input()
    rng = np.random.default_rng(1)
    xs = np.concatenate([x, rng.integers(-128, 128, (4,) + x.shape[1:]).astype(np.int8)])
    checked: set[str] = set()
    for k in range(len(xs)):
        checked |= check_step(tg, trainer, state, xs[k], int(rng.integers(0, 5)))
    print("fp32 ops equal bit for bit:", sorted(checked))
    expected = {"conv2d_grad_input/regular", "conv2d_grad_weight/regular", "fully_connected_grad_input", "bias_grad",
                "avg_pool2d_grad", "softmax_xent", "softmax_xent_grad"}
    if any(n.op == "conv2d_grad_weight" and n.attrs.groups > 1 for n in tg.nodes):  # "full": multiplier 2
        expected |= {"conv2d_grad_input/depthwise", "conv2d_grad_weight/depthwise"}
    assert expected <= checked


def test_device_schedule_trains_like_the_simulator(setup):
    """The reordered schedule with in-place buffers (what compile emits): 12 free-running steps."""
    tg, mb, cache = setup
    trainer = CTrainer(tg, cache)
    state = init_state(tg)
    rng = np.random.default_rng(2)
    xs = rng.integers(-128, 128, (12,) + mb.calibration_input().shape[1:]).astype(np.int8)
    ys = rng.integers(0, 5, 12)
    sim = np.array([train_step(tg, state, xs[k : k + 1], int(ys[k]))["loss"][0] for k in range(12)], np.float32)
    c = trainer.train(xs, ys)
    assert np.array_equal(c.view(np.uint32), sim.view(np.uint32))  # the losses, bit for bit
    got = trainer.state()
    assert got.step == state.step == 12 and trainer.state_bytes() == pack(tg, state)  # momentum included
    logits = trainer.predict(xs[:3])
    assert logits.shape == (3, 5) and logits.dtype == np.int8


def test_state_bytes_round_trip_and_foreign_state_is_refused(setup, model):
    tg, mb, cache = setup
    trainer = CTrainer(tg, cache)
    state = init_state(tg)
    state.step = 7
    trainer.load_state(state)
    assert trainer.state_bytes() == pack(tg, state)
    back = unpack(tg, trainer.state_bytes())
    assert back.step == 7 and all(np.array_equal(back.tensors[k], v) for k, v in state.tensors.items())
    other = build_training_graph(model[0], preset("bias-only", model[0]))
    with pytest.raises(ValueError):
        unpack(tg, pack(other, init_state(other)))
    bad = bytearray(pack(tg, state))
    bad[8] ^= 1
    assert trainer._lib.tt_state_load(bytes(bad)) == -1
    old = bytearray(pack(tg, state))
    old[4:8] = (1).to_bytes(4, "little")  # a version-1 state (before weight remainders)
    with pytest.raises(ValueError, match="state version 1 was written by another tinytrain"):
        unpack(tg, bytes(old))
    assert trainer._lib.tt_state_load(bytes(old)) == -1


# Fused (ops/grad_weight_sgd_update.py) against unfused C: besides CONFIGS, a partial pointwise / depthwise / fully
# connected update with momentum and stochastic rounding (whose draws are indexed over the whole selection).
FUSION_CONFIGS = {
    **CONFIGS,
    "channels+momentum+stochastic": lambda g: (
        Plan(bias_last_k=2, weights=(WeightUpdate(1, 0.5), WeightUpdate(2, 0.5), WeightUpdate(5, 0.5)), lr=0.05),
        UpdateConfig(momentum=0.9, seed=5)),
}


@pytest.mark.parametrize("config", sorted(FUSION_CONFIGS))
def test_fused_gradient_and_update_are_bit_identical_to_unfused_c(model, config, tmp_path_factory):
    """8 steps of the C with each weight gradient fused into its update, in blocks of one row, of a few rows (some
    blocks shorter) and as compile chooses them (with clamp masks in bits): the same losses and the same state
    (weights, biases, momentum) bit for bit as the C with whole gradients and int8 saved outputs."""
    from tinytrain.training.reorder import reorder

    g, mb = model
    plan, update_config = FUSION_CONFIGS[config](g)
    tg = build_training_graph(g, plan, update_config)
    cache = tmp_path_factory.mktemp("cache")
    rng = np.random.default_rng(3)
    xs = rng.integers(-128, 128, (8,) + mb.calibration_input().shape[1:]).astype(np.int8)
    ys = rng.integers(0, 5, 8)
    unfused = CTrainer(reorder(tg), cache, reorder=False)
    want_losses, want = unfused.train(xs, ys), unfused.state()
    assert "grad_weight_sgd_update" not in unfused.files[MODEL_SOURCE]
    for scratch_bytes in (1, 120, None):
        fused = CTrainer(tg, cache) if scratch_bytes is None else \
            CTrainer(reorder(fuse_updates(tg, scratch_bytes)), cache, reorder=False)
        nodes = [n for n in fused.schedule.nodes if n.op.endswith("_grad_weight_sgd_update")]
        assert len(nodes) == sum(1 for n in tg.nodes if n.op.endswith("_grad_weight"))
        rows = [len(n.attrs.channels or range(tg.tensors[n.inputs[0]].shape[0])) for n in nodes]
        if scratch_bytes == 1:
            assert all(n.attrs.block == 1 for n in nodes)
        if scratch_bytes == 120:  # some last block shorter than the others
            assert any(r % n.attrs.block for r, n in zip(rows, nodes))
        np.testing.assert_array_equal(fused.train(xs, ys), want_losses)
        got = fused.state()
        assert got.step == want.step == 8 and got.tensors.keys() == want.tensors.keys()
        for name, value in want.tensors.items():
            np.testing.assert_array_equal(got.tensors[name], value, err_msg=f"{name}, scratch {scratch_bytes}")


@pytest.fixture(scope="module")
def project(model, tmp_path_factory):
    """What compile emits: clamp masks in bits, updates fused with their weight gradients, reordered."""
    from tinytrain.memory.report import memory_report

    g, _ = model
    plan, config = CONFIGS["full"](g)
    tg = device_schedule(build_training_graph(g, plan, config))
    out = tmp_path_factory.mktemp("train_project")
    files = render_project(tg, memory_report(tg, 1 << 30, 1 << 30))
    for name, text in files.items():
        (out / name).write_text(text)
    return out, tg, files


def test_project_is_deterministic_and_names_version_and_model_hash(project, model):
    from tinytrain.memory.report import memory_report

    out, tg, files = project
    g2, _ = train_ops_model()  # rebuilt from scratch
    plan, config = CONFIGS["full"](g2)
    tg2 = device_schedule(build_training_graph(g2, plan, config))
    again = render_project(tg2, memory_report(tg2, 1 << 30, 1 << 30))
    assert again == files
    for name in (MODEL_SOURCE, MODEL_HEADER):
        head = files[name].split("*/")[0]
        assert f"tinytrain {__version__}" in head and SHA in head


def test_sram_is_what_the_memory_report_counts(model):
    """Arena and SRAM copies (only the updated rows of a partially updated weight) as memory.report says."""
    from tinytrain.memory.report import memory_report

    g, _ = model
    plan, config = CONFIGS["channels+momentum+nearest"](g)
    tg = build_training_graph(g, plan, config)
    report = memory_report(tg, 1 << 30, 1 << 30)
    header = render_project(tg, report)[MODEL_HEADER]
    defined = dict(re.findall(r"#define (TT_\w+_BYTES) (\d+)", header))
    assert int(defined["TT_ARENA_BYTES"]) == report.arena_bytes
    assert int(defined["TT_TRAINABLE_BYTES"]) == report.trainable_sram_bytes + report.optimizer_state_bytes
    assert any(tg.tensors[p].nbytes > n for p, n in report.trainable)  # some weights only partly in SRAM


def test_trainable_tensors_in_sram_frozen_in_flash(project):
    from tinytrain.codegen.state import state_tensors

    out, tg, files = project
    src = files[MODEL_SOURCE]
    assert "static float tt_arena[TT_ARENA_BYTES / 4] __attribute__((aligned(16)));" in src
    arrays = re.findall(r"^static (const )?\w+ (\w+)\[", src, re.M)
    mutable = {name for const, name in arrays if not const} - {"tt_arena"}
    assert len(mutable) == len(state_tensors(tg))  # the SRAM copies of exactly what the step updates
    zeroed = {n for n in mutable if n.endswith("_remainder")}  # optimizer state: zeroed at tt_init
    assert zeroed and all(f"memset({name}, 0, sizeof({name}));" in src for name in zeroed)
    for name in mutable - zeroed:  # each copied from its flash original at tt_init
        assert ("const ", f"{name}_init") in arrays and f"memcpy({name}, {name}_init, sizeof({name}));" in src
    mutable -= zeroed
    n_frozen = sum(1 for t in tg.constants() if t.name not in state_tensors(tg))
    assert n_frozen > 0 and sum(1 for const, _ in arrays if const) >= n_frozen + len(mutable)


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_compiles_for_cortex_m(project, cpu, tmp_path):
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs it)")
    out, _, _ = project
    for fpu in ([], ["-mfloat-abi=hard", "-mfpu=fpv4-sp-d16" if cpu == "cortex-m4" else "-mfpu=fpv5-d16"]):
        r = subprocess.run([cc, f"-mcpu={cpu}", "-mthumb", *fpu, *WARNINGS, "-O2", "-ffp-contract=off", "-c",
                            str(out / MODEL_SOURCE), "-o", str(tmp_path / "model.o")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tinytrain_model.h"

/* stdin: n records of (label int32 little-endian, TT_INPUT_BYTES image); stdout: n float losses, the state. */
int main(int argc, char **argv) {
    static int8_t x[TT_INPUT_BYTES];
    static uint8_t state[TT_STATE_BYTES];
    const int n = argc > 1 ? atoi(argv[1]) : 0;
    tt_init();
    for (int i = 0; i < n; i++) {
        int32_t label;
        float loss;
        if (fread(&label, 4, 1, stdin) != 1 || fread(x, 1, TT_INPUT_BYTES, stdin) != TT_INPUT_BYTES) return 2;
        if (tt_train_step(x, (int)label, &loss) != 0) return 3;
        fwrite(&loss, 4, 1, stdout);
    }
    if (tt_state_size() != TT_STATE_BYTES) return 4;
    tt_state_save(state);
    fwrite(state, 1, TT_STATE_BYTES, stdout);
    return tt_state_load(state);
}
"""


def test_20_steps_clean_under_address_and_undefined_sanitizers(project, model, tmp_path):
    out, tg, files = project
    (tmp_path / "main.c").write_text(HARNESS)
    exe = tmp_path / "run"
    r = subprocess.run(["gcc", *WARNINGS, "-O1", "-g", "-ffp-contract=off", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=all", f"-I{out}", str(out / MODEL_SOURCE), str(tmp_path / "main.c"),
                        "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(5)
    xs = rng.integers(-128, 128, (20,) + tg.tensors[tg.inputs[0]].shape[1:]).astype(np.int8)
    ys = rng.integers(0, 5, 20).astype("<i4")
    stdin = b"".join(ys[k].tobytes() + xs[k].tobytes() for k in range(20))
    r = subprocess.run([str(exe), "20"], input=stdin, capture_output=True)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    losses, state = np.frombuffer(r.stdout[:80], "<f4"), r.stdout[80:]
    trainer = CTrainer(tg, tmp_path / "cache", reorder=False)  # the -O3 shared library: the same bits
    np.testing.assert_array_equal(trainer.train(xs, ys), losses)
    assert trainer.state_bytes() == state
    assert unpack(tg, state).step == 20


def test_every_forward_op_and_weight_zero_points_agree_per_op(tmp_path):
    """tests/codegen_graphs.every_op_graph: 5x5 and 7x7 kernels, stride 2x1, weight zero points, two means."""
    from codegen_graphs import GraphBuilder, every_op_graph

    g = every_op_graph()
    tg = build_training_graph(g, preset("full", g, lr=0.05))
    trainer = CTrainer(tg, tmp_path, planner="linear", inplace=False, reorder=False)
    assert "grad_input_f32_wzp(" in trainer.files[MODEL_SOURCE]
    state = init_state(tg)
    xs = GraphBuilder(3).inputs_batch(g, 3)
    for k in range(len(xs)):
        check_step(tg, trainer, state, xs[k], k)


def large_kernel_model():
    """A 7x7 depthwise on a 4x4 map of 96 channels (whose input gradient goes through a block of channels in scratch,
    ops/conv2d.py grad_input_block) and a 3x3 one on 48 channels (gathered in C order)."""
    mb = ModelBuilder("large_kernel", 1)
    h = mb.conv(mb.input((8, 8, 3)), 16, 3, 2)
    h = mb.inverted_residual(h, 16, 6, k=7)
    h = mb.inverted_residual(h, 16, 3)
    return mb.build(mb.classifier(h, 5)), mb


@pytest.mark.parametrize("which", ["tiny_mobilenet", "large_kernel"])
def test_in_place_backward_is_bit_identical_to_separate_buffers(which, tmp_path_factory):
    """The device schedule, where the plan writes depthwise and pointwise input gradients (and masked gradients) over
    the gradient they read (ops/conv2d.py grad_input_min_read, grad_input_block): 6 steps give the same losses and
    state bit for bit as the same C with every buffer separate; each op agrees with the simulator."""
    from ir_builders import tiny_mobilenet

    g, mb = tiny_mobilenet() if which == "tiny_mobilenet" else large_kernel_model()
    plan = CONFIGS["channels+momentum+nearest"](g)[0] if which == "tiny_mobilenet" else preset("bias-only", g)
    tg = build_training_graph(g, plan)
    cache = tmp_path_factory.mktemp("cache")
    in_place = CTrainer(tg, cache)
    nodes = in_place.schedule.nodes
    grads = [nodes[p.step].attrs for p in in_place.memory.inplace if nodes[p.step].op == "conv2d_grad_input"]
    assert any(a.groups > 1 for a in grads) and any(a.groups == 1 for a in grads)  # depthwise and pointwise
    assert any(nodes[p.step].op == "clamp_mask_packed" for p in in_place.memory.inplace)
    if which == "large_kernel":  # the 7x7 one in blocks (a host build's: staged whole), exactly over its g_z
        assert "_grad_input_f32_blocked_channels(" in in_place.files[MODEL_SOURCE]
        assert any(p.delta == 0 and in_place.schedule.tensors[p.input].shape == (1, 4, 4, 96)
                   for p in in_place.memory.inplace if nodes[p.step].op == "conv2d_grad_input")
    else:  # a depthwise one gathered in C order, some pixels ahead of its g_z
        assert any(p.delta > 0 for p in in_place.memory.inplace
                   if nodes[p.step].op == "conv2d_grad_input" and nodes[p.step].attrs.groups > 1)
    separate = CTrainer(tg, cache, inplace=False)
    rng = np.random.default_rng(7)
    xs = rng.integers(-128, 128, (6,) + mb.calibration_input().shape[1:]).astype(np.int8)
    ys = rng.integers(0, 5, 6)
    np.testing.assert_array_equal(in_place.train(xs, ys), separate.train(xs, ys))
    for name, value in separate.state().tensors.items():
        np.testing.assert_array_equal(in_place.state().tensors[name], value, err_msg=name)
    # and each op of that schedule against the simulator, from identical states
    schedule = in_place.schedule
    lock = CTrainer(schedule, cache, planner="linear", inplace=False, reorder=False)
    state = init_state(schedule)
    for k in range(2):
        check_step(schedule, lock, state, xs[k], int(ys[k]))
