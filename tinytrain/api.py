"""The Python API (``import tinytrain``): ``load_model``, ``compile``, ``plan``, ``train``, ``evaluate``.

Each returns a typed result and raises the typed errors of tinytrain/errors.py (``UsageError``, ``ModelError``,
``BudgetError``, ...); the command line (cli*.py) is a thin layer that turns arguments into these calls, prints
the results and writes the files. ``model`` is a path (ONNX / TFLite) or a loaded ``Graph``; ``data`` a DATA spec
(an .npz, a class folder, ``lfw``, ``fashion-mnist[:test][:N]``) or a pair (uint8 NHWC images, labels); a plan a
``Plan``, a plan file or its JSON object.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

import numpy as np

from tinytrain.data import held_out_split
from tinytrain.errors import UsageError
from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport
from tinytrain.simulator import TrainState
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.schedule import check_schedule
from tinytrain.training.sparse import Plan

ENGINES = ("sim", "c", "qemu")


def load_model(path: str | Path, *, new_head: int | None = None, seed: int = 0,
               input_size: int | str | tuple[int, int] | None = None, input_mapping=None) -> Graph:
    """The int8 model as a tinytrain graph; ``input_size`` (N, "HxW" or (H, W)): its layers run at that input
    size (frontends/resize.py); ``new_head``: its last layer replaced by a new N-class head (init ``seed``);
    ``input_mapping`` (a name, "SCALE,OFFSET" or an ``InputMapping``; None: the model's own): how a pixel becomes
    its input (tinytrain/input_mapping.py)."""
    from tinytrain.frontends import load_model as load

    return _graph(load(path), new_head, seed, input_size, input_mapping)


def _graph(model: str | Path | Graph, new_head: int | None, seed: int,
           input_size: int | str | tuple[int, int] | None = None, input_mapping=None) -> Graph:
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


LOSSES = ("xent", "mse")


def load_data(data):
    """The Dataset of a DATA spec, or of a pair / triple of arrays (x, y[, anomaly]; y may be None)."""
    from tinytrain.data import dataset_from_arrays, load_dataset

    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise UsageError(f"data: give (x, y) or (x, y, anomaly), not {len(data)} arrays")
        return dataset_from_arrays(*data)
    return load_dataset(data)


def model_data(graph: Graph, data, loss: str = "xent") -> tuple[np.ndarray, np.ndarray | None]:
    """(the samples as the model's int8 inputs, their targets) of ``data``: class labels indexing the model's
    outputs (``xent``); float targets of the output's shape, or None for reconstruction (``mse``)."""
    x, y, _ = _prepared(graph, load_data(data), loss)
    return x, y


def _prepared(graph: Graph, ds, loss: str):
    from tinytrain.data import model_inputs

    if len(ds) == 0:
        raise UsageError(f"{ds.source}: no samples")
    y = _targets(graph, ds, loss)
    return model_inputs(graph, ds.x), y, ds


def default_loss(graph: Graph, ds) -> str:
    """mse for data without targets on a model whose output has its input's shape (an autoencoder), else xent."""
    x_shape, out_shape = (graph.tensors[t].shape for t in (graph.inputs[0], graph.outputs[0]))
    return "mse" if ds.y is None and tuple(x_shape) == tuple(out_shape) else "xent"


def _targets(graph: Graph, ds, loss: str) -> np.ndarray | None:
    if loss not in LOSSES:
        raise UsageError(f"loss {loss!r}: choose one of {', '.join(LOSSES)}")
    x_shape, out_shape = (graph.tensors[t].shape for t in (graph.inputs[0], graph.outputs[0]))
    if loss == "mse":
        if ds.labelled:
            raise UsageError(f"{ds.source}: y holds class labels, but --loss mse needs float targets of the output's "
                             f"shape {out_shape[1:]} or no y (reconstruction); drop y (labels on an autoencoder)")
        if ds.y is None and tuple(x_shape) != tuple(out_shape):
            raise UsageError(f"{ds.source}: --loss mse without targets y reconstructs the input, but the model's "
                             f"output {out_shape} is not its input's shape {x_shape}; give float targets y")
        if ds.y is not None and tuple(ds.y.shape[1:]) != tuple(out_shape[1:]):
            raise UsageError(f"{ds.source}: the targets y are {tuple(ds.y.shape)}, the model's output is "
                             f"(N, {', '.join(map(str, out_shape[1:]))})")
        return ds.y
    if ds.y is None or not ds.labelled:
        raise UsageError(f"{ds.source}: {'no labels y' if ds.y is None else 'y holds float targets'}; a classifier "
                         "trains on integer class labels (an autoencoder or regression: --loss mse)")
    n_out = out_shape[-1]
    if ds.y.max() >= n_out:
        raise UsageError(f"{ds.source}: labels go up to {ds.y.max()} but the model has {n_out} outputs; "
                         f"train a new classifier with --new-head {ds.y.max() + 1}")
    return ds.y


def sample_order(rows: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """The rows a batch-1 run trains on, in order: a new permutation of ``rows`` each epoch (seed ``seed``)."""
    from tinytrain.search.measure import sample_order as order

    return rows[order(len(rows), steps, seed)] if steps else rows[:0]


def _plan(graph: Graph, plan, update: str | None, lr: float | None, bias_lr: float | None,
          head_lr: float | None, default: str | None, remainder_bits: int | None = None,
          backward: str | None = None) -> Plan | None:
    """The plan a call asks for; ``remainder_bits`` (None: the plan's own, or the default for a preset) sets the
    fraction bits every trained weight keeps (a layer's own bits in the plan included), ``backward`` ("fp32" /
    "int"; None: the plan's own, or "fp32" for a preset) the step's arithmetic from the loss to the update
    (training/sparse.py)."""
    from dataclasses import replace

    from tinytrain.training.sparse import BACKWARDS, REMAINDER_BITS

    if remainder_bits is not None and remainder_bits not in REMAINDER_BITS:
        raise UsageError(f"--remainder-bits {remainder_bits}: choose one of {', '.join(map(str, REMAINDER_BITS))}")
    if backward is not None and backward not in BACKWARDS:
        raise UsageError(f"--backward {backward}: choose one of {', '.join(BACKWARDS)}")
    chosen = _given_plan(graph, plan, update, lr, bias_lr, head_lr, default)
    if chosen is None:
        if backward is not None:
            raise UsageError("--backward sets the training step's arithmetic: give it with --plan or --update")
        return None
    if remainder_bits is not None:
        chosen = replace(chosen, remainder_bits=remainder_bits,
                         weights=tuple(replace(w, remainder_bits=None) for w in chosen.weights))
    return chosen if backward is None else replace(chosen, backward=backward)


def _given_plan(graph: Graph, plan, update: str | None, lr: float | None, bias_lr: float | None,
                head_lr: float | None, default: str | None) -> Plan | None:
    from tinytrain.training.sparse import load_plan, parse_plan, preset

    if plan is not None and update:
        raise UsageError("give either --plan or --update, not both")
    if plan is not None and (lr or bias_lr or head_lr):
        raise UsageError("--lr / --bias-lr / --head-lr apply to --update presets; a plan file carries its own")
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return parse_plan(plan)
    if plan is not None:
        return load_plan(plan)
    if update or default:
        return preset(update or default, graph, lr=lr or 0.01, bias_lr=bias_lr, head_lr=head_lr)
    return None


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
        return {**meta, **self.report.to_json(), "schedule": [f"{n.op} {n.name}" for n in self.step.nodes]}

    def text(self) -> str:
        from tinytrain.memory.text import report_text

        return report_text(self.report, self.step)

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
            input_size: int | str | tuple[int, int] | None = None, remainder_bits: int | None = None,
            backward: str | None = None, input_mapping=None, classes=None) -> Compiled:
    """Plan the training step of ``plan`` / ``update`` (without them: the inference forward pass) against the
    budgets and emit its C (``loss``, ``remainder_bits``, ``backward``: as ``train``'s). Raises BudgetError when it
    does not fit."""
    from tinytrain.codegen.flash import render_within_flash
    from tinytrain.errors import UnsupportedModelError
    from tinytrain.memory.report import check_budget, plan_memory
    from tinytrain.sizes import parse_size

    sram_bytes, flash_bytes = (v if isinstance(v, int) else parse_size(v) for v in (sram, flash))
    from tinytrain.codegen.contract import with_classes

    graph = _graph(model, new_head, 0, input_size, input_mapping)
    chosen = _plan(graph, plan, update, None, None, None, None, remainder_bits, backward)
    graph = with_classes(graph, classes if classes is not None else getattr(chosen, "classes", None))
    if chosen is not None:
        chosen = _with_loss(chosen, loss, plan is not None)
    elif loss is not None:
        raise UsageError("--loss sets the training step's loss: give it with --plan or --update")
    step = graph
    if chosen is not None:
        from tinytrain.training.device_step import device_schedule
        from tinytrain.training.train_graph import build_training_graph

        step = build_training_graph(graph, chosen)
        if reorder:
            step = device_schedule(step)
    report = plan_memory(step, sram_bytes, flash_bytes, planner=planner, inplace=inplace, target=target)
    check_budget(report, step)
    guard = None
    if chosen is not None:  # the guard checks the loss: a finite one must prove every gradient finite
        from tinytrain.training.finite import gradient_bounds

        guard = gradient_bounds(step).to_json()
    choices: list[str] = []
    try:
        (report, files), note = render_within_flash(step, report, choices), None
    except UnsupportedModelError as e:
        if chosen is None:
            raise
        files, note = {}, f"note: no C project written for the training step yet ({e})"
    check_budget(report, step)  # the flash of the emitted C
    return Compiled(graph, step, report, chosen, reorder, files, note, guard, tuple(choices))


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
          engine: str = "sim", board: str = "qemu-m7", sram: str | int = "256k", flash: str | Path | None = None,
          save_every: int = 0, stop_after_saves: int = 0, new_head: int | None = None, momentum: float = 0.0,
          rounding: str = "stochastic", qas: bool = True, held_out: float | None = None, split_seed: int = 0,
          seed: int = 0, lr_schedule: str | None = None, warmup: float = 0.0, loss: str | None = None,
          input_size: int | str | tuple[int, int] | None = None,
          remainder_bits: int | None = None, backward: str | None = None, input_mapping=None,
          state: TrainState | str | Path | None = None) -> TrainResult | None:
    """Fine-tune with the device's arithmetic (batch-1 SGD, QAS, a sparse plan; default the bias-only preset) on
    ``engine``: ``sim`` the numpy simulator, ``c`` the emitted C built for the host, ``qemu`` that C as firmware
    on ``board``. ``held_out``: train on the rest of a stratified split, report held-out accuracy before and
    after. ``flash`` / ``save_every`` / ``stop_after_saves`` (qemu): the board's flash file; with
    ``stop_after_saves`` the board's power is cut after that many saves and None is returned. ``lr_schedule``
    "cosine" gives the plan an lr schedule over this run's steps (``warmup``: the warm-up fraction), "constant"
    drops the plan's (default: the plan's own). ``loss`` "xent" (softmax cross-entropy, default) or "mse" (the
    reconstruction of DATA without y: an autoencoder; accuracies become mean reconstruction errors).
    ``remainder_bits`` (0, 4 or 8; None: the plan's own): the fraction bits each trained int8 weight keeps below its
    LSB between steps (ops/sgd_update.py). ``backward`` "fp32" or "int" (None: the plan's own): the arithmetic from
    the loss to the update, "int" the integer-only step (training/integer_step.py). ``state`` (a TrainState, a
    STATE.npz or a board's tt_state.bin): start from its weights and biases (the step counter, momentum and weight
    remainders start at zero, as after tt_init)."""
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.training.sparse import with_lr_schedule

    if engine not in ENGINES:
        raise UsageError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    _check_persist_arguments(engine, flash, save_every, stop_after_saves)
    check_schedule(lr_schedule, warmup)
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    chosen = _plan(graph, plan, update, lr, bias_lr, head_lr, "bias-only", remainder_bits, backward)
    chosen = _with_loss(chosen, loss, plan is not None)
    _check_classifier(graph, chosen.loss)
    if state is not None:
        from tinytrain.simulator import with_state
        from tinytrain.state_file import load_state

        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph, chosen))
    config = UpdateConfig(momentum=momentum, rounding=Rounding(rounding), qas=qas, seed=seed)
    x, y, targets = _training_data(graph, data, chosen.loss)
    parts = held_out_split(y, held_out, split_seed)
    rows = parts[0] if parts else np.arange(len(y))
    n_steps = steps if steps is not None else epochs * len(rows)
    if n_steps <= 0:
        raise UsageError("nothing to do: --steps / --epochs must be positive")
    chosen = with_lr_schedule(chosen, lr_schedule, warmup, n_steps)
    order = sample_order(rows, n_steps, seed)
    measure = _measure(graph, chosen.loss, x, y, targets)
    tg, x = _training_step(engine, graph, chosen, config, x, targets is not None)  # C, QEMU: its device_schedule
    runner = _Runner.make(engine, graph, tg, x, y, targets, measure, board=board, sram=sram, save_every=save_every,
                          flash=flash)
    info, metric = {}, "accuracy" if chosen.loss == "xent" else "error"
    if parts:
        info.update(n_train=int(len(rows)), n_held_out=int(len(parts[1])), held_out=held_out, split_seed=split_seed,
                    **{f"{metric}_before": runner.score(parts[1])})
    t0 = time.time()
    if stop_after_saves:
        runner.trainer.train(x, y, order, stop_after_saves=stop_after_saves)
        return None
    losses, state = runner.train(order)
    seconds = time.time() - t0
    tail = losses[-min(len(losses), len(rows)):]
    tail = tail[np.isfinite(tail)]  # the non-finite guard's steps were not applied
    if parts:
        info[f"{metric}_after"] = runner.score(parts[1], state)
    return TrainResult(graph, chosen, config, engine, int(n_steps), losses, state, round(seconds, 3),
                       runner.score(rows, state), float(tail.mean()) if len(tail) else None, int(len(rows)), info,
                       runner.info)


