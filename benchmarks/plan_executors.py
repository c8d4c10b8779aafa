"""Wall time of the plan search's fine-tunes on the local executor (``--workers 2``) and on Ray (``--executor ray``,
a local Ray instance of 2 CPUs), the same search, each from an empty cache; and (``--defaults``) the wall and CPU
time of each phase of ``tinytrain plan`` with its defaults on the task of issue 40.

    .venv/bin/python benchmarks/plan_executors.py [--ft-steps 40] [--rounds 2]
    .venv/bin/python benchmarks/plan_executors.py --defaults     # -> results/plan_defaults.{md,json}

``--defaults``: ``tinytrain plan`` as a user types it with its defaults, ``--workers 2``, on 4,000 Fashion-MNIST
training images (``fashion-mnist:4000``, Debian package ``dataset-fashion-mnist``, resized to 128x128) with
ImageNet MobileNetV1-0.25 128x128 (../shared/models) and a new 10-class head, 256 KB, from empty caches. Records each
phase's wall and CPU seconds (this process and its finished children: the workers and their compilers; PLAN.search.json
``phases``), the machine's load average while it ran (sampled every 20 s: other work shares the 2 cores, so wall
time alone overstates the search's own), and the chosen plan with its validation accuracy.

Writes benchmarks/results/plan_executors.json and .md. Each run is ``tinytrain plan`` as a user types it, in its
own process (the Ray run's time includes starting Ray), with an empty contribution cache and an empty build cache
(``TINYTRAIN_CACHE``: each fine-tune's C is built with gcc, as on a first run): the shipped MobileNetV1-0.25 (models/mbv1-0.25-vww.onnx)
with a new 2-class head on ``lfw``, 128 KB, held-out 0.25. Checks that both measured the same contributions and
finalists and chose the same plan (bit for bit: the executor only decides where a fine-tune runs). The machine is
shared, so the executors alternate over ``--rounds`` rounds (local first in odd rounds, Ray first in even ones).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, SHARED, write_results  # noqa: E402  (puts the checkout on sys.path)
MODEL = ROOT / "models" / "mbv1-0.25-vww.onnx"
EXECUTORS = {"local, --workers 2": ["--workers", "2"], "ray, local instance of 2 CPUs": ["--executor", "ray", "--workers", "2"]}


def run(name: str, extra: list[str], common: list[str], tmp: Path) -> dict:
    own = tmp / str(len(list(tmp.iterdir())))
    own.mkdir()
    out = own / "plan.json"
    cmd = [sys.executable, "-m", "tinytrain.cli", "plan", *common, *extra, "-o", str(out)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TINYTRAIN_CACHE": str(own / "cache")})
    seconds = time.time() - t0
    if r.returncode != 0:
        raise SystemExit(f"{name}: exit status {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}")
    report = json.loads(out.with_name(out.stem + ".search.json").read_text())
    command = " ".join(["tinytrain", *cmd[3:-2], "-o", "PLAN.json"]).replace(str(ROOT) + "/", "")
    return {"executor": name, "command": command, "wall_seconds": round(seconds, 1),
            "finetunes": report["finetunes_run"] + report["finalist_finetunes_run"], "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ft-steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--defaults", action="store_true", help="the phases of plan's defaults on 4,000 FMNIST images")
    args = ap.parse_args()
    if args.defaults:
        defaults()
        return
    common = [str(MODEL), "--data", "lfw", "--new-head", "2", "--sram", "128k", "--held-out", "0.25",
              "--ft-steps", str(args.ft_steps), "--bias-k", "1,2,4,8", "--repeats", "2", "--epochs", "1",
              "--max-rungs", "1", "--no-progress", "--json"]
    names = list(EXECUTORS)
    with tempfile.TemporaryDirectory(prefix="tinytrain-executors-") as tmp:
        runs = [dict(run(name, EXECUTORS[name], common, Path(tmp)), round=k + 1)
                for k in range(args.rounds) for name in (names if k % 2 == 0 else names[::-1])]
    reports = [r.pop("report") for r in runs]
    a = reports[0]
    same = {k: all(b[k] == a[k] for b in reports) for k in ("contributions", "finalists", "plan", "noise_floor")}
    mean = {name: round(sum(r["wall_seconds"] for r in runs if r["executor"] == name) / args.rounds, 1)
            for name in names}
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "python": platform.python_version(),
              "model": MODEL.name, "data": "lfw", "runs": runs, "mean_wall_seconds": mean, "identical": same,
              "contributions_measured": a["options"]["measured"]}
    out = ROOT / "benchmarks" / "results"
    (out / "plan_executors.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# `tinytrain plan`: local workers vs Ray tasks", "",
             f"`python benchmarks/plan_executors.py --ft-steps {args.ft_steps}` on {result['machine']}: "
             f"{MODEL.name} + a new 2-class head on lfw, 128 KB, {result['contributions_measured']} options measured; "
             "each run in its own process from empty caches (contributions and C builds).", "",
             "| round | executor | wall time | fine-tunes |", "|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['executor']} | {r['wall_seconds']:.1f} s | {r['finetunes']} |" for r in runs]
    lines += ["", "Mean wall time: " + ", ".join(f"{n} {t:.1f} s" for n, t in mean.items()) + ".",
              "", "Identical in every run: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()) + ".",
              "", "Commands:", ""] + [f"    {r['command']}" for r in runs[:len(names)]]
    (out / "plan_executors.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _load(samples: list, stop: threading.Event) -> None:
    while not stop.wait(20.0):
        samples.append(float(Path("/proc/loadavg").read_text().split()[0]))


def defaults() -> None:
    """``tinytrain plan`` with its defaults on the issue-40 task, its phases' wall and CPU time."""
    model = SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite"
    if not model.exists() or not Path("/usr/share/datasets/fashion-mnist").is_dir():
        raise SystemExit(f"needs {model} and the Debian package dataset-fashion-mnist")
    argv = [str(model), "--new-head", "10", "--data", "fashion-mnist:4000", "--sram", "256k", "--workers", "2"]
    with tempfile.TemporaryDirectory(prefix="tinytrain-plan-defaults-") as tmp:
        out, load, stop = Path(tmp) / "plan.json", [], threading.Event()
        sampler = threading.Thread(target=_load, args=(load, stop), daemon=True)
        load_start, t0 = os.getloadavg(), time.time()
        sampler.start()
        r = subprocess.run([sys.executable, "-m", "tinytrain.cli", "plan", *argv, "-o", str(out)], text=True,
                           stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                        "TINYTRAIN_CACHE": str(Path(tmp) / "cache")})
        seconds = time.time() - t0
        stop.set()
        if r.returncode != 0:
            raise SystemExit(f"tinytrain plan: exit status {r.returncode}")
        report = json.loads(out.with_name("plan.search.json").read_text())
    cmd = "tinytrain plan " + " ".join(a.replace(str(SHARED), "../shared") for a in argv) + " -o PLAN.json"
    data = {"plan_command": cmd, "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
            "wall_seconds": round(seconds, 1), "search_seconds": report["seconds"],
            "cpu_seconds": round(sum(p["cpu_seconds"] for p in report["phases"]), 1),
            "load_average": {"start_1min": load_start[0], "during_1min": load, "mean_during": round(
                sum(load) / len(load), 2) if load else None},
            "phases": report["phases"], "chosen": report["chosen"], "validation_accuracy": report["validation_accuracy"],
            "n_val": report["measurement"]["n_val"], "plan": report["plan"], "stdout": r.stdout}
    # outside the phases: loading what the search starts from, the split, (before they were a phase) the frozen
    # features; counted at its wall time, stretched as it is by the load: the estimate is an upper bound there
    data["outside_phases_seconds"] = round(report["seconds"] - sum(p["seconds"] for p in data["phases"]), 1)
    data["idle_estimate_seconds"] = round(sum(_idle(p) for p in data["phases"]) + data["outside_phases_seconds"], 1)
    text = markdown(data)
    write_results("plan_defaults", text, data)
    print(text)


