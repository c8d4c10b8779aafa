"""``tinytrain.field``: a stream through the field runtime of a model (the API of ``tinytrain field``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from tinytrain.api import load_model
from tinytrain.engines import default_engine
from tinytrain.engines.samples import load_data, training_samples
from tinytrain.errors import Notice, UsageError, param
from tinytrain.field_runtime.anomaly import AnomalyProgram, is_autoencoder
from tinytrain.field_runtime.anomaly_run import field_anomaly
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.program import FieldProgram, field_program
from tinytrain.field_runtime.run import FIELD_ENGINES, FieldResult, run_stream
from tinytrain.field_runtime.stream import load_stream
from tinytrain.ir import Graph
from tinytrain.ops.sgd_update import Rounding
from tinytrain.training.head import new_head
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.resolve import resolve_plan


def _model(model: str | Path | Graph, max_classes: int | None, seed: int) -> tuple[Graph, bool]:
    """(the model, whether its head is new): a new head of ``max_classes`` rows replaces the model's last layer
    when it has another number of outputs (an autoencoder without ``max_classes`` stays one: anomaly.py)."""
    graph = model if isinstance(model, Graph) else load_model(model)
    n = int(np.prod(graph.tensors[graph.outputs[0]].shape[1:]))
    if max_classes is None or max_classes == n:
        return graph, False
    if max_classes < 2:
        raise UsageError(f"{param('max_classes', max_classes)}: give at least 2 classes")
    warnings.warn(Notice(f"the model has {n} outputs: its last layer is replaced by a new {max_classes}-class head "
                         f"(seed {seed})"))
    return new_head(graph, max_classes, seed=seed), True


def field_model(model: str | Path | Graph, *, plan=None, update: str | None = None, lr: float | None = None,
                max_classes: int | None = None, known_classes: int | None = None, seed: int = 0,
                **settings) -> FieldProgram:
    """The field runtime's program of ``model`` (see ``field``), checked."""
    graph, fresh = _model(model, max_classes, seed)
    loss = "mse" if max_classes is None and is_autoencoder(graph) else None  # anomaly.py's runtime
    chosen = resolve_plan(graph, plan=plan, update=update, lr=lr, default="last-k:1", loss=loss)
    known = known_classes if known_classes is not None else (0 if fresh else -1)
    unknown = set(settings) - set(FieldConfig.__dataclass_fields__)
    if unknown:
        raise UsageError(f"{param(sorted(unknown)[0])}: not a field runtime setting")
    cfg = FieldConfig(known=known, **settings)
    return field_program(graph, chosen, cfg, UpdateConfig(rounding=Rounding.STOCHASTIC, seed=seed))


def field(model: str | Path | Graph, stream, test=None, *, plan=None, update: str | None = None,
          lr: float | None = None, max_classes: int | None = None, known_classes: int | None = None,
          replay: int = 256, replay_k: int = 2, guard: int = 32, engine: str | None = None, checkpoints: int = 10,
          seed: int = 0, board: str = "qemu-m4", runtime=None, **settings) -> FieldResult:
    """Run ``stream`` (STREAM.npz: ``x`` in arrival order, ``y`` labels with -1 for none) through the field runtime
    of ``model`` trained by ``plan`` / ``update`` (default last-k:1: the head) on ``engine`` (sim | c | qemu on
    ``board``; default c with gcc); ``test`` (a DATA spec) is scored at ``checkpoints`` points. ``max_classes``: the head's rows (a new
    head when the model has another count); ``known_classes``: classes known at the start (default all, none with
    a new head). ``replay`` / ``replay_k`` / ``guard`` and ``settings`` (the other ``FieldConfig`` fields).
    ``runtime``: program -> the runtime to run it on instead (``engine`` names it; ``tinytrain stream --field``: a
    board's over its serial port, board.SerialField)."""
    engine = engine or default_engine()
    if runtime is None and engine not in FIELD_ENGINES:
        raise UsageError(f"{param('engine', engine)}: the field runtime runs on {', '.join(FIELD_ENGINES)}")
    program = field_model(model, plan=plan, update=update, lr=lr, max_classes=max_classes,
                          known_classes=known_classes, seed=seed, replay=replay, replay_k=replay_k, guard=guard,
                          **settings)
    graph = program.graph
    if isinstance(program, AnomalyProgram):
        return field_anomaly(program, stream, test, engine, checkpoints, board)
    s = load_stream(stream, graph, program.classes)
    rt = runtime(program) if runtime else None
    # a runtime given raw samples (a board whose frozen prefix computes the latents) gets the model's int8 inputs
    feed = (lambda x: x.reshape(len(x), -1)) if getattr(rt, "raw", False) else program.latents
    if test is not None:
        t = training_samples(graph, load_data(test), "xent")
        test_latents, test_y = feed(t.x), np.asarray(t.y, np.int64)
    else:
        test_latents, test_y = np.zeros((0, program.width), np.int8), np.zeros(0, np.int64)
    every = max(1, len(s.y) // max(1, checkpoints))
    return run_stream(program, feed(s.x), s.y, (test_latents, test_y), engine=engine, every=every, board=board,
                      rt=rt)
