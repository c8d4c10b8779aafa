"""Contribution analysis: the accuracy gain of each update option, by short fine-tunes on the host C engine.
(An autoencoder, ``FineTune.loss`` "mse": the score is minus the validation reconstruction error instead of the
accuracy, and the model is never cut: its loss reads its own input.)

Each option (the biases of the last k layers; the weights of layer i at ratio r) is fine-tuned alone on top
of the classifier-only baseline (space.py) with the device arithmetic — the emitted C training step of
``engine_c.CTrainer`` (int8 forward, fp32 backward, QAS SGD, the plan's rounding) — for a fixed number of
batch-1 steps over the search's training rows, then scored (argmax of the C forward) on the search's
validation rows. Gain = accuracy - baseline accuracy. Every option uses the same sample order and seed. Each
result keeps which validation rows it got right (``pack_correct``), for paired comparisons of finalists.

Speed: the layers below the first one an option touches are frozen, so their int8 outputs are computed
once per image (the C forward, bit-identical to the simulator's) and the C step is built for the model cut there
(``suffix_model``): the same training step, bit for bit, on the cut tensor. Options run where an executor
(executors.py) puts them: this process, forked workers, or Ray tasks.

Cache: a JSON file per measurement setting (``Measurement.key``: model sha256, head, data sha256, splits,
every hyper-parameter, tool version and a fingerprint of the arithmetic's sources), updated after each
fine-tune, so an interrupted run resumes and a run with another budget re-uses every option already measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tinytrain.csources import Folder, c_folder
from tinytrain.engines.cut import stretch, suffix_model
from tinytrain.engines.host_c import CTrainer, predict
from tinytrain.engines.order import sample_order
from tinytrain.ir import Graph
from tinytrain.lr_schedule import DEFAULT_FLOOR
from tinytrain.metrics import reconstruction_errors, roc_auc
from tinytrain.ops.sgd_update import Rounding
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan
from tinytrain.training.sparse import parse_plan, with_lr_schedule
from tinytrain.training.train_graph import build_training_graph
from tinytrain.version import __version__


@dataclass(frozen=True)
class FineTune:
    """Hyper-parameters of one contribution fine-tune (all part of the cache key)."""

    lr: float = 0.01
    bias_lr: float | None = None
    head_lr: float | None = None
    steps: int = 0  # 0: one epoch over the search's training rows
    lr_schedule: str = "constant"  # "cosine": every fine-tune's lrs follow a cosine schedule over its own steps
    warmup: float = 0.0  # the warm-up fraction of a cosine schedule
    lr_floor: float = DEFAULT_FLOOR  # the fraction of the lrs a cosine keeps after its last step (the written plan's)
    qas: bool = True
    rounding: str = "stochastic"
    momentum: float = 0.0
    seed: int = 0
    loss: str = "xent"  # "mse": an autoencoder, scored by its validation reconstruction error (``score``)
    anomaly: bool = False  # mse with anomaly labels: scored by the ROC AUC of the error on the validation rows


def dataset_sha256(x: np.ndarray, y: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (x, y):
        h.update(f"{a.dtype.str}{a.shape}".encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Measurement:
    """What a contribution depends on besides the option: identifies a cache file."""

    model_sha256: str
    new_head: int | None
    head_seed: int
    data_sha256: str
    held_out: float | None
    split_seed: int
    val: float
    finetune: FineTune

    def key(self) -> str:
        body = json.dumps({**asdict(self), "version": __version__, "arithmetic": arithmetic_fingerprint()},
                          sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:24]


def arithmetic_fingerprint() -> str:
    """sha256 of the sources that decide a fine-tune's numbers (op rules, training passes, the emitted C and its
    runtime): a contribution measured by other arithmetic is not reused."""
    return source_fingerprint(("ops", "training", "codegen", "quant.py", "training/reorder.py"), ("codegen",))


def source_fingerprint(subs: tuple[str, ...], c_folders: tuple[Folder, ...] = ()) -> str:
    """sha256 (16 hex digits) of the .py / .c / .h / .j2 sources under ``subs`` (paths in the package) and under
    the C folders ``c_folders`` (``csources.c_folder``)."""
    package = Path(__file__).resolve().parents[1]
    roots = [(package / sub, package) for sub in subs] + [(c_folder(f), c_folder(f).parent) for f in c_folders]
    h = hashlib.sha256()
    for p, base in roots:
        for f in sorted(p.rglob("*") if p.is_dir() else [p]):
            if f.is_file() and f.suffix in (".py", ".c", ".h", ".j2"):
                h.update(str(f.relative_to(base)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


class ContributionCache:
    """option key -> {"accuracy": .., "seconds": ..}, one JSON file, rewritten atomically after each result."""

    def __init__(self, path: Path | None, meta: dict) -> None:
        self.path, self.meta, self.results = path, meta, {}
        if path is not None and path.exists():
            try:
                self.results = dict(json.loads(path.read_text())["results"])
            except (OSError, ValueError, KeyError, TypeError):
                self.results = {}

    def get(self, key: str):
        return self.results.get(key)

    def put(self, key: str, value: dict) -> None:
        self.results[key] = value
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        tmp.write_text(json.dumps({"meta": self.meta, "results": self.results}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


# ---- one fine-tune (in this process or a worker) -------------------------------------------------------

_JOB: dict = {}  # set_job: graph, images, labels, rows, order, features, finetune


def set_job(job: dict) -> None:
    """The job ``finetune_accuracy`` runs over, in this process (search/executors.py sets it)."""
    _JOB.clear()
    _JOB.update(job)


def finetune_accuracy(plan_json: dict, steps: int | None = None, seed: int | None = None) -> dict:
    """Fine-tune a plan (the classifier-only baseline + one option, or a whole candidate plan) and score it on
    the validation rows: a worker task. ``steps`` / ``seed`` (sample order and rounding stream) override the
    job's ``FineTune``; the defaults give the job's order."""

    t0 = time.time()
    job = _JOB
    ft: FineTune = job["finetune"]
    plan = parse_plan(plan_json)
    # the mse loss reconstructs the model's own input: a model cut below the plan would reconstruct the cut tensor
    g, p, cut = suffix_model(job["graph"], plan) if ft.loss == "xent" else (job["graph"], plan, None)
    x = job["features"][cut] if cut is not None else job["x"]  # rows: train rows then val rows
    seed = ft.seed if seed is None else seed
    n_train = len(job["train_rows"])
    if steps is None and seed == ft.seed:
        order = job["order"]
    else:
        order = sample_order(np.arange(n_train), steps or ft.steps or n_train, seed)
    p = with_lr_schedule(p, ft.lr_schedule, ft.warmup, len(order), ft.lr_floor)
    config = UpdateConfig(momentum=ft.momentum, rounding=Rounding(ft.rounding), qas=ft.qas, seed=seed)
    trainer = CTrainer(build_training_graph(g, p, config))
    trainer.train(x[:n_train], job["y_train"], order)
    out = trainer.predict(x[n_train:])
    if ft.loss == "mse":
        anomalous = job["y_val"] if ft.anomaly else None
        return {**reconstruction_score(g, x[n_train:], out, anomalous), "seconds": round(time.time() - t0, 3)}
    correct = out.argmax(axis=1) == job["y_val"]
    return {"accuracy": float(correct.mean()), "correct": pack_correct(correct), "seconds": round(time.time() - t0, 3)}


def reconstruction_score(graph: Graph, x: np.ndarray, out: np.ndarray, anomalous: np.ndarray | None = None) -> dict:
    """An autoencoder's score on the validation rows ``x`` (higher is better, as an accuracy): minus the mean
    reconstruction error (metrics.py), ``scores`` each row's for paired comparisons of finalists; or with the rows'
    0/1 ``anomalous`` labels the ROC AUC of the error as an anomaly score (no per-row scores)."""

    errors = reconstruction_errors(graph, x, out).astype(np.float64)
    if anomalous is not None:
        return {"accuracy": roc_auc(errors, anomalous)}
    return {"accuracy": -float(errors.mean()), "scores": [-round(float(e), 7) for e in errors]}


def pack_correct(correct: np.ndarray) -> str:
    """Per validation row, right or wrong, as hex of the packed bits (the cache keeps it for paired comparisons)."""
    return np.packbits(correct.astype(bool)).tobytes().hex()


def unpack_correct(packed: str, n: int) -> list[bool]:
    return np.unpackbits(np.frombuffer(bytes.fromhex(packed), np.uint8))[:n].astype(bool).tolist()


def prepare_job(graph: Graph, x: np.ndarray, y: np.ndarray, train_rows: np.ndarray, val_rows: np.ndarray,
                ft: FineTune, plans: list[Plan]) -> dict:
    """The shared inputs of the fine-tunes: images (train rows then val rows), the sample order, and the
    frozen features at every cut the ``plans`` need (``add_features`` adds more)."""
    rows = np.concatenate([train_rows, val_rows])
    order = sample_order(np.arange(len(train_rows)), ft.steps or len(train_rows), ft.seed)
    job = {"graph": graph, "x": np.ascontiguousarray(x[rows]), "y_train": y[train_rows], "y_val": y[val_rows],
           "train_rows": train_rows, "order": order, "features": {}, "cut_starts": {}, "finetune": ft}
    add_features(job, plans)
    return job


def new_cuts(job: dict, plans: list[Plan]) -> dict:
    """The cuts ``plans`` need whose features ``job`` does not have yet: cut tensor -> the node it starts at."""
    graph, starts = job["graph"], job["cut_starts"]
    return {cut: len(graph.nodes) - len(g.nodes) for p in plans for g, _, cut in [suffix_model(graph, p)]
            if cut is not None and cut not in starts}


def add_features(job: dict, plans: list[Plan], progress=None) -> None:
    """Compute the frozen features of the cuts ``plans`` need that ``job`` does not have yet: each from the
    deepest tensor below it the job has (the images or another cut), by the C forward of the frozen layers
    between the two (``engine_c.predict``, bit-identical to the simulator's; about ten times as fast);
    ``progress.update(1)`` after each."""
    graph, starts = job["graph"], job["cut_starts"]
    for cut, start in sorted(new_cuts(job, plans).items(), key=lambda item: item[1]):
        src, src_start = max(((c, s) for c, s in starts.items() if s < start), key=lambda cs: cs[1],
                             default=(graph.inputs[0], 0))
        values = job["x"] if src_start == 0 else job["features"][src]
        job["features"][cut] = np.ascontiguousarray(predict(stretch(graph, src, src_start, start, cut), values))
        starts[cut] = start
        if progress is not None:
            progress.update(1)