PARALLEL = ("memory of each option", "contribution fine-tunes", "finalists", "rank check")  # on the 2 workers


def _idle(phase: dict) -> float:
    """A phase's time on 2 cores with nothing else running: its CPU time over the workers that share it (the
    parallel phases), else its CPU time."""
    return phase["cpu_seconds"] / (2 if phase["name"].startswith(PARALLEL) else 1)


def _shared(load: dict) -> str:
    """What the load says of the wall times: the search's own 2 workers make a load of about 2."""
    if load["start_1min"] < 1 and load["mean_during"] <= 2.5:
        return "the machine was otherwise idle, so the wall times are measured ones"
    return "other work shared them, so the wall times are stretched; the CPU times are the search's own"


def markdown(data: dict) -> str:
    load = data["load_average"]
    lines = ["# `tinytrain plan` with its defaults: time per phase", "",
             f"`{data['plan_command']}` ({data['machine']}; fresh caches): {data['wall_seconds'] / 60:.1f} min wall "
             f"in all ({data['search_seconds'] / 60:.1f} min of search after loading the model and the data), "
             f"{data['cpu_seconds'] / 60:.1f} CPU-min in its phases. Load average (1 min) while it ran: mean "
             f"{load['mean_during']} (at the start {load['start_1min']:.2f}) on 2 cores: {_shared(load)}. On 2 "
             "idle cores (each parallel "
             "phase's CPU time over its 2 workers, the others' as they are, and the "
             f"{data['outside_phases_seconds']:.0f} s outside the phases at their wall time) the search takes "
             f"{data['idle_estimate_seconds'] / 60:.1f} min (an estimate from the CPU times, not a measurement).", "",
             "| phase | done / total | wall | CPU | on 2 idle cores (estimate) |", "|---|---|---|---|---|"]
    lines += [f"| {p['name']} | {p['done']} / {p['total']} | {p['seconds']:.1f} s | {p['cpu_seconds']:.1f} s | "
              f"{_idle(p):.1f} s |" + (f" cut short: {p['cut_short']}" if p["cut_short"] else "")
              for p in data["phases"]]
    lines += ["", f"Chosen: {data['chosen']}, validation accuracy {data['validation_accuracy']:.4f} on "
              f"{data['n_val']} rows."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
