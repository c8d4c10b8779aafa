"""Clamp masks saved as bits (training/masks.py, ops/clamp_mask_packed.py): the ops' reference semantics against
``clamp_mask``, what the pass replaces and what it keeps, and the simulator's training state, identical with and
without masks. (The C kernels against the simulator: tests/codegen/test_codegen_train.py.)"""

import numpy as np
import pytest

from ir_builders import tiny_mobilenet
from tinytrain.ir import DType, Role, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.clamp_mask import ClampMaskAttrs
from tinytrain.ops.clamp_mask_packed import ClampMaskPackedAttrs, packed_shape
from tinytrain.simulator import init_state, train_step
from tinytrain.training.autodiff import is_forward
from tinytrain.training.fuse_masks import fuse_mean_masks
from tinytrain.training.masks import save_masks
from tinytrain.training.sparse import Plan, WeightUpdate, preset
from tinytrain.training.train_graph import build_training_graph
from tinytrain.verify import verify


@pytest.mark.parametrize("shape", [(1, 4, 4, 8), (3, 5, 3, 7), (2, 1), (1, 1, 1, 13)])
@pytest.mark.parametrize("bounds", [(-128, 127), (-5, 127), (-128, 0), (-20, 30)])
def test_packed_mask_gives_clamp_masks_gradient_exactly(shape, bounds):
    """Values on and beyond both bounds; sizes that are not a multiple of 8; a batch of several samples."""
    rng = np.random.default_rng(sum(shape) + bounds[0] + 128)
    y = rng.integers(-128, 128, shape).astype(np.int8)
    y.flat[:4] = (bounds[0], bounds[1], bounds[0] + 1, bounds[1] - 1)[: y.size]
    g = rng.standard_normal(shape).astype(np.float32)
    attrs = ClampMaskAttrs(*bounds)
    yt = Tensor("y", (1,) + shape[1:], DType.INT8, Role.SAVED)
    gt = Tensor("g", (1,) + shape[1:], DType.FLOAT32, Role.GRADIENT)
    pack, apply, plain = get_op("pack_clamp_mask"), get_op("clamp_mask_packed"), get_op("clamp_mask")
    (bt_shape,) = pack.infer_shapes(attrs, [yt])
    assert bt_shape == packed_shape(yt.shape) == (1, -(-yt.size // 8))
    bt = Tensor("bits", bt_shape, DType.UINT8, Role.SAVED)
    (bits,) = pack.reference(attrs, [y], [yt], [bt])
    assert bits.dtype == np.uint8 and bits.shape == (shape[0], bt_shape[1])
    inside = (y > bounds[0]) & (y < bounds[1])
    for n in range(shape[0]):  # bit i % 8 of byte i // 8, LSB first; unused bits of the last byte 0
        flat = inside[n].ravel()
        for i in range(bt_shape[1] * 8):
            assert (bits[n, i // 8] >> (i % 8)) & 1 == (flat[i] if i < flat.size else 0)
    assert apply.infer_shapes(ClampMaskPackedAttrs(), [gt, bt]) == [gt.shape]
    (got,) = apply.reference(ClampMaskPackedAttrs(), [g, bits], [gt, bt], [gt])
    (want,) = plain.reference(attrs, [g, y], [gt, yt], [gt])
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()


def test_bits_that_do_not_fit_the_gradient_are_refused():
    gt = Tensor("g", (1, 4, 4, 8), DType.FLOAT32, Role.GRADIENT)
    with pytest.raises(ValueError, match="do not fit"):
        get_op("clamp_mask_packed").infer_shapes(ClampMaskPackedAttrs(), [gt, Tensor("b", (1, 15), DType.UINT8,
                                                                                          Role.SAVED)])


PLANS = {
    "bias-only": lambda g: preset("bias-only", g),
    "sparse": lambda g: Plan(bias_last_k=6, weights=(WeightUpdate(7, 0.25), WeightUpdate(9, 0.5),
                                                     WeightUpdate(10, 1.0))),
    "full": lambda g: preset("full", g),
}


@pytest.fixture(scope="module")
def model():
    return tiny_mobilenet()


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_masks_replace_exactly_the_outputs_only_clamp_masks_read(model, plan):
    g, _ = model
    tg = build_training_graph(g, PLANS[plan](g))
    m = save_masks(tg)
    verify(m)
    assert save_masks(m) == m  # idempotent
    consumers = tg.consumers()
    masked = {n.inputs[1] for n in tg.nodes if n.op == "clamp_mask"} - {n.inputs[1] for n in m.nodes
                                                                        if n.op == "clamp_mask"}
    assert masked or plan == "full"
    for name, readers in consumers.items():
        if tg.tensors[name].role is not Role.SAVED:
            continue
        backward = [n for n in readers if not is_forward(tg, n)]
        only_masks = all(n.op == "clamp_mask" and n.inputs[1] == name for n in backward)
        assert (name in masked) == only_masks, name
        # kept where a weight gradient (or the loss) reads its values; an ordinary forward activation otherwise
        assert m.tensors[name].role is (Role.ACTIVATION if only_masks else Role.SAVED)
    packs = {n.inputs[0]: n for n in m.nodes if n.op == "pack_clamp_mask"}
    assert set(packs) == masked
    order = [n.name for n in m.nodes]
    producers = m.producers()
    for y, pack in packs.items():
        assert order.index(pack.name) == order.index(producers[y].name) + 1  # right after the producer
        bits = m.tensors[pack.outputs[0]]
        assert bits.dtype == DType.UINT8 and bits.role is Role.SAVED and bits.shape == packed_shape(tg.tensors[y].shape)
        assert all(not is_forward(m, n) and n.op == "clamp_mask_packed" for n in m.consumers()[bits.name])
    forward = [is_forward(m, n) for n in m.nodes]
    assert forward == sorted(forward, reverse=True)  # the forward pass is still a prefix
    assert [n.name for n in m.nodes if n.op != "pack_clamp_mask"] == [n.name for n in tg.nodes]


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_masked_training_state_is_the_unmasked_one_exactly(model, plan):
    g, mb = model
    tg = build_training_graph(g, PLANS[plan](g))
    m = save_masks(tg)
    rng = np.random.default_rng(5)
    xs = rng.integers(-128, 128, (4,) + mb.calibration_input().shape[1:]).astype(np.int8)
    runs = []
    for graph in (tg, m):
        state = init_state(graph)
        losses = [train_step(graph, state, xs[k : k + 1], k % 5)["loss"].tobytes() for k in range(4)]
        runs.append((losses, {k: v.tobytes() for k, v in sorted(state.tensors.items())}))
    assert runs[0] == runs[1]


def test_mean_gradient_is_fused_into_the_packed_mask(model):
    """The mean's broadcast gradient is written masked (training/fuse_masks.py): no mean_grad, no broadcast tensor,
    the same masked gradient by name; the state after 4 steps is the unfused graph's exactly."""
    g, mb = model
    tg = save_masks(build_training_graph(g, PLANS["sparse"](g)))
    f = fuse_mean_masks(tg)
    verify(f)
    assert fuse_mean_masks(f) == f
    (broadcast,) = [n for n in tg.nodes if n.op == "mean_grad"]
    (mask,) = [n for n in tg.nodes if n.inputs[0] == broadcast.outputs[0]]
    (fused,) = [n for n in f.nodes if n.op == "mean_grad_masked"]
    assert not any(n.op == "mean_grad" for n in f.nodes) and broadcast.outputs[0] not in f.tensors
    assert (fused.name, fused.inputs, fused.outputs) == (mask.name, (broadcast.inputs[0], mask.inputs[1]), mask.outputs)
    assert [n.name for n in f.nodes] == [n.name for n in tg.nodes if n is not broadcast]
    rng = np.random.default_rng(6)
    xs = rng.integers(-128, 128, (4,) + mb.calibration_input().shape[1:]).astype(np.int8)
    runs = []
    for graph in (tg, f):
        state = init_state(graph)
        out = [train_step(graph, state, xs[k : k + 1], k % 5, keep_all=True) for k in range(4)]
        runs.append(([o[fused.outputs[0]].tobytes() for o in out], {k: v.tobytes() for k, v in state.tensors.items()}))
    assert runs[0] == runs[1]
