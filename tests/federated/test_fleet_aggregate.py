"""The fleet's aggregation rule (tinytrain/federated/aggregate.py): exact integers, the device's grid, any order."""

import numpy as np
import pytest

from tinytrain.codegen.state import StateEntry
from tinytrain.federated.aggregate import (aggregate, fixed_point, round_half_even, split_fixed_point,
                                          weighted_mean)
from tinytrain.federated.shards import make_shards
from tinytrain.ops.sgd_update import land_remainder, pack_nibbles
from tinytrain.simulator import TrainState


def test_round_half_even_exact():
    num = np.array([5, 7, -5, -7, 3, -3, 4, 1 << 61], np.int64)
    assert round_half_even(num, 2).tolist() == [2, 4, -2, -4, 2, -2, 2, 1 << 60]  # 2.5 -> 2, 3.5 -> 4, ...
    assert round_half_even(np.array([10, -10, 11]), 4).tolist() == [2, -2, 3]  # 2.5 -> 2, -2.5 -> -2, 2.75 -> 3


def test_weighted_mean_by_samples():
    assert weighted_mean([np.array([0, 10]), np.array([3, -10])], [1, 2]).tolist() == [2, -3]  # 6/3, -10/3
    with pytest.raises(ValueError):
        weighted_mean([np.array([1])], [0])
    with pytest.raises(ValueError):
        weighted_mean([np.array([1]), np.array([1])], [1 << 30, 1 << 30])


def test_fixed_point_round_trip_on_the_kernels_grid():
    rng = np.random.default_rng(0)
    p = rng.integers(-127, 128, (3, 5)).astype(np.int8)
    # a remainder as the update kernel leaves it: land a step of 0 on a random q
    q = p.astype(np.int64) * 16 + rng.integers(-8, 8, p.shape)
    q = np.clip(q, -127 * 16, 127 * 16)
    p2, rem = split_fixed_point(q, 4)
    assert rem.shape == (3, 3) and np.array_equal(fixed_point(p2, rem, 4), q)
    lp, lrem = land_remainder(p2, rem, np.zeros(p.shape, np.int64), 4)
    assert np.array_equal(lp, p2) and np.array_equal(lrem, rem)  # the device's own split of the same q


def _layout():
    return [StateEntry("w", (2, 3), "i8", 1, 3), StateEntry("w.remainder", (2, 2), "i8", 0, 2),
            StateEntry("b", (3,), "i32", 0, 3)]


def _state(w_rows, rem_parts, b, step=0):
    w = np.zeros((3, 3), np.int8)
    w[1:] = w_rows
    return TrainState({"w": w, "w.remainder": pack_nibbles(np.asarray(rem_parts, np.int8)),
                       "b": np.asarray(b, np.int32)}, step)


def test_aggregate_rule_exact():
    a = _state([[1, 0, -3], [127, 2, 0]], [[-8, 7, 0], [7, 0, 1]], [1, 2, -(1 << 31)])
    b = _state([[1, 0, -3], [127, 3, 0]], [[7, 7, 1], [-8, 0, 0]], [2, 3, (1 << 31) - 1])
    base = _state([[0, 0, 0], [0, 0, 0]], [[0] * 3] * 2, [0, 0, 0])
    base.tensors["w"][0] = [5, 6, 7]  # a row no device trains: kept
    out = aggregate(_layout(), [a, b], [1, 1], 40, base, 4)
    # q = 16p + rem: device a has q = 8, device b q = 23 at [0, 0]: 15.5 rounds to 16 = (p 1, rem 0)
    assert out.tensors["w"][0].tolist() == [5, 6, 7]
    q = fixed_point(out.tensors["w"][1:], out.tensors["w.remainder"], 4)
    qa, qb = (fixed_point(s.tensors["w"][1:], s.tensors["w.remainder"], 4) for s in (a, b))
    assert np.array_equal(q, round_half_even(qa + qb, 2))
    assert q[0, 0] == 16 and out.tensors["w"][1, 0] == 1
    assert np.abs(q).max() <= 127 * 16 and out.tensors["w"].min() >= -127
    # biases: (1+2)/2 = 1.5 -> 2, (2+3)/2 = 2.5 -> 2, (-2^31 + 2^31 - 1)/2 = -0.5 -> 0
    assert out.tensors["b"].tolist() == [2, 2, 0] and out.step == 40
    again = aggregate(_layout(), [b, a], [1, 1], 40, base, 4)  # the order of the replies does not matter
    assert all(np.array_equal(again.tensors[k], out.tensors[k]) for k in out.tensors)


