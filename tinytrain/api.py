"""The Python API (``import tinytrain``): ``load_model``, ``compile``, ``plan``, ``train``, ``evaluate``.

Each returns a typed result and raises the typed errors of tinytrain/errors.py (``UsageError``, ``ModelError``,
``BudgetError``, ...), which name the parameters as this API spells them (``plan=``); the command line (cli*.py) is
a thin layer that turns arguments into these calls, prints the results, writes the files and spells the
parameters as its options. ``model`` is a path (ONNX / TFLite) or a loaded ``Graph``; ``data`` a DATA spec (an
.npz, a class folder, ``lfw``, ``fashion-mnist[:test][:N]``) or a pair (uint8 NHWC images, labels); a plan a
``Plan``, a plan file or its JSON object. The work is done by the engines (tinytrain/engines/), the training
passes (tinytrain/training/), the memory planner, the code generator and the plan search (tinytrain/search/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.data import held_out_split
from tinytrain.engines import default_engine
from tinytrain.engines.order import sample_order
from tinytrain.engines import samples as sampling
from tinytrain.engines.samples import check_classifier, default_loss, load_data, prepared, scorer, training_samples
from tinytrain.engines.trainer import build_trainer, check_engine, forward_outputs
from tinytrain.errors import UsageError, param
from tinytrain.firmware.fit import links_json, links_text
from tinytrain.ir import Graph
from tinytrain.layers import layer_table, layer_text
from tinytrain.memory.report import MemoryReport
from tinytrain.simulator import TrainState
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.resolve import resolve_plan
from tinytrain.lr_schedule import check_schedule
from tinytrain.training.sparse import Plan

__all__ = ["load_model", "load_data", "model_data", "compile", "Compiled", "train", "TrainResult", "evaluate",
           "EvalResult", "score_outputs", "plan", "sample_order", "Plan"]

InputSize = int | str | tuple[int, int] | None


def load_model(path: str | Path, *, new_head: int | None = None, seed: int = 0, input_size: InputSize = None,
               input_mapping=None) -> Graph:
    """The int8 model as a tinytrain graph; ``input_size`` (N, "HxW" or (H, W)): its layers run at that input
    size (frontends/resize.py); ``new_head``: its last layer replaced by a new N-class head (init ``seed``);
    ``input_mapping`` (a name, "SCALE,OFFSET" or an ``InputMapping``; None: the model's own): how a pixel becomes
    its input (tinytrain/input_mapping.py)."""
    from tinytrain.frontends import load_model as load

    return _graph(load(path), new_head, seed, input_size, input_mapping)


def _graph(model: str | Path | Graph, new_head: int | None, seed: int, input_size: InputSize = None,
           input_mapping=None) -> Graph:
    from tinytrain.input_mapping import with_mapping

    if not isinstance(model, Graph):
        return load_model(model, new_head=new_head, seed=seed, input_size=input_size, input_mapping=input_mapping)
    if new_head is not None and new_head < 1:
        raise UsageError(f"new_head {new_head}: give the number of classes of the new head (at least 2)")
    model = with_mapping(model, input_mapping)
    if input_size is not None:
        from tinytrain.frontends.resize import resize_input

        model = resize_input(model, input_size)
    if new_head:
        from tinytrain.training.head import new_head as replace_head

        return replace_head(model, new_head, seed=seed)
    return model


def model_data(graph: Graph, data, loss: str = "xent") -> tuple[np.ndarray, np.ndarray | None]:
    """(the samples as the model's int8 inputs, their targets) of ``data``: class labels indexing the model's
    outputs (``xent``); float targets of the output's shape, or None for reconstruction (``mse``)."""
    return prepared(graph, load_data(data), loss)


# ---- compile ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compiled:
    """What ``compile`` planned: the step (training graph or forward pass), its memory report and C project."""

    graph: Graph                 # the model
    step: Graph                  # what the device runs: the scheduled training step, or the forward pass
    report: MemoryReport
    plan: Plan | None            # None: inference
    reorder: bool
    files: dict[str, str] = field(repr=False)  # the C project by file name (empty: C not emitted, see note)
    note: str | None = None
    nonfinite_guard: dict | None = None  # training: the proof that a finite loss gives finite gradients
    kernel_choices: tuple[str, ...] = ()  # per forward convolution: the kernel variant and why not the earlier ones

    @property
    def mode(self) -> str:
        return "inference" if self.plan is None else "training"

    def to_json(self) -> dict:
        """report.json (docs/design.md §5)."""
        from tinytrain.version import __version__

        meta = {"tinytrain_version": __version__, "model": self.graph.name, "model_sha256": self.graph.source_sha256,
                "mode": self.mode}
        if self.plan is not None:
            meta.update(plan=self.plan.to_json(), reorder=self.reorder, nonfinite_guard=self.nonfinite_guard)
        report = self.report.to_json()
        return {**meta, **report, "firmware": links_json(report),
                "layers": [r.to_json() for r in layer_table(self.graph, self.step, self.report)],
                "schedule": [f"{n.op} {n.name}" for n in self.step.nodes]}

    def text(self) -> str:
        from tinytrain.memory.text import report_text

        return (report_text(self.report, self.step, boards=links_text(self.report.to_json())) + "\n\n"
                + layer_text(layer_table(self.graph, self.step, self.report), self.plan is not None))

    def write(self, out, force: bool = False) -> None:
        """The output folder of ``tinytrain compile`` (a path or a checked ``outputs.OutputDir``): the C project,
        report.json, report.txt, memory_timeline.png (a training build: persist/, the flash persistence of the
        learned state, docs/guide/integration.md), all or nothing; an earlier output is replaced, the files
        tinytrain did not write are kept (tinytrain/outputs)."""
        import json

        from tinytrain.memory.timeline import write_timeline
        from tinytrain.outputs import OutputDir

        target = out if isinstance(out, OutputDir) else OutputDir(out, "compile", force=force)
        with target as tmp:
            for name, body in self.files.items():
                (tmp / name).write_bytes(body.encode("utf-8"))
            (tmp / "report.json").write_text(json.dumps(self.to_json(), indent=1) + "\n")
            (tmp / "report.txt").write_text(self.text() + "\n")
            write_timeline(self.report, self.step, tmp / "memory_timeline.png",
                           title=f"{self.graph.name} {self.mode}: SRAM over the schedule")
            if self.plan is not None and self.files:  # the learned state in flash: firmware/c/tt_persist.h
                from tinytrain.csources import firmware_sources
                from tinytrain.firmware.project import PERSIST_API

                (tmp / "persist").mkdir()
                for name in PERSIST_API:
                    (tmp / "persist" / name).write_bytes((firmware_sources() / name).read_bytes())


def compile(model: str | Path | Graph, *, sram: str | int = "256k", flash: str | int = "1m", plan=None,
            update: str | None = None, target: str = "cortex-m7", new_head: int | None = None,
            planner: str = "greedy", reorder: bool = True, inplace: bool = True, loss: str | None = None,
            input_size: InputSize = None, remainder_bits: int | None = None, backward: str | None = None,
            input_mapping=None, classes=None) -> Compiled:
    """Plan the training step of ``plan`` / ``update`` (without them: the inference forward pass) against the
    budgets and emit its C (``loss``, ``remainder_bits``, ``backward``: as ``train``'s). Raises BudgetError when it
    does not fit."""
    from tinytrain.codegen.contract import with_classes
    from tinytrain.compilation import compile_step
    from tinytrain.sizes import parse_size

    sram_bytes, flash_bytes = (v if isinstance(v, int) else parse_size(v) for v in (sram, flash))
    graph = _graph(model, new_head, 0, input_size, input_mapping)
    chosen = resolve_plan(graph, plan=plan, update=update, remainder_bits=remainder_bits, backward=backward,
                          loss=loss)
    graph = with_classes(graph, classes if classes is not None else getattr(chosen, "classes", None))
    step, report, files, note, guard, choices = compile_step(graph, chosen, sram_bytes, flash_bytes, planner=planner,
                                                             reorder=reorder, inplace=inplace, target=target)
    return Compiled(graph, step, report, chosen, reorder, files, note, guard, choices)


# ---- train and evaluate ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainResult:
    """A training run: per-step losses, the trained state, accuracies (held-out ones with ``held_out``)."""

    graph: Graph = field(repr=False)   # the model (with its new head)
    plan: Plan
    config: UpdateConfig
    engine: str
    steps: int                         # the run's steps (a run resumed from a board's flash: with those it skipped)
    losses: np.ndarray = field(repr=False)  # float32 per step run here; NaN / Inf: a step the guard did not apply
    state: TrainState = field(repr=False)
    seconds: float
    train_accuracy: float              # loss mse: the mean reconstruction error (metrics.py) instead
    final_loss: float | None           # mean loss of the last epoch's steps (at most len(train rows))
    n_train: int
    held_out: dict = field(default_factory=dict)  # n_held_out, held_out, split_seed, accuracy_before / _after
    engine_info: dict = field(default_factory=dict)  # build_seconds; qemu: board, insns_per_step

    @property
    def accuracy_after(self) -> float | None:
        return self.held_out.get("accuracy_after")

    def trained_model(self) -> Graph:
        """The model with the trained weights and biases (``tinytrain.export_onnx`` writes it as ONNX)."""
        from tinytrain.simulator import with_state

        return with_state(self.graph, self.state)

    def to_json(self) -> dict:
        """The JSON line of ``tinytrain train --json``."""
        return {"final_loss": self.final_loss, "steps": self.steps, "seconds": self.seconds, "engine": self.engine,
                "plan": self.plan.to_json(), "rounding": self.config.rounding.value, "qas": self.config.qas,
                "loss": self.plan.loss,
                ("train_accuracy" if self.plan.loss == "xent" else "train_error"): self.train_accuracy,
                "nonfinite_steps": int(self.state.nonfinite),
                **self.engine_info, **self.held_out}


def train(model: str | Path | Graph, data, *, plan=None, update: str | None = None, lr: float | None = None,
          bias_lr: float | None = None, head_lr: float | None = None, epochs: int = 1, steps: int | None = None,
          engine: str | None = None, board: str = "qemu-m7", sram: str | int = "256k", flash: str | Path | None = None,
          save_every: int = 0, stop_after_saves: int = 0, new_head: int | None = None, momentum: float = 0.0,
          rounding: str = "stochastic", qas: bool = True, held_out: float | None = None, split_seed: int = 0,
          seed: int = 0, lr_schedule: str | None = None, warmup: float = 0.0, loss: str | None = None,
          input_size: InputSize = None, remainder_bits: int | None = None, backward: str | None = None,
          progress=None, input_mapping=None, state: TrainState | str | Path | None = None) -> TrainResult | None:
    """Fine-tune with the device's arithmetic (batch-1 SGD, QAS, a sparse plan; default the bias-only preset) on
    ``engine``: ``sim`` the numpy simulator, ``c`` the emitted C built for the host, ``qemu`` that C as firmware
    on ``board`` (default: ``c`` when gcc is installed, else ``sim``; every engine computes the same states).
    ``held_out``: train on the rest of a stratified split, report held-out accuracy before and after. ``flash`` /
    ``save_every`` / ``stop_after_saves`` (qemu): the board's flash file; with ``stop_after_saves`` the board's
    power is cut after that many saves and None is returned. ``lr_schedule`` "cosine" gives the plan an lr
    schedule over this run's steps (``warmup``: the warm-up fraction), "constant" drops the plan's (default: the
    plan's own). ``loss`` "xent" (softmax cross-entropy, default) or "mse" (the reconstruction of DATA without y:
    an autoencoder; accuracies become mean reconstruction errors). ``remainder_bits`` (0, 4 or 8; None: the plan's
    own): the fraction bits each trained int8 weight keeps below its LSB between steps (ops/sgd_update.py).
    ``backward`` "fp32" or "int" (None: the plan's own): the arithmetic from the loss to the update, "int" the
    integer-only step (training/integer_step.py). ``progress(n)``: called as n more steps finish. ``state`` (a
    TrainState, a STATE.npz or a board's tt_state.bin): start from its weights and biases (the step counter,
    momentum and weight remainders start at zero, as after tt_init)."""
    from tinytrain.engines.run import check_persist_arguments, run_training
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.training.sparse import with_lr_schedule

    engine = check_engine(engine or default_engine())
    check_persist_arguments(engine, flash, save_every, stop_after_saves)
    check_schedule(lr_schedule, warmup)
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    chosen = resolve_plan(graph, plan=plan, update=update, lr=lr, bias_lr=bias_lr, head_lr=head_lr,
                          default="bias-only", remainder_bits=remainder_bits, backward=backward, loss=loss)
    check_classifier(graph, chosen.loss)
    if state is not None:
        from tinytrain.simulator import with_state
        from tinytrain.state_file import load_state

        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph, chosen))
    config = UpdateConfig(momentum=momentum, rounding=Rounding(rounding), qas=qas, seed=seed)
    samples = training_samples(graph, load_data(data), chosen.loss)
    parts = held_out_split(samples.y, held_out, split_seed)
    rows = parts[0] if parts else np.arange(len(samples.y))
    n_steps = steps if steps is not None else epochs * len(rows)
    if n_steps <= 0:
        raise UsageError(f"nothing to do: {param('steps')} / {param('epochs')} must be positive")
    chosen = with_lr_schedule(chosen, lr_schedule, warmup, n_steps)
    measure = scorer(graph, chosen.loss, samples)
    trainer = build_trainer(engine, graph, chosen, config, samples, board=board, sram_bytes=_bytes(sram),
                            save_every=save_every, flash=flash)
    if stop_after_saves:
        trainer.device.train(trainer.samples.x, trainer.samples.y, sample_order(rows, n_steps, seed),
                             stop_after_saves=stop_after_saves)
        return None
    run = run_training(trainer, measure, rows, parts[1] if parts else None, n_steps, seed, progress,
                       "accuracy" if chosen.loss == "xent" else "error")
    held = {} if not parts else {"n_train": int(len(rows)), "n_held_out": int(len(parts[1])), "held_out": held_out,
                                 "split_seed": split_seed, **run.held_out}
    return TrainResult(graph, chosen, config, engine, int(n_steps), run.losses, run.state, run.seconds,
                       run.train_score, run.final_loss, int(len(rows)), held, trainer.info)