@dataclass
class _Runner:
    """One engine's training run: ``trainer`` (the C or QEMU trainer; None: the simulator on the frozen prefix's
    ``features``), its score (``measure`` of the engine's own outputs: accuracy or reconstruction error) and what
    the engine reports (``info``)."""

    tg: Graph
    x: np.ndarray
    y: np.ndarray
    targets: np.ndarray | None
    measure: Any
    engine: str
    trainer: Any = None
    features: Any = None
    suffix: Graph | None = None
    info: dict = field(default_factory=dict)

    @classmethod
    def make(cls, engine: str, graph: Graph, tg: Graph, x, y, targets, measure, *, board: str, sram,
             save_every: int, flash) -> _Runner:
        if engine == "sim":
            features, suffix = _frozen(graph, tg, x)
            return cls(tg, x, y, targets, measure, engine, features=features, suffix=suffix)
        t0 = time.time()
        if engine == "qemu":  # the firmware of the training step on an emulated board (engine_qemu.py)
            from tinytrain.engine_qemu import QemuTrainer
            from tinytrain.sizes import parse_size

            trainer = QemuTrainer(tg, board=board, sram_budget=sram if isinstance(sram, int) else parse_size(sram),
                                  save_every=save_every, flash=flash)
        else:
            from tinytrain.engine_c import CTrainer

            trainer = CTrainer(tg)
        return cls(tg, x, y, targets, measure, engine, trainer=trainer,
                   info={"build_seconds": round(time.time() - t0, 3)})

    def score(self, rows: np.ndarray, state=None) -> float:
        """The measure on ``rows`` of the device's outputs (tt_predict's int8 output), or the simulator's."""
        if self.trainer is None:
            return self.measure(_suffix_outputs(self.suffix, self.features, rows, state), rows)
        return self.measure(self.trainer.predict(self.x[rows]), rows)

    def train(self, order: np.ndarray):
        """(per-step losses, final state) of batch-1 SGD over ``order``."""
        if self.trainer is None:
            from tinytrain.simulator import init_state, train as sim_train

            state = init_state(self.tg)
            losses = sim_train(self.tg, state, self.x, self.y, order, features=self.features, targets=self.targets)
            return losses, state
        losses = self.trainer.train(self.x, self.y, order, targets=self.targets)
        if self.engine == "qemu":
            self.info.update(board=self.trainer.board, insns_per_step=float(np.mean(self.trainer.step_insns)))
        return losses, self.trainer.state()


