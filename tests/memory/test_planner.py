"""Arena planners: exact offsets on a small case, and properties on random lifetimes."""

from hypothesis import given, settings, strategies as st

from tinytrain.memory.planner import GreedyBySizePlanner, LinearPlanner

buffers = st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=40)


def _planned(planner_type, spec):
    p = planner_type(alignment=16)
    ids = [p.add_buffer(size, first, first + length) for size, first, length in spec]
    return p, ids


@settings(derandomize=True, max_examples=200)
@given(buffers)
def test_no_two_live_buffers_overlap_and_arena_bounds(spec):
    for planner_type in (GreedyBySizePlanner, LinearPlanner):
        p, ids = _planned(planner_type, spec)
        placed = [(p.offset(i), p.offset(i) + size, first, first + length) for i, (size, first, length) in zip(ids, spec)]
        for a in range(len(placed)):
            assert placed[a][0] % 16 == 0
            for b in range(a + 1, len(placed)):
                s0, e0, f0, l0 = placed[a]
                s1, e1, f1, l1 = placed[b]
                if f0 <= l1 and f1 <= l0:
                    assert e0 <= s1 or e1 <= s0, (placed[a], placed[b])
        assert p.total_size() >= p.max_live_bytes()
        assert p.total_size() <= LinearPlanner.total_size(_planned(LinearPlanner, spec)[0])


def test_greedy_exact_offsets():
    p = GreedyBySizePlanner(alignment=16)
    a = p.add_buffer(1000, 0, 1)   # largest, placed first at 0
    b = p.add_buffer(500, 1, 2)    # overlaps a at step 1 -> after a
    c = p.add_buffer(800, 2, 3)    # overlaps b only -> fits at 0
    assert (p.offset(a), p.offset(b), p.offset(c)) == (0, 1008, 0)
    assert p.total_size() == 1008 + 512
    assert p.max_live_bytes() == 1008 + 512


# ---- tied buffers (in-place outputs placed relative to the input they overwrite) ---------------------

chains = st.lists(st.tuples(st.integers(1, 4000), st.integers(0, 25), st.integers(0, 8), st.booleans(),
                            st.integers(-8, 8)), min_size=1, max_size=30)


def _planned_with_ties(planner_type, spec):
    """Buffers as in ``buffers``; a buffer with ``tied`` set starts when the previous one ends and is tied to
    it at ``k * 16`` bytes (an in-place output and the input it overwrites)."""
    p = planner_type(alignment=16)
    ids, ties, prev = [], [], None
    for size, first, length, tied, k in spec:
        if tied and prev is not None:
            first = p.buffers[prev].last_use
        i = p.add_buffer(size, first, first + length)
        if tied and prev is not None:
            p.tie(i, prev, 16 * k)
            ties.append((i, prev, 16 * k))
        ids.append(i)
        prev = i
    return p, ids, ties


@settings(derandomize=True, max_examples=150, deadline=None)
@given(chains)
def test_tied_groups_keep_their_distance_and_never_overlap_others(spec):
    for planner_type in (GreedyBySizePlanner, LinearPlanner):
        p, ids, ties = _planned_with_ties(planner_type, spec)
        group = {}
        for g, members in enumerate(p.groups()):
            for i, _ in members:
                group[i] = g
        for i, j, delta in ties:
            assert p.offset(i) == p.offset(j) + delta
        for a in ids:
            assert p.offset(a) >= 0 and p.offset(a) % 16 == 0
            for b in ids:
                if a < b and group[a] != group[b] and p.buffers[a].overlaps_in_time(p.buffers[b]):
                    sa, sb = p.offset(a), p.offset(b)
                    assert sa + p.buffers[a].size <= sb or sb + p.buffers[b].size <= sa
        assert p.total_size() >= p.max_live_bytes()


def test_tie_exact_offsets_and_live_bytes():
    p = GreedyBySizePlanner(alignment=16)
    a = p.add_buffer(1000, 0, 1)      # an input, dead after step 1
    b = p.add_buffer(400, 1, 2)       # the output of step 1 written over it, 48 bytes before it
    p.tie(b, a, -48)
    c = p.add_buffer(300, 0, 2)       # alive throughout
    assert p.offset(b) == p.offset(a) - 48
    # at step 1 the pair needs 48 + 1008 bytes, not 1008 + 400
    assert p.live_bytes(1) == 48 + 1008 + 304
    assert p.max_live_bytes() == 1360 and p.total_size() == 1360
    assert sorted((p.offset(b), p.offset(a), p.offset(c))) == [0, 48, 1056]


def test_tie_rejects_unaligned_and_contradicting_distances():
    import pytest

    p = GreedyBySizePlanner(alignment=16)
    a, b = p.add_buffer(64, 0, 1), p.add_buffer(64, 1, 2)
    with pytest.raises(ValueError, match="alignment"):
        p.tie(b, a, 8)
    p.tie(b, a, 16)
    p.tie(b, a, 16)  # the same tie again is fine
    with pytest.raises(ValueError, match="another distance"):
        p.tie(a, b, 0)