def _bytes(size: str | int) -> int:
    from tinytrain.sizes import parse_size

    return size if isinstance(size, int) else parse_size(size)


@dataclass(frozen=True)
class EvalResult:
    """Accuracy of a classifier, or (loss mse) an autoencoder's reconstruction error per sample (``errors``, their
    mean in ``accuracy``'s place: ``error``) and the ROC AUC of that error against anomaly labels, if given."""

    accuracy: float | None
    n: int
    held_out: float | None = None
    split_seed: int | None = None
    errors: np.ndarray | None = field(default=None, repr=False)  # (n,) float32 per-sample reconstruction error
    auc: float | None = None
    n_anomalous: int | None = None

    @property
    def error(self) -> float | None:
        return None if self.errors is None else float(self.errors.mean())

    def to_json(self) -> dict:
        """The JSON line of ``tinytrain eval --json``."""
        if self.errors is None:
            d = {"accuracy": self.accuracy, "n": self.n}
        else:
            e = self.errors.astype(np.float64)
            d = {"loss": "mse", "reconstruction_error": self.error, "n": self.n,
                 "errors_summary": {"min": float(e.min()), "median": float(np.median(e)),
                                    "p90": float(np.percentile(e, 90)), "max": float(e.max())},
                 "errors": [float(v) for v in e]}
            if self.auc is not None:
                d.update(roc_auc=self.auc, n_anomalous=self.n_anomalous)
        if self.held_out is not None:
            d.update(held_out=self.held_out, split_seed=self.split_seed)
        return d