def _training_step(engine: str, graph: Graph, plan: Plan, config: UpdateConfig, x: np.ndarray,
                   targets: bool) -> tuple[Graph, np.ndarray]:
    """(training graph, its inputs). The host C engine trains the step of the layers from the first one ``plan``
    touches, on their input tensor, computed once per image by the C forward of the frozen layers below (the
    device recomputes it at every step, with the same result: search/measure.suffix_model): the state and the
    outputs are the whole step's, bit for bit. Every other engine, an autoencoder (its loss reads the input) and
    a plan without a cut (a residual across it, layer 0 trained): the whole step on the images ``x``."""
    from dataclasses import replace

    from tinytrain.engine_c import predict
    from tinytrain.search.measure import suffix_model
    from tinytrain.training.train_graph import build_training_graph

    g, p, cut = suffix_model(graph, plan) if engine == "c" and not targets else (graph, plan, None)
    if cut is None:
        return build_training_graph(graph, plan, config, targets), x
    prefix = replace(graph, nodes=graph.nodes[: len(graph.nodes) - len(g.nodes)], outputs=(cut,))
    return build_training_graph(g, p, config), predict(prefix, x)


def _check_classifier(graph: Graph, loss: str) -> None:
    logits = graph.tensors[graph.outputs[0]].shape
    if loss == "xent" and any(d != 1 for d in logits[1:-1]):
        raise UsageError(f"{graph.name}: the output {logits} is not class logits (1, C); training needs a classifier "
                         "(an autoencoder: --loss mse)")


