"""The field runtime (tinytrain/field_runtime/): the simulator's spec and the emitted C (tt_field.c) on the host, bit for bit;
the buffer's selection rule, imprinting, drift alarms, the guard's rollbacks, bad labels."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

from ir_builders import tiny_mobilenet
from tinytrain.errors import PlanError, UsageError
from tinytrain.field_runtime.buffer import Slots, offer_replay
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.head import imprint
from tinytrain.field_runtime.host import HostField
from tinytrain.field_runtime.program import field_program
from tinytrain.field_runtime.qemu import qemu_field
from tinytrain.field_runtime.rng import Rng, next_u32
from tinytrain.field_runtime.runtime import BAD_LABEL, HELD, FieldRuntime, predicted, split_state
from tinytrain.field_runtime.step import SimStep
from tinytrain.firmware import BOARDS
from tinytrain.training.sparse import preset

CFG = FieldConfig(replay=12, replay_k=2, known=2, imprint=3, guard=6, guard_every=3, guard_period=4, guard_drop=0,
                  drift_shift=3, drift_warmup=10, drift_factor=3, drift_min=16, drift_rebase=30)


@pytest.fixture(scope="module")
def program():
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    return field_program(g, preset("last-k:1", g, lr=0.05), CFG)


def stream(program, n: int = 150, seed: int = 0):
    """(latents, labels, learn?) of a stream: class clusters, a shift of the latents at n/2, a burst of wrong
    labels in the last quarter, one sample in four unlabelled."""
    rng = np.random.default_rng(seed)
    k, c = program.width, program.classes
    centres = rng.integers(-128, -40, (c, k))
    y = rng.integers(0, c, n)
    x = centres[y] + rng.integers(-8, 8, (n, k))
    x[n // 2 :] += 30
    wrong = np.arange(n) >= 3 * n // 4
    labels = np.where(wrong, (y + 1) % c, y)
    return np.clip(x, -128, 127).astype(np.int8), labels, np.arange(n) % 4 != 3


def test_sim_equals_host_c(program):
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    assert sim.state_bytes() == c.state_bytes()
    xs, ys, labelled = stream(program)
    codes = set()
    for x, y, lab in zip(xs, ys, labelled):
        a, b = (sim.learn(x, int(y)), c.learn(x, int(y))) if lab else (sim.observe(x), c.observe(x))
        assert a == b
        codes.add(a if lab else None)
        assert sim.state_bytes() == c.state_bytes()
    assert HELD in codes and sim.seen.all() and sim.buffer.filled == CFG.replay
    assert sim.drift.alarms >= 1 and sim.n.rollbacks >= 1 and sim.n.checks > sim.n.rollbacks


def test_bad_label_changes_nothing(program):
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    xs, ys, _ = stream(program, 20)
    for x, y in zip(xs, ys):
        sim.learn(x, int(y)), c.learn(x, int(y))
    before = sim.state_bytes()
    for bad in (program.classes, -1, 1000):
        assert sim.learn(xs[0], bad) == BAD_LABEL == c.learn(xs[0], bad)
    assert sim.state_bytes() == before == c.state_bytes()


def test_buffer_is_class_balanced():
    buf, rng = Slots.empty(8, 1, 3), Rng(1)
    for label in [0] * 20 + [1] * 3 + [2] * 20:
        offer_replay(buf, rng, np.zeros(1, np.int8), label)
    counts = np.bincount(buf.y, minlength=3)
    assert counts.tolist() == [2, 3, 3] and buf.offered.tolist() == [20, 3, 20]


def test_new_class_is_imprinted(program):
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    xs, ys, _ = stream(program, 200, seed=3)
    xs, ys = xs[:100], ys[:100]  # before the shift
    keep = ys != 4
    for x, y in zip(xs[keep][:30], ys[keep][:30]):
        sim.learn(x, int(y))
    assert not sim.seen[4]
    fours = xs[ys == 4]
    for x in fours[:2]:
        sim.learn(x, 4)
    assert sim.seen[4]
    out = sim.step.predict(fours[2:])
    assert np.mean([predicted(o, sim.seen)[0] == 4 for o in out]) >= 0.7


def test_imprinted_bias_meets_the_other_rows_at_the_buffer_mean(program):
    """The new row's accumulator on the buffer's mean latent is the other seen rows' mean there (floors aside)."""
    layout, rng = program.head, np.random.default_rng(5)
    buf = Slots.empty(8, layout.width, program.classes)
    buf.x[:] = rng.integers(-128, 60, buf.x.shape)
    buf.y[:], buf.filled = [0, 1, 0, 1, 2, 2, 0, 1], 8
    state = SimStep(program.cut_graph, program.tg).save()
    seen = np.arange(program.classes) < 3
    out = imprint(state, layout, buf, 2, seen)
    w = np.frombuffer(out, np.int8, layout.classes * layout.width, layout.weight).reshape(layout.classes, -1)
    b = np.frombuffer(out, "<i4", layout.classes, layout.bias)
    s = buf.x.astype(np.int64).sum(0) - 8 * layout.zero
    level = [int(w[j].astype(np.int64) @ s) + 8 * int(b[j]) for j in range(3)]
    assert abs(level[2] - (level[0] + level[1]) / 2) < 8 + 1


