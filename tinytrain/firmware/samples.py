"""The sample file the host writes for the QEMU harness (the C side: firmware/c/tt_samples.h,
firmware/c/tt_harness_qemu.c).

    offset        size    field
    0             4       magic b"TTDS"
    4             4       version, uint32 little-endian (1)
    8             4       count N, uint32 LE
    12            4       sample_bytes S, uint32 LE: one int8 NHWC image in the model's input form (TT_INPUT_BYTES)
    16            N * S   images, int8, in the order they are used (a training file holds one per step)
    16 + N * S    N * 4   labels, int32 LE
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MAGIC = b"TTDS"
VERSION = 1
HEADER = np.dtype([("magic", "S4"), ("version", "<u4"), ("count", "<u4"), ("sample_bytes", "<u4")])


def encode(x: np.ndarray, y: np.ndarray) -> bytes:
    """The file's bytes for int8 images ``x`` (N, ...) and integer labels ``y`` (N,)."""
    x = np.ascontiguousarray(x)
    if x.dtype != np.int8:
        raise ValueError(f"samples: images must be int8 (the model's input form), got {x.dtype}")
    y = np.asarray(y)
    if y.shape != (len(x),):
        raise ValueError(f"samples: {len(x)} images but labels of shape {y.shape}")
    header = np.array([(MAGIC, VERSION, len(x), x[0].nbytes if len(x) else 0)], HEADER)
    return header.tobytes() + x.tobytes() + y.astype("<i4").tobytes()


def write(path: str | Path, x: np.ndarray, y: np.ndarray) -> None:
    Path(path).write_bytes(encode(x, y))


def decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, S) int8, labels (N,) int32) of a sample file's bytes."""
    if len(data) < HEADER.itemsize:
        raise ValueError("samples: shorter than the 16-byte header")
    h = np.frombuffer(data[:HEADER.itemsize], HEADER)[0]
    if h["magic"] != MAGIC or h["version"] != VERSION:
        raise ValueError(f"samples: not a version-{VERSION} TTDS file")
    n, s = int(h["count"]), int(h["sample_bytes"])
    if len(data) != HEADER.itemsize + n * s + 4 * n:
        raise ValueError(f"samples: {len(data)} bytes, expected {HEADER.itemsize + n * s + 4 * n}")
    body = np.frombuffer(data, np.int8, n * s, HEADER.itemsize).reshape(n, s)
    labels = np.frombuffer(data, "<i4", n, HEADER.itemsize + n * s)
    return body, labels.astype(np.int32)