def _training_data(graph: Graph, data, loss: str):
    """(int8 inputs, labels, float targets or None): an mse run's labels are zeros (the engines pass one; the loss
    reads none), its targets y or None (reconstruction of the input); every engine takes both."""
    x, y = model_data(graph, data, loss)
    if loss == "xent":
        return x, y, None
    return x, np.zeros(len(x), np.int64), y


def _check_persist_arguments(engine: str, flash, save_every: int, stop_after_saves: int) -> None:
    if (flash or save_every or stop_after_saves) and engine != "qemu":
        raise UsageError("--flash, --save-every and --stop-after-saves need --engine qemu")
    if bool(flash) != (save_every > 0):
        raise UsageError("give --flash FILE and --save-every N (N > 0) together")
    if stop_after_saves < 0 or (stop_after_saves and not flash):
        raise UsageError("--stop-after-saves K needs --flash and a positive K")


_PREFIX_OUTPUTS: dict[str, dict[str, np.ndarray]] = {}  # content digest -> outputs (a few entries, in-process)


def _prefix_outputs(prefix, x: np.ndarray) -> dict[str, np.ndarray]:
    """``forward(prefix, x)``, remembered by content (nodes, tensors, images) so that several runs in one
    process (benchmarks, tests) on the same frozen layers and images compute it once."""
    import hashlib
    import pickle

    from tinytrain.simulator import forward

    if not prefix.nodes:
        return {name: x for name in prefix.outputs}
    h = hashlib.sha256(pickle.dumps((prefix.nodes, prefix.inputs, prefix.outputs)))
    for name in sorted({i for n in prefix.nodes for i in (*n.inputs, *n.outputs) if i}):
        h.update(pickle.dumps(prefix.tensors[name]))
    h.update(pickle.dumps((x.shape, x.dtype.str)) + np.ascontiguousarray(x).tobytes())
    key = h.hexdigest()
    if key not in _PREFIX_OUTPUTS:
        while len(_PREFIX_OUTPUTS) >= 4:
            _PREFIX_OUTPUTS.pop(next(iter(_PREFIX_OUTPUTS)))
        _PREFIX_OUTPUTS[key] = forward(prefix, {prefix.inputs[0]: x})
    return _PREFIX_OUTPUTS[key]


