"""Build the model zoo: train in float on Fashion-MNIST, fold BN, export ONNX, quantize to
int8 QDQ, evaluate, and write ``models/<name>.onnx`` + ``provenance.json`` + ``README.md``.

    python -m models.build [--only NAME[,NAME]] [--epochs E] [--out models/]

Data: the Debian package ``dataset-fashion-mnist`` (``make setup`` installs it), read from
/usr/share/datasets/fashion-mnist or $TINYTRAIN_FASHION_MNIST.

Preprocessing (the same for training, calibration and evaluation): the 28x28 uint8 image is
resized bilinearly (half-pixel centres, PyTorch ``align_corners=False``) to the model's
input size, rounded back to uint8, replicated to 3 channels, and fed as ``pixel / 255``
(NCHW float32, batch 1 in the exported graph).  The int8 graph's input QuantizeLinear has
scale 1/255 and zero point -128, so the quantized input is exactly ``pixel - 128``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from models.readme import write_readme

HERE = Path(__file__).resolve().parent
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

ALLOWED_FLOAT_OPS = {"Conv", "Relu", "Clip", "Add", "GlobalAveragePool", "ReduceMean",
                     "Flatten", "Reshape", "Gemm", "MatMul"}
INPUT_NAME, OUTPUT_NAME = "input", "logits"
INPUT_SCALE = np.float32(1.0 / 255.0)
INPUT_ZERO_POINT = np.int8(-128)

# Per-model recipe.  Sizes are chosen so that the whole zoo builds in well under 25 minutes
# of wall time with one PyTorch thread on a 2-core machine (~4 min per 128x128 model).
RECIPES = {
    "mbv2-w0.35": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "proxyless-w0.3": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "mcunet-5fps": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "mbv1-0.25-vww": {"task": "fmnist2-torso", "train_size": 20000, "epochs": 3},
}
COMMON = {"batch_size": 64, "optimizer": "AdamW", "lr": 3e-3, "weight_decay": 5e-5,
          "schedule": "OneCycle (cosine, 20% warm-up)", "augment": "random horizontal flip",
          "test_size": 2000, "calib_size": 300, "seed": 0, "calibration": "MinMax"}


class DataMissing(RuntimeError):
    pass


# --------------------------------------------------------------------------- data

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


# --------------------------------------------------------------------------- training

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


def eval_onnx(path: Path, x_u8: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    preds = np.empty(len(x_u8), np.int64)
    for i in range(len(x_u8)):
        out = sess.run(None, {INPUT_NAME: to_input(x_u8[i:i + 1])})[0]
        preds[i] = int(out.argmax())
    return float((preds == y).mean()), preds


# --------------------------------------------------------------------------- ONNX export

def _rename_value(graph, old: str, new: str) -> None:
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.name == old:
            v.name = new
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
        for i, name in enumerate(n.output):
            if name == old:
                n.output[i] = new


def canonicalize(model):
    """Rewrite the exporter's pooling head into GlobalAveragePool -> Flatten.

    torch's dynamo exporter lowers AdaptiveAvgPool2d(1) to ReduceMean(axes=[-1,-2] or [2,3],
    keepdims=1) and nn.Flatten to Reshape(shape=[1, C]).  Both are rewritten only when that
    exact pattern is seen; anything else is left alone (and later rejected if not allowed).
    """
    import onnx
    from onnx import helper, numpy_helper
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}

    def const_value(name):
        if name in inits:
            return numpy_helper.to_array(inits[name])
        if name in consts:
            for a in consts[name].attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None

    new_nodes = []
    for n in g.node:
        if n.op_type == "ReduceMean":
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            axes = const_value(n.input[1]) if len(n.input) > 1 else attrs.get("axes")
            if axes is not None and sorted(int(a) % 4 for a in np.ravel(axes)) == [2, 3] \
                    and attrs.get("keepdims", 1) == 1:
                new_nodes.append(helper.make_node("GlobalAveragePool", [n.input[0]], list(n.output),
                                                  name=n.name or "global_avg_pool"))
                continue
        if n.op_type == "Reshape":
            shape = const_value(n.input[1])
            if shape is not None and shape.size == 2 and int(shape[0]) in (1, -1, 0):
                new_nodes.append(helper.make_node("Flatten", [n.input[0]], list(n.output), axis=1,
                                                  name=n.name or "flatten"))
                continue
        new_nodes.append(n)
    del g.node[:]
    g.node.extend(new_nodes)
    # drop initializers / Constant nodes nobody uses any more
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = [n for n in g.node if not (n.op_type == "Constant" and n.output[0] not in used)]
    del g.node[:]
    g.node.extend(nodes)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def strip_metadata(model) -> None:
    """Drop the exporter's per-node metadata (stack traces with absolute paths, fx node dumps).

    They are large and make the file (and its sha256) depend on where the checkout lives.
    """
    g = model.graph
    for n in g.node:
        del n.metadata_props[:]
        n.doc_string = ""
    for v in list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer):
        del v.metadata_props[:]
        v.doc_string = ""
    del g.metadata_props[:]
    del model.metadata_props[:]
    model.doc_string = ""


def finalize_int8(path: Path, name: str) -> None:
    """Strip metadata from the quantized file, re-run shape inference, stamp a short description."""
    import onnx
    from onnx import helper
    m = onnx.load(str(path))
    strip_metadata(m)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    helper.set_model_props(m, {"tinytrain.zoo.model": name,
                               "tinytrain.zoo.input": "float32 pixel/255 NCHW; quantized input = pixel - 128",
                               "tinytrain.zoo.provenance": "models/provenance.json"})
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def export_float_onnx(folded, size: int, path: Path, log) -> dict:
    import onnx
    import torch
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    prog = torch.onnx.export(folded, (x,), dynamo=True, opset_version=18, optimize=True, verbose=False)
    model = prog.model_proto
    g = model.graph
    if len(g.input) != 1 or len(g.output) != 1:
        raise RuntimeError(f"expected one input and one output, got {len(g.input)} / {len(g.output)}")
    raw_ops = sorted({n.op_type for n in g.node})
    strip_metadata(model)
    _rename_value(g, g.input[0].name, INPUT_NAME)
    _rename_value(g, g.output[0].name, OUTPUT_NAME)
    model = canonicalize(model)
    ops = sorted({n.op_type for n in model.graph.node})
    bad = set(ops) - ALLOWED_FLOAT_OPS
    if bad:
        # last resort: constant-fold with onnxscript's optimizer and re-check
        import onnxscript.optimizer
        model = onnxscript.optimizer.optimize(model)
        model = canonicalize(model)
        ops = sorted({n.op_type for n in model.graph.node})
        bad = set(ops) - ALLOWED_FLOAT_OPS
        if bad:
            raise RuntimeError(f"exported graph has unsupported ops {sorted(bad)}")
    for inp in model.graph.input:
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if dims != [1, 3, size, size]:
            raise RuntimeError(f"unexpected input shape {dims}")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    # float ONNX must agree with torch
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = folded(x).numpy()
    got = sess.run(None, {INPUT_NAME: x.numpy()})[0]
    diff = float(np.abs(ref - got).max())
    if diff > 1e-3:
        raise RuntimeError(f"float ONNX disagrees with torch: max |diff| {diff}")
    log(f"  exported float ONNX: exporter ops {raw_ops} -> {ops}; max |onnx - torch| = {diff:.2e}")
    return {"exporter_ops": raw_ops, "float_ops": ops, "float_onnx_max_abs_diff": diff}


class _Calib:
    def __init__(self, x_u8: np.ndarray):
        self.x = x_u8
        self.i = 0

    def get_next(self):
        if self.i >= len(self.x):
            return None
        self.i += 1
        return {INPUT_NAME: to_input(self.x[self.i - 1:self.i])}

    def rewind(self):
        self.i = 0


def quantize(float_path: Path, out_path: Path, calib_u8: np.ndarray) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    quantize_static(
        str(float_path), str(out_path), _Calib(calib_u8),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        per_channel=True, calibrate_method=CalibrationMethod.MinMax,
        extra_options={
            "WeightSymmetric": True,
            "ActivationSymmetric": False,
            # onnxruntime wants numpy arrays here (a numpy scalar is rejected)
            "TensorQuantOverrides": {INPUT_NAME: [{"scale": np.array(INPUT_SCALE, dtype=np.float32),
                                                   "zero_point": np.array(INPUT_ZERO_POINT, dtype=np.int8)}]},
        },
    )


def inspect_qdq(path: Path) -> dict:
    """Check the int8 graph: input Q = (1/255, -128), int8 per-channel weights, int32 biases."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(path))
    g = m.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    # input quantization
    qs = [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == INPUT_NAME]
    if len(qs) != 1:
        raise RuntimeError(f"expected exactly one QuantizeLinear on the input, found {len(qs)}")
    scale, zp = inits[qs[0].input[1]], inits[qs[0].input[2]]
    if not (scale.dtype == np.float32 and scale.shape == () and scale == INPUT_SCALE
            and zp.dtype == np.int8 and zp.shape == () and int(zp) == -128):
        raise RuntimeError(f"input quantization is scale={scale!r} zp={zp!r}, expected 1/255, -128")
    weight_info = []
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm"):
            continue
        w_dq = producers.get(n.input[1])
        if w_dq is None or w_dq.op_type != "DequantizeLinear" or w_dq.input[0] not in inits:
            raise RuntimeError(f"{n.op_type} {n.name}: weight is not an int8 initializer + DequantizeLinear")
        wq, ws, wz = (inits[w_dq.input[i]] for i in range(3))
        axis = next((a.i for a in w_dq.attribute if a.name == "axis"), 1)
        cout = wq.shape[0] if n.op_type == "Conv" else (wq.shape[axis])
        if wq.dtype != np.int8 or ws.shape != (cout,) or np.any(wz != 0):
            raise RuntimeError(f"{n.op_type} {n.name}: weights not int8 symmetric per-channel "
                               f"(dtype {wq.dtype}, scale shape {ws.shape})")
        if len(n.input) > 2:
            b_dq = producers.get(n.input[2])
            if b_dq is None or b_dq.op_type != "DequantizeLinear" or inits[b_dq.input[0]].dtype != np.int32:
                raise RuntimeError(f"{n.op_type} {n.name}: bias is not int32 + DequantizeLinear")
        weight_info.append((n.op_type, tuple(wq.shape), int(axis)))
    ops: dict[str, int] = {}
    for n in g.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    weight_bytes = int(sum(a.nbytes for a in inits.values()))
    return {"ops": dict(sorted(ops.items())), "n_conv": sum(1 for t, _, _ in weight_info if t == "Conv"),
            "n_gemm": sum(1 for t, _, _ in weight_info if t == "Gemm"),
            "initializer_bytes": weight_bytes,
            "weight_elements": int(sum(int(np.prod(s)) for _, s, _ in weight_info)),
            "gemm_weight_axis": [a for t, _, a in weight_info if t == "Gemm"]}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- driver

