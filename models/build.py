"""Build the model zoo: train in float on Fashion-MNIST, fold BN, export ONNX, quantize to
int8 QDQ, evaluate, and write ``models/<name>.onnx`` + ``provenance.json`` + ``README.md``.

    python -m models.build [--only NAME[,NAME]] [--epochs E] [--out models/]

The steps live in ``models/data.py`` (Fashion-MNIST, tasks, preprocessing), ``models/training.py`` (float
training, accuracy) and ``models/export.py`` (ONNX export, quantization, checks); this module drives them and
writes the provenance.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from models.data import (FASHION_CLASSES, DataMissing, balanced_subset, load_fashion_mnist, resize_u8, task_labels,
                         task_num_classes, to_input)
from models.export import (INPUT_NAME, INPUT_SCALE, INPUT_ZERO_POINT, OUTPUT_NAME, eval_onnx, export_float_onnx,
                           finalize_int8, inspect_qdq, quantize, sha256_file)
from models.readme import write_readme
from models.training import COMMON, eval_torch, train_float

HERE = Path(__file__).resolve().parent

# Per-model recipe.  Sizes are chosen so that the whole zoo builds in well under 25 minutes
# of wall time with one PyTorch thread on a 2-core machine (~4 min per 128x128 model).
RECIPES = {
    "mbv2-w0.35": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "proxyless-w0.3": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "mcunet-5fps": {"task": "fmnist10", "train_size": 10000, "epochs": 3},
    "mbv1-0.25-vww": {"task": "fmnist2-torso", "train_size": 20000, "epochs": 3},
    "mbv3s-w0.5": {"task": "fmnist10", "train_size": 10000, "epochs": 4},
}


def build_one(name: str, data: dict, out_dir: Path, epochs: int | None, train_size: int | None,
              seed: int, log) -> dict:
    import torch
    import models
    from models.common import count_params, fold_bn, layer_macs

    entry = models.ENTRIES[name]
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
        unknown = [n for n in wanted if n not in models.ENTRIES]
        if unknown:
            print(f"error: unknown model(s) {', '.join(unknown)}; choose from {', '.join(models.ENTRIES)}",
                  file=sys.stderr)
            return 2
        names = [n for n in models.ENTRIES if n in wanted]

    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    prov_path = out_dir / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {"models": {}}
    cmd = "python -m models.build" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    t0 = time.time()
    for name in names:
        prov["models"][name] = build_one(name, data, out_dir, args.epochs, args.train_size, args.seed, log)
        prov["models"][name]["command"] = cmd
    prov["models"] = {n: prov["models"][n] for n in models.ENTRIES if n in prov["models"]}
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
