"""Fashion-MNIST for the model zoo: the IDX files of the Debian package ``dataset-fashion-mnist`` (read in place
from /usr/share/datasets/fashion-mnist or $TINYTRAIN_FASHION_MNIST), the tasks, the balanced subsets, and the
preprocessing shared by training, calibration and evaluation: the 28x28 uint8 image resized bilinearly (half-pixel
centres) to the model's input size, rounded back to uint8, replicated to 3 channels and fed as ``pixel / 255``.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

DATA_DIRS = [os.environ.get("TINYTRAIN_FASHION_MNIST", ""), "/usr/share/datasets/fashion-mnist"]
DATA_FILES = {
    "train_x": "train-images-idx3-ubyte.gz", "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz", "test_y": "t10k-labels-idx1-ubyte.gz",
}
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
# 2-class split used for the VWW-style MobileNetV1: "garment worn on the torso" (1) vs other (0),
# five Fashion-MNIST classes each, so the binary task is balanced like person / no-person.
TORSO = (0, 2, 3, 4, 6)


class DataMissing(RuntimeError):
    pass


def find_data_dir() -> Path:
    for d in DATA_DIRS:
        if d and all((Path(d) / f).is_file() for f in DATA_FILES.values()):
            return Path(d)
    raise DataMissing(
        "Fashion-MNIST not found (looked in /usr/share/datasets/fashion-mnist and "
        "$TINYTRAIN_FASHION_MNIST): run `make setup` (installs the Debian package dataset-fashion-mnist)")


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist() -> dict[str, np.ndarray]:
    d = find_data_dir()
    return {k: _read_idx(d / f) for k, f in DATA_FILES.items()}


def task_labels(y: np.ndarray, task: str) -> np.ndarray:
    if task == "fmnist10":
        return y.astype(np.int64)
    if task == "fmnist2-torso":
        return np.isin(y, TORSO).astype(np.int64)
    raise ValueError(task)


def task_num_classes(task: str) -> int:
    return {"fmnist10": 10, "fmnist2-torso": 2}[task]


def balanced_subset(y: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n indices, the same count from each of the 10 original classes, in random order."""
    per = n // 10
    idx = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per] for c in range(10)])
    return rng.permutation(idx)


def resize_u8(x28: np.ndarray, size: int) -> np.ndarray:
    """(N,28,28) uint8 -> (N,size,size) uint8, bilinear (half-pixel centres), rounded."""
    import torch
    import torch.nn.functional as F
    out = np.empty((len(x28), size, size), np.uint8)
    for i in range(0, len(x28), 1000):
        t = torch.from_numpy(x28[i:i + 1000].astype(np.float32))[:, None]
        r = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False)
        out[i:i + 1000] = r[:, 0].round().clamp(0, 255).to(torch.uint8).numpy()
    return out


def to_input(x_u8: np.ndarray) -> np.ndarray:
    """(N,H,W) uint8 -> (N,3,H,W) float32 in [0,1]: the float model's input."""
    x = x_u8.astype(np.float32) / np.float32(255.0)
    return np.ascontiguousarray(np.repeat(x[:, None], 3, axis=1))


def export_npz(path: str | Path, x_u8: np.ndarray, y: np.ndarray) -> None:
    """Write a tinytrain DATA file: x (N,H,W,3) uint8, y (N,) int64."""
    np.savez_compressed(path, x=np.repeat(x_u8[..., None], 3, axis=3), y=y.astype(np.int64))
