"""Model importers. ``load_model`` picks the frontend from the file's contents, not its name."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tinytrain.errors import ModelError, UsageError
from tinytrain.frontends.fold_pad import fold_pads
from tinytrain.frontends.onnx import graph_from_onnx
from tinytrain.frontends.tflite import graph_from_tflite
from tinytrain.ir import Graph


def load_model(path: str | Path) -> Graph:
    """Read an int8 ONNX (QDQ or QOperator) or int8/uint8 TFLite model into the IR (a zero-point PAD before a
    convolution folded into its padding, fold_pad.py)."""
    path = Path(path)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "no such file"
        raise UsageError(f"{path}: {what}; give the path of an .onnx or .tflite model")
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelError(f"{path}: file is too short to be a model ({len(data)} bytes)")
    if data[:4] == b"PK\x03\x04" and _numpy_arrays(path):
        raise ModelError(f"{path}: an .npz of numpy arrays (a dataset, or a state of train --state-out), not a "
                         "model; give the .onnx or .tflite model (an .npz of x, y is DATA: --data)")
    if data[:4] == b"PK\x03\x04":  # torch.save's zip (a .pt / .pth), or a Keras .keras archive
        raise ModelError(f"{path}: a zip archive (a PyTorch .pt / .pth or a Keras .keras file), not a model "
                         f"tinytrain reads; export it to ONNX (torch.onnx.export) and `tinytrain quantize` it, or "
                         f"convert it to an int8 .tflite")
    sha = hashlib.sha256(data).hexdigest()
    if data[4:8] == b"TFL3":
        return fold_pads(_computed(graph_from_tflite(data, name=path.stem, sha256=sha), path))

    return fold_pads(_computed(graph_from_onnx(data, name=path.stem, sha256=sha), path))


def _numpy_arrays(path: Path) -> bool:
    """Is the zip at ``path`` numpy.savez's (every member an .npy)?"""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return bool(names) and all(n.endswith(".npy") for n in names)


def _computed(graph: Graph, path: Path) -> Graph:
    """The graph, if it computes its outputs: at least one, each produced by an operator."""
    produced = {o for n in graph.nodes for o in n.outputs}
    missing = [o for o in graph.outputs if o not in produced]
    if not graph.outputs or missing:
        what = f"output '{missing[0]}' is not computed by any operator" if missing else "the model has no outputs"
        raise ModelError(f"{path}: {what}; nothing to run")
    return graph
