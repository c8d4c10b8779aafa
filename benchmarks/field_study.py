"""Field study: the field runtime (replay, drift, class-incremental head, guard) on Fashion-MNIST streams.

    .venv/bin/python benchmarks/field_study.py [--pool 3000 --test 2000 --lr 0.03 --no-exact]

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared/models) with a new 10-class head (seed 0),
the plan the head only (``last-k:1``, lr 0.003: chosen by the sweep this script prints, offline training on the
pretraining set scored on 1,000 validation images of the stream pool, never on the test images), batch-1 SGD, QAS, stochastic rounding. Fashion-MNIST from the
Debian package ``dataset-fashion-mnist``, read in place: a pretraining set (1,000 train images), a stream pool
(``--pool`` other train images) and ``--test`` test images, each also under two domain shifts (``contrast``:
x/2 + 96; ``noise``: Gaussian, sigma 40). Every image's latent (the 256-byte frozen prefix output) is computed once by
the C forward (cached in build/field_study). Every run starts from the head pretrained offline (3 shuffled epochs)
on the classes known at the start, runs on the host C field runtime, and is scored on the test images of the
scenario's distribution over the classes seen. With ``--exact`` (default) the replay+guard run of every scenario is
repeated on the simulator and must give the same final runtime bytes (tt_field_save) and status.

Scenarios: ``stationary`` (10,000 draws from the clean pool, 10 % labelled: false alarms), ``shift-contrast`` and
``shift-noise`` (1,000 clean samples, then 2,000 shifted, 30 % labelled), ``class-incremental`` (classes 0-4 known;
5..9 arrive one by one, 600 samples apart, all labelled), ``new-class-10`` (classes 0-8 known, 300 old samples, then
ten examples of class 9 among old ones), ``scarce-labels`` (the noise shift, 10 % labelled in runs of 20 of one
class), ``wrong-labels`` (3,000 labelled clean samples, 30 % of labels wrong from 1,000 to 1,600). Configurations:
``none`` (no buffer, no guard: the newest sample alone), ``replay`` (210 slots: the most a 64 KB flash log
holds; K 2), ``replay+guard`` (and the guard's 64 slots, ``guard_drop`` 4: chosen over 32 slots / 0 and / 2
and 64 / 2 on 2,000 validation images, Fashion-MNIST train images outside the study's sets, on the class-incremental and wrong-labels streams).
Offline: the same plan from the same start, 3 shuffled epochs over the same labelled samples.
Audio (``kws-room``, benchmarks/common/field_audio.py, skipped without the model or espeak-ng): the MLPerf Tiny DS-CNN
(``kws_ref_model.tflite``, its own 12-class head, last-k:1 at the lr of ``KWS_LRS`` best on validation) on synthesized
keyword speech, 1,000 clean clips then 2,000 in a new room through a new microphone, 30 % labelled; and
``kws-stationary`` (10,000 draws of the clean clips, 10 % labelled: false alarms on audio).
Camera (``vww-light``, benchmarks/common/field_vww.py, skipped without the VWW model or images): the MLPerf Tiny VWW
model from its shipped person head (last-k:1, the lr of ``VWW_LRS`` whose replay runs score best on the validation
images at night) on real VWW images, 1,000 as the camera saw them, then 2,000 at night, 30 % labelled.
Writes benchmarks/results/field_study.{md,json}; ``--vww-only`` the camera scenario alone to field_vww.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from common import ROOT, command, field_audio, field_machine, field_vww, kws_data, write_results  # noqa: E402
from common.flash_life import flash_lines, flash_study  # noqa: E402
sys.path.insert(0, str(ROOT))

from tinytrain.api import load_model  # noqa: E402
from tinytrain.field_runtime.emit import field_memory  # noqa: E402
from tinytrain.data import load_dataset, model_inputs  # noqa: E402
from tinytrain.engines.host_c import CTrainer  # noqa: E402
from tinytrain.errors import Notice  # noqa: E402
from tinytrain.field_runtime.config import FieldConfig  # noqa: E402
from tinytrain.field_runtime.program import field_program  # noqa: E402
from tinytrain.field_runtime.qemu import qemu_field  # noqa: E402
from tinytrain.field_runtime.run import run_stream  # noqa: E402
from tinytrain.field_runtime.runtime import HELD, FieldRuntime, split_state  # noqa: E402
from tinytrain.field_runtime.step import SimStep  # noqa: E402
from tinytrain.training.sparse import preset  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "mobilenet_v1_0.25_128_quant.tflite"
KWS_MODEL = ROOT.parent / "shared" / "models" / "kws_ref_model.tflite"
AD_MODEL = ROOT.parent / "shared" / "models" / "ad01_int8.tflite"
KWS_LRS = (0.01, 0.03, 0.1)
VWW_LRS = (0.003, 0.01, 0.03)
WORK = ROOT / "build" / "field_study"
SHIFTS = {"clean": lambda x, rng: x,
          "contrast": lambda x, rng: (x.astype(np.int32) // 2 + 96).astype(np.uint8),
          "noise": lambda x, rng: np.clip(x + rng.normal(0, 40, x.shape), 0, 255).astype(np.uint8)}
CONFIGS = {"none": dict(replay=0, replay_k=0, guard=0), "replay": dict(replay=210, replay_k=2, guard=0),
           "replay+guard": dict(replay=210, replay_k=2, guard=64, guard_drop=4)}  # 210 slots: a 64 KB flash log
EPOCHS = 3
QEMU_BOARDS = ("qemu-m4", "qemu-m7")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pool", type=int, default=3000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--lr", type=float, default=0.003, help="the plan's lr (default: the sweep's choice)")
    p.add_argument("--seeds", type=int, default=8, help="stream orders per scenario (default 8)")
    p.add_argument("--no-exact", action="store_true", help="skip the simulator's replay of each scenario")
    p.add_argument("--no-qemu", action="store_true", help="skip the qemu-m4 / qemu-m7 runs")
    p.add_argument("--flash-only", action="store_true", help="only the flash life (to results/field_flash)")
    p.add_argument("--machine-only", action="store_true",
                   help="only the machine-audio anomaly scenario (to results/field_machine; common/field_machine.py)")
    p.add_argument("--vww-only", action="store_true",
                   help="only the camera scenario vww-light (to results/field_vww; common/field_vww.py)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "field_study"))
    return p.parse_args(argv)


def latents(program, graph, args) -> dict:
    """{split: {shift: (latents, labels)}} for pretrain / pool / test, cached in build/field_study."""
    WORK.mkdir(parents=True, exist_ok=True)
    cache = WORK / f"latents-{args.pool}-{args.test}.npz"
    if cache.exists():
        with np.load(cache) as f:
            return {s: {h: (f[f"{s}-{h}-x"], f[f"{s}-{h}-y"]) for h in SHIFTS} for s in ("pretrain", "pool", "test")}
    train, test = load_dataset("fashion-mnist:train"), load_dataset("fashion-mnist:test")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(train.y))
    parts = {"pretrain": (train.x[order[:1000]], train.y[order[:1000]]),
             "pool": (train.x[order[1000 : 1000 + args.pool]], train.y[order[1000 : 1000 + args.pool]]),
             "test": (test.x[: args.test], test.y[: args.test])}
    out = {}
    for split, (x, y) in parts.items():
        out[split] = {}
        for name, shift in SHIFTS.items():
            if split == "pretrain" and name != "clean":
                out[split][name] = out[split]["clean"]
                continue
            out[split][name] = (program.latents(model_inputs(graph, shift(x, np.random.default_rng(1)))), y)
    np.savez(cache, **{f"{s}-{h}-{k}": v for s, d in out.items() for h, (x, y) in d.items()
                       for k, v in (("x", x), ("y", y))})
    return out


def offline(program, start: bytes, x: np.ndarray, y: np.ndarray, seed: int, epochs: int = EPOCHS) -> CTrainer:
    """The plan trained offline from ``start``: ``epochs`` shuffled epochs over the labelled (x, y), host C."""
    t = CTrainer(program.tg)
    t.load_state_bytes(start)
    order = np.concatenate([np.random.default_rng(seed + e).permutation(len(y)) for e in range(epochs)])
    if len(y):
        t.train(batch(t, x), y, order)
    return t


def accuracy_of(trainer: CTrainer, x: np.ndarray, y: np.ndarray, seen: list[int]) -> np.ndarray:
    """Per test sample, 1 where the prediction among ``seen`` is right (samples of seen classes only)."""
    keep = np.isin(y, seen)
    logits = trainer.predict(batch(trainer, x[keep])).astype(np.int32)
    mask = np.isin(np.arange(logits.shape[1]), seen)
    return (np.argmax(np.where(mask, logits, -1000), axis=1) == y[keep]).astype(np.float64)


def batch(trainer: CTrainer, x: np.ndarray) -> np.ndarray:
    """(N, width) latents in the shape of the trainer's input (the cut tensor's)."""
    return x.reshape((len(x), *trainer._x_shape))


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(mean of a - b in points, the half-width of its 95 % normal interval) over paired samples."""
    d = (a - b) * 100
    return float(d.mean()), float(1.96 * d.std(ddof=1) / np.sqrt(len(d)))