def build_one(name: str, data: dict, out_dir: Path, epochs: int | None, train_size: int | None,
              seed: int, log) -> dict:
    import torch
    import models
    from models.common import count_params, fold_bn, layer_macs

    entry = models.ZOO[name]
    recipe = dict(RECIPES[name])
    if epochs is not None:
        recipe["epochs"] = epochs
    if train_size is not None:
        recipe["train_size"] = train_size
    task = recipe["task"]
    nc = task_num_classes(task)
    size = entry.input_size
    t_start = time.time()
    log(f"[{name}] {task}, {nc} classes, {size}x{size}, {recipe['train_size']} train images x "
        f"{recipe['epochs']} epochs")

    rng = np.random.default_rng(seed)
    tr_idx = balanced_subset(data["train_y"], recipe["train_size"], rng)
    rest = np.setdiff1d(np.arange(len(data["train_y"])), tr_idx)
    cal_idx = rng.permutation(rest)[:COMMON["calib_size"]]
    te_idx = balanced_subset(data["test_y"], COMMON["test_size"], np.random.default_rng(seed + 1))
    x_tr = resize_u8(data["train_x"][tr_idx], size)
    y_tr = task_labels(data["train_y"][tr_idx], task)
    x_cal = resize_u8(data["train_x"][cal_idx], size)
    x_te = resize_u8(data["test_x"][te_idx], size)
    y_te = task_labels(data["test_y"][te_idx], task)

    torch.manual_seed(seed)
    model = models.build_model(name, num_classes=nc)
    n_params = count_params(model)
    train_info = train_float(model, x_tr, y_tr, recipe["epochs"], seed, log)
    float_acc = eval_torch(model, x_te, y_te)
    log(f"  float test acc {float_acc:.4f}")

    folded = fold_bn(model)
    with torch.no_grad():
        probe = torch.from_numpy(to_input(x_te[:8]))
        fold_diff = float((model(probe) - folded(probe)).abs().max())
    rows = layer_macs(folded, size)
    macs = int(sum(r["macs"] for r in rows))
    deploy_params = count_params(folded)

    out_path = out_dir / entry.onnx_file
    with tempfile.TemporaryDirectory() as td:
        fpath = Path(td) / "float.onnx"
        exp_info = export_float_onnx(folded, size, fpath, log)
        quantize(fpath, out_path, x_cal)
    finalize_int8(out_path, name)
    q = inspect_qdq(out_path)
    if q["n_conv"] + q["n_gemm"] != len(rows):
        raise RuntimeError(f"int8 graph has {q['n_conv']} Conv + {q['n_gemm']} Gemm, torch model has {len(rows)}")
    if q["weight_elements"] != sum(r["cout"] * (r["cin"] // r.get("groups", 1)) * r.get("k", 1) ** 2
                                   for r in rows):
        raise RuntimeError("int8 weight element count does not match the torch model")
    int8_acc, preds = eval_onnx(out_path, x_te, y_te)
    with torch.no_grad():
        fpreds = np.concatenate([folded(torch.from_numpy(to_input(x_te[i:i + 200]))).argmax(1).numpy()
                                 for i in range(0, len(x_te), 200)])
    agree = float((preds == fpreds).mean())
    log(f"  int8 test acc {int8_acc:.4f} (argmax agrees with float on {agree:.4f}); "
        f"{out_path.name} {out_path.stat().st_size} bytes; ops {q['ops']}")

    return {
        "file": entry.onnx_file,
        "sha256": sha256_file(out_path),
        "file_bytes": out_path.stat().st_size,
        "input": {"name": INPUT_NAME, "shape": [1, 3, size, size], "dtype": "float32",
                  "meaning": "pixel / 255, RGB (grayscale replicated), NCHW",
                  "quantization": {"scale": float(INPUT_SCALE), "zero_point": int(INPUT_ZERO_POINT),
                                   "quantized_input": "pixel - 128"}},
        "output": {"name": OUTPUT_NAME, "shape": [1, nc]},
        "num_classes": nc,
        "params": n_params,
        "params_note": "torch model parameters incl. BatchNorm gamma/beta (what tests/test_zoo.py recounts)",
        "deploy_params": deploy_params,
        "deploy_params_note": "weights + biases after BN folding = numbers stored in the int8 graph",
        "macs": macs,
        "macs_note": "multiply-accumulates of all Conv + Gemm layers for one image, counted on the torch model",
        "n_conv": q["n_conv"], "n_gemm": q["n_gemm"],
        "int8_ops": q["ops"],
        "float_export_ops": exp_info["float_ops"],
        "exporter_raw_ops": exp_info["exporter_ops"],
        "float_acc": round(float_acc, 4),
        "int8_acc": round(int8_acc, 4),
        "int8_float_argmax_agreement": round(agree, 4),
        "bn_fold_max_abs_diff": fold_diff,
        "float_onnx_max_abs_diff": exp_info["float_onnx_max_abs_diff"],
        "data": {
            "dataset": "Fashion-MNIST (Debian package dataset-fashion-mnist)",
            "task": task,
            "labels": (FASHION_CLASSES if task == "fmnist10"
                       else ["other (trouser, sandal, sneaker, bag, ankle boot)",
                             "torso garment (T-shirt/top, pullover, dress, coat, shirt)"]),
            "train": f"{recipe['train_size']} images from the official training split, "
                     f"{recipe['train_size'] // 10} per original class (seed {seed})",
            "calibration": f"{COMMON['calib_size']} other training-split images",
            "test": f"{COMMON['test_size']} images from the official test split "
                    f"(200 per original class, seed {seed + 1}), never used for training or calibration",
            "preprocessing": f"28x28 -> {size}x{size} bilinear (half-pixel centres), rounded to uint8, "
                             "grayscale replicated to RGB, /255",
        },
        "recipe": {"epochs": recipe["epochs"], "train_size": recipe["train_size"], **COMMON,
                   **train_info, "threads": 1,
                   "quantization": "onnxruntime quantize_static: QDQ, per-channel int8 symmetric weights, "
                                   "int8 asymmetric activations, int32 bias, MinMax calibration, "
                                   "input override scale 1/255 zp -128"},
        "published": entry.published,
        "build_seconds": round(time.time() - t_start, 1),
    }


def _tune_malloc() -> None:
    """Keep glibc from returning every large training buffer to the kernel after each step.

    PyTorch's per-step activations are big enough to be mmap'ed and unmapped each time; the
    resulting page faults cost about a third of the CPU time of a 1-thread training run.
    Numerics are unaffected.
    """
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)       # M_MMAP_THRESHOLD: 1 GiB
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never trim
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m models.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=None,
                    help="build only these models (repeat or comma-separate); others keep their provenance")
    ap.add_argument("--epochs", type=int, default=None, help="override the per-model epoch count")
    ap.add_argument("--train-size", type=int, default=None, help="override the per-model training subset size")
    ap.add_argument("--out", default=str(HERE), help="output folder (default: the models/ package folder)")
    ap.add_argument("--seed", type=int, default=COMMON["seed"])
    ap.add_argument("--readme-only", action="store_true",
                    help="only regenerate README.md from the existing provenance.json")
    args = ap.parse_args(argv)
    if args.readme_only:
        sys.path.insert(0, str(HERE.parent))
        out_dir = Path(args.out).resolve()
        write_readme(json.loads((out_dir / "provenance.json").read_text()), out_dir / "README.md")
        return 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    try:
        data = load_fashion_mnist()
    except DataMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import onnx
    import onnxruntime
    import onnxscript
    import torch
    import warnings

    _tune_malloc()
    warnings.filterwarnings("ignore")
    import logging
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)

    sys.path.insert(0, str(HERE.parent))
    import models

    names = list(models.ZOO)
    if args.only:
        wanted = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in models.ZOO]
        if unknown:
            print(f"error: unknown model(s) {', '.join(unknown)}; choose from {', '.join(models.ZOO)}",
                  file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]

    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    prov_path = out_dir / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {"models": {}}
    cmd = "python -m models.build" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    t0 = time.time()
    for name in names:
        prov["models"][name] = build_one(name, data, out_dir, args.epochs, args.train_size, args.seed, log)
        prov["models"][name]["command"] = cmd
    prov["models"] = {n: prov["models"][n] for n in models.ZOO if n in prov["models"]}
    prov["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                        "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                        "onnxscript": onnxscript.__version__, "numpy": np.__version__}
    if names == list(models.ZOO) or "command" not in prov:
        # whole-zoo figures only describe a whole-zoo run; partial runs keep the last full one
        prov["command"] = cmd
        prov["wall_seconds"] = round(time.time() - t0, 1)
    prov_path.write_text(json.dumps(prov, indent=2) + "\n")
    write_readme(prov, out_dir / "README.md")
    log(f"done in {time.time() - t0:.0f}s: {', '.join(names)} -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
