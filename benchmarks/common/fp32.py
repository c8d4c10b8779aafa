"""The fp32 reference of the accuracy studies: the PyTorch twin of an int8 graph, and fine-tuning it.

The twin (``torch_twin``): every weight and bias dequantized, every activation clamped to its dequantized int8
range, the same new head's initial weights; residual adds read their shortcut by name. Each op computes itself as its
module says (``OpDef.twin``, tinytrain/ops/<op>.py). Used by transfer_study.py's upper-bound row, fp32_ceiling.py,
remainders.py and ic_demo.py.

Fine-tuning it (``fit_predict``): two optimizers, batch-1 SGD (the device's) and Adam on batches of 32 (not available
on the device: 8 bytes of state per parameter and a batch of activations). Either runs under a lr schedule over its
steps (constant, or cosine from ``tinytrain.lr_schedule``, the device's); the last ``last_k`` conv /
fully-connected layers are trained (weights and biases), the head (the last of them) at its own lr. ``grid_bits`` 8
keeps every trained weight on its int8 grid (stochastic rounding after each step, as the device stores it), the
arithmetic otherwise fp32: it isolates what storing the weights in int8 costs; 16 a grid 256 times finer.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from tinytrain.ir import Role
from tinytrain.ops import get_op


def _dequantized(t) -> np.ndarray:
    """A constant's real values (per output channel along axis 0 where it has several scales); conv weights OIHW."""
    q = t.quant
    s = np.asarray(q.scale, np.float64)
    zp = np.asarray(q.zero_point, np.float64)
    d = t.data.astype(np.float64)
    if len(s) > 1:
        shape = (-1,) + (1,) * (d.ndim - 1)
        d = (d - zp.reshape(shape)) * s.reshape(shape)
    else:
        d = (d - zp[0]) * s[0]
    return d.transpose(0, 3, 1, 2) if d.ndim == 4 else d  # OHWI -> OIHW


def torch_twin(graph):
    """An fp32 torch module computing the graph's forward on dequantized values (NCHW inside)."""
    import torch
    import torch.nn.functional as F

    ops = SimpleNamespace(torch=torch, F=F)

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict()
            self.steps = []
            for k, node in enumerate(graph.nodes):
                for j, name in enumerate(node.inputs):
                    t = graph.tensors[name] if name else None
                    if t is not None and t.role in (Role.WEIGHT, Role.BIAS):
                        w = torch.tensor(_dequantized(t), dtype=torch.float32)
                        self.params[f"{'wb'[j - 1] if j in (1, 2) else 'c'}{k}"] = torch.nn.Parameter(w)
                self.steps.append((k, node))

        def forward(self, x):  # x: N,C,H,W float
            return self.run(x, 0, len(self.steps)).flatten(1)

        def run(self, x, lo: int, hi: int):
            """steps[lo:hi] on x (N,C,H,W): the part of the network between two nodes, shapes kept. A node reads
            its inputs by name (a residual's shortcut), x for a tensor from before ``lo``."""
            env = {}
            for k, node in self.steps[lo:hi]:
                rule = get_op(node.op).twin
                if rule is None:
                    raise NotImplementedError(f"torch twin: {node.op}")
                xs = [env.get(name, x) for name in node.inputs if name and not graph.tensors[name].is_constant]
                params = [self.params[f"{c}{k}"] for c in "wb" if f"{c}{k}" in self.params]
                x = rule(ops, node, xs, params, _clamp(graph, node))
                env[node.outputs[0]] = x
            return x

    return Twin()


def _clamp(graph, node) -> tuple[float, float]:
    """The real range of the node's int8 output (its act_min .. act_max, or the whole int8 range)."""
    a, q = node.attrs, graph.tensors[node.outputs[0]].quant
    lo, hi = getattr(a, "act_min", -128), getattr(a, "act_max", 127)
    if q is None:
        return float("-inf"), float("inf")
    return (lo - q.zp) * q.s, (hi - q.zp) * q.s


@dataclass(frozen=True)
class Fp32Recipe:
    last_k: int  # weights + biases of the last k conv / fully-connected layers (1: the classifier only)
    optimizer: str  # "sgd" (batch 1) or "adam" (batch 32)
    epochs: int
    lr: float  # backbone weights and biases
    head_lr: float
    schedule: str = "cosine"  # or "constant"
    grid_bits: int = 0  # 8: after every step each trained weight is stochastically rounded back onto its int8 grid;
    # 16: onto a grid 256x finer (an int16 copy of it); 0: fp32 weights


    @property
    def batch(self) -> int:
        return 1 if self.optimizer == "sgd" else 32

    def describe(self) -> str:
        how = "batch-1 SGD" if self.optimizer == "sgd" else "Adam, batch 32"
        if self.last_k == 1:
            what, lrs = "classifier-only", f"lr {self.head_lr:g}"
        else:
            what, lrs = f"last-k:{self.last_k}", f"lr {self.lr:g}, head lr {self.head_lr:g}"
        grid = f", weights kept on an int{self.grid_bits} grid" if self.grid_bits else ""
        return f"{what}, {how}, {self.schedule}, {lrs}, {self.epochs} epoch{'s' if self.epochs > 1 else ''}{grid}"