def runs_of(lat: dict, n_pool: int, seed: int = 0) -> list[dict]:
    """The scenarios of stream order ``seed``: stream latents / labels (-1: none), the test set, classes known, the
    shift's sample."""
    rng = np.random.default_rng(2 + seed)
    px, py = lat["pool"]["clean"]
    out = []
    draws = rng.integers(0, n_pool, 10000)
    lab = np.where(rng.random(10000) < 0.1, py[draws], -1)
    out.append(dict(name="stationary", x=px[draws], y=lab, test="clean", known=10, shift=None))
    for shift in ("contrast", "noise"):
        sx, sy = lat["pool"][shift]
        idx = rng.permutation(n_pool)
        x = np.concatenate([px[idx[:1000]], sx[idx[1000:3000]]])
        y = np.concatenate([py[idx[:1000]], sy[idx[1000:3000]]])
        out.append(dict(name=f"shift-{shift}", x=x, y=np.where(rng.random(len(y)) < 0.3, y, -1), test=shift,
                        known=10, shift=1000))
    out.append(incremental(px, py, rng))
    out.append(new_class(px, py, rng))
    out.append(scarce(lat["pool"]["noise"], rng))
    idx = rng.permutation(n_pool)
    y = py[idx].copy()
    burst = (np.arange(len(y)) >= 1000) & (np.arange(len(y)) < 1600) & (rng.random(len(y)) < 0.3)
    y[burst] = (y[burst] + rng.integers(1, 10, int(burst.sum()))) % 10
    out.append(dict(name="wrong-labels", x=px[idx], y=y, test="clean", known=10, shift=None, burst=(1000, 1600)))
    return out


