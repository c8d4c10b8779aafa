"""50 training steps of a real model under a sparse-update plan: ``--engine sim`` against ``--engine c``.

MobileNetV2-w0.35 (models/, 128x128, 10 classes) on 50 Fashion-MNIST training images, the plan below. Three
runs over the same 50 samples: the simulator; the C free-running from the initial state (what ``train
--engine c`` does); and the C in lockstep, restarted from the simulator's state before every step.

Integer results agree given the same fp32 inputs (tests/test_codegen_train.py), but the C's fp32 gradients
are not the simulator's bit for bit (float32 sums against float64 sums rounded once). An int8 weight then
moves differently exactly when its stochastic-rounding sum v + u = G k + u lands on different sides of an
integer for the two gradients: a threshold crossed by a gradient difference of a few ulps (more ulps of the
result where a sum cancels, still within the per-op tolerance of sum|terms|). The lockstep run
checks that every differing element is such a crossing; the free-running run reports the fraction of
identical trainable elements after 50 steps (differences compound: a changed weight changes later steps).
"""

import numpy as np
import pytest

from tinytrain.codegen import arena_offsets
from tinytrain.data import model_inputs
from tinytrain.engine_c import CTrainer
from tinytrain.frontends import load_model
from tinytrain.ir import Role
from tinytrain.ops.sgd_update import uniform
from tinytrain.simulator import init_state, train_step
from tinytrain.training.sparse import parse_plan
from tinytrain.training.train_graph import build_training_graph

pytestmark = pytest.mark.slow

PLAN = {"version": 1, "bias_last_k": 16, "lr": 0.01,
        "weights": [{"conv": 52, "ratio": 1.0}, {"conv": 51, "ratio": 0.5}, {"conv": 50, "ratio": 0.25},
                    {"conv": 47, "ratio": 0.125}]}
STEPS = 50


def fashion_mnist(n: int) -> tuple[np.ndarray, np.ndarray]:
    data = pytest.importorskip("models.data")
    try:
        d = data.load_fashion_mnist()
    except data.DataMissing as e:
        pytest.skip(str(e))
    return np.repeat(d["train_x"][:n, :, :, None], 3, axis=3), d["train_y"][:n].astype(np.int64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from pathlib import Path

    graph = load_model(Path(__file__).resolve().parents[1] / "models" / "mbv2-w0.35.onnx")
    tg = build_training_graph(graph, parse_plan(PLAN))
    images, y = fashion_mnist(STEPS)
    x = model_inputs(graph, images)
    cache = tmp_path_factory.mktemp("cache")
    free = CTrainer(tg, cache)
    lock = CTrainer(tg, cache, planner="linear", inplace=False, reorder=False)  # every gradient stays readable
    offsets = arena_offsets(lock.schedule, lock.plan)
    sim = init_state(tg)
    updates = [n for n in tg.nodes if n.op == "sgd_update"]
    crossings = []  # per differing element of a lockstep step: (gradient ulps apart, |v_c - v_sim|, |v_sim + u - integer|)
    unexplained = 0
    differing = 0
    for k in range(STEPS):
        pre = sim.copy()
        lock.load_state(pre)
        lock.step(x[k], int(y[k]))
        after_c = lock.state()
        arena = lock.arena()
        values = train_step(tg, sim, x[k : k + 1], int(y[k]), keep_all=True)
        free.step(x[k], int(y[k]))
        for node in updates:
            param, grad, scale = node.inputs[:3]
            diff = after_c.tensors[param] != sim.tensors[param]
            if not diff.any():
                continue
            gt = tg.tensors[grad]
            g_c = np.frombuffer(arena, np.float32, gt.size, offsets[grad]).reshape(gt.shape)
            g_s = values[grad]
            kk = tg.tensors[scale].data.reshape((-1,) + (1,) * (len(gt.shape) - 1))
            u = uniform(node.attrs.seed, pre.step, node.attrs.stream, gt.size).reshape(gt.shape)
            t_c, t_s = g_c * kk + u, g_s * kk + u
            rows = diff if node.attrs.channels is None else diff[np.asarray(node.attrs.channels)]
            differing += int(rows.sum())
            unexplained += int((np.floor(t_c) == np.floor(t_s))[rows].sum())
            ulps = np.abs(g_c - g_s) / np.spacing(np.abs(g_s))
            lsb = float(1 << node.attrs.remainder_bits)  # t is in 2^-F LSBs where the weight keeps a remainder
            crossings += list(zip(ulps[rows].tolist(), (np.abs(t_c - t_s)[rows] / lsb).tolist(),
                                  (np.abs(t_s - np.rint(t_s))[rows] / lsb).tolist()))
    return tg, sim, free.state(), differing, unexplained, crossings


def test_fraction_of_identical_trainable_weights_after_50_steps(runs):
    from tinytrain.codegen.state import state_layout

    tg, sim, c, *_ = runs
    total = same = 0
    for e in state_layout(tg):  # the updated rows only (frozen rows of a partly updated weight are not counted)
        if tg.tensors[e.name].role is Role.OPTIMIZER_STATE:
            continue  # a remainder moves at 2^-F LSB: it differs wherever a fine threshold was crossed
        rows = slice(e.row0, e.row0 + e.shape[0])
        total += int(np.prod(e.shape))
        same += int((c.tensors[e.name][rows] == sim.tensors[e.name][rows]).sum())
    fraction = same / total
    print(f"after {STEPS} steps: {same} of {total} trainable int8 weights / int32 biases identical "
          f"({100 * fraction:.3f} %)")
    assert c.step == sim.step == STEPS
    assert fraction > 0.99


def test_every_lockstep_difference_is_a_rounding_threshold_crossed(runs):
    _, _, _, differing, unexplained, crossings = runs
    ulps, dv, gap = (np.array([c[i] for c in crossings]) for i in range(3))
    if differing:
        print(f"lockstep: {differing} elements moved differently in {STEPS} steps; there the two gradients are "
              f"{np.median(ulps):.1f} ulps apart (median; max {ulps.max():.0f}, where the sum cancels), the steps "
              f"v = G k differ by {dv.max():.1e} LSB at most, and v + u lay within {gap.max():.1e} LSB of an integer")
    assert unexplained == 0  # no difference without a crossing: the integer update itself is exact
    assert np.all(gap <= dv) and (differing == 0 or dv.max() < 0.05)
