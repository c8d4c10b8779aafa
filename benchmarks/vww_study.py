"""End-to-end transfer study on Visual Wake Words: the searched sparse plan at 256 KB against the baselines.

    .venv/bin/python benchmarks/vww_study.py --fresh [--workers 2] [--epochs 4] [--lr 0.001]

(about 20-30 min on 2 cores with ``--fresh``: contributions measured again in build/vww_study/cache; without
it the default contribution cache is used and a re-run skips every fine-tune already measured).

ImageNet MobileNetV1-0.25 128x128 (uint8 TF1 ``.tflite`` from ../shared) with a new 2-class head
(``--new-head 2``), fine-tuned on ../shared/data/vww96/vww96_dev800.npz (800 images, person / no person)
with a stratified 25 % held-out split (``--held-out 0.25 --split-seed 0``: 600 train, 200 held out, the same
rows in every run). Every int8 row is a ``tinytrain`` command (printed in the .md, re-runs standalone):
``train --engine c`` (the emitted C training step built for the host: the device's arithmetic), the same
epochs, lr and sample order for all; peak SRAM from ``tinytrain compile --plan ... --sram 256k``'s
report.json. Rows:

- searched: ``tinytrain plan`` at 256 KB (contributions measured on a validation part of the 600 training
  images; the held-out 200 are never seen by the search), trained with QAS; with the default noise floor
  (gains under 2 standard errors of the validation accuracy count as 0), with 1, and with none (every
  measured gain summed, as published) — the same contributions, three searches;
- bias-only: the classifier (a new head must be trained) + the biases of the deepest last-k that fits 256 KB
  (every bias, the ``bias-only`` preset, needs more: its peak is recorded);
- classifier-only: the last layer's weights and bias;
- last-k: the largest ``last-k:N`` preset (weights + biases of the last N layers) that fits 256 KB;
- searched, no QAS: the searched plan with plain int8 SGD (``--no-qas``) at the plan's lr and at lr x 100 and
  x 10^4 (without QAS an lr acts on the int8 value; the best of the three is the row, all are recorded);
- fp32 full fine-tuning (PyTorch): an fp32 twin of the same graph (every weight and bias dequantized,
  activations' clamps = their dequantized int8 range, the same new head's initial weights dequantized), every
  parameter trained, batch-1 SGD, the same split, epochs and order; lr from {lr/10, lr/3, lr}, the best on the
  held-out rows is the row (an upper bound: memory unconstrained, lr picked on the test rows);
- the shipped zoo models models/mbv2-w0.35.onnx and models/mcunet-5fps.onnx (Fashion-MNIST pretrained) with a
  new 2-class head: classifier-only and their shipped sparse plan (models/plans/).

Writes benchmarks/results/vww_study.json, vww_study.md and vww_study_plan.json (the searched plan, used by
tests/test_plan_search.py's host C == QEMU test). Needs ../shared (skips with a message without it).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"
MODEL = "../shared/models/mobilenet_v1_0.25_128_quant.tflite"
DATA = "../shared/data/vww96/vww96_dev800.npz"
HELD_OUT, SPLIT_SEED, SEED = 0.25, 0, 0
BUDGET = "256k"
BUDGET_BYTES = 256 * 1024
OUT = ROOT / "benchmarks" / "results"
BUILD = ROOT / "build" / "vww_study"
TT = [".venv/bin/tinytrain"]
ZOO = ("mbv2-w0.35", "mcunet-5fps")


def run(argv: list[str], log: list) -> tuple[int, dict | None, str]:
    """Run one tinytrain command from the project root; (exit code, its --json object or None, stderr tail)."""
    t0 = time.time()
    r = subprocess.run(TT + argv, cwd=ROOT, capture_output=True, text=True, check=False)
    out = None
    lines = r.stdout.strip().splitlines()
    if "--json" in argv and r.returncode == 0 and lines:
        out = json.loads(lines[-1])
    log.append({"command": shlex.join(["tinytrain", *argv]), "exit": r.returncode,
                "seconds": round(time.time() - t0, 1)})
    return r.returncode, out, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""


def write_plan(name: str, obj: dict) -> str:
    path = BUILD / "plans" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) + "\n")
    return os.path.relpath(path, ROOT)


def compile_peak(model: str, plan: str, name: str, log: list) -> dict:
    out = BUILD / "compile" / name
    code, _, err = run(["compile", model, "--new-head", "2", "--sram", BUDGET, "--plan", plan, "-o",
                        os.path.relpath(out, ROOT)], log)
    if code != 0:
        return {"fits": False, "compile": err}
    rep = json.loads((out / "report.json").read_text())
    return {"fits": rep["fits"], "peak_sram_bytes": rep["peak_sram_bytes"],
            "report": os.path.relpath(out / "report.json", ROOT)}


def train(model: str, plan: str, epochs: int, log: list, *extra: str) -> dict:
    code, out, err = run(["train", model, "--data", DATA, "--new-head", "2", "--held-out", str(HELD_OUT),
                          "--split-seed", str(SPLIT_SEED), "--seed", str(SEED), "--plan", plan, "--epochs",
                          str(epochs), "--engine", "c", *extra, "--json"], log)
    if code != 0:
        raise SystemExit(f"train failed: {err}")
    return {k: out[k] for k in ("accuracy_before", "accuracy_after", "train_accuracy", "final_loss", "seconds")}


# ---- the searchless baselines under the budget --------------------------------------------------------------

def deepest_fitting(graph, make) -> tuple[int, int]:
    """Largest N whose plan make(N) fits the budget (peak SRAM of compile's schedule + planner), and its peak."""
    from tinytrain.search.memory import peak_sram
    from tinytrain.training.sparse import layers

    best = (1, peak_sram(graph, make(1)))
    for n in range(2, len(layers(graph)) + 1):
        peak = peak_sram(graph, make(n))
        if peak > BUDGET_BYTES:
            break
        best = (n, peak)
    return best


# ---- fp32 twin in PyTorch -------------------------------------------------------------------------------------

def torch_twin(graph):
    """An fp32 torch module computing the graph's forward on dequantized values (NCHW inside)."""
    import torch
    import torch.nn.functional as F

    def deq(t, axis0=True):
        q = t.quant
        s = np.asarray(q.scale, np.float64)
        zp = np.asarray(q.zero_point, np.float64)
        d = t.data.astype(np.float64)
        if len(s) > 1:
            shape = (-1,) + (1,) * (d.ndim - 1)
            return (d - zp.reshape(shape)) * s.reshape(shape)
        return (d - zp[0]) * s[0]

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict()
            self.steps = []
            for k, node in enumerate(graph.nodes):
                if node.op in ("conv2d", "fully_connected"):
                    w = deq(graph.tensors[node.inputs[1]])
                    if node.op == "conv2d":
                        w = w.transpose(0, 3, 1, 2)  # OHWI -> OIHW
                    self.params[f"w{k}"] = torch.nn.Parameter(torch.tensor(w, dtype=torch.float32))
                    if len(node.inputs) > 2 and node.inputs[2]:
                        b = deq(graph.tensors[node.inputs[2]])
                        self.params[f"b{k}"] = torch.nn.Parameter(torch.tensor(b, dtype=torch.float32))
                self.steps.append((k, node))

        def forward(self, x):  # x: N,C,H,W float
            return self.run(x, 0, len(self.steps)).flatten(1)

        def run(self, x, lo: int, hi: int):
            """steps[lo:hi] on x (N,C,H,W): the part of the network between two nodes, shapes kept. A node reads
            its inputs by name (a residual's shortcut), x for a tensor from before ``lo``."""
            env = {}
            for k, node in self.steps[lo:hi]:
                a = node.attrs
                x = env.get(node.inputs[0], x)
                if node.op in ("conv2d", "fully_connected", "avg_pool2d", "add"):
                    yq = graph.tensors[node.outputs[0]].quant
                    c_lo, c_hi = (a.act_min - yq.zp) * yq.s, (a.act_max - yq.zp) * yq.s
                b = self.params[f"b{k}"] if f"b{k}" in self.params else None
                if node.op == "conv2d":
                    pt, pl, pb, pr = a.padding
                    x = F.conv2d(F.pad(x, (pl, pr, pt, pb)), self.params[f"w{k}"], b, a.stride, 0, a.dilation, a.groups)
                    x = torch.clamp(x, c_lo, c_hi)
                elif node.op == "fully_connected":
                    x = torch.clamp(F.linear(x.flatten(1), self.params[f"w{k}"], b), c_lo, c_hi)
                elif node.op == "avg_pool2d":
                    pt, pl, pb, pr = a.padding
                    x = F.avg_pool2d(F.pad(x, (pl, pr, pt, pb)), a.kernel, a.stride)
                elif node.op == "add":
                    x = torch.clamp(x + env.get(node.inputs[1], x), c_lo, c_hi)
                elif node.op == "reshape":
                    x = x.flatten(1)
                elif node.op in ("softmax", "dequantize"):
                    pass  # logits are trained with softmax cross-entropy
                else:
                    raise NotImplementedError(f"torch twin: {node.op}")
                env[node.outputs[0]] = x
            return x

    return Twin()


def fp32_full_finetune(epochs: int, lrs: list[float]) -> dict:
    import torch

    from tinytrain.data import load_dataset, model_inputs, stratified_split
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    graph = new_head(load_model(ROOT / MODEL), 2, seed=SEED)
    ds = load_dataset(ROOT / DATA)
    q = graph.tensors[graph.inputs[0]].quant
    x = (model_inputs(graph, ds.x).astype(np.float32) - q.zp) * np.float32(q.s)  # the int8 input, dequantized
    x = torch.tensor(x.transpose(0, 3, 1, 2))
    y = torch.tensor(ds.y)
    train_rows, test_rows = stratified_split(ds.y, HELD_OUT, SPLIT_SEED)
    rng = np.random.default_rng(SEED)  # the order of `tinytrain train --seed 0`
    order = train_rows[np.concatenate([rng.permutation(len(train_rows)) for _ in range(epochs)])]
    runs = {}
    for lr in lrs:
        model = torch_twin(graph)
        with torch.no_grad():
            before = float((model(x[test_rows]).argmax(1) == y[test_rows]).float().mean())
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        t0 = time.time()
        for k in order:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[k : k + 1]), y[k : k + 1])
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = float((model(x[test_rows]).argmax(1) == y[test_rows]).float().mean())
            train_acc = float((model(x[train_rows]).argmax(1) == y[train_rows]).float().mean())
        runs[str(lr)] = {"accuracy_before": before, "accuracy_after": acc, "train_accuracy": train_acc,
                         "seconds": round(time.time() - t0, 1)}
    best = max(runs, key=lambda k: runs[k]["accuracy_after"])
    return {"lr": float(best), **runs[best], "runs": runs}


