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

from pathlib import Path

import numpy as np

from tinytrain.codegen.contract import with_classes
from tinytrain.compilation import Compiled
from tinytrain.cores import DEFAULT_CORE
from tinytrain.compilation import compile_step
from tinytrain.engines import default_engine
from tinytrain.engines import samples as sampling
from tinytrain.engines.order import sample_order
from tinytrain.engines.results import EvalResult, TrainResult, score_outputs
from tinytrain.engines.run import check_persist_arguments, run_training
from tinytrain.engines.samples import check_classifier, default_loss, load_data, prepared, scorer, training_samples
from tinytrain.engines.trainer import build_trainer, check_engine, forward_outputs
from tinytrain.errors import UsageError, param
from tinytrain.input_mapping import with_mapping
from tinytrain.ir import Graph
from tinytrain.search.run import search_data
from tinytrain.simulator import TrainState, with_state
from tinytrain.sizes import parse_size
from tinytrain.splits import held_out_split
from tinytrain.state_file import load_state
from tinytrain.training.head import new_head as replace_head
from tinytrain.training.resolve import needs_steps, over_run, read_step, resolve_step, seed_of
from tinytrain.training.sparse import Plan
from tinytrain.training.spec import StepSpec

__all__ = ["load_model", "load_data", "model_data", "compile", "Compiled", "train", "TrainResult", "evaluate",
           "EvalResult", "score_outputs", "plan", "sample_order", "Plan", "StepSpec"]

InputSize = int | str | tuple[int, int] | None


def load_model(path: str | Path, *, new_head: int | None = None, seed: int = 0, input_size: InputSize = None,
               input_mapping=None) -> Graph:
    """The int8 model as a tinytrain graph; ``input_size`` (N, "HxW" or (H, W)): its layers run at that input
    size (frontends/resize.py); ``new_head``: its last layer replaced by a new N-class head (init ``seed``);
    ``input_mapping`` (a name, "SCALE,OFFSET" or an ``InputMapping``; None: the model's own): how a pixel becomes
    its input (tinytrain/input_mapping.py)."""
    # lazy: the importers load onnx (about 0.6 s); only reading a model needs them
    from tinytrain.frontends import load_model as load

    return _graph(load(path), new_head, seed, input_size, input_mapping)


def _graph(model: str | Path | Graph, new_head: int | None, seed: int, input_size: InputSize = None,
           input_mapping=None) -> Graph:
    if not isinstance(model, Graph):
        return load_model(model, new_head=new_head, seed=seed, input_size=input_size, input_mapping=input_mapping)
    if new_head is not None and new_head < 1:
        raise UsageError(f"new_head {new_head}: give the number of classes of the new head (at least 2)")
    model = with_mapping(model, input_mapping)
    if input_size is not None:
        # lazy: the importers load onnx (about 0.6 s); only reading a model needs them
        from tinytrain.frontends.resize import resize_input

        model = resize_input(model, input_size)
    if new_head:
        return replace_head(model, new_head, seed=seed)
    return model


def model_data(graph: Graph, data, loss: str = "xent") -> tuple[np.ndarray, np.ndarray | None]:
    """(the samples as the model's int8 inputs, their targets) of ``data``: class labels indexing the model's
    outputs (``xent``); float targets of the output's shape, or None for reconstruction (``mse``)."""
    return prepared(graph, load_data(data), loss)


# ---- compile ---------------------------------------------------------------------------------------------

def compile(model: str | Path | Graph, *, sram: str | int = "256k", flash: str | int = "1m", plan=None,
            update: str | None = None, target: str = DEFAULT_CORE, new_head: int | None = None,
            planner: str = "greedy", reorder: bool = True, inplace: bool = True, input_size: InputSize = None,
            input_mapping=None, classes=None, clock_mhz: float | None = None, **step) -> Compiled:
    """Plan the training step of ``plan`` / ``update`` (without them: the inference forward pass) against the
    budgets and emit its C; ``clock_mhz``: the clock of the report's time estimate (None: the core's reference). ``step``: the step's knobs, as ``train`` takes them (training/spec.py ``KNOBS``; a
    cosine ``lr_schedule`` needs ``schedule_steps`` here), so the step tuned with ``train`` is the step compiled.
    Raises BudgetError when it does not fit."""

    sram_bytes, flash_bytes = _bytes(sram, "sram"), _bytes(flash, "flash")
    needs_steps(step)
    given = read_step(plan)
    graph = _graph(model, new_head, seed_of(given, step), input_size, input_mapping)
    spec = resolve_step(graph, given, update=update, new_head=new_head, **step)
    graph = with_classes(graph, classes if classes is not None else getattr(spec, "classes", None))
    return compile_step(graph, spec, sram_bytes, flash_bytes, planner=planner, reorder=reorder, inplace=inplace,
                        target=target, clock_mhz=clock_mhz)


# ---- train and evaluate ----------------------------------------------------------------------------------