def _frozen(graph, tg, x: np.ndarray):
    """(features, forward suffix) of a training run: the outputs, for every image of ``x``, of the layers no
    update of the training graph ``tg`` can change (simulator.split_frozen) — what the training graph's suffix
    reads at each step and what the forward graph's suffix needs to score an image. Scoring through the
    suffix is bit-identical to the whole forward pass."""
    from dataclasses import replace

    from tinytrain.ops import written_tensors
    from tinytrain.simulator import split_frozen

    t_prefix, _ = split_frozen(tg)
    f_prefix, f_suffix = split_frozen(graph, live=written_tensors(tg))
    produced = {o for n in f_prefix.nodes for o in n.outputs} | set(graph.inputs[:1])
    both = tuple(dict.fromkeys(t_prefix.outputs + f_prefix.outputs))
    if produced.issuperset(both):  # the usual case: one pass over the frozen forward layers serves both
        return _prefix_outputs(replace(f_prefix, outputs=both), x), f_suffix
    return {**_prefix_outputs(t_prefix, x), **_prefix_outputs(f_prefix, x)}, f_suffix


def _suffix_outputs(suffix, features, rows: np.ndarray, state=None) -> np.ndarray:
    from tinytrain.simulator import forward, with_state

    g = suffix if state is None else with_state(suffix, state)
    return forward(g, {k: features[k][rows] for k in g.inputs})[g.outputs[0]]