def incremental(px, py, rng) -> dict:
    """Classes 0-4 known; class 5 + j joins at sample 600 j; every sample labelled, of the classes present."""
    order, x, y = rng.permutation(len(py)), [], []
    for j in range(5):
        rows = [r for r in order if py[r] < 5 + j + 1][:600]
        x.append(px[rows]), y.append(py[rows])
        order = np.setdiff1d(order, rows, assume_unique=True)
        order = rng.permutation(order)
    return dict(name="class-incremental", x=np.concatenate(x), y=np.concatenate(y), test="clean", known=5,
                shift=None)


def new_class(px, py, rng) -> dict:
    """Classes 0-8 known: 300 old samples, then ten class-9 examples, each followed by 4 old ones."""
    old, nine = rng.permutation(np.flatnonzero(py < 9)), rng.permutation(np.flatnonzero(py == 9))[:10]
    rows = list(old[:300])
    for k in range(10):
        rows += [nine[k], *old[300 + 4 * k : 304 + 4 * k]]
    return dict(name="new-class-10", x=px[rows], y=py[rows], test="clean", known=9, shift=None, before=300)


def scarce(pool, rng) -> dict:
    """The noise shift from the first sample, 10 % labelled in runs of 20 labels of one class."""
    sx, sy = pool
    y = np.full(len(sy), -1)
    at = 0
    while at < len(sy):
        c = rng.integers(0, 10)
        rows = [r for r in range(at, min(len(sy), at + 200)) if sy[r] == c][:20]
        y[rows] = c
        at += 200
    return dict(name="scarce-labels", x=sx, y=y, test="noise", known=10, shift=None)


def lr_sweep(graph, lat: dict, lrs=(0.001, 0.003, 0.01, 0.03), n_val: int = 1000) -> list[dict]:
    """Validation accuracy of offline training on the pretraining set (1 and 3 epochs) per lr."""
    px, py = lat["pretrain"]["clean"]
    vx, vy = lat["pool"]["clean"][0][:n_val], lat["pool"]["clean"][1][:n_val]
    classes = int(py.max()) + 1
    out = []
    for lr in lrs:
        program = field_program(graph, preset("last-k:1", graph, lr=lr), FieldConfig(replay=0, replay_k=0, guard=0))
        init = CTrainer(program.tg).state_bytes()
        row = {"lr": lr}
        for epochs in (1, EPOCHS):
            t = offline(program, init, px, py, 0, epochs)
            row[f"epochs_{epochs}"] = float(accuracy_of(t, vx, vy, list(range(classes))).mean())
        out.append(row)
    return out