def evaluate(model: str | Path | Graph, data, *, state: TrainState | str | Path | None = None,
             engine: str | None = None, new_head: int | None = None, seed: int = 0, held_out: float | None = None,
             split_seed: int = 0, loss: str | None = None, anomaly_labels: str | Path | np.ndarray | None = None,
             input_size: InputSize = None, progress=None, input_mapping=None, plan=None, update: str | None = None,
             remainder_bits: int | None = None, backward: str | None = None) -> EvalResult:
    """Accuracy of the int8 forward pass (``sim``: the simulator; ``c``: the emitted C built for the host; default
    ``c`` when gcc is installed), with a trained ``state`` (a TrainState or a state file) if given; ``held_out``: on
    that part of the split only (the same rows as ``train(held_out=...)``). ``loss`` "mse" (default for DATA
    without y on a model whose output has its input's shape): the reconstruction error per sample, and its ROC AUC
    as an anomaly score against ``anomaly_labels`` (a .npy file or array of 0/1, default the DATA's ``anomaly``
    array). ``progress(n)``: called as n more samples are done. A board's saved state (tt_state.bin) is read with
    the step's ``plan`` / ``update`` (``remainder_bits``, ``backward``: as compiled)."""
    from tinytrain.simulator import with_state

    engine = check_engine(engine or default_engine(), ("sim", "c"))
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    if state is not None:
        from tinytrain.state_file import load_state

        step = resolve_plan(graph, plan=plan, update=update, remainder_bits=remainder_bits, backward=backward)
        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph, step))
    ds = load_data(data)
    loss = loss or default_loss(graph, ds)
    x, y = prepared(graph, ds, loss)
    anomaly = sampling.anomaly_labels(ds, anomaly_labels, loss)
    targets = y if loss == "mse" else None
    if loss == "mse":
        y = np.zeros(len(x), np.int64)
    parts = held_out_split(y, held_out, split_seed)
    if parts:
        x, y = x[parts[1]], y[parts[1]]
        anomaly = None if anomaly is None else anomaly[parts[1]]
        targets = None if targets is None else targets[parts[1]]
    out = forward_outputs(graph, x, engine, progress)
    return score_outputs(graph, loss, x, out, y, targets, anomaly, held_out=held_out,
                         split_seed=split_seed if parts else None)


