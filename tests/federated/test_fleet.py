"""``tinytrain fleet`` (tinytrain/federated/): a device's round is ``tinytrain train --engine c`` byte for byte;
faults are counted and never averaged; a killed server resumes to the same global state; Flower's simulation
engine gives the in-process rounds' state. Every test builds or runs the C training step of a zoo model: slow."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tinytrain.cli import main
from tinytrain.codegen.state import unpack
from tinytrain.federated import fleet, fleet_task
from tinytrain.federated.client import run_device
from tinytrain.federated.server import FleetServer, drive_local
from tinytrain.federated.task import local
from tinytrain.state_file import save_state

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "models" / "mbv1-0.25-vww.onnx")
OPTIONS = dict(devices=3, per_device=6, classes_per_device=2, new_head=4, seed=0)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """4 classes of 96x96 images, each class a brightness (so a head can learn), 12 per class."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 12)
    x = np.clip(rng.normal(40 + 50 * y[:, None, None, None], 20, (48, 96, 96, 3)), 0, 255).astype(np.uint8)
    path = tmp_path_factory.mktemp("fleet") / "pool.npz"
    np.savez(path, x=x, y=y)
    old = os.environ.get("TINYTRAIN_CACHE")
    os.environ["TINYTRAIN_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield str(path)
    if old is None:
        os.environ.pop("TINYTRAIN_CACHE")
    else:
        os.environ["TINYTRAIN_CACHE"] = old


@pytest.mark.slow
def test_device_round_is_tinytrain_train_engine_c_byte_for_byte(pool, tmp_path, capsys):
    task = fleet_task(MODEL, pool, **OPTIONS)
    built = local(task)
    server = FleetServer(task, 1)
    reply = run_device(task, 1, server.state, 1, {})
    rows = built.shards[1]
    np.savez(tmp_path / "shard.npz", x=built.dataset.x[rows], y=built.dataset.y[rows])
    assert main(["train", MODEL, "--data", str(tmp_path / "shard.npz"), "--engine", "c", "--update", "last-k:1",
                 "--new-head", "4", "--seed", "0", "--state-out", str(tmp_path / "train.npz"), "--json"]) == 0
    capsys.readouterr()
    save_state(tmp_path / "device.npz", unpack(built.step_graph, reply.state))
    assert (tmp_path / "device.npz").read_bytes() == (tmp_path / "train.npz").read_bytes()
    assert reply.samples == len(rows) == 6 and np.isfinite(reply.loss)


def _final(pool, faults, rounds=2, **kw):
    server = FleetServer(fleet_task(MODEL, pool, **OPTIONS), rounds, **kw)
    drive_local(server, faults)
    return server


@pytest.mark.slow
def test_faults_are_counted_and_never_averaged(pool, capsys):
    dropped = _final(pool, {(1, 1): "drop", (2, 0): "drop"})
    assert dropped.progress.counts == {"ok": 4, "refused": 0, "corrupt": 0, "nonfinite": 0, "dropped": 2}
    for kind in ("corrupt", "nan", "foreign"):
        faulty = _final(pool, {(1, 1): kind, (2, 0): kind})
        key = {"corrupt": "corrupt", "nan": "nonfinite", "foreign": "refused"}[kind]
        assert faulty.progress.counts[key] == 2 and faulty.progress.counts["ok"] == 4
        assert faulty.state == dropped.state  # as if those devices had not answered
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("refused" in line and "rebuild its training step" in line for line in err)
    clean = _final(pool, {})
    assert clean.progress.counts["ok"] == 6 and clean.state != dropped.state


@pytest.mark.slow
def test_resume_after_a_stop_gives_the_uninterrupted_state(pool, tmp_path):
    whole = _final(pool, {(2, 2): "drop"}, rounds=3)
    first = FleetServer(fleet_task(MODEL, pool, **OPTIONS), 3, tmp_path / "run")
    drive_local(first, {(2, 2): "drop"}, stop_after=1)
    assert json.loads((tmp_path / "run" / "fleet.json").read_text())["round"] == 1
    second = FleetServer(fleet_task(MODEL, pool, **OPTIONS), 3, tmp_path / "run")
    assert second.resumed_from == 1
    drive_local(second, {(2, 2): "drop"})
    assert second.state == whole.state and second.progress.counts == whole.progress.counts
    assert (tmp_path / "run" / "global-r3.tts").read_bytes() == whole.state


@pytest.mark.slow
def test_cli_fleet_writes_the_state_and_refuses_another_runs_folder(pool, tmp_path, capsys):
    out = tmp_path / "g.tts"
    args = ["fleet", MODEL, "--data", pool, "--devices", "3", "--per-device", "6", "--new-head", "4", "--rounds", "1",
            "--engine", "local", "--state-dir", str(tmp_path / "run"), "--state-out", str(out)]
    assert main(args + ["--json"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["rounds"] == 1 and rec["counts"]["ok"] == 3 and out.read_bytes()[:4] == b"TTS1"
    assert rec["state_bytes"] == out.stat().st_size
    assert main(args[:-2] + ["--seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds another fleet run" in err
    assert main(args[:-2] + ["--rounds", "0"]) == 2 and "--rounds 0" in capsys.readouterr().err


@pytest.mark.slow
def test_server_killed_mid_run_resumes_to_the_same_state(pool, tmp_path):
    """A real kill (SIGKILL of the server process after its first persisted round), then a restart."""
    base = [sys.executable, "-m", "tinytrain.cli", "fleet", MODEL, "--data", pool, "--devices", "3", "--per-device",
            "6", "--new-head", "4", "--rounds", "5", "--local-epochs", "30", "--engine", "local"]  # rounds of ~0.5 s
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(base + ["--state-out", str(tmp_path / "whole.tts")], check=True, env=env, capture_output=True)
    run = tmp_path / "run"
    proc = subprocess.Popen(base + ["--state-dir", str(run)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (run / "fleet.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stopped = json.loads((run / "fleet.json").read_text())["round"]
    assert 1 <= stopped < 5
    r = subprocess.run(base + ["--state-dir", str(run), "--state-out", str(tmp_path / "resumed.tts")], env=env,
                       capture_output=True, text=True, check=True)
    assert f"resumed after round {stopped}" in r.stdout
    assert (tmp_path / "resumed.tts").read_bytes() == (tmp_path / "whole.tts").read_bytes()


@pytest.mark.slow
def test_flower_simulation_equals_the_in_process_rounds(pool):
    pytest.importorskip("flwr", reason="flwr is not installed (pip install -e '.[fleet]')")
    faults = {(1, 2): "corrupt", (2, 1): "drop"}
    sim = fleet(MODEL, pool, rounds=2, engine="flower", faults=faults, **OPTIONS)
    assert sim.state == _final(pool, faults).state
    assert sim.counts == {"ok": 4, "refused": 0, "corrupt": 1, "nonfinite": 0, "dropped": 1}


@pytest.mark.slow
def test_local_steps_and_server_lr(pool):
    """``local_steps`` K: every round advances the global step by K; ``server_lr`` 1 is the plain mean (the default
    task's bytes), another rate lands elsewhere, deterministically."""
    from tinytrain.federated.client import local_train

    task = fleet_task(MODEL, pool, local_steps=4, **OPTIONS)
    built = local(task)
    first = local_train(task, 0, FleetServer(task, 2).state, 1)
    assert unpack(built.step_graph, first.state).step == 4
    plain = FleetServer(task, 2)
    drive_local(plain)
    assert unpack(built.step_graph, plain.state).step == 8
    same = FleetServer(fleet_task(MODEL, pool, local_steps=4, server_lr="1/1", **OPTIONS), 2)
    drive_local(same)
    faster = [FleetServer(fleet_task(MODEL, pool, local_steps=4, server_lr="3/2", **OPTIONS), 2) for _ in range(2)]
    for s in faster:
        drive_local(s)
    assert same.state == plain.state and faster[0].state == faster[1].state != plain.state


def test_a_plan_with_per_layer_remainder_bits_is_refused_in_one_line(tmp_path):
    """The server averages every weight at the plan's remainder bits: a layer with its own is refused up front
    (and --remainder-bits, which replaces every layer's, makes the plan acceptable)."""
    from tinytrain.errors import UsageError
    from tinytrain.training.sparse import layers
    import tinytrain

    n = len(layers(tinytrain.load_model(MODEL, new_head=4)))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "bias_last_k": 1, "weights": [
        {"conv": n - 2, "ratio": 0.25, "remainder_bits": 8}, {"conv": n - 1, "ratio": 1}]}))
    with pytest.raises(UsageError, match="remove the layers' own remainder_bits"):
        fleet_task(MODEL, "lfw", plan=str(plan), **OPTIONS)
    task = fleet_task(MODEL, "lfw", plan=str(plan), remainder_bits=8, **OPTIONS)
    assert all("remainder_bits" not in w for w in json.loads(task.plan_json)["weights"])