# ---- the study ------------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="tinytrain plan --workers, and parallel train runs")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--fresh", action="store_true",
                    help="measure the contributions again in a fresh cache (build/vww_study/cache): the full cost")
    ap.add_argument("--render", action="store_true", help="only rewrite vww_study.md from vww_study.json")
    args = ap.parse_args()
    if args.render:
        (OUT / "vww_study.md").write_text(markdown(json.loads((OUT / "vww_study.json").read_text())) + "\n")
        return
    if not (SHARED / "models" / "mobilenet_v1_0.25_128_quant.tflite").exists():
        print("skipped: ../shared (the ImageNet model and VWW data) is not beside the project")
        return
    from tinytrain.frontends import load_model
    from tinytrain.training.head import new_head
    from tinytrain.training.sparse import Plan, WeightUpdate, layers, preset

    t_start = time.time()
    log: list = []
    BUILD.mkdir(parents=True, exist_ok=True)
    graph = new_head(load_model(ROOT / MODEL), 2)
    n = len(layers(graph))
    lr, epochs = args.lr, args.epochs

    # 1. the search: the default noise floor (2 standard errors), then 1 and 0 (every measured gain counts, as
    # published) from the same contribution cache (no fine-tune is repeated)
    if args.fresh:
        shutil.rmtree(BUILD / "cache", ignore_errors=True)
    cache = ["--cache", os.path.relpath(BUILD / "cache", ROOT)] if args.fresh else []
    plan_path = os.path.relpath(OUT / "vww_study_plan.json", ROOT)
    floor_plans = {}
    for z, path in ((2, plan_path), (1, os.path.relpath(OUT / "vww_study_plan_z1.json", ROOT)),
                    (0, os.path.relpath(OUT / "vww_study_plan_z0.json", ROOT))):
        code, _, err = run(["plan", MODEL, "--data", DATA, "--new-head", "2", "--held-out", str(HELD_OUT),
                            "--split-seed", str(SPLIT_SEED), "--seed", str(SEED), "--sram", BUDGET, "--lr", str(lr),
                            "--workers", str(args.workers), "--time-limit", "1500", "--noise-floor", str(z),
                            "--no-progress", *cache, "--json", "-o", path], log)
        if code != 0:
            raise SystemExit(f"tinytrain plan failed: {err}")
        floor_plans[z] = path
    plan_search_seconds = sum(c["seconds"] for c in log)

    # 2. the plans
    cls = Plan(1, (WeightUpdate(n - 1, 1.0),), lr=lr)
    k_bias, _ = deepest_fitting(graph, lambda k: Plan(k, (WeightUpdate(n - 1, 1.0),), lr=lr))
    k_last, _ = deepest_fitting(graph, lambda k: preset(f"last-k:{k}", graph, lr=lr))
    from tinytrain.search.memory import peak_sram

    all_bias_peak = peak_sram(graph, Plan(n, (WeightUpdate(n - 1, 1.0),), lr=lr))
    next_last_peak = peak_sram(graph, preset(f"last-k:{k_last + 1}", graph, lr=lr)) if k_last < n else None
    searched_plan = json.loads((ROOT / plan_path).read_text())
    rows = [
        ("searched sparse plan (QAS)", MODEL, plan_path, ()),
        ("searched, noise floor 1 SE", MODEL, floor_plans[1], ()),
        ("searched, no noise floor (every measured gain, as published)", MODEL, floor_plans[0], ()),
        (f"bias-only (classifier + biases of the last {k_bias})", MODEL,
         write_plan("bias-only", Plan(k_bias, (WeightUpdate(n - 1, 1.0),), lr=lr).to_json()), ()),
        ("classifier-only (last layer)", MODEL, write_plan("classifier-only", cls.to_json()), ()),
        (f"last-k:{k_last} (largest last-k under 256 KB)", MODEL,
         write_plan(f"last-k-{k_last}", preset(f"last-k:{k_last}", graph, lr=lr).to_json()), ()),
    ]
    no_qas = []
    for factor in (1, 100, 10000):
        p = write_plan(f"searched-no-qas-x{factor}", {**searched_plan, "lr": searched_plan["lr"] * factor})
        no_qas.append((f"searched plan, int8 SGD without QAS (lr x {factor})", MODEL, p, ("--no-qas",)))
    zoo = []
    for m in ZOO:
        path = f"models/{m}.onnx"
        g = new_head(load_model(ROOT / path), 2)
        zoo.append((f"{m}: classifier-only", path, write_plan(f"{m}-classifier",
                    Plan(1, (WeightUpdate(len(layers(g)) - 1, 1.0),), lr=lr).to_json()), ()))
        shipped = json.loads((ROOT / "models" / "plans" / f"{m}-sparse.json").read_text())
        zoo.append((f"{m}: shipped sparse plan", path, write_plan(f"{m}-sparse", {**shipped, "lr": lr}), ()))

    # 3. train (C engine) and compile every row; the fp32 twin beside them
    jobs = rows + no_qas + zoo

    def one(job):
        name, model, plan, extra = job
        return {"name": name, "model": model, "plan": plan, "extra": list(extra),
                **train(model, plan, epochs, log, *extra), **compile_peak(model, plan, Path(plan).stem, log)}

    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        results = list(pool.map(one, jobs))
    fp32 = fp32_full_finetune(epochs, [lr / 10, lr / 3, lr])

    by = {r["name"]: r for r in results}
    best_no_qas = max((r for r in results if "--no-qas" in r["extra"]), key=lambda r: r["accuracy_after"])
    table = [by[j[0]] for j in rows] + [{**best_no_qas, "name": "searched plan, int8 SGD without QAS (best lr)"}]
    table.append({"name": "fp32 full fine-tuning, PyTorch (upper bound, memory unconstrained)", "model": MODEL,
                  "plan": "all weights and biases", "accuracy_before": fp32["accuracy_before"],
                  "accuracy_after": fp32["accuracy_after"], "train_accuracy": fp32["train_accuracy"],
                  "fits": False, "peak_sram_bytes": None, "lr": fp32["lr"]})
    table += [by[j[0]] for j in zoo]
    search = json.loads((ROOT / plan_path).with_name("vww_study_plan.search.json").read_text())
    s_acc, b_acc, c_acc = (by[rows[i][0]]["accuracy_after"] for i in (0, 3, 4))
    result = {
        "command": ".venv/bin/python benchmarks/vww_study.py " + shlex.join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "python": platform.python_version(),
        "model": MODEL, "data": DATA, "held_out": HELD_OUT, "split_seed": SPLIT_SEED, "epochs": epochs, "lr": lr,
        "sram_budget_bytes": BUDGET_BYTES, "all_biases_peak_sram_bytes": all_bias_peak,
        "last_k_fitting": {"k": k_last, "next_peak_sram_bytes": next_last_peak},
        "searched_plan": searched_plan,
        "search": {k: search[k] for k in ("evolution", "exact", "baseline", "options", "noise_floor", "measurement",
                                                                          "finetunes_run", "finetunes_cached",
                                                                          "seconds", "contributions")},
        "searches": {str(z): _search_summary(ROOT / path) for z, path in floor_plans.items()},
        "plan_command_seconds": plan_search_seconds,
        "rows": table, "no_qas_runs": [by[j[0]] for j in no_qas], "fp32": fp32,
        "must_show": {"searched_fits": by[rows[0][0]]["fits"],
                      "searched_minus_bias_only_points": round(100 * (s_acc - b_acc), 2),
                      "searched_minus_classifier_only_points": round(100 * (s_acc - c_acc), 2),
                      "fp32_minus_searched_points": round(100 * (fp32["accuracy_after"] - s_acc), 2)},
        "commands": log, "total_seconds": round(time.time() - t_start, 1),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vww_study.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "vww_study.md").write_text(markdown(result) + "\n")
    print(markdown(result))


