"""How an fp32 SGD step lands on int8 weights: round-to-nearest vs stochastic rounding (docs/design.md §3).

    .venv/bin/python benchmarks/rounding.py [--epochs 3] [--lrs 0.003,0.01,0.03]

Transfer learning as on the device: the ImageNet MobileNetV1-0.25 (128x128, uint8 TF1 model from
../shared) gets a new 2-class head and learns Visual Wake Words (../shared/data/vww96, 600 train /
200 held-out images, stratified) with batch-1 SGD + QAS under the plan last-k:4 (weights and biases of
the last 4 layers), once per rounding mode. The frozen prefix of the network is computed once per image
(bit-identical to running it every step). Reports held-out accuracy, mean training loss of the last
epoch, and where the fp32 weight steps v = lr G / s_w fall: the share with |v| < 0.5 LSB (which
nearest rounding turns into no update at all). Writes benchmarks/results/rounding.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from tinytrain.data import load_dataset, model_inputs, stratified_split
from tinytrain.frontends import load_model
from tinytrain.ir import Graph, Role
from tinytrain.names import LOSS
from tinytrain.ops.sgd_update import Rounding
from tinytrain.simulator import execute, forward, init_state, train_step, with_state
from tinytrain.training.head import new_head
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import layers, preset
from tinytrain.training.train_graph import build_training_graph

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
SHARED = ROOT.parent / "shared"


def suffix(graph: Graph, start: str) -> Graph:
    """The nodes computing from ``start`` on, with ``start`` as the input (chain-shaped prefixes only)."""
    producer = next(k for k, n in enumerate(graph.nodes) if start in n.outputs)
    nodes = graph.nodes[producer + 1:]
    available = {start} | {n for n, t in graph.tensors.items() if t.has_data}
    for n in nodes:
        assert all(i in available for i in n.inputs if i), f"{n.name} reads across the cut"
        available.update(n.outputs)
    tensors = dict(graph.tensors)
    tensors[start] = replace(tensors[start], role=Role.INPUT)
    used = {start} | {i for n in nodes for i in (*n.inputs, *n.outputs) if i}
    return replace(graph, tensors={k: v for k, v in tensors.items() if k in used}, nodes=nodes, inputs=(start,))


def run(head: Graph, cut: str, feats, y, test_feats, y_test, lr: float, rounding: Rounding, epochs: int, seed: int):
    g = suffix(head, cut)
    t = build_training_graph(g, preset("last-k:4", g, lr=lr), UpdateConfig(rounding=rounding, seed=seed))
    updates = [n for n in t.nodes if n.op == "sgd_update" and t.tensors[n.inputs[0]].role is Role.WEIGHT]
    state = init_state(t)
    rng = np.random.default_rng(seed)
    small = total = moved = 0
    losses = []
    for _ in range(epochs):
        losses = []
        for k in rng.permutation(len(y)):
            before = {u.inputs[0]: state.tensors[u.inputs[0]].copy() for u in updates}
            out = train_step(t, state, feats[k : k + 1], int(y[k]), keep_all=True)
            losses.append(float(out[LOSS][0]))
            for u in updates:
                v = out[u.inputs[1]] * t.tensors[u.inputs[2]].data.reshape((-1,) + (1,) * (out[u.inputs[1]].ndim - 1))
                small += int((np.abs(v) < 0.5).sum())
                total += v.size
                moved += int((state.tensors[u.inputs[0]] != before[u.inputs[0]]).sum())
    trained = with_state(g, state)
    probs = forward(trained, {cut: test_feats})[g.outputs[0]]
    acc = float((probs.argmax(axis=1) == y_test).mean())
    return {"lr": lr, "rounding": rounding.value, "seed": seed, "held_out_accuracy": acc,
            "last_epoch_loss": float(np.mean(losses)), "steps_below_half_lsb": small / total,
            "weight_elements_changed_per_step": moved / (total or 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lrs", default="0.003,0.01,0.03")
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    model_path = SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite"
    data_path = SHARED / "data" / "vww96" / "vww96_dev800.npz"
    if not model_path.exists() or not data_path.exists():
        raise SystemExit(f"needs {model_path} and {data_path} (../shared)")
    head = new_head(load_model(str(model_path)), 2)
    ls = layers(head)
    cut = ls[-4].inputs[0]  # input of the lowest updated layer: everything before it is frozen
    ds = load_dataset(data_path)
    train_idx, test_idx = stratified_split(ds.y, 0.25)
    x = model_inputs(head, ds.x)
    t0 = time.time()
    prefix_out = execute(replace(head, outputs=(cut,)), {head.inputs[0]: x})[cut]
    print(f"frozen prefix of {len(ds.y)} images: {time.time() - t0:.0f} s")
    rows = []
    for lr in map(float, args.lrs.split(",")):
        for rounding in (Rounding.NEAREST, Rounding.STOCHASTIC):
            for seed in range(args.seeds):
                r = run(head, cut, prefix_out[train_idx], ds.y[train_idx], prefix_out[test_idx], ds.y[test_idx],
                        lr, rounding, args.epochs, seed)
                rows.append(r)
                print(f"lr {lr:<6} {rounding.value:<10} seed {seed}: held-out acc {r['held_out_accuracy']:.3f}  "
                      f"last-epoch loss {r['last_epoch_loss']:.3f}  |v|<0.5 LSB {100 * r['steps_below_half_lsb']:.1f} %  "
                      f"weights changed/step {100 * r['weight_elements_changed_per_step']:.2f} %", flush=True)
    out = ROOT / "benchmarks" / "results" / "rounding.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": model_path.name, "data": data_path.name, "plan": "last-k:4",
                               "train": len(train_idx), "held_out": len(test_idx), "epochs": args.epochs,
                               "runs": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
