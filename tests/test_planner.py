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
