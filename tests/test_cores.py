"""The core table (tinytrain/cores.py): a core is named there and in its boards, nowhere else in the package, so a new
core is one row plus its firmware (issue 42 item 5)."""

import re
from pathlib import Path

import tinytrain
from tinytrain.codegen.context import arm_dsp, fpv5, has_fpu
from tinytrain.cores import CORE_TARGETS, CORES, stack_reserve
from tinytrain.firmware.boards import BOARDS

PACKAGE = Path(tinytrain.__file__).parent
# A core's name as code spells it: cortex-m4, cortex-m0plus, riscv32 (not qemu-system-riscv32, a QEMU binary, nor
# a board's name such as qemu-m0plus: those are the firmware's).
CORE_NAME = re.compile(r"cortex-m\d+\w*|(?<![\w-])(?:m0plus|riscv32)\b")
WHERE_CORES_LIVE = {"cores.py", "firmware/boards.py"}


def places_naming_a_core() -> dict[str, list[str]]:
    """Every file of the package (source, templates, C) that names a core -> the names, in order."""
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix not in {".py", ".j2", ".c", ".h", ".md"}:
            continue
        names = CORE_NAME.findall(path.read_text(encoding="utf-8", errors="replace"))
        if names:
            found[path.relative_to(PACKAGE).as_posix()] = names
    return found


def test_a_core_is_named_only_in_the_core_table_and_the_boards():
    places = places_naming_a_core()
    assert set(places) == WHERE_CORES_LIVE, {p: n for p, n in places.items() if p not in WHERE_CORES_LIVE}
    assert set(places["cores.py"]) >= set(CORE_TARGETS)


def test_every_core_has_a_board_and_every_board_flag_starts_with_its_cores():
    assert {b.core for b in BOARDS.values()} == set(CORES)
    for board in BOARDS.values():
        core = CORES[board.core]
        assert board.cpu_flags[: len(core.cpu_flags)] == core.cpu_flags, board.name


def test_codegen_and_the_report_read_the_table():
    for core in CORES.values():
        assert (arm_dsp(core.name), has_fpu(core.name), fpv5(core.name)) == (core.dsp, core.fpu, core.fpv5)
        assert stack_reserve(core.name) == core.stack_bytes
    assert not arm_dsp("") and not has_fpu("") and not fpv5("")


def _pooled_rates(rows, macs) -> dict[str, tuple[float, float]]:
    """Per QEMU board: instructions per forward MAC (the inferences') and per backward MAC (the steps' less the
    inferences'), pooled over the measured plans (``macs``: plan -> (forward MACs, step MACs))."""
    sums = {}
    for r in rows:
        if "insns_per_step" in r:
            fwd, step = macs[r["plan"]]
            s = sums.setdefault(r["board"], [0, 0, 0, 0])
            s[0] += r["insns_per_inference"]
            s[1] += fwd
            s[2] += r["insns_per_step"] - r["insns_per_inference"]
            s[3] += step - fwd
    return {b: (s[0] / s[1], s[2] / s[3]) for b, s in sums.items()}


def test_the_rates_are_those_measured_in_the_cores_benchmark():
    """Each core's instructions per MAC (the report's time estimate) are benchmarks/results/cores.json's, to the
    table's 3 significant digits, and each measured board has its row."""
    import json

    from tinytrain.api import compile
    from tinytrain.describe import node_macs

    root = PACKAGE.parent
    rows = json.loads((root / "benchmarks" / "results" / "cores.json").read_text())["rows"]
    macs = {}
    for plan in sorted({r["plan"] for r in rows}):
        c = compile(root / "models" / (Path(plan).stem.rsplit("-", 1)[0] + ".onnx"), plan=root / plan)
        macs[plan] = (sum(node_macs(c.graph, n) for n in c.graph.nodes), sum(node_macs(c.step, n) for n in c.step.nodes))
    measured = _pooled_rates(rows, macs)
    table = {r.board: r for core in CORES.values() for r in core.rates}
    assert set(table) == set(measured)
    for board, (fwd, bwd) in measured.items():
        assert float(f"{fwd:.3g}") == table[board].forward and float(f"{bwd:.3g}") == table[board].backward, board


def test_the_report_estimates_the_time_at_a_clock(tmp_path):
    from tinytrain.api import compile

    model = PACKAGE.parent / "models" / "mbv2-w0.35.onnx"
    c = compile(model, update="last-k:2", clock_mhz=100)
    est = c.to_json()["time_estimate"]
    rate = CORES[c.options.target].rates[0]
    assert est["clock_mhz"] == 100 and est["backward_macs"] > 0
    assert est["estimates"][0]["instructions"] == round(est["forward_macs"] * rate.forward
                                                        + est["backward_macs"] * rate.backward)
    assert f"at 100 MHz (estimate" in c.text()
    assert compile(model, target="cortex-m55").to_json()["time_estimate"]["estimates"] == []