def on_boards(graph, plan, sc: dict, n: int = 200) -> list[dict]:
    """Instructions per tt_learn / tt_observe on qemu-m4 and qemu-m7 (replay+guard, from the new head, the first
    ``n`` samples of ``sc``), and whether the board's tt_field_save bytes and results equal the simulator's."""
    program = field_program(graph, plan, FieldConfig(known=sc["known"], **CONFIGS["replay+guard"]))
    x, y = sc["x"][:n], sc["y"][:n]
    sim = FieldRuntime(program, SimStep(program.cut_graph, program.tg))
    results = [sim.learn(a, int(b)) if b >= 0 else sim.observe(a) for a, b in zip(x, y)]
    out = []
    for board in ("qemu-m4", "qemu-m7"):
        run = qemu_field(program, x, y, board)
        trained = run.learned & (run.results != HELD)
        out.append(dict(board=board, samples=n, learn_insns=float(run.insns[trained].mean()),
                        observe_insns=float(run.insns[~run.learned].mean()),
                        identical=run.results.tolist() == results and run.state == sim.state_bytes()))
    return out


def flash_rows(graph, plan, lat: dict, args) -> list[dict]:
    """The flash life of the study's label streams (first stream order), replay+guard (common/flash_life.py)."""
    prog = field_program(graph, plan, FieldConfig(**CONFIGS["replay+guard"]))
    streams = {sc["name"]: (sc["y"], sc["known"]) for sc in runs_of(lat, args.pool)}
    return flash_study(streams, prog.cfg, prog.width, prog.state_size, prog.classes, WORK)


def flash_only(graph, plan, args, t0: float) -> dict:
    """--flash-only: the flash section alone from the pool's labels (no latents), to results/field_flash."""
    train = load_dataset("fashion-mnist:train")
    py = train.y[np.random.default_rng(0).permutation(len(train.y))[1000 : 1000 + args.pool]]  # latents()' pool
    lat = {"pool": {h: (np.zeros((len(py), 1), np.int8), py) for h in SHIFTS}}
    rec = dict(flash=flash_rows(graph, plan, lat, args), seconds=round(time.time() - t0, 1))
    head = f"# Field study: flash life\n\n`{command()}` ({rec['seconds']} s)\n\n"
    write_results("field_flash", head + "\n".join(flash_lines(rec["flash"])), rec)
    return rec


def start_state(program, lat: dict, known: int, seed: int = 0) -> bytes:
    """The head pretrained offline on the pretraining set's classes 0 .. known-1 (from the new head)."""
    x, y = lat["pretrain"]["clean"]
    keep = y < known
    return offline(program, CTrainer(program.tg).state_bytes(), x[keep], y[keep], seed).state_bytes()


def final_trainer(program, state: bytes) -> CTrainer:
    t = CTrainer(program.tg)
    t.load_state_bytes(state)
    return t


def run_one(graph, plan, sc: dict, lat: dict, cfg_name: str, starts: dict, engine: str = "c") -> dict:
    """One scenario under one configuration: the field run, its final state's test scores, the offline baseline."""
    cfg = FieldConfig(known=sc["known"], **CONFIGS[cfg_name])
    program = field_program(graph, plan, cfg)
    tx, ty = lat["test"][sc["test"]]
    res = run_stream(program, sc["x"], sc["y"], (tx, ty), engine=engine, every=200, start=starts[sc["known"]])
    state = split_state(program, res.state)["state"].tobytes()
    seen = res.classes_seen
    mine = accuracy_of(final_trainer(program, state), tx, ty, seen)
    rec = dict(scenario=sc["name"], config=cfg_name, engine=engine, samples=res.samples, labelled=res.labelled,
               accuracy=float(mine.mean()), curve=[(c["sample"], c["accuracy"]) for c in res.checkpoints],
               alarms=res.alarms, rollbacks=res.status["rollbacks"], checks=res.status["checks"],
               memory=field_memory(program).as_dict(), seconds=round(res.seconds, 2), seen=seen,
               final_bytes=res.state)
    lab = sc["y"] >= 0
    off = offline(program, starts[sc["known"]], sc["x"][lab], sc["y"][lab], 7)
    theirs = accuracy_of(off, tx, ty, seen)
    rec.update(offline=float(theirs.mean()), vs_offline=paired(mine, theirs))
    rec.update(scenario_metrics(sc, program, res, state, tx, ty, starts))
    return rec