def _measure(graph: Graph, loss: str, x: np.ndarray, y: np.ndarray, targets: np.ndarray | None = None):
    """score(int8 outputs of rows, rows): accuracy of a classifier (argmax against y), or the mean reconstruction
    error (metrics.reconstruction_errors) of an autoencoder (against ``targets`` when given)."""
    if loss == "mse":
        from tinytrain.metrics import reconstruction_errors

        return lambda out, rows: float(reconstruction_errors(
            graph, x[rows], out, None if targets is None else targets[rows]).mean())
    return lambda out, rows: float((out.reshape(len(rows), -1).argmax(axis=1) == y[rows]).mean())


def _with_loss(plan: Plan, loss: str | None, from_file: bool) -> Plan:
    """The plan with the run's ``loss`` (a preset takes it; a plan file carries its own, which it must not contradict)."""
    from dataclasses import replace

    if loss is None or loss == plan.loss:
        return plan
    if loss not in LOSSES:
        raise UsageError(f"loss {loss!r}: choose one of {', '.join(LOSSES)}")
    if from_file:
        raise UsageError(f"the plan's loss is {plan.loss}, --loss {loss} contradicts it; edit the plan's \"loss\" field")
    return replace(plan, loss=loss)


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


def evaluate(model: str | Path | Graph, data, *, state: TrainState | str | Path | None = None, engine: str = "sim",
             new_head: int | None = None, seed: int = 0, held_out: float | None = None,
             split_seed: int = 0, loss: str | None = None, anomaly_labels: str | Path | np.ndarray | None = None,
             input_size: int | str | tuple[int, int] | None = None, input_mapping=None, plan=None,
             update: str | None = None, remainder_bits: int | None = None, backward: str | None = None) -> EvalResult:
    """Accuracy of the int8 forward pass (``sim``: the simulator; ``c``: the emitted C built for the host), with
    a trained ``state`` (a TrainState or a state file) if given; ``held_out``: on that part of the split only
    (the same rows as ``train(held_out=...)``). ``loss`` "mse" (default for DATA without y on a model whose output
    has its input's shape): the reconstruction error per sample, and its ROC AUC as an anomaly score against
    ``anomaly_labels`` (a .npy file or array of 0/1, default the DATA's ``anomaly`` array). A board's saved state
    (tt_state.bin) is read with the step's ``plan`` / ``update`` (``remainder_bits``, ``backward``: as compiled)."""
    from tinytrain.simulator import with_state

    if engine not in ("sim", "c"):
        raise UsageError(f"engine {engine!r}: evaluate runs on sim or c")
    graph = _graph(model, new_head, seed, input_size, input_mapping)
    if state is not None:
        from tinytrain.state_file import load_state

        step = _plan(graph, plan, update, None, None, None, None, remainder_bits, backward)
        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph, step))
    ds = load_data(data)
    loss = loss or default_loss(graph, ds)
    x, y, ds = _prepared(graph, ds, loss)
    anomaly = _anomaly(ds, anomaly_labels, loss)
    targets = y if loss == "mse" else None
    if loss == "mse":
        y = np.zeros(len(x), np.int64)
    parts = held_out_split(y, held_out, split_seed)
    if parts:
        x, y = x[parts[1]], y[parts[1]]
        anomaly = None if anomaly is None else anomaly[parts[1]]
        targets = None if targets is None else targets[parts[1]]
    out = _forward_outputs(graph, x, engine)
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


