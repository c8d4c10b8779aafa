"""Fuzz the ONNX and TFLite importers and the .npz / class-folder data loaders through the command line.

    .venv/bin/python benchmarks/fuzz_importers.py [--cases 10000] [--seed 0] [--workers 2] [--timeout 30]

Mutated files are made from seeds — the shipped ONNX models (models/*.onnx), the bad-model corpus and its good
variants (tests/bad_models/), the public TFLite models in ../shared/models when present, a small .npz dataset and a
class-folder dataset — by bit flips, byte overwrites, truncations, chunk deletions and duplications, and field edits
(ONNX: through the protobuf — dims, data types, scales, zero points, attributes, op types, node inputs; TFLite:
through the flatbuffer object API — shapes, types, buffers, quantization, operator inputs and codes; .npz: dtypes,
shapes, labels, missing or extra arrays; folders: truncated, empty and non-image files, empty class folders).
Models run `tinytrain inspect FILE`; datasets `tinytrain eval MODEL --data FILE` on a small good model.

Each case must end with exit 0, or exit 2 and exactly one stderr line "tinytrain: error: ..." — anything else is
counted: a crash (the worker process died: a signal), a traceback (exit 3, the CLI's internal-error line, or a
Traceback on stderr), a hang (no answer within --timeout seconds), or a malformed rejection (exit 2 with not one
line). Cases run in worker processes (one import of tinytrain each, restarted after a crash or a hang). The last
line of stdout is one JSON object with the counts; --failures DIR keeps every failing file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
SHARED_MODELS = ROOT.parent / "shared" / "models"
SHARED_TFLITE = ("person_detect.tflite", "vww_96_int8.tflite", "mobilenet_v1_0.25_128_quant.tflite",
                 "vww_96_float.tflite")


@dataclass(frozen=True)
class Seed:
    name: str
    kind: str      # onnx | tflite | npz | folder
    data: object   # bytes, or for a folder {relative path: bytes}
    weight: float  # how often it is picked


# ------------------------------------------------------------------------------------------------ seeds
def _png(rng: np.random.Generator, h: int, w: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def seeds() -> list[Seed]:
    sys.path.insert(0, str(ROOT / "tests" / "bad_models"))
    from make_corpus import all_cases, qdq_conv, tflite_conv

    rng = np.random.default_rng(0)
    out = [Seed(p.name, "onnx", p.read_bytes(), 1.5) for p in sorted((ROOT / "models").glob("*.onnx"))]
    out[0:0] = [Seed("corpus-good.onnx", "onnx", qdq_conv().SerializeToString(), 30.0),
                Seed("corpus-good.tflite", "tflite", tflite_conv(), 30.0)]
    for name, data in all_cases().items():
        if name != "huge_weights.onnx":
            out.append(Seed(name, name.rsplit(".", 1)[1], data, 1.0))
    for name in SHARED_TFLITE:
        if (SHARED_MODELS / name).exists():
            out.append(Seed(name, "tflite", (SHARED_MODELS / name).read_bytes(), 1.0))
    x = rng.integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    out.append(Seed("data.npz", "npz", _npz(x=x, y=np.array([0, 1, 2, 3, 0, 1])), 12.0))
    folder = {f"class{c}/img{i}.png": _png(rng, 8 + c, 8) for c in range(2) for i in range(2)}
    out.append(Seed("data-folder", "folder", folder, 6.0))
    return out


# ------------------------------------------------------------------------------------------- mutations
def flip_bits(rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 17))):
        if b:
            b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
    return bytes(b)


def overwrite(rng, data: bytes) -> bytes:
    b = bytearray(data)
    if b:
        at, n = int(rng.integers(len(b))), int(rng.integers(1, 9))
        value = rng.choice([0x00, 0xFF, 0x7F, 0x80, int(rng.integers(256))])
        b[at : at + n] = bytes([value]) * len(b[at : at + n])
    return bytes(b)


def truncate(rng, data: bytes) -> bytes:
    return data[: int(rng.integers(len(data) + 1))] if data else data


def cut_or_copy(rng, data: bytes) -> bytes:
    if len(data) < 2:
        return data + data
    a = int(rng.integers(len(data)))
    b = min(len(data), a + int(rng.integers(1, 257)))
    return data[:a] + data[b:] if rng.random() < 0.5 else data[:b] + data[a:b] + data[b:]


BYTE_MUTATIONS = (flip_bits, overwrite, truncate, cut_or_copy)
ODD_FLOATS = (0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1e-45, 1e30, 3.4e38)
ODD_INTS = (0, -1, 1, 2, 127, 128, 255, 256, -128, -129, 2 ** 31 - 1, -2 ** 31, 2 ** 31, 10 ** 9, 7)


def edit_onnx(rng, data: bytes) -> bytes:
    import onnx
    from onnx import numpy_helper

    m = onnx.load_from_string(data)
    g = m.graph
    what = int(rng.integers(8))
    if what == 0 and g.initializer:  # a scale, zero point or weight value
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        a = numpy_helper.to_array(t).copy()
        if a.size:
            flat = a.reshape(-1)
            i = int(rng.integers(flat.size))
            if np.issubdtype(a.dtype, np.floating):
                flat[i] = rng.choice(ODD_FLOATS)
            else:
                info = np.iinfo(a.dtype)
                flat[i] = int(np.clip(rng.choice(ODD_INTS), info.min, info.max))
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    elif what == 1 and g.initializer:  # dims or data type
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if t.dims and rng.random() < 0.6:
            t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice(ODD_INTS))
        else:
            t.data_type = int(rng.integers(0, 17))
    elif what == 2 and g.node:  # an attribute
        n = g.node[int(rng.integers(len(g.node)))]
        if n.attribute:
            a = n.attribute[int(rng.integers(len(n.attribute)))]
            if a.ints:
                a.ints[int(rng.integers(len(a.ints)))] = int(rng.choice(ODD_INTS))
            else:
                a.i = int(rng.choice(ODD_INTS))
                a.f = float(rng.choice(ODD_FLOATS))
    elif what == 3 and g.node:  # op type
        n = g.node[int(rng.integers(len(g.node)))]
        n.op_type = str(rng.choice(["Conv", "Add", "Relu", "Clip", "QuantizeLinear", "DequantizeLinear", "Gemm",
                                    "MatMul", "Reshape", "GlobalAveragePool", "Sin", "Loop", ""]))
    elif what == 4 and g.node:  # node inputs: drop, rename, or point at another tensor
        n = g.node[int(rng.integers(len(g.node)))]
        if n.input:
            i = int(rng.integers(len(n.input)))
            names = [t.name for t in g.initializer] + [x for node in g.node for x in node.output]
            choice = rng.random()
            if choice < 0.3:
                del n.input[i]
            elif choice < 0.6:
                n.input[i] = "no_such_tensor"
            elif names:
                n.input[i] = str(rng.choice(names))
    elif what == 5:  # input shape
        dims = g.input[0].type.tensor_type.shape.dim if g.input else []
        if dims:
            d = dims[int(rng.integers(len(dims)))]
            if rng.random() < 0.3:
                d.dim_param = "n"
            else:
                d.dim_value = int(rng.choice(ODD_INTS))
    elif what == 6 and g.node:  # remove a node or duplicate one
        i = int(rng.integers(len(g.node)))
        if rng.random() < 0.5:
            del g.node[i]
        else:
            g.node.append(g.node[i])
    else:  # opset / outputs
        if rng.random() < 0.5 and m.opset_import:
            m.opset_import[0].version = int(rng.choice([1, 7, 10, 13, 18, 21, 99]))
        elif g.output:
            g.output[0].name = "no_such_output"
    return m.SerializeToString()


def edit_tflite(rng, data: bytes) -> bytes:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT.InitFromPackedBuf(data, 0)
    sg = m.subgraphs[int(rng.integers(len(m.subgraphs)))] if m.subgraphs else None
    what = int(rng.integers(7))
    if sg is not None and sg.tensors:
        t = sg.tensors[int(rng.integers(len(sg.tensors)))]
        if what == 0 and t.shape is not None and len(t.shape):
            t.shape[int(rng.integers(len(t.shape)))] = int(rng.choice(ODD_INTS))
        elif what == 1:
            t.type = int(rng.integers(0, 18))
        elif what == 2:
            t.buffer = int(rng.choice([0, len(m.buffers or []), 2 ** 31 - 1, int(rng.integers(len(m.buffers or [1])))]))
        elif what == 3 and t.quantization is not None:
            q = t.quantization
            if q.scale is not None and len(q.scale) and rng.random() < 0.5:
                q.scale[int(rng.integers(len(q.scale)))] = float(rng.choice(ODD_FLOATS))
            elif q.zeroPoint is not None and len(q.zeroPoint):
                q.zeroPoint[int(rng.integers(len(q.zeroPoint)))] = int(rng.choice(ODD_INTS))
            else:
                q.quantizedDimension = int(rng.choice(ODD_INTS))
    if sg is not None and sg.operators and what in (4, 5):
        op = sg.operators[int(rng.integers(len(sg.operators)))]
        if what == 4 and op.inputs is not None and len(op.inputs):
            op.inputs[int(rng.integers(len(op.inputs)))] = int(rng.choice([-1, 0, len(sg.tensors), 9999]))
        else:
            op.opcodeIndex = int(rng.choice([0, 1, len(m.operatorCodes or []), 255]))
    if what == 6 and m.operatorCodes:
        c = m.operatorCodes[int(rng.integers(len(m.operatorCodes)))]
        c.builtinCode = c.deprecatedBuiltinCode = int(rng.integers(0, 127))
    if what == 6 and m.buffers and rng.random() < 0.5:
        b = m.buffers[int(rng.integers(len(m.buffers)))]
        if b.data is not None and len(b.data):
            b.data = b.data[: int(rng.integers(len(b.data)))]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def edit_npz(rng, data: bytes) -> bytes:
    with np.load(io.BytesIO(data), allow_pickle=False) as f:
        x, y = f["x"], f["y"]
    what = int(rng.integers(10))
    if what == 0:
        x = x.astype(rng.choice([np.float32, np.int16, np.int8, np.float64, np.bool_]))
    elif what == 1:
        x = x.reshape(rng.choice([(-1,), (len(x), -1), (len(x), 4, 4, 3, 4), (len(x), 8, 8 * 3)]))
    elif what == 2:
        y = y.copy()
        y[int(rng.integers(len(y)))] = int(rng.choice([-1, 1000, 2 ** 40, -(2 ** 40)]))
    elif what == 3:
        y = y.astype(rng.choice([np.float32, np.float64, np.bool_, np.uint64]))
    elif what == 4:
        x, y = x[:0], y[:0]
    elif what == 5:
        y = y[: int(rng.integers(len(y)))]
    elif what == 6:
        x = x[:, :, :, : int(rng.integers(0, 5))] if rng.random() < 0.5 else np.concatenate([x, x[..., :1]], axis=3)
    elif what == 7:
        x = x[:, : int(rng.integers(0, 3)), : int(rng.integers(0, 3))]
    elif what == 8:
        return _npz(x=x) if rng.random() < 0.5 else _npz(y=y, z=x)
    else:
        y = y.reshape(-1, 1) if rng.random() < 0.5 else np.array(["a"] * len(y))
    return _npz(x=x, y=y)


def mutate_folder(rng, files: dict[str, bytes]) -> dict[str, bytes]:
    files = dict(files)
    name = str(rng.choice(sorted(files)))
    what = int(rng.integers(7))
    if what == 0:
        files[name] = truncate(rng, files[name])
    elif what == 1:
        files[name] = flip_bits(rng, files[name])
    elif what == 2:
        files[name] = b""
    elif what == 3:
        files[name] = b"not an image at all\n"
    elif what == 4:
        files = {"empty_class/": b"", **{k: v for k, v in files.items() if k.startswith("class0/")}}
    elif what == 5:
        files = {k.replace(".png", ".txt"): v for k, v in files.items()}
    else:
        files[name] = overwrite(rng, cut_or_copy(rng, files[name]))
    return files


def mutate(rng, seed: Seed):
    """(description, mutated data) of one case."""
    if seed.kind == "folder":
        return "folder-edit", mutate_folder(rng, seed.data)
    structured = {"onnx": edit_onnx, "tflite": edit_tflite, "npz": edit_npz}[seed.kind]
    if rng.random() < 0.5:
        try:
            return f"{structured.__name__}", structured(rng, seed.data)
        except Exception:  # the seed itself does not parse (a corpus file): mutate its bytes instead
            pass
    fn = BYTE_MUTATIONS[int(rng.integers(len(BYTE_MUTATIONS)))]
    data = seed.data
    for _ in range(int(rng.integers(1, 3))):
        data = fn(rng, data)
    return fn.__name__, data


def write_case(folder: Path, seed: Seed, data) -> Path:
    if seed.kind == "folder":
        shutil.rmtree(folder / "case", ignore_errors=True)
        for rel, content in data.items():
            path = folder / "case" / rel
            if rel.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return folder / "case"
    path = folder / f"case.{seed.kind}"
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------------ worker
def worker() -> None:
    """Read one JSON argv per line, run the CLI in-process, answer one JSON line {code, err}."""
    from tinytrain.cli import main

    for line in sys.stdin:
        argv = json.loads(line)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
        print(json.dumps({"code": code, "err": err.getvalue()}), flush=True)


class Worker:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("TINYTRAIN_DEBUG", None)
        self.p = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, bufsize=1)

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def verdict(r: dict) -> str:
    if "crash" in r:
        return "crash"
    if "hang" in r:
        return "hang"
    lines = r["err"].strip().splitlines()
    if r["code"] == 3 or "Traceback" in r["err"]:
        return "traceback"
    if r["code"] == 0:
        return "accepted"
    if r["code"] == 2 and len(lines) == 1 and lines[0].startswith("tinytrain: error: "):
        return "rejected"
    return "malformed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a case may take before it counts as a hang")
    ap.add_argument("--failures", type=Path, help="keep every failing case's file here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    rng = np.random.default_rng(args.seed)
    pool = seeds()
    weights = np.array([s.weight for s in pool])
    weights /= weights.sum()
    counts = {k: 0 for k in ("accepted", "rejected", "crash", "traceback", "hang", "malformed")}
    by_kind: dict[str, int] = {}
    failed: list[dict] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tinytrain-fuzz-") as tmp:
        tmp = Path(tmp)
        good = tmp / "good.onnx"
        good.write_bytes(pool[0].data)
        slots = [tmp / f"w{k}" for k in range(args.workers)]
        for s in slots:
            s.mkdir()
        live = [Worker() for _ in slots]
        pending: list[tuple[int, dict] | None] = [None] * len(slots)
        done = 0
        k = 0
        while done < args.cases:
            for w, folder in enumerate(slots):  # hand every idle worker a new case
                if pending[w] is None and k < args.cases:
                    s = pool[int(rng.choice(len(pool), p=weights))]
                    how, data = mutate(rng, s)
                    path = write_case(folder, s, data)
                    cmd = ["inspect", str(path)] if s.kind in ("onnx", "tflite") else ["eval", str(good), "--data",
                                                                                         str(path)]
                    live[w].p.stdin.write(json.dumps(cmd) + "\n")
                    live[w].p.stdin.flush()
                    pending[w] = (k, {"seed": s.name, "kind": s.kind, "mutation": how, "path": path, "t": time.time()})
                    k += 1
            busy = [w for w in range(len(slots)) if pending[w] is not None]
            ready, _, _ = select.select([live[w].p.stdout for w in busy], [], [], 1.0)
            for w in busy:
                case_id, info = pending[w]
                if live[w].p.stdout in ready:
                    line = live[w].p.stdout.readline()
                    r = json.loads(line) if line else {"crash": live[w].p.wait()}
                elif time.time() - info["t"] > args.timeout:
                    r = {"hang": True}
                else:
                    continue
                v = verdict(r)
                counts[v] += 1
                by_kind[info["kind"]] = by_kind.get(info["kind"], 0) + 1
                if v not in ("accepted", "rejected"):
                    failed.append({"case": case_id, "verdict": v, "seed": info["seed"], "mutation": info["mutation"],
                                   "detail": (r.get("err") or str(r))[-300:]})
                    if args.failures:
                        args.failures.mkdir(parents=True, exist_ok=True)
                        src = info["path"]
                        dst = args.failures / f"{case_id:05d}-{v}-{src.name}"
                        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
                    if v in ("crash", "hang"):
                        live[w].close()
                        live[w] = Worker()
                pending[w] = None
                done += 1
                if done % 1000 == 0:
                    print(f"{done} cases, {time.time() - t0:.0f} s: {counts}", flush=True)
        for w in live:
            w.close()
    for f in failed[:20]:
        print(json.dumps(f))
    result = {"cases": done, **counts, "by_kind": by_kind, "seconds": round(time.time() - t0, 1), "seed": args.seed,
              "workers": args.workers}
    print(json.dumps(result))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
