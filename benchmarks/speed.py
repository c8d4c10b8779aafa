"""How fast a training step is, in one run: instructions on qemu-m7 and host CPU time per step, side by side.

    .venv/bin/python benchmarks/speed.py [--steps 3] [--inferences 2] [--board qemu-m7]
                                         [--steps-c 200] [--steps-sim 20] [--steps-torch 100] [--model NAME ...]
                                         [--only qemu|host] [--threads 1] [--out benchmarks/results]

For each 128x128 zoo model with its shipped sparse plan (models/plans/NAME-sparse.json) it takes two measurements:
``qemu_instructions.measure_row`` (the firmware, linked at 256 KB, trains --steps steps and runs --inferences
inferences on the board under QEMU -icount, counting instructions with SysTick) and ``step_time.measure`` (CPU time
per training step on the host, one thread, the best of 3 runs, for the emitted C, the numpy simulator and PyTorch
eager fp32). The other models of ``qemu_instructions.models()`` (the MobileNetV1-0.25 VWW models: no shipped plan)
are measured on QEMU only, so that the same run regenerates the whole of qemu_instructions.json / .md; the host
measurements regenerate step_time.json / .md.

Columns of speed.md (one row per model):

- step, inference (M instr.): instructions per training step and per inference on the board, millions (means);
- instr. / MAC: instructions per inference over its multiply-accumulates;
- step MACs (M): the step's MACs, int8 forward + fp32 backward of the planned layers: a lower bound on its
  instructions at one instruction per MAC; ÷ MACs: the step's instructions over it;
- published (M cycles): the published training latency per image (STM32F746 at 216 MHz, sparse update,
  docs/design.md §7) as cycles; ÷ published: the step's instructions over them (instructions are not cycles: a
  Cortex-M7 dual-issues and stalls on memory, so this compares orders of magnitude);
- C, sim, sim whole, torch (ms): host CPU ms per step of the emitted C (``train --engine c``), of the simulator as
    ``train --engine sim`` runs it (frozen prefix batched) and one whole ``simulator.train_step``, of the float twin
  in
  PyTorch eager fp32; (×): over the C. A blank torch cell: the twin does not match the ONNX (the reason is written
  below the table).

Writes OUT/speed.json and .md, OUT/qemu_instructions.json and .md, OUT/step_time.json and .md (OUT:
benchmarks/results). ``speed.py profile-host [--model M]`` prints where the host step's time goes per kernel
and op family (common/host_profile.py; it writes nothing). ``--only qemu`` (every model of
``qemu_instructions.models()``) or ``--only host`` (the shipped
plans, on ``--threads``) takes one half alone and writes only its files. The halves are common/qemu_instructions.py
(with common/qemu_profile.py: where the instructions go, per op family) and common/step_time.py.
"""

from __future__ import annotations

from common import step_time  # first: it fixes the BLAS / OpenMP threads (--threads, default 1) before numpy loads

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from common import host_profile, qemu_instructions  # noqa: E402


@dataclass(frozen=True)
class SpeedRow:
    """One model: its counts on the board (from qemu_instructions' row) and its host times."""
    model: str
    plan: str
    insns_per_step: int
    insns_per_inference: int
    inference_macs: int
    step_macs: int
    published_cycles: int | None
    host: step_time.StepTime

    @classmethod
    def of(cls, qemu: dict, host: step_time.StepTime) -> SpeedRow:
        return cls(model=qemu["model"], plan=qemu["plan"], insns_per_step=qemu["insns_per_step"],
                   insns_per_inference=qemu["insns_per_inference"], inference_macs=qemu["inference_macs"],
                   step_macs=qemu["step_int8_macs"] + qemu["step_fp32_macs"],
                   published_cycles=qemu.get("published_cycles"), host=host)

    def ratios(self) -> dict[str, float | None]:
        return {"insns_per_mac_inference": self.insns_per_inference / self.inference_macs,
                "step_over_macs": self.insns_per_step / self.step_macs,
                "step_over_published": None if self.published_cycles is None
                else self.insns_per_step / self.published_cycles,
                **{f"{k}_over_c": self.host.ratio_to_c(k) for k in ("sim_cli", "sim_whole", "torch")}}

    def to_json(self) -> dict:
        return {**asdict(self), "host": self.host.to_json(), "ratios": self.ratios()}


def _m(v: float | None) -> str:
    return "—" if v is None else f"{v / 1e6:.1f}"


def _x(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}×"


def _ms(row: SpeedRow, engine: str) -> str:
    t = row.host.engines()[engine]
    return "—" if t is None else f"{t * 1e3:.1f} ({_x(row.host.ratio_to_c(engine))})"


def table_row(r: SpeedRow) -> str:
    q = r.ratios()
    cells = [r.model, _m(r.insns_per_step), _m(r.insns_per_inference), f"{q['insns_per_mac_inference']:.1f}",
             _m(r.step_macs), _x(q["step_over_macs"]), _m(r.published_cycles), _x(q["step_over_published"], 2),
             f"{r.host.c * 1e3:.1f}", _ms(r, "sim_cli"), _ms(r, "sim_whole"), _ms(r, "torch")]
    return "| " + " | ".join(cells) + " |"


def _span(values: list[float | None], fmt: str) -> str:
    """min–max of the values present, "—" when there are none."""
    present = [v for v in values if v is not None]
    if not present:
        return "—"
    lo, hi = fmt.format(min(present)), fmt.format(max(present))
    return lo if lo == hi else f"{lo}–{hi}"


