"""Every shipped plan (models/plans/*.json on its zoo model, models/*.onnx): ``--engine sim`` against ``--engine c``,
bit for bit.

Two training steps on synthetic images (seed 0), both engines free-running from the initial state (what ``train``
does): the losses' float32 bits, the packed state (tt_state.bin: int8 weights, their remainders, int32 biases) and
the int8 logits of a third image under the trained weights are identical. The simulator's fp32 backward sums in the
kernels' float32 order with their fused multiply-adds (docs/design.md §3b, tinytrain/f32.py), so nothing is left to
a tolerance: one differing gradient bit would move a weight whose rounding threshold lies between the two.
"""

from pathlib import Path

import numpy as np
import pytest

from tinytrain import simulator
from tinytrain.codegen.state import pack
from tinytrain.data import model_inputs
from tinytrain.engines.host_c import CTrainer
from tinytrain.frontends import load_model
from tinytrain.training.sparse import load_plan
from tinytrain.training.train_graph import build_training_graph

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "models" / "plans").glob("*.json"))
STEPS = 2


@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_shipped_plan_trains_bit_for_bit_like_the_c(plan):
    g = load_model(ROOT / "models" / (plan.stem.rsplit("-", 1)[0] + ".onnx"))
    tg = build_training_graph(g, load_plan(plan))
    rng = np.random.default_rng(0)
    x = model_inputs(g, rng.integers(0, 256, (STEPS + 1, *g.tensors[g.inputs[0]].shape[1:]), dtype=np.uint8))
    y = rng.integers(0, g.tensors[g.outputs[0]].shape[-1], STEPS + 1)
    c = CTrainer(tg)  # the shared build cache (engine_c): the same C as train --engine c and the exactness benchmark
    losses = c.train(x[:STEPS], y[:STEPS])
    state = simulator.init_state(tg)
    sim_losses = np.asarray(simulator.train(tg, state, x[:STEPS], y[:STEPS]), np.float32)
    assert np.array_equal(sim_losses.view(np.uint32), np.asarray(losses, np.float32).view(np.uint32))
    assert pack(tg, state) == c.state_bytes()
    sim_logits = simulator.forward(simulator.with_state(g, state), {g.inputs[0]: x[STEPS:]})[g.outputs[0]]
    assert np.array_equal(sim_logits.reshape(len(sim_logits), -1), c.predict(x[STEPS:]))