def score_outputs(graph: Graph, loss: str, x: np.ndarray, out: np.ndarray, y: np.ndarray,
                  targets: np.ndarray | None = None, anomaly: np.ndarray | None = None, **split) -> EvalResult:
    """eval's result of the int8 outputs ``out`` of the samples ``x`` (any engine's, or a board's over serial): the
    accuracy of argmax against ``y`` (xent), or (mse) the reconstruction error per sample (against ``targets`` when
    given) and its ROC AUC against ``anomaly``; ``split``: the EvalResult's held_out / split_seed."""
    if loss == "mse":
        from tinytrain.metrics import reconstruction_errors, roc_auc

        errors = reconstruction_errors(graph, x, out, targets)
        auc = None if anomaly is None else roc_auc(errors, anomaly)
        return EvalResult(None, int(len(x)), **split, errors=errors, auc=auc,
                          n_anomalous=None if anomaly is None else int(anomaly.sum()))
    acc = float((out.reshape(len(y), -1).argmax(axis=1) == y).mean())
    return EvalResult(acc, int(len(y)), **split)


# ---- plan ------------------------------------------------------------------------------------------------

def plan(model: str | Path | Graph, data, *, sram: str | int = "256k", output: str | Path | None = None,
         new_head: int | None = None, seed: int = 0, progress: bool = False, input_size: InputSize = None,
         input_mapping=None, **options):
    """Search the sparse-update plan with the best measured accuracy under the SRAM budget (tinytrain/search/):
    contributions by short fine-tunes (cached on disk), the gain model's proposals, the presets and proposals
    trained as finalists. ``options``: the fields of ``search.run.SearchOptions`` (workers, executor, lr, epochs,
    ...; ``loss``: "xent" or "mse", default from the data as ``train``'s: an autoencoder on DATA without y is
    searched by minus its validation reconstruction error, or with the data's anomaly labels by the ROC AUC of that
    error, fitting on the normal rows only). Returns a ``search.run.SearchResult`` (``.plan``,
    ``.report`` = PLAN.search.json); with ``output`` writes PLAN.json and PLAN.search.json beside it."""
    from tinytrain.search.run import search_data

    graph = _graph(model, new_head, seed, input_size, input_mapping)
    names = {"model": str(model) if not isinstance(model, Graph) else graph.name,
             "data": str(data) if not isinstance(data, tuple) else "arrays"}
    result = search_data(graph, load_data(data), names, sram_bytes=_bytes(sram), new_head=new_head, seed=seed,
                         progress=progress, **options)
    if output is not None:
        result.write(output)
    return result
