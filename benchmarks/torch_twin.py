"""The fp32 PyTorch twin of an int8 graph: the fp32 reference of the transfer and VWW studies (fp32_finetune.py,
vww_ceiling.py). Every weight and bias dequantized, every activation clamped to its dequantized int8 range, the
same new head's initial weights; residual adds read their shortcut by name."""

from __future__ import annotations

import numpy as np


def torch_twin(graph):
    """An fp32 torch module computing the graph's forward on dequantized values (NCHW inside)."""
    import torch
    import torch.nn.functional as F

    def deq(t, axis0=True):
        q = t.quant
        s = np.asarray(q.scale, np.float64)
        zp = np.asarray(q.zero_point, np.float64)
        d = t.data.astype(np.float64)
        if len(s) > 1:
            shape = (-1,) + (1,) * (d.ndim - 1)
            return (d - zp.reshape(shape)) * s.reshape(shape)
        return (d - zp[0]) * s[0]

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict()
            self.steps = []
            for k, node in enumerate(graph.nodes):
                if node.op in ("conv2d", "fully_connected"):
                    w = deq(graph.tensors[node.inputs[1]])
                    if node.op == "conv2d":
                        w = w.transpose(0, 3, 1, 2)  # OHWI -> OIHW
                    self.params[f"w{k}"] = torch.nn.Parameter(torch.tensor(w, dtype=torch.float32))
                    if len(node.inputs) > 2 and node.inputs[2]:
                        b = deq(graph.tensors[node.inputs[2]])
                        self.params[f"b{k}"] = torch.nn.Parameter(torch.tensor(b, dtype=torch.float32))
                self.steps.append((k, node))

        def forward(self, x):  # x: N,C,H,W float
            return self.run(x, 0, len(self.steps)).flatten(1)

        def run(self, x, lo: int, hi: int):
            """steps[lo:hi] on x (N,C,H,W): the part of the network between two nodes, shapes kept. A node reads
            its inputs by name (a residual's shortcut), x for a tensor from before ``lo``."""
            env = {}
            for k, node in self.steps[lo:hi]:
                a = node.attrs
                x = env.get(node.inputs[0], x)
                if node.op in ("conv2d", "fully_connected", "avg_pool2d", "add"):
                    yq = graph.tensors[node.outputs[0]].quant
                    c_lo, c_hi = (a.act_min - yq.zp) * yq.s, (a.act_max - yq.zp) * yq.s
                b = self.params[f"b{k}"] if f"b{k}" in self.params else None
                if node.op == "conv2d":
                    pt, pl, pb, pr = a.padding
                    x = F.conv2d(F.pad(x, (pl, pr, pt, pb)), self.params[f"w{k}"], b, a.stride, 0, a.dilation, a.groups)
                    x = torch.clamp(x, c_lo, c_hi)
                elif node.op == "fully_connected":
                    x = torch.clamp(F.linear(x.flatten(1), self.params[f"w{k}"], b), c_lo, c_hi)
                elif node.op == "avg_pool2d":
                    pt, pl, pb, pr = a.padding
                    x = F.avg_pool2d(F.pad(x, (pl, pr, pt, pb)), a.kernel, a.stride)
                elif node.op == "add":
                    x = torch.clamp(x + env.get(node.inputs[1], x), c_lo, c_hi)
                elif node.op == "reshape":
                    x = x.flatten(1)
                elif node.op in ("softmax", "dequantize"):
                    pass  # logits are trained with softmax cross-entropy
                else:
                    raise NotImplementedError(f"torch twin: {node.op}")
                env[node.outputs[0]] = x
            return x

    return Twin()

