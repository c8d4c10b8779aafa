"""PyTorch's memory for one fp32 training step (batch 1) of a zoo model under an update plan.

Run as a script in a fresh process (``python benchmarks/common/torch_memory.py MODEL PLAN_SPEC``) so the process
figures are its own; prints one JSON object. Method:

- the zoo model (models/, BatchNorm folded into the convolutions: the same layers as the int8 graph, so a
  plan's ``conv`` indices name the same layers), eval mode, fp32, one thread, 128x128 input, 10 classes;
- ``requires_grad`` only on what the plan updates: the biases of the last ``bias_last_k`` layers and the
  weights of the listed layers — whole tensors (PyTorch cannot differentiate a subset of channels);
- one step = forward, cross-entropy, backward, ``torch.optim.SGD(lr).step()`` (no momentum);
- ``step_peak_bytes``: the peak of tensor bytes allocated during a step over those alive before it, from
  the profiler's memory timeline (``torch.profiler.profile(profile_memory=True, record_shapes=True,
  with_stack=True)._memory_profile().timeline``: every tensor CREATE (+bytes) and DESTROY (-bytes) in time
  order; tensors alive before the step are PREEXISTING and not counted). The second step is profiled
  (gradients reset to None first, so they are allocated again); the first is a warm-up;
- ``tensor_peak_bytes`` = ``step_peak_bytes`` + fp32 parameters (alive throughout): PyTorch's counterpart of
  our peak SRAM (our int8 weights in flash correspond to its frozen fp32 parameters in RAM, so
  ``trainable_param_bytes`` is given apart as well);
- ``rss_peak_bytes``: the process's peak resident set (``ru_maxrss``) after both steps, and
  ``rss_step_delta_bytes``: that peak minus the resident set just before the first step (interpreter,
  torch, model and input already loaded).
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: this file runs as a script
from common import ROOT  # noqa: E402  (puts the checkout on sys.path)


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def layer_modules(model):
    import torch.nn as nn

    return [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def trainable(layers, plan) -> list:
    """The tensors a plan updates: biases of the last bias_last_k layers, weights of the listed layers."""
    n = len(layers)
    params = []
    for k, m in enumerate(layers):
        if k in {w.conv for w in plan.weights}:
            params.append(m.weight)
        if k >= n - plan.bias_last_k and m.bias is not None:
            params.append(m.bias)
    return params


def measure(model_name: str, plan_spec: str, input_size: int = 128, classes: int = 10, lr: float = 0.01) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from models import build_model, fold_bn
    from tinytrain.training.sparse import Plan, WeightUpdate, load_plan

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = fold_bn(build_model(model_name, num_classes=classes))
    layers = layer_modules(model)
    n = len(layers)
    if plan_spec == "full":
        plan = Plan(n, tuple(WeightUpdate(i, 1.0) for i in range(n)))
    elif plan_spec == "bias-only":
        plan = Plan(n)
    elif plan_spec.startswith("last-k:"):
        k = int(plan_spec.split(":")[1])
        plan = Plan(k, tuple(WeightUpdate(i, 1.0) for i in range(n - k, n)))
    else:
        plan = load_plan(plan_spec)
    for p in model.parameters():
        p.requires_grad_(False)
    params = trainable(layers, plan)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=lr)
    x = torch.randn(1, 3, input_size, input_size)
    y = torch.tensor([1])

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    rss_before = _rss_now()
    step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    running = peak = 0
    for _, action, _, nbytes in sorted(prof._memory_profile().timeline, key=lambda e: e[0]):
        if action.name == "CREATE":
            running += nbytes
        elif action.name == "DESTROY":
            running -= nbytes
        peak = max(peak, running)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "model": model_name, "plan": plan_spec, "layers": n,
        "param_bytes": param_bytes,
        "trainable_param_bytes": sum(p.numel() * p.element_size() for p in params),
        "step_peak_bytes": int(peak),
        "tensor_peak_bytes": int(peak) + param_bytes,
        "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_step_delta_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before,
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