def _search_summary(path: Path) -> dict:
    d = json.loads(path.with_name(path.stem + ".search.json").read_text())
    return {"plan_file": os.path.relpath(path, ROOT), "chosen": d["chosen"], "noise_floor": d["noise_floor"],
            "memory_evaluations": d["memory_evaluations"], "memory_checks_inferred": d["memory_checks_inferred"],
            **{k: {x: d[k][x] for x in ("gain", "peak_sram_bytes", "seconds", "plan", "fits",
                                        "generations", "proven_optimal", "nodes") if x in d[k]}
               for k in ("evolution", "exact")}}


def _ceiling_lines() -> list[str]:
    """The reading of benchmarks/vww_ceiling.py's result (the fp32 cross-validated upper bound), if it was run."""
    path = OUT / "vww_ceiling.json"
    if not path.exists():
        return ["- Run `benchmarks/vww_ceiling.py` for the fp32 cross-validated upper bound of a backbone update."]
    c = json.loads(path.read_text())
    compared = [row for row in c["rows"] if row["reference"] != row["config"]["name"] and not row["config"]["flip"]]
    top = max(compared, key=lambda row: row["gain_points"])
    return [f"- Not even fp32 with unlimited memory gets 2 points here: in `benchmarks/results/vww_ceiling.md` "
            f"({c['folds']}-fold cross-validation, all {c['images']} images held out once, gains paired per image) "
            f"the best backbone update, {top['config']['name']}, is {top['gain_points']:+.1f} ± "
            f"{top['gain_standard_error_points']:.1f} points over classifier-only trained as long; updating more "
            "layers loses accuracy (" + ", ".join(
                f"{row['config']['name'].split(' (')[0]}: {row['gain_points']:+.1f}" for row in compared
                if row["config"]["name"].startswith("last-k")) + " points)."]


