"""Float training of a zoo model in PyTorch (one recipe for every model: ``COMMON``) and its test accuracy.
"""

from __future__ import annotations

import math
import time

import numpy as np

from models.data import to_input

COMMON = {"batch_size": 64, "optimizer": "AdamW", "lr": 3e-3, "weight_decay": 5e-5,
          "schedule": "OneCycle (cosine, 20% warm-up)", "augment": "random horizontal flip",
          "test_size": 2000, "calib_size": 300, "seed": 0, "calibration": "MinMax"}


def train_float(model, x_u8: np.ndarray, y: np.ndarray, epochs: int, seed: int, log) -> dict:
    import torch
    import torch.nn.functional as F
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    bs = COMMON["batch_size"]
    steps_per_epoch = math.ceil(len(x_u8) / bs)
    opt = torch.optim.AdamW(model.parameters(), lr=COMMON["lr"], weight_decay=COMMON["weight_decay"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=COMMON["lr"], total_steps=epochs * steps_per_epoch,
                                                pct_start=0.2)
    model = model.to(memory_format=torch.channels_last).train()
    xt = torch.from_numpy(x_u8)
    yt = torch.from_numpy(y)
    t0 = time.time()
    last_loss = float("nan")
    for ep in range(epochs):
        perm = torch.randperm(len(xt), generator=g)
        tot, correct, seen = 0.0, 0, 0
        for s in range(steps_per_epoch):
            idx = perm[s * bs:(s + 1) * bs]
            xb = xt[idx].float().div_(255.0)
            flip = torch.rand(len(idx), generator=g) < 0.5
            xb[flip] = xb[flip].flip(-1)
            xb = xb[:, None].expand(-1, 3, -1, -1).contiguous(memory_format=torch.channels_last)
            yb = yt[idx]
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(idx)
            correct += int((out.argmax(1) == yb).sum())
            seen += len(idx)
        last_loss = tot / seen
        log(f"  epoch {ep + 1}/{epochs}: loss {last_loss:.4f} train-acc {correct / seen:.4f} "
            f"({time.time() - t0:.0f}s)")
    model = model.to(memory_format=torch.contiguous_format).eval()
    return {"final_train_loss": round(last_loss, 4), "train_seconds": round(time.time() - t0, 1)}


def eval_torch(model, x_u8: np.ndarray, y: np.ndarray) -> float:
    import torch
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x_u8), 200):
            xb = torch.from_numpy(to_input(x_u8[i:i + 200]))
            correct += int((model(xb).argmax(1).numpy() == y[i:i + 200]).sum())
    return correct / len(x_u8)