def test_guard_keeps_the_last_good_state_between_rollback_and_gain(program):
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    sim.cfg = replace(CFG, guard_drop=1 << 10)  # never a rollback
    sim.guard.filled = CFG.guard
    good, scores = sim.good, iter([3, 4])  # the state scores 3, the last good one 4
    sim.score = lambda: next(scores)
    sim.step.train(sim.guard.x[0], 1)
    sim.check()
    assert sim.good == good and sim.step.save() != good and sim.n.rollbacks == 0


def test_xorshift32():
    assert next_u32(1) == 270369 and next_u32(0x2545F491) < 1 << 32


def test_refusals():
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    with pytest.raises(UsageError, match="known_classes"):
        field_program(g, preset("last-k:1", g), FieldConfig(known=6))
    with pytest.raises(UsageError, match="replay_k"):
        field_program(g, preset("last-k:1", g), FieldConfig(replay=0, replay_k=2))
    with pytest.raises(PlanError, match="head only"):
        field_program(g, preset("last-k:2", g), FieldConfig(known=2))


def test_status_and_predict_agree(program):
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    xs, ys, _ = stream(program, 80)
    for x, y in zip(xs, ys):
        sim.learn(x, int(y)), c.learn(x, int(y))
    assert sim.status() == c.status()
    assert np.array_equal(sim.predict(xs), c.predict(xs))


def test_no_buffer_no_guard_sim_equals_host_c():
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    program = field_program(g, preset("last-k:1", g, lr=0.05), FieldConfig(replay=0, replay_k=0, guard=0, known=3,
                                                                            drift_warmup=8))
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    xs, ys, _ = stream(program, 40)
    for x, y in zip(xs, ys):
        assert sim.learn(x, int(y)) == c.learn(x, int(y))
    assert sim.state_bytes() == c.state_bytes() and sim.seen.all()


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_m4_equals_simulator(program):
    xs, ys, labelled = stream(program, 60)
    labels = np.where(labelled, ys, -1)
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    results = [sim.learn(x, int(y)) if y >= 0 else sim.observe(x) for x, y in zip(xs, labels)]
    run = qemu_field(program, xs, labels, "qemu-m4")
    assert run.results.tolist() == results and run.state == sim.state_bytes()
    trained = run.learned & (run.results != HELD)
    assert run.insns[trained].min() > run.insns[~run.learned].max() > 0


SEMIHOSTING = [name for name, b in BOARDS.items() if b.qemu]


@pytest.mark.qemu
@pytest.mark.parametrize("board", [b if b == "qemu-riscv32" else pytest.param(b, marks=pytest.mark.slow)
                                   for b in SEMIHOSTING])