def train(model: str | Path | Graph, data, *, plan=None, update: str | None = None, epochs: int = 1,
          steps: int | None = None, engine: str | None = None, board: str = "qemu-m7", sram: str | int = "256k",
          flash: str | Path | None = None, save_every: int = 0, stop_after_saves: int = 0,
          new_head: int | None = None, held_out: float | None = None, split_seed: int = 0,
          input_size: InputSize = None, progress=None, input_mapping=None, state: TrainState | str | Path | None = None,
          **step) -> TrainResult | None:
    """Fine-tune with the device's arithmetic (batch-1 SGD, QAS, a sparse plan; default the bias-only preset) on
    ``engine``: ``sim`` the numpy simulator, ``c`` the emitted C built for the host, ``qemu`` that C as firmware
    on ``board`` (default: ``c`` when gcc is installed, else ``sim``; every engine computes the same states).
    ``step``: the step's knobs (training/spec.py ``KNOBS``, each with its meaning; None or absent: the plan's own,
    else the default), e.g. ``lr``, ``lr_schedule="cosine"`` (over this run's steps unless ``schedule_steps``),
    ``momentum``, ``rounding``, ``qas``, ``seed`` (also the sample order and the new head's init),
    ``remainder_bits``, ``backward``, ``loss`` ("mse": the reconstruction of DATA without y; accuracies become mean
    reconstruction errors). ``held_out``: train on the
    rest of a stratified split, report held-out accuracy before and after. ``flash`` / ``save_every`` /
    ``stop_after_saves`` (qemu): the board's flash file; with ``stop_after_saves`` the board's power is cut after
    that many saves and None is returned. ``progress(n)``: called as n more steps finish. ``state`` (a
    TrainState, a STATE.npz or a board's tt_state.bin): start from its weights and biases (the step counter,
    momentum and weight remainders start at zero, as after tt_init)."""

    engine = check_engine(engine or default_engine())
    check_persist_arguments(engine, flash, save_every, stop_after_saves)
    given = read_step(plan)
    seed = seed_of(given, step)
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    spec = resolve_step(graph, given, update=update, default="bias-only", new_head=new_head, **step)
    check_classifier(graph, spec.loss)
    if state is not None:
        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph, spec))
    samples = training_samples(graph, load_data(data), spec.loss)
    parts = held_out_split(samples.y, held_out, split_seed)
    rows = parts[0] if parts else np.arange(len(samples.y))
    n_steps = steps if steps is not None else epochs * len(rows)
    if n_steps <= 0:
        raise UsageError(f"nothing to do: {param('steps')} / {param('epochs')} must be positive")
    spec = over_run(spec, step, n_steps)
    measure = scorer(graph, spec.loss, samples)
    trainer = build_trainer(engine, graph, spec, samples, board=board, sram_bytes=_bytes(sram, "sram"),
                            save_every=save_every, flash=flash)
    if stop_after_saves:
        trainer.device.train(trainer.samples.x, trainer.samples.y, sample_order(rows, n_steps, seed),
                             stop_after_saves=stop_after_saves)
        return None
    run = run_training(trainer, measure, rows, parts[1] if parts else None, n_steps, seed, progress,
                       "accuracy" if spec.loss == "xent" else "error")
    held = {} if not parts else {"n_train": int(len(rows)), "n_held_out": int(len(parts[1])), "held_out": held_out,
                                 "split_seed": split_seed, **run.held_out}
    return TrainResult(graph, spec, engine, int(n_steps), run.losses, run.state, run.seconds, run.train_score,
                       run.final_loss, int(len(rows)), held, trainer.info)


def _bytes(size: str | int, name: str) -> int:
    return size if isinstance(size, int) else parse_size(size, name)


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
    engine = check_engine(engine or default_engine(), ("sim", "c"))
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    if state is not None:
        step = resolve_step(graph, read_step(plan), update=update, remainder_bits=remainder_bits, backward=backward)
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


# ---- plan ------------------------------------------------------------------------------------------------

def plan(model: str | Path | Graph, data, *, sram: str | int = "256k", output: str | Path | None = None,
         new_head: int | None = None, seed: int = 0, progress: bool = False, input_size: InputSize = None,
         input_mapping=None, **options):
    """Search the sparse-update plan with the best measured accuracy under the SRAM budget (tinytrain/search/):
    contributions by short fine-tunes (cached on disk), the gain model's proposals, the presets and proposals
    trained as finalists. ``options``: the fields of ``search.state.SearchOptions`` (workers, executor, lr, epochs,
    ...; ``loss``: "xent" or "mse", default from the data as ``train``'s: an autoencoder on DATA without y is
    searched by minus its validation reconstruction error, or with the data's anomaly labels by the ROC AUC of that
    error, fitting on the normal rows only). Returns a ``search.state.SearchResult`` (``.plan``,
    ``.report`` = PLAN.search.json); with ``output`` writes PLAN.json and PLAN.search.json beside it."""

    graph = _graph(model, new_head, seed, input_size, input_mapping)
    names = {"model": str(model) if not isinstance(model, Graph) else graph.name,
             "data": str(data) if not isinstance(data, tuple) else "arrays"}
    result = search_data(graph, load_data(data), names, sram_bytes=_bytes(sram, "sram"), new_head=new_head, seed=seed,
                         progress=progress, **options)
    if output is not None:
        result.write(output)
    return result
