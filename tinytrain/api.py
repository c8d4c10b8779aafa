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


def load_model(path: str | Path, *, new_head: int | None = None, seed: int = 0) -> Graph:
    """The int8 model as a tinytrain graph; ``new_head``: its last layer replaced by a new N-class head (init
    ``seed``)."""
    from tinytrain.frontends import load_model as load

    graph = load(path)
    if new_head:
        from tinytrain.training.head import new_head as replace_head

        graph = replace_head(graph, new_head, seed=seed)
    return graph


def _graph(model: str | Path | Graph, new_head: int | None, seed: int) -> Graph:
    if isinstance(model, Graph):
        if new_head:
            from tinytrain.training.head import new_head as replace_head

            return replace_head(model, new_head, seed=seed)
        return model
    return load_model(model, new_head=new_head, seed=seed)


def model_data(graph: Graph, data) -> tuple[np.ndarray, np.ndarray]:
    """(the images as the model's int8 inputs, labels) of ``data``; labels must index the model's outputs."""
    from tinytrain.data import load_dataset, model_inputs

    if isinstance(data, tuple):
        x, y = (np.asarray(a) for a in data)
        if x.dtype != np.uint8 or x.ndim != 4 or y.ndim != 1 or len(x) != len(y):
            raise UsageError(f"data: give uint8 images (N,H,W,C) and N labels, not {x.dtype}{x.shape} and {y.shape}")
        spec = "the data"
    else:
        ds = load_dataset(data)
        x, y, spec = ds.x, ds.y, str(data)
    n_out = graph.tensors[graph.outputs[0]].shape[-1]
    if len(y) == 0:
        raise UsageError(f"{spec}: no samples")
    if y.min() < 0 or y.max() >= n_out:
        raise UsageError(f"{spec}: labels go up to {y.max()} but the model has {n_out} outputs; "
                         f"train a new classifier with --new-head {y.max() + 1}")
    return model_inputs(graph, x), y.astype(np.int64)