def test_every_semihosting_board_equals_the_simulator(program, board):
    """The field harness (the stream baked in, semihosting output) on every semihosting QEMU board, the C built for
    its core: every call's result and the final tt_field_save bytes are the simulator's (about 2 s a board)."""
    if BOARDS[board].toolchain == "riscv" and not shutil.which("qemu-system-riscv32"):
        pytest.skip("qemu-system-riscv32 not installed")
    xs, ys, labelled = stream(program, 40)
    labels = np.where(labelled, ys, -1)
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    results = [sim.learn(x, int(y)) if y >= 0 else sim.observe(x) for x, y in zip(xs, labels)]
    run = qemu_field(program, xs, labels, board)
    assert run.results.tolist() == results and run.state == sim.state_bytes()


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_buffer_and_state_in_flash_survive_a_reboot(program):
    """The buffer in its log and the last good state in its ring: a reboot resumes from both (the model's state
    becomes the last good one)."""
    xs, ys, _ = stream(program, 60)
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    for x, y in zip(xs, ys):
        sim.learn(x, int(y))
    run = qemu_field(program, xs, ys, "qemu-m4", flash=True)
    assert run.state == sim.state_bytes() and run.erases > 0
    mine, back = split_state(program, sim.state_bytes()), split_state(program, run.restored)
    for part in ("buffer_filled", "buffer_x", "buffer_y"):
        assert np.array_equal(mine[part], back[part]), part
    assert np.array_equal(back["buffer_offered"], np.bincount(mine["buffer_y"], minlength=program.classes))
    assert np.array_equal(back["good"], mine["good"]) and np.array_equal(back["state"], mine["good"])
    assert not np.array_equal(mine["good"], split_state(program, FieldRuntime(program, SimStep(
        program.cut_graph, program.tg)).state_bytes())["good"])  # the stream changed the last good state


def test_drift_standardized_shift_sim_equals_host_c():
    """A shift of 3 LSB on the narrow half of the channels (spread ~2 LSB) while the wide half swings by class (+-40
    LSB): the standardized score alarms soon after the shift and not before, the simulator == the host C."""
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    program = field_program(g, preset("last-k:1", g, lr=0.05), replace(CFG, drift_warmup=40, drift_shift=4))
    rng = np.random.default_rng(3)
    k, n = program.width, 240
    wide = np.arange(k) % 2 == 0
    x = np.where(wide, rng.choice([-40, 40], (n, 1)) + rng.integers(-4, 5, (n, k)), rng.integers(-2, 3, (n, k)))
    x[n // 2 :, ~wide] += 3
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    alarms = []
    for row in x.astype(np.int8):
        assert sim.observe(row) == c.observe(row)
        if sim.drift.active and sim.drift.since not in alarms:
            alarms.append(sim.drift.since)
    assert sim.state_bytes() == c.state_bytes()
    assert alarms and n // 2 < alarms[0] <= n // 2 + 30, alarms


def test_drift_spread_is_the_whole_warm_up_s_mean_deviation():
    """A warm-up whose first half swings by +-20 LSB and whose second half is quiet: the spread is the mean absolute
    deviation over all of it (an EMA of weight 1/8 would keep only the quiet end), the simulator == the host C."""
    g, _ = tiny_mobilenet(seed=0, n_classes=5)
    program = field_program(g, preset("last-k:1", g, lr=0.05), replace(CFG, drift_warmup=40, drift_shift=3))
    k, w = program.width, 40
    x = np.where(np.arange(w)[:, None] < w // 2, np.where(np.arange(w)[:, None] % 2 == 0, 20, -20), 0)
    x = np.broadcast_to(x, (w, k)).astype(np.int8)
    sim, c = FieldRuntime(program, SimStep(program.cut_graph, program.tg)), HostField(program)
    devs = []
    for row in x:
        assert sim.observe(row) == c.observe(row)
        assert sim.state_bytes() == c.state_bytes()
    m = 256 * int(x[0, 0])
    for v in 256 * x[1:, 0].astype(np.int64):  # the deviations from the EMA, as drift.py takes them
        devs.append(abs(v - m))
        m += (v - m) >> 3
    assert np.all(np.abs(sim.drift.s - np.mean(devs)) <= 2), (sim.drift.s[:4], np.mean(devs))
    assert sim.drift.s.min() > 256 * 8  # the loud half counts: an EMA would have ended near 0