def test_aggregate_identical_states_is_identity_and_weights_count():
    a = _state([[1, 2, 3], [4, 5, 6]], [[1, -2, 3], [0, 0, -8]], [9, -9, 0])
    b = _state([[2, 2, 3], [4, 5, 6]], [[1, -2, 3], [0, 0, -8]], [19, -9, 0])
    same = aggregate(_layout(), [a, a, a], [5, 1, 7], 3, a, 4)
    assert all(np.array_equal(same.tensors[k], a.tensors[k]) for k in a.tensors)
    heavy = aggregate(_layout(), [a, b], [3, 1], 3, a, 4)
    assert heavy.tensors["b"][0] == 12  # (3*9 + 19) / 4 = 11.5 -> 12


def test_non_iid_shards():
    y = np.repeat(np.arange(10), 100)
    shards = make_shards(y, 20, 30, 2, seed=1)
    assert all(len(s) == 30 and len(set(y[s])) == 2 for s in shards)
    rows = np.concatenate(shards)
    assert len(set(rows.tolist())) == len(rows)  # no row on two devices
    assert set(y[rows].tolist()) == set(range(10))
    assert [s.tolist() for s in make_shards(y, 20, 30, 2, seed=1)] == [s.tolist() for s in shards]
    iid = make_shards(y, 4, 50, None)
    assert all(len(set(y[s])) == 10 for s in iid)


def test_server_lr_scales_the_step_from_the_previous_global_state_exactly():
    from fractions import Fraction

    base = np.array([10, -4, 0, 100], np.int64)
    values = [np.array([13, -4, 1, 90]), np.array([14, 0, 2, 95])]
    assert np.array_equal(weighted_mean(values, [1, 1], base, Fraction(1)), weighted_mean(values, [1, 1]))
    # steps from base: 3.5, 2, 1.5, -7.5; x 3/2: 5.25, 3, 2.25, -11.25 -> 5, 3, 2, -11
    assert weighted_mean(values, [1, 1], base, Fraction(3, 2)).tolist() == [15, -1, 2, 89]
    with pytest.raises(ValueError):
        weighted_mean(values, [1, 1], base, Fraction(65))
    a = _state([[1, 0, -3], [100, 2, 0]], [[-8, 7, 0], [7, 0, 1]], [1, 2, 7])
    b = _state([[1, 2, -3], [127, 3, 0]], [[7, 7, 1], [-8, 0, 0]], [2, 3, 8])
    prev = _state([[0, 0, 0], [120, 0, 0]], [[0] * 3] * 2, [0, 0, 0])
    plain = aggregate(_layout(), [a, b], [1, 1], 40, prev, 4)
    assert all(np.array_equal(plain.tensors[k], aggregate(_layout(), [a, b], [1, 1], 40, prev, 4,
                                                          Fraction(1)).tensors[k]) for k in plain.tensors)
    twice = aggregate(_layout(), [a, b], [1, 1], 40, prev, 4, Fraction(2))
    q0, q1, q2 = (fixed_point(s.tensors["w"][1:], s.tensors["w.remainder"], 4) for s in (prev, plain, twice))
    # with rate 2 the fixed-point step doubles (before the clip to the int8 grid: 127 x 16)
    assert np.array_equal(q2, np.clip(q0 + round_half_even(2 * (fixed_point(a.tensors["w"][1:], a.tensors[
        "w.remainder"], 4) + fixed_point(b.tensors["w"][1:], b.tensors["w.remainder"], 4) - 2 * q0), 2),
        -127 * 16, 127 * 16))
    assert twice.tensors["b"].tolist() == [3, 5, 15]  # 0 + 2 * (1.5, 2.5, 7.5)
    assert q1[1, 0] != q2[1, 0]


@pytest.mark.parametrize("value", ["0", "-1", "65", "1/65", "fast"])
def test_cli_refuses_a_bad_server_lr_in_one_line(value, capsys):
    from tinytrain.cli import main

    assert main(["fleet", "model.onnx", "--data", "fashion-mnist:100", "--server-lr", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--server-lr {value}" in err[0]


def test_cli_refuses_a_non_positive_local_steps(capsys):
    from tinytrain.cli import main

    assert main(["fleet", "model.onnx", "--data", "fashion-mnist:100", "--local-steps", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--local-steps" in err[0] and "0 is not a positive integer" in err[0]
