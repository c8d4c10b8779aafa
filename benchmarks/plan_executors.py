"""Wall time of the plan search's fine-tunes on the local executor (``--workers 2``) and on Ray (``--executor ray``,
a local Ray instance of 2 CPUs), the same search, each from an empty cache.

    .venv/bin/python benchmarks/plan_executors.py [--ft-steps 40] [--rounds 2]

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
import time
from pathlib import Path

from common import ROOT  # noqa: E402  (puts the checkout on sys.path)
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