def scenario_metrics(sc, program, res, state, tx, ty, starts) -> dict:
    out = {}
    if sc["shift"] is not None:
        after = [a for a in res.alarms if a >= sc["shift"]]
        out.update(delay=(after[0] - sc["shift"]) if after else None,
                   false_alarms=len([a for a in res.alarms if a < sc["shift"]]))
    if sc["name"].endswith("stationary"):
        out.update(false_alarms=len(res.alarms))
    if sc["name"] == "class-incremental":
        old = list(range(sc["known"]))
        start = accuracy_of(final_trainer(program, starts[sc["known"]]), tx, ty, old).mean()
        keep = np.isin(ty, old)
        end = accuracy_of(final_trainer(program, state), tx[keep], ty[keep], res.classes_seen).mean()
        out.update(old_start=float(start), old_end=float(end), forgetting=float(100 * (start - end)))
    if sc["name"] == "new-class-10":
        t, n = final_trainer(program, state), sc["before"]
        nine, old = ty == 9, ty < 9
        prefix = run_stream(program, sc["x"][:n], sc["y"][:n], (tx[:0], ty[:0]), engine=res.engine,
                            start=starts[sc["known"]])
        b = final_trainer(program, split_state(program, prefix.state)["state"].tobytes())
        out.update(new_class=float(accuracy_of(t, tx[nine], ty[nine], res.classes_seen).mean()),
                   old_before=float(accuracy_of(b, tx[old], ty[old], prefix.classes_seen).mean()),
                   old_after=float(accuracy_of(t, tx[old], ty[old], res.classes_seen).mean()))
    if "burst" in sc:
        curve = dict((c["sample"], c["accuracy"]) for c in res.checkpoints)
        out.update(before_burst=curve[sc["burst"][0]], after_burst=curve[sc["burst"][1]])
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    warnings.simplefilter("ignore", Notice)
    t0 = time.time()
    graph = load_model(MODEL, new_head=10)
    plan = preset("last-k:1", graph, lr=args.lr)
    if args.flash_only:
        return flash_only(graph, plan, args, t0)
    if args.machine_only:
        return field_machine.machine_study(load_model(AD_MODEL), args.seeds, not args.no_exact, t0)
    if args.vww_only:
        return vww_only(args, t0)
    lat = latents(field_program(graph, plan, FieldConfig()), graph, args)
    base = field_program(graph, plan, FieldConfig(replay=0, replay_k=0, guard=0))
    starts = {k: start_state(base, lat, k) for k in (5, 9, 10)}
    sweep = lr_sweep(graph, lat)
    print("lr sweep (validation accuracy):", sweep, flush=True)
    rows, exact = [], []
    for seed in range(args.seeds):
        scenarios = runs_of(lat, args.pool, seed)
        for sc in scenarios:
            exact += run_scenario(graph, plan, sc, lat, starts, rows, seed, not args.no_exact and seed == 0,
                                  () if args.no_qemu else QEMU_BOARDS)
    kws_sweep = audio(args, rows, exact)
    camera = vww(args, rows, exact)
    for r in rows:
        r.pop("final_bytes")
    life = flash_rows(graph, plan, lat, args)
    boards = [] if args.no_qemu else on_boards(graph, plan, runs_of(lat, args.pool)[2])
    print("boards:", boards, flush=True)
    record = dict(command="python benchmarks/field_study.py " + shlex.join(argv or sys.argv[1:]),
                  model=MODEL.name, plan="last-k:1", lr=args.lr, pool=args.pool, test=args.test, seeds=args.seeds,
                  offline_epochs=EPOCHS, lr_sweep=sweep, kws_lr_sweep=kws_sweep, vww=camera, boards=boards,
                  flash=life,
                  configs=CONFIGS, rows=rows,
                  exact=exact, seconds=round(time.time() - t0, 1))
    write(record, Path(args.out))
    return record