def _anomaly(ds, labels, loss: str) -> np.ndarray | None:
    if labels is None:
        return ds.anomaly if loss == "mse" else None
    if loss != "mse":
        raise UsageError("--anomaly-labels score the reconstruction error of an autoencoder: use --loss mse")
    if isinstance(labels, (str, Path)):
        from tinytrain.metrics import load_anomaly_labels

        return load_anomaly_labels(labels, len(ds))
    from tinytrain.data import dataset_from_arrays

    return dataset_from_arrays(ds.x, None, labels, ds.source).anomaly


def _forward_outputs(graph: Graph, x: np.ndarray, engine: str) -> np.ndarray:
    """The int8 output of every sample: the simulator's, or the emitted C forward pass's (bit-identical)."""
    if engine == "c":
        from tinytrain.engine_c import predict

        return predict(graph, x)
    from tinytrain.simulator import forward

    return forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]


# ---- plan ------------------------------------------------------------------------------------------------

def plan(model: str | Path | Graph, data, *, sram: str | int = "256k", output: str | Path | None = None,
         new_head: int | None = None, seed: int = 0, progress: bool = False,
         input_size: int | str | tuple[int, int] | None = None, input_mapping=None, **options):
    """Search the sparse-update plan with the best measured accuracy under the SRAM budget (tinytrain/search/):
    contributions by short fine-tunes (cached on disk), the gain model's proposals, the presets and proposals
    trained as finalists. ``options``: the fields of ``search.run.SearchOptions`` (workers, executor, lr, epochs,
    ...; ``loss``: "xent" or "mse", default from the data as ``train``'s: an autoencoder on DATA without y is
    searched by minus its validation reconstruction error, or with the data's anomaly labels by the ROC AUC of that
    error, fitting on the normal rows only). Returns a ``search.run.SearchResult`` (``.plan``,
    ``.report`` = PLAN.search.json); with ``output`` writes PLAN.json and PLAN.search.json beside it."""
    from tinytrain.search.run import SearchOptions, search
    from tinytrain.sizes import parse_size

    graph = _graph(model, new_head, seed, input_size, input_mapping)
    names = {"model": str(model) if not isinstance(model, Graph) else graph.name,
             "data": str(data) if not isinstance(data, tuple) else "arrays"}
    ds = load_data(data)
    loss = options.pop("loss", None) or default_loss(graph, ds)
    anomaly = loss == "mse" and ds.anomaly is not None  # scored by the ROC AUC, fit on the normal rows
    try:
        opts = SearchOptions(sram_bytes=sram if isinstance(sram, int) else parse_size(sram), new_head=new_head,
                             seed=seed, progress=progress, loss=loss, anomaly=anomaly, **options)
    except TypeError as e:
        raise UsageError(f"plan: {e}") from None
    x, y, _ = _prepared(graph, ds, loss)
    if loss == "mse" and y is not None:
        raise UsageError(f"{ds.source}: the plan search scores an autoencoder's reconstruction of its input; float "
                         "targets y are not searched (drop y, or train a preset: tinytrain train --loss mse)")
    if loss == "mse":
        y = ds.anomaly.astype(np.int64) if anomaly else np.zeros(len(x), np.int64)
    result = search(graph, x, y, opts, names)
    if output is not None:
        result.write(output)
    return result