def _weight_grids(graph, model, trained: set[int]) -> list[tuple]:
    """(parameter, scale, zero point) of every trained weight, the quantization broadcast along its output
    channels (axis 0, as torch_twin lays the weights out)."""
    import torch

    grids = []
    for k in sorted(trained):
        p = model.params[f"w{k}"]
        q = graph.tensors[graph.nodes[k].inputs[1]].quant
        shape = (-1,) + (1,) * (p.dim() - 1)
        grids.append((p, torch.tensor(np.asarray(q.scale, np.float32)).reshape(shape),
                      torch.tensor(np.asarray(q.zero_point, np.float32)).reshape(shape)))
    return grids


def _round_onto_grids(grids: list[tuple], bits: int, generator) -> None:
    """w <- (clamp(floor((w / s + zp) f + u), -127 f, 127 f) / f - zp) * s, u uniform in [0, 1), f = 2^(bits - 8):
    for 8 bits the int8 weight the device stores after a QAS step with stochastic rounding (ops/sgd_update.py), in
    expectation the fp32 step."""
    import torch

    f = float(2 ** (bits - 8))
    with torch.no_grad():
        for p, s, zp in grids:
            u = torch.rand(p.shape, generator=generator)
            p.copy_((torch.clamp(torch.floor((p / s + zp) * f + u), -127 * f, 127 * f) / f - zp) * s)


def fit_predict(graph, x: np.ndarray, y: np.ndarray, rows: np.ndarray, x_eval: np.ndarray, recipe: Fp32Recipe,
                seed: int) -> np.ndarray:
    """Train the twin of ``graph`` on the int8 inputs ``x[rows]`` (labels ``y[rows]``) as ``recipe`` says; the
    predicted class of every row of the int8 inputs ``x_eval``. One thread, seeded: the same call gives the same
    predictions."""
    import torch
    import torch.nn.functional as F

    from tinytrain.lr_schedule import Schedule

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    q = graph.tensors[graph.inputs[0]].quant

    def floats(xs: np.ndarray):  # int8 NHWC -> the dequantized float input, NCHW
        return torch.tensor(((xs.astype(np.float32) - q.zp) * np.float32(q.s)).transpose(0, 3, 1, 2).copy())

    model = torch_twin(graph)
    layers = [k for k, n in enumerate(graph.nodes) if n.op in ("conv2d", "fully_connected")]
    trained, head = set(layers[-recipe.last_k:]), layers[-1]
    groups: dict[str, list] = {"backbone": [], "head": []}
    for name, p in model.params.items():
        k = int(name[1:])
        p.requires_grad_(k in trained)
        if k in trained:
            groups["head" if k == head else "backbone"].append(p)
    params = [{"params": groups["backbone"], "lr": recipe.lr}, {"params": groups["head"], "lr": recipe.head_lr}]
    opt = torch.optim.SGD(params) if recipe.optimizer == "sgd" else torch.optim.Adam(params)
    rng = np.random.default_rng(seed)
    batches = [rows[perm[i: i + recipe.batch]] for perm in (rng.permutation(len(rows)) for _ in range(recipe.epochs))
               for i in range(0, len(rows) - recipe.batch + 1, recipe.batch)]
    schedule = Schedule.over(len(batches), 0.0) if recipe.schedule == "cosine" else None
    base = [g["lr"] for g in opt.param_groups]
    labels = torch.tensor(y)
    grids = _weight_grids(graph, model, trained) if recipe.grid_bits else []
    generator = torch.Generator().manual_seed(seed)
    for step, batch in enumerate(batches):
        batch = np.sort(batch)
        if schedule is not None:
            for g, lr in zip(opt.param_groups, base):
                g["lr"] = lr * float(schedule.factor(step))
        opt.zero_grad()
        F.cross_entropy(model(floats(x[batch])), labels[batch]).backward()
        opt.step()
        _round_onto_grids(grids, recipe.grid_bits, generator)
    with torch.no_grad():
        return np.concatenate([model(floats(x_eval[i: i + 500])).argmax(1).numpy() for i in range(0, len(x_eval), 500)])