def audio(args, rows: list, exact: list) -> list[dict]:
    """The audio domain shift (kws-room, benchmarks/common/field_audio.py) into ``rows`` / ``exact``: the DS-CNN,
    last-k:1 at the lr of the best validation accuracy (offline on the pretraining speakers, scored on the stream
    pool's clean clips); the lr sweep ([] when the model or espeak-ng is missing)."""
    if not KWS_MODEL.exists() or not kws_data.espeak_available():
        print("kws-room skipped: no", KWS_MODEL.name if not KWS_MODEL.exists() else "espeak-ng", flush=True)
        return []
    graph = load_model(KWS_MODEL)
    lat = field_audio.latent_sets(field_program(graph, preset("last-k:1", graph), FieldConfig()),
                                  field_audio.clips(graph, WORK))
    sweep = lr_sweep(graph, lat, KWS_LRS, n_val=len(lat["pool"]["clean"][1]))
    lr = max(sweep, key=lambda r: r[f"epochs_{EPOCHS}"])["lr"]
    plan = preset("last-k:1", graph, lr=lr)
    base = field_program(graph, plan, FieldConfig(replay=0, replay_k=0, guard=0))
    starts = {base.classes: start_state(base, lat, base.classes)}
    for seed in range(args.seeds):
        sc = field_audio.stream(lat, seed)
        exact += run_scenario(graph, plan, sc, lat, starts, rows, seed, not args.no_exact and seed == 0,
                              () if args.no_qemu else QEMU_BOARDS)
        run_scenario(graph, plan, field_audio.stationary(lat, seed), lat, starts, rows, seed, False)
    return sweep


def vww(args, rows: list, exact: list) -> dict:
    """The camera domain shift (vww-light, benchmarks/common/field_vww.py) into ``rows`` / ``exact``: the VWW model
    from its shipped head, last-k:1 at the lr of vww_sweep; {lr_sweep, lr, start: the shipped head's test accuracy
    by day and at night} ({} when the model or data is missing)."""
    if not field_vww.MODEL.exists() or not field_vww.DATA.exists():
        print("vww-light skipped: no", field_vww.MODEL if not field_vww.MODEL.exists() else field_vww.DATA, flush=True)
        return {}
    graph = load_model(field_vww.MODEL)
    lat = field_vww.latent_sets(field_program(graph, preset("last-k:1", graph), FieldConfig()), graph)
    sweep = vww_sweep(graph, lat)
    lr = max(sweep, key=lambda r: r["replay"])["lr"]
    plan = preset("last-k:1", graph, lr=lr)
    head = CTrainer(field_program(graph, plan, FieldConfig(replay=0, replay_k=0, guard=0)).tg)
    starts = {2: head.state_bytes()}
    start = {h: float(accuracy_of(head, *lat["test"][h], [0, 1]).mean()) for h in field_vww.SHIFTS}
    for seed in range(args.seeds):
        for sc in (field_vww.stream(lat, seed), field_vww.stationary(lat, seed)):
            exact += run_scenario(graph, plan, sc, lat, starts, rows, seed, not args.no_exact and seed == 0,
                                  () if args.no_qemu else QEMU_BOARDS)
    return dict(lr_sweep=sweep, lr=lr, start=start)


def vww_sweep(graph, lat: dict, orders=(100, 101, 102)) -> list[dict]:
    """Per lr of VWW_LRS, the validation accuracy (the validation images at night) of the replay run and of offline
    fine-tuning on its labelled samples, means over tuning stream orders that the reported runs do not use."""
    val = {**lat, "test": {"light": lat["val"]["light"]}}
    out = []
    for lr in VWW_LRS:
        plan = preset("last-k:1", graph, lr=lr)
        starts = {2: CTrainer(field_program(graph, plan, FieldConfig(replay=0, replay_k=0, guard=0)).tg).state_bytes()}
        runs = [run_one(graph, plan, field_vww.stream(lat, s), val, "replay", starts) for s in orders]
        out.append(dict(lr=lr, replay=float(np.mean([r["accuracy"] for r in runs])),
                        offline=float(np.mean([r["offline"] for r in runs]))))
        print("vww-light lr sweep (validation):", out[-1], flush=True)
    return out


def vww_only(args, t0: float) -> dict:
    """--vww-only: the vww-light scenario alone, to results/field_vww.{md,json}."""
    rows, exact = [], []
    camera = vww(args, rows, exact)
    for r in rows:
        r.pop("final_bytes")
    rec = dict(model=field_vww.MODEL.name, plan="last-k:1", seeds=args.seeds, offline_epochs=EPOCHS, vww=camera,
               rows=rows, exact=exact, seconds=round(time.time() - t0, 1))
    if not rows:
        return rec
    rec["table"] = aggregate(rows)
    lines = [f"# Field study: camera (vww-light)\n\n`{command()}` ({rec['seconds']} s)\n",
             field_vww.describe(camera, EPOCHS), "", *TABLE_HEAD, *table_lines(rec["table"]), "",
             *exact_lines(exact)]
    write_results("field_vww", "\n".join(lines) + "\n", rec)
    print("\n".join(lines), flush=True)
    return rec


