"""The stream file of ``tinytrain field``: STREAM.npz with ``x`` (the samples in arrival order, any DATA kind
``train`` takes: uint8 images (N,H,W[,C]) or int8 / float32 features) and ``y`` ((N,) integers: the sample's class,
-1 where it has no label). A label not seen before is a new class; one at or above the head's classes is refused."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinytrain.data import dataset_from_arrays, model_inputs
from tinytrain.errors import UsageError
from tinytrain.ir import Graph


@dataclass(frozen=True)
class Stream:
    x: np.ndarray  # the model's int8 inputs, in arrival order
    y: np.ndarray  # (N,) int64, -1: unlabelled
    source: str

    @property
    def labelled(self) -> np.ndarray:
        return self.y >= 0


def _arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            if not isinstance(f, np.lib.npyio.NpzFile) or not {"x", "y"} <= set(f.files):
                raise UsageError(f"{path}: a stream is an .npz with arrays 'x' (the samples in arrival order) and 'y' "
                                 "(their labels, -1 for none)")
            return f["x"], f["y"]
    except (OSError, ValueError, EOFError, NotImplementedError, zipfile.BadZipFile, zlib.error) as e:
        raise UsageError(f"{path}: cannot read as a stream .npz ({e})") from None
    except AttributeError:  # a plain .npy: np.load returned an array, which has no context manager
        raise UsageError(f"{path}: a plain .npy array is not a stream; save numpy.savez(FILE.npz, x=..., y=...)") \
            from None


def load_stream(path: str | Path, graph: Graph, classes: int, labels: Callable | None = None) -> Stream:
    """The stream at ``path`` as ``graph``'s int8 inputs, checked (one line, UsageError, on anything wrong);
    ``labels(y, source)``: the check of the labels in place of the class checks (an autoencoder's stream)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such stream file")
    x, y = _arrays(path)
    if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1 or len(y) != len(x):
        raise UsageError(f"{path}: y must be (N,) integer labels for the N = {len(x)} samples of x (-1: unlabelled), "
                         f"got {y.dtype}{y.shape}")
    if labels is not None:
        labels(y, str(path))
    elif len(y) and y.min() < -1:
        raise UsageError(f"{path}: label {int(y.min())} at sample {int(np.argmin(y))}: labels are -1 (none) or "
                         f"classes 0..{classes - 1}")
    elif len(y) and y.max() >= classes:
        raise UsageError(f"{path}: label {int(y.max())} at sample {int(np.argmax(y))} is not a class of the head, --max-classes "
                         f"{classes} (classes 0..{classes - 1})")
    if not len(x):
        raise UsageError(f"{path}: the stream is empty")
    ds = dataset_from_arrays(x, None, source=str(path))
    return Stream(model_inputs(graph, ds.x), y.astype(np.int64), str(path))