def reading(rows: list[SpeedRow]) -> str:
    """The ranges over the models, as the README and docs/guide/studies.md quote them."""
    q = [r.ratios() for r in rows]
    return (f"Reading: a training step takes {_span([x['step_over_macs'] for x in q], '{:.1f}')}× "
            f"its MACs in instructions and {_span([x['step_over_published'] for x in q], '{:.2f}')}× the published "
            f"cycles; an inference {_span([x['insns_per_mac_inference'] for x in q], '{:.1f}')} instructions per "
            f"MAC. On the host the emitted C takes {_span([r.host.c * 1e3 for r in rows], '{:.1f}')} ms per step: "
            f"{_span([x['torch_over_c'] for x in q], '{:.1f}')}× faster than PyTorch eager, "
            f"{_span([x['sim_cli_over_c'] for x in q], '{:.0f}')}× than the simulator (--engine sim).")


def markdown(rows: list[SpeedRow], meta: dict) -> str:
    qm, hm = meta["qemu"], meta["host"]
    lines = [f"# Training step speed: instructions on {qm['board']} and host CPU time, side by side", "",
             f"Measured in one run ({meta['seconds'] / 60:.1f} min) by `{meta['command']}`. Board: {qm['board']} "
             f"(QEMU -icount shift=0), {qm['qemu']}, {qm['gcc']}; {qm['steps']} training steps and "
             f"{qm['inferences']} inferences per model, synthetic images. Host: {hm['cpu']} ({hm['cores']} cores, load "
             f"average {hm['load_average_1min']:.1f}), {hm['cc']}, torch {hm['torch']}, {hm['threads']} thread; CPU "
             f"time per step, best of {hm['repeats']} runs; Fashion-MNIST images. Each model with its shipped sparse "
             "plan (models/plans/NAME-sparse.json). Columns: benchmarks/speed.py's docstring; more detail in "
             "qemu_instructions.md and step_time.md (same run).", "",
             "| model | step (M instr.) | inference (M instr.) | instr. / MAC (inference) | step MACs (M) | "
             "÷ MACs | published (M cycles) | ÷ published | C (ms) | sim (ms, × C) | sim whole (ms, × C) | "
             "torch (ms, × C) |",
             "|---|" + "---:|" * 11]
    lines += [table_row(r) for r in rows]
    lines += ["", reading(rows), "", step_time.twin_note([r.host for r in rows])]
    return "\n".join(lines) + "\n"


def measure_all(args: argparse.Namespace) -> tuple[list[dict], list[step_time.StepTime]]:
    """qemu_instructions' rows of every selected model, step_time's of those with a shipped plan (``--only``: one
    of the two)."""
    timing = step_time.timing_of(args)
    shipped = {t.name for t in qemu_instructions.shipped_plans()}
    qemu_rows, host_rows = [], []
    for target in qemu_instructions.models():
        if args.model and target.name not in args.model:
            continue
        if args.only != "host":
            qemu_rows.append(qemu_instructions.measure_row(target, args))
        if target.name in shipped and args.only != "qemu":
            host_rows.append(step_time.measure(target, timing))
    return qemu_rows, host_rows


def write_all(args: argparse.Namespace, qemu_rows: list[dict], host_rows: list[step_time.StepTime],
              seconds: float) -> str:
    """speed, qemu_instructions and step_time (.json and .md) under --out; returns speed.md."""
    command = " ".join(["python benchmarks/speed.py", *sys.argv[1:]])
    qemu_meta = qemu_instructions.meta(args, command)
    host_meta = step_time.meta(step_time.timing_of(args), args.threads, command)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only == "host":
        return step_time.write(host_rows, host_meta, out / "step_time")
    if args.only == "qemu":
        return qemu_instructions.write(qemu_rows, qemu_meta, str(out / "qemu_instructions"))
    qemu_instructions.write(qemu_rows, qemu_meta, str(out / "qemu_instructions"))
    step_time.write(host_rows, host_meta, out / "step_time")
    by_name = {q["model"]: q for q in qemu_rows}
    rows = [SpeedRow.of(by_name[h.model], h) for h in host_rows]
    meta = {"command": command, "seconds": round(seconds, 1), "qemu": qemu_meta, "host": host_meta}
    (out / "speed.json").write_text(json.dumps({**meta, "rows": [r.to_json() for r in rows]}, indent=1) + "\n")
    text = markdown(rows, meta)
    (out / "speed.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    qemu_instructions.add_arguments(ap)
    step_time.add_arguments(ap)
    ap.add_argument("--model", action="append", help="only these models (repeatable; default: all)")
    ap.add_argument("--only", choices=("qemu", "host"), help="one half alone: its result files only")
    ap.add_argument("--threads", type=int, default=1, help="host half: threads of every engine (default 1)")
    ap.add_argument("--out", default=str(qemu_instructions.ROOT / "benchmarks" / "results"),
                    help="directory of the results")
    args = ap.parse_args()
    step_time.pin_threads(args.threads)
    t0 = time.perf_counter()
    qemu_rows, host_rows = measure_all(args)
    print(write_all(args, qemu_rows, host_rows, time.perf_counter() - t0))

if __name__ == "__main__":
    if sys.argv[1:2] == ["profile-host"]:  # where the host step's time goes, per kernel (common/host_profile.py)
        host_profile.main(sys.argv[2:])
    else:
        main()