def run_scenario(graph, plan, sc, lat, starts, rows: list, seed: int, exact: bool, boards=()) -> list[dict]:
    """Every configuration of one scenario into ``rows``; with ``exact``, the replay+guard run again on the
    simulator and on each of ``boards`` (QEMU): [{scenario, identical, board: identical}]."""
    for cfg_name in CONFIGS:
        rows.append({**run_one(graph, plan, sc, lat, cfg_name, starts), "seed": seed})
        print(f"{seed} {sc['name']:18} {cfg_name:13} accuracy {rows[-1]['accuracy']:.4f} offline "
              f"{rows[-1]['offline']:.4f} alarms {rows[-1]['alarms']} rollbacks {rows[-1]['rollbacks']} "
              f"({rows[-1]['seconds']} s)", flush=True)
    out = []
    if exact:
        sim = run_one(graph, plan, sc, lat, "replay+guard", starts, engine="sim")
        out.append(dict(scenario=sc["name"], identical=sim["final_bytes"] == rows[-1]["final_bytes"]
                        and sim["curve"] == rows[-1]["curve"] and sim["alarms"] == rows[-1]["alarms"]))
        print(f"{sc['name']:18} simulator == host C: {out[-1]['identical']}", flush=True)
        for board in boards:
            t0 = time.time()
            program = field_program(graph, plan, FieldConfig(known=sc["known"], **CONFIGS["replay+guard"]))
            run = qemu_field(program, sc["x"], sc["y"], board, start=starts[sc["known"]], timeout=1200)
            out[-1][board] = run.state == rows[-1]["final_bytes"]
            print(f"{sc['name']:18} {board} == host C: {out[-1][board]} ({time.time() - t0:.0f} s)", flush=True)
    return out


MEANS = ("accuracy", "offline", "old_start", "old_end", "forgetting", "new_class", "old_before", "old_after",
         "before_burst", "after_burst", "labelled", "samples")


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (scenario, config): means over the seeds (accuracy also its sd), field - offline's mean with the
    runs' paired intervals combined, alarms per seed, rollbacks and false alarms summed, the largest drift delay."""
    out = {}
    for r in rows:
        out.setdefault((r["scenario"], r["config"]), []).append(r)
    agg = []
    for (scenario, config), rs in out.items():
        a = {"scenario": scenario, "config": config, "seeds": len(rs), "memory": rs[0]["memory"]}
        a.update({k: float(np.mean([r[k] for r in rs])) for k in MEANS if k in rs[0]})
        a["accuracy_sd"] = float(np.std([r["accuracy"] for r in rs]))
        d = [r["vs_offline"][0] for r in rs]
        a["vs_offline"] = (float(np.mean(d)), float(np.sqrt(sum(r["vs_offline"][1] ** 2 for r in rs)) / len(rs)))
        a["alarms"] = [r["alarms"] for r in rs]
        a["rollbacks"], a["checks"] = sum(r["rollbacks"] for r in rs), sum(r["checks"] for r in rs)
        if "false_alarms" in rs[0]:
            a["false_alarms"] = sum(r["false_alarms"] for r in rs)
        if "delay" in rs[0]:
            delays = [r["delay"] for r in rs]
            a["delay"] = None if None in delays else max(delays)
        agg.append(a)
    return agg


TABLE_HEAD = ("| scenario | config | labelled | accuracy | offline | field - offline | drift alarms (sample) | "
              "rollbacks | scenario's measure |", "|---|---|---|---|---|---|---|---|---|")


def table_lines(agg: list[dict]) -> list[str]:
    """The study's table rows, one per aggregated (scenario, config)."""
    lines = []
    for r in agg:
        d, h = r["vs_offline"]
        alarms = "; ".join(", ".join(map(str, a)) or "none" for a in r["alarms"])
        lines.append(f"| {r['scenario']} | {r['config']} | {r['labelled']:.0f} | {fmt(r['accuracy'])} ± "
                     f"{100 * r['accuracy_sd']:.1f} | {fmt(r['offline'])} | {d:+.1f} ± {h:.1f} | {alarms} | "
                     f"{r['rollbacks']} / {r['checks']} | {measure(r)} |")
    return lines


def fmt(v, pct: bool = True) -> str:
    if v is None:
        return "—"
    return f"{100 * v:.1f}" if pct else str(v)