def _kb(b) -> str:
    return "—" if b is None else f"{b / 1024:.1f} KB"


def markdown(r: dict) -> str:
    lines = [
        "# VWW transfer study: searched sparse plan at 256 KB vs baselines",
        "",
        f"Reproduce: `{r['command']}` ({r['total_seconds'] / 60:.1f} min here, {r['machine']}; "
        f"the `tinytrain plan` step {r['plan_command_seconds'] / 60:.1f} min of it).",
        "",
        f"ImageNet MobileNetV1-0.25 128x128 (`{r['model']}`), new 2-class head, `{r['data']}` with a stratified "
        f"{r['held_out']:.0%} held-out split (seed {r['split_seed']}: 600 train / 200 held out); every int8 row: "
        f"`tinytrain train --engine c`, {r['epochs']} epochs, batch 1, lr {r['lr']}, stochastic rounding; "
        "peak SRAM from `tinytrain compile --plan ... --sram 256k` (report.json).",
        "",
        "| configuration | held-out accuracy | before | train accuracy | peak SRAM | fits 256 KB |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        fp32 = row.get("peak_sram_bytes") is None and "fp32" in row["name"]
        fits = "n/a" if fp32 else ("yes" if row["fits"] else "no")
        lines.append(f"| {row['name']} | {100 * row['accuracy_after']:.1f} % | {100 * row['accuracy_before']:.1f} % | "
                     f"{100 * row['train_accuracy']:.1f} % | {_kb(row.get('peak_sram_bytes'))} | {fits} |")
    m = r["must_show"]
    s = r["search"]
    rows = {row["name"]: row for row in r["rows"]}
    z0 = next(row for name, row in rows.items() if name.startswith("searched, no noise floor"))
    z1 = next(row for name, row in rows.items() if name.startswith("searched, noise floor 1"))
    c_row = next(row for name, row in rows.items() if name.startswith("classifier-only"))
    sz = r["searches"]
    lines += [
        "",
        f"Searched plan: `{json.dumps(r['searched_plan'])}` (fits: {m['searched_fits']}). Searched minus bias-only: "
        f"{m['searched_minus_bias_only_points']:+.1f} points; minus classifier-only: "
        f"{m['searched_minus_classifier_only_points']:+.1f} points; fp32 full fine-tuning minus searched: "
        f"{m['fp32_minus_searched_points']:+.1f} points. One held-out image is 0.5 points. Every bias (the "
        f"`bias-only` preset) needs {_kb(r['all_biases_peak_sram_bytes'])}; the largest last-k under the budget is "
        f"last-k:{r['last_k_fitting']['k']} (last-k:{r['last_k_fitting']['k'] + 1} needs "
        f"{_kb(r['last_k_fitting']['next_peak_sram_bytes'])}).",
        "",
        "## Reading",
        "",
        "- On 600 training images the ImageNet features are already as good as these fine-tunes make them: "
        "updating parts of the backbone (biases, a fraction of a layer's channels, whole layers) did not beat "
        "training the new classifier alone by more than the noise (one image = 0.5 points), in int8 or in fp32 — "
        f"the fp32 full fine-tuning (every parameter, best of three lrs picked on the held-out rows) gets "
        f"{100 * r['fp32']['accuracy_after']:.1f} %, the int8 classifier alone {100 * c_row['accuracy_after']:.1f} %. "
        f"So there is little for a search to find here: the searched plan is "
        f"{m['searched_minus_classifier_only_points']:+.1f} points from classifier-only and "
        f"{m['searched_minus_bias_only_points']:+.1f} from bias-only (paired per held-out image, with intervals: "
        f"`benchmarks/vww_paired.py`), {-m['fp32_minus_searched_points']:+.1f} points from fp32 full fine-tuning.",
        *_ceiling_lines(),
        f"- The contributions are short fine-tunes (one epoch) scored on {s['measurement']['n_val']} "
        f"validation images, whose standard error is {100 * s['noise_floor']['binomial_se']:.1f} points. "
        f"Summing every measured gain, as published, adds up noise: that plan (no noise floor) claims "
        f"{100 * sz['0']['exact']['gain']:+.0f} points over the classifier and gets {100 * z0['accuracy_after']:.1f} % "
        f"held out, updating {len(sz['0']['exact']['plan']['weights']) - 1} backbone layers. Hence `tinytrain "
        f"plan`'s default noise floor (gains under 2 standard errors count as 0); with 1 standard error it picks "
        f"{len(sz['1']['exact']['plan']['weights']) - 1} layers and gets {100 * z1['accuracy_after']:.1f} %.",
        f"- Exact branch and bound vs evolution (no noise floor, the one non-trivial search): gains "
        f"{100 * sz['0']['exact']['gain']:+.1f} / {100 * sz['0']['evolution']['gain']:+.1f} points, "
        f"{sz['0']['exact']['seconds']:.0f} s ({sz['0']['exact']['nodes']} nodes, proven optimal: "
        f"{sz['0']['exact']['proven_optimal']}) / {sz['0']['evolution']['seconds']:.0f} s "
        f"({sz['0']['evolution']['generations']} generations); peak SRAM "
        f"{_kb(sz['0']['exact']['peak_sram_bytes'])} / {_kb(sz['0']['evolution']['peak_sram_bytes'])}; "
        f"{sz['0']['memory_evaluations']} true memory evaluations, {sz['0']['memory_checks_inferred']} checks "
        "answered by monotonicity.",
        f"- Without QAS the searched plan learns only at a much larger lr: "
        + ", ".join(f"{x['name'].split('(')[-1].rstrip(')')}: {100 * x['accuracy_after']:.1f} %"
                    for x in r["no_qas_runs"]) + " — QAS is what makes the same lr work for int8 weights.",
        "- The zoo models were pretrained on Fashion-MNIST (grayscale clothes): their features do not transfer "
        "to person detection (about chance with either plan); their rows show the plans' peak SRAM.",
        "",
        "## Search (`tinytrain plan`)",
        "",
        f"Options: {s['options']['total']} ({s['options']['over_budget_alone']} over 256 KB alone, "
        f"{s['options']['measured']} measured); fine-tunes run {s['finetunes_run']}, from the cache "
        f"{s['finetunes_cached']}; {s['seconds']:.0f} s. Validation accuracy of the baseline "
        f"(classifier-only fine-tune): {100 * s['baseline']['accuracy']:.1f} %; noise floor "
        f"{s['noise_floor']['z']:g} x {100 * s['noise_floor']['binomial_se']:.1f} points (one standard error of "
        f"that accuracy): {s['noise_floor']['options_above']} options above it.",
        "",
        "| method | gain (sum of contributions) | peak SRAM | notes |",
        "|---|---|---|---|",
    ]
    for name in ("evolution", "exact"):
        e = s[name]
        note = (f"{e['generations']} generations" if name == "evolution" else
                f"branch and bound, {e['nodes']} nodes, {'proven optimal' if e['proven_optimal'] else 'time limit'}")
        lines.append(f"| {name} | {100 * e['gain']:+.2f} points | {_kb(e['peak_sram_bytes'])} | {note}: "
                     f"`{json.dumps(e['plan']['weights'])}`, bias_last_k {e['plan']['bias_last_k']} |")
    lines += ["", "No-QAS runs (same plan): " + ", ".join(
        f"{x['name'].split('(')[-1].rstrip(')')}: {100 * x['accuracy_after']:.1f} %" for x in r["no_qas_runs"]),
        "fp32 lr grid: " + ", ".join(f"lr {float(k):.2g}: {100 * v['accuracy_after']:.1f} %"
                                     for k, v in r["fp32"]["runs"].items()),
        "", "## Commands", ""]
    lines += [f"- `{c['command']}` ({c['seconds']} s)" for c in r["commands"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
