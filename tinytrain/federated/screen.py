"""The server's check of a device's reply before it may be averaged in (docs/guide/fleet.md, "Safety").

In this order: its bytes must match the sha256 the device computed (else ``corrupt``: changed on the way); the
state's layout fingerprint must be the plan's (else ``refused``: another model or plan, one line on stderr); the
bytes must decode as a state of this layout (else ``corrupt``); its int8 weights must be on the device's grid [-127, 127] (else ``corrupt``); its loss and any float
state must be finite (else ``nonfinite``: a diverged device). Only ``ok`` replies are aggregated.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from dataclasses import dataclass

import numpy as np

from tinytrain.codegen.state import HEADER_BYTES, MAGIC, unpack
from tinytrain.federated.client import Reply
from tinytrain.simulator import TrainState

VERDICTS = ("ok", "refused", "corrupt", "nonfinite")


@dataclass(frozen=True)
class Verdict:
    device: int
    verdict: str   # one of VERDICTS
    message: str = ""


def screen(built, reply: Reply) -> tuple[Verdict, TrainState | None]:
    """(the verdict, the decoded state when ``ok``) of one reply against the task's layout."""
    data = reply.state
    if hashlib.sha256(data).hexdigest() != reply.sha256:
        return Verdict(reply.device, "corrupt", "sha256 mismatch"), None
    if len(data) >= HEADER_BYTES and data[:4] == MAGIC:
        fp = struct.unpack_from("<I", data, 8)[0]
        if fp != built.fingerprint:
            msg = (f"device {reply.device} refused: its state layout {fp:08x} is not the plan's "
                   f"{built.fingerprint:08x} (another model or plan); rebuild its training step from this plan")
            print(f"tinytrain fleet: {msg}", file=sys.stderr)
            return Verdict(reply.device, "refused", msg), None
    if reply.samples <= 0:
        return Verdict(reply.device, "corrupt", f"sample count {reply.samples}"), None
    try:
        state = unpack(built.step_graph, data)
    except ValueError as e:
        return Verdict(reply.device, "corrupt", str(e)), None
    for e in built.layout:
        a = state.tensors[e.name]
        if e.kind == "f32" and not np.isfinite(a).all():
            return Verdict(reply.device, "nonfinite", f"{e.name} holds NaN or Inf"), None
        if e.kind == "i8" and not e.name.endswith(".remainder") and (a == -128).any():
            return Verdict(reply.device, "corrupt", f"{e.name} holds -128 (off the device's grid)"), None
    if not math.isfinite(reply.loss):
        return Verdict(reply.device, "nonfinite", "its training loss is NaN or Inf"), None
    return Verdict(reply.device, "ok"), state