def write(rec: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=1) + "\n")
    lines = [f"# Field study\n\n`{rec['command']}` ({rec['seconds']} s)\n",
             f"{rec['model']} with a new 10-class head, plan {rec['plan']}, lr {rec['lr']}; Fashion-MNIST, "
             f"{rec['pool']} stream-pool images, {rec['test']} test images; host C field runtime. Accuracy (%) on the "
             "test images of the scenario's distribution over the classes seen; offline: the same plan from the "
             f"same start, {rec['offline_epochs']} shuffled epochs over the same labelled samples. Each row is the "
             f"mean over {rec['seeds']} stream orders (accuracy ± its sd over them); field - offline with the runs' "
             "paired 95 % intervals combined; drift alarms per stream order; rollbacks / guard checks summed.\n",
             *TABLE_HEAD]
    agg = aggregate(rec["rows"])
    lines += table_lines(agg)
    m = next(a for a in agg if a["config"] == "replay+guard")["memory"]
    lines += ["", f"SRAM the runtime adds (replay+guard): {m['sram']} B (buffer {m['buffer']}, guard {m['guard']}, "
              f"two states {m['states']}, statistics {m['statistics']}); no replay, no guard: "
              f"{agg[0]['memory']['sram']} B.", ""]
    lines += flash_lines(rec["flash"])
    lines += ["lr sweep (offline on the pretraining set, validation accuracy % on 1,000 pool images): " + "; ".join(
        f"{r['lr']}: {fmt(r['epochs_1'])} (1 epoch), {fmt(r['epochs_' + str(rec['offline_epochs'])])} "
        f"({rec['offline_epochs']})" for r in rec["lr_sweep"]), ""]
    if rec["kws_lr_sweep"]:
        lines += ["kws-room (the DS-CNN keyword model, last-k:1, on synthesized speech, "
                  "benchmarks/common/field_audio.py: 1,000 clean clips, then 2,000 in a new room through a new "
                  "microphone, 30 % labelled; the test "
                  "speakers' shifted clips; the pretrained head first trained offline on 6 adaptation speakers' clean "
                  "clips) lr sweep, validation accuracy % on the 6 stream-pool speakers' clean clips: " + "; ".join(
                      f"{r['lr']}: {fmt(r['epochs_' + str(rec['offline_epochs'])])} ({rec['offline_epochs']} epochs)"
                      for r in rec["kws_lr_sweep"]) + "; the best is the lr used.", ""]
    for b in rec["boards"]:
        lines.append(f"{b['board']} (replay+guard, the first {b['samples']} samples of shift-noise, from the new "
                     f"head): {b['learn_insns']:,.0f} instructions per tt_learn that trains (1 + K steps), "
                     f"{b['observe_insns']:,.0f} per tt_observe; results and tt_field_save bytes "
                     f"{'identical to' if b['identical'] else 'DIFFERENT from'} the simulator's.")
    lines.append("")
    if rec.get("vww"):
        lines += [field_vww.describe(rec["vww"], rec["offline_epochs"]), ""]
    lines += exact_lines(rec["exact"])
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def exact_lines(exact: list[dict]) -> list[str]:
    """Simulator == host C (== each QEMU board) over the scenarios checked."""
    if not exact:
        return []
    ok = sum(e["identical"] for e in exact)
    lines = [f"Simulator == host C (replay+guard, first stream order, final tt_field_save bytes, accuracy "
             f"curve, alarms): {ok} of {len(exact)} scenarios identical."]
    for board in QEMU_BOARDS:
        if board in exact[0]:
            same = sum(e[board] for e in exact)
            lines.append(f"{board} == host C (the same runs, final tt_field_save bytes): {same} of "
                         f"{len(exact)} scenarios identical.")
    return lines


def measure(r: dict) -> str:
    if r["scenario"] == "class-incremental":
        return f"old classes {fmt(r['old_start'])} → {fmt(r['old_end'])} (forgetting {r['forgetting']:.1f} points)"
    if r["scenario"] == "new-class-10":
        return (f"class 9 {fmt(r['new_class'])}; classes 0-8 {fmt(r['old_before'])} → {fmt(r['old_after'])}")
    if "before_burst" in r:
        return f"before burst {fmt(r['before_burst'])}, after {fmt(r['after_burst'])}"
    if "delay" in r:
        return f"largest drift delay {fmt(r['delay'], False)} samples, false alarms {r['false_alarms']}"
    if "false_alarms" in r:
        return f"false alarms {r['false_alarms']} in {r['seeds'] * r['samples']:,.0f} samples"
    return ""


if __name__ == "__main__":
    main()