def sample_order(rows: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """The rows a batch-1 run trains on, in order: a new permutation of ``rows`` each epoch (seed ``seed``)."""
    from tinytrain.search.measure import sample_order as order

    return rows[order(len(rows), steps, seed)] if steps else rows[:0]


def _plan(graph: Graph, plan, update: str | None, lr: float | None, bias_lr: float | None,
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

    def write(self, out: str | Path) -> None:
        """The output folder of ``tinytrain compile``: the C project, report.json, report.txt, memory_timeline.png
        (all or nothing)."""
        import json

        from tinytrain.memory.timeline import write_timeline
        from tinytrain.outputs import AtomicDir

        with AtomicDir(Path(out)) as tmp:
            for name, body in self.files.items():
                (tmp / name).write_bytes(body.encode("utf-8"))
            (tmp / "report.json").write_text(json.dumps(self.to_json(), indent=1) + "\n")
            (tmp / "report.txt").write_text(self.text() + "\n")
            write_timeline(self.report, self.step, tmp / "memory_timeline.png",
                           title=f"{self.graph.name} {self.mode}: SRAM over the schedule")


def compile(model: str | Path | Graph, *, sram: str | int = "256k", flash: str | int = "1m", plan=None,
            update: str | None = None, target: str = "cortex-m7", new_head: int | None = None,
            planner: str = "greedy", reorder: bool = True, inplace: bool = True) -> Compiled:
    """Plan the training step of ``plan`` / ``update`` (without them: the inference forward pass) against the
    budgets and emit its C. Raises BudgetError when it does not fit."""
    from tinytrain.codegen import render_project
    from tinytrain.errors import UnsupportedModelError
    from tinytrain.memory.report import check_budget, plan_memory
    from tinytrain.sizes import parse_size

    sram_bytes, flash_bytes = (v if isinstance(v, int) else parse_size(v) for v in (sram, flash))
    graph = _graph(model, new_head, 0)
    chosen = _plan(graph, plan, update, None, None, None, None)
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
        files, note = render_project(step, report, choices), None
    except UnsupportedModelError as e:
        if chosen is None:
            raise
        files, note = {}, f"note: no C project written for the training step yet ({e})"
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
    train_accuracy: float
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
                "train_accuracy": self.train_accuracy, "nonfinite_steps": int(self.state.nonfinite),
                **self.engine_info, **self.held_out}


def train(model: str | Path | Graph, data, *, plan=None, update: str | None = None, lr: float | None = None,
          bias_lr: float | None = None, head_lr: float | None = None, epochs: int = 1, steps: int | None = None,
          engine: str = "sim", board: str = "qemu-m7", sram: str | int = "256k", flash: str | Path | None = None,
          save_every: int = 0, stop_after_saves: int = 0, new_head: int | None = None, momentum: float = 0.0,
          rounding: str = "stochastic", qas: bool = True, held_out: float | None = None, split_seed: int = 0,
          seed: int = 0, lr_schedule: str | None = None, warmup: float = 0.0) -> TrainResult | None:
    """Fine-tune with the device's arithmetic (batch-1 SGD, QAS, a sparse plan; default the bias-only preset) on
    ``engine``: ``sim`` the numpy simulator, ``c`` the emitted C built for the host, ``qemu`` that C as firmware
    on ``board``. ``held_out``: train on the rest of a stratified split, report held-out accuracy before and
    after. ``flash`` / ``save_every`` / ``stop_after_saves`` (qemu): the board's flash file; with
    ``stop_after_saves`` the board's power is cut after that many saves and None is returned. ``lr_schedule``
    "cosine" gives the plan an lr schedule over this run's steps (``warmup``: the warm-up fraction), "constant"
    drops the plan's (default: the plan's own)."""
    from tinytrain.ops.sgd_update import Rounding
    from tinytrain.training.sparse import with_lr_schedule
    from tinytrain.training.train_graph import build_training_graph

    if engine not in ENGINES:
        raise UsageError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    _check_persist_arguments(engine, flash, save_every, stop_after_saves)
    check_schedule(lr_schedule, warmup)
    graph = _graph(model, new_head, seed)
    logits = graph.tensors[graph.outputs[0]].shape
    if any(d != 1 for d in logits[1:-1]):
        raise UsageError(f"{graph.name}: the output {logits} is not class logits (1, C); training needs a classifier")
    chosen = _plan(graph, plan, update, lr, bias_lr, head_lr, "bias-only")
    config = UpdateConfig(momentum=momentum, rounding=Rounding(rounding), qas=qas, seed=seed)
    x, y = model_data(graph, data)
    parts = held_out_split(y, held_out, split_seed)
    rows = parts[0] if parts else np.arange(len(y))
    n_steps = steps if steps is not None else epochs * len(rows)
    if n_steps <= 0:
        raise UsageError("nothing to do: --steps / --epochs must be positive")
    chosen = with_lr_schedule(chosen, lr_schedule, warmup, n_steps)
    tg = build_training_graph(graph, chosen, config)  # the C and QEMU engines run its device_schedule
    order = sample_order(rows, n_steps, seed)
    engine_info, trainer, features = {}, None, None
    if engine in ("c", "qemu"):
        t0 = time.time()
        if engine == "qemu":  # the firmware of the training step on an emulated board (engine_qemu.py)
            from tinytrain.engine_qemu import QemuTrainer
            from tinytrain.sizes import parse_size

            trainer = QemuTrainer(tg, board=board, sram_budget=sram if isinstance(sram, int) else parse_size(sram),
                                  save_every=save_every, flash=flash)
        else:
            from tinytrain.engine_c import CTrainer

            trainer = CTrainer(tg)
        engine_info["build_seconds"] = round(time.time() - t0, 3)

        def score(rows_, state_=None):  # the device's prediction: argmax of tt_predict's int8 logits
            return float((trainer.predict(x[rows_]).argmax(axis=1) == y[rows_]).mean())
    else:
        features, suffix = _frozen(graph, tg, x)

        def score(rows_, state_=None):
            return _suffix_accuracy(suffix, features, rows_, y, state_)
    info = {}
    if parts:
        info.update(n_train=int(len(rows)), n_held_out=int(len(parts[1])), held_out=held_out, split_seed=split_seed,
                    accuracy_before=score(parts[1]))
    t0 = time.time()
    if stop_after_saves:
        trainer.train(x, y, order, stop_after_saves=stop_after_saves)
        return None
    if trainer is not None:
        losses = trainer.train(x, y, order)
        state = trainer.state()
        if engine == "qemu":
            engine_info.update(board=board, insns_per_step=float(np.mean(trainer.step_insns)))
    else:
        from tinytrain.simulator import init_state, train as sim_train

        state = init_state(tg)
        losses = sim_train(tg, state, x, y, order, features=features)
    seconds = time.time() - t0
    tail = losses[-min(len(losses), len(rows)):]
    tail = tail[np.isfinite(tail)]  # the non-finite guard's steps were not applied
    if parts:
        info["accuracy_after"] = score(parts[1], state)
    return TrainResult(graph, chosen, config, engine, int(n_steps), losses, state, round(seconds, 3), score(rows, state),
                       float(tail.mean()) if len(tail) else None, int(len(rows)), info, engine_info)


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


def _suffix_accuracy(suffix, features, rows: np.ndarray, y: np.ndarray, state=None) -> float:
    from tinytrain.simulator import forward, with_state

    g = suffix if state is None else with_state(suffix, state)
    out = forward(g, {k: features[k][rows] for k in g.inputs})[g.outputs[0]]
    return float((out.reshape(len(rows), -1).argmax(axis=1) == y[rows]).mean())


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    n: int
    held_out: float | None = None
    split_seed: int | None = None

    def to_json(self) -> dict:
        """The JSON line of ``tinytrain eval --json``."""
        d = {"accuracy": self.accuracy, "n": self.n}
        if self.held_out is not None:
            d.update(held_out=self.held_out, split_seed=self.split_seed)
        return d


def evaluate(model: str | Path | Graph, data, *, state: TrainState | str | Path | None = None, engine: str = "sim",
             new_head: int | None = None, seed: int = 0, held_out: float | None = None,
             split_seed: int = 0) -> EvalResult:
    """Accuracy of the int8 forward pass (``sim``: the simulator; ``c``: the emitted C built for the host), with
    a trained ``state`` (a TrainState or a state file) if given; ``held_out``: on that part of the split only
    (the same rows as ``train(held_out=...)``)."""
    from tinytrain.simulator import forward, with_state

    if engine not in ("sim", "c"):
        raise UsageError(f"engine {engine!r}: evaluate runs on sim or c")
    graph = _graph(model, new_head, seed)
    if state is not None:
        from tinytrain.state_file import load_state

        graph = with_state(graph, state if isinstance(state, TrainState) else load_state(state, graph))
    x, y = model_data(graph, data)
    parts = held_out_split(y, held_out, split_seed)
    if parts:
        x, y = x[parts[1]], y[parts[1]]
    if engine == "c":  # the emitted int8 forward pass, built with the host compiler (bit-identical to sim)
        from tinytrain.engine_c import predict

        out = predict(graph, x)
    else:
        out = forward(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    acc = float((out.reshape(len(y), -1).argmax(axis=1) == y).mean())
    return EvalResult(acc, int(len(y)), held_out, split_seed if parts else None)


# ---- plan ------------------------------------------------------------------------------------------------

def plan(model: str | Path | Graph, data, *, sram: str | int = "256k", output: str | Path | None = None,
         new_head: int | None = None, seed: int = 0, progress: bool = False, **options):
    """Search the sparse-update plan with the best measured accuracy under the SRAM budget (tinytrain/search/):
    contributions by short fine-tunes (cached on disk), the gain model's proposals, the presets and proposals
    trained as finalists. ``options``: the fields of ``search.run.SearchOptions`` (workers, executor, lr, epochs,
    ...). Returns a ``search.run.SearchResult`` (``.plan``, ``.report`` = PLAN.search.json); with ``output`` writes
    PLAN.json and PLAN.search.json beside it."""
    from tinytrain.search.run import SearchOptions, search
    from tinytrain.sizes import parse_size

    try:
        opts = SearchOptions(sram_bytes=sram if isinstance(sram, int) else parse_size(sram), new_head=new_head,
                             seed=seed, progress=progress, **options)
    except TypeError as e:
        raise UsageError(f"plan: {e}") from None
    graph = _graph(model, new_head, seed)
    names = {"model": str(model) if not isinstance(model, Graph) else graph.name,
             "data": str(data) if not isinstance(data, tuple) else "arrays"}
    result = search(graph, *model_data(graph, data), opts, names)
    if output is not None:
        result.write(output)
    return result
