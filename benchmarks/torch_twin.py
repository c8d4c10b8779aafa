"""The fp32 PyTorch twin of an int8 graph: the fp32 reference of the transfer and VWW studies (fp32_finetune.py,
vww_ceiling.py). Every weight and bias dequantized, every activation clamped to its dequantized int8 range, the
same new head's initial weights; residual adds read their shortcut by name. Each op computes itself as its module
says (``OpDef.twin``, tinytrain/ops/<op>.py)."""

from __future__ import annotations

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
