"""Persistent learned state (README "Learning that survives the field"): the state in two flash slots with sequence
numbers and CRCs (tinytrain/firmware/c/tt_persist.c), checked on the same C as the firmware.

Power loss: power is cut at every erase and program operation of consecutive saves, before the operation and
in the middle of it (torn: a part of its bits changed), on a NOR simulator; every boot must load the previous
or the new state, byte for byte, never anything else.
"""

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from test_codegen_train import train_ops_model
from tinytrain.engine_c import CTrainer
from tinytrain.training.fuse import fuse_updates
from tinytrain.training.qas import UpdateConfig
from tinytrain.training.sparse import Plan, WeightUpdate
from tinytrain.training.train_graph import build_training_graph

PLAN = Plan(bias_last_k=4, weights=(WeightUpdate(0, 0.5), WeightUpdate(3, 0.25), WeightUpdate(5, 1.0)), lr=0.05)
PERSIST_SOURCES = ("tt_flash.h", "tt_persist.h", "tt_persist.c", "tt_flash_sim.h", "tt_flash_sim.c")
CFLAGS = ("-std=c99", "-O1", "-g", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
_LINE = re.compile(r"powerloss((?: \w+ \d+)+)")


def build_powerloss(out: Path, graph) -> Path:
    """The power-loss driver (tests/c/powerloss_main.c) linked with the graph's emitted step and tt_persist.c."""
    for name, text in CTrainer(graph).files.items():
        (out / name).write_text(text)
    c = resources.files("tinytrain.firmware.c")
    for name in PERSIST_SOURCES:
        (out / name).write_bytes(c.joinpath(name).read_bytes())
    shutil.copy(Path(__file__).parent / "c" / "powerloss_main.c", out)
    cmd = ["gcc", *CFLAGS, "-o", "powerloss", "powerloss_main.c", "tinytrain_model.c", "tt_persist.c", "tt_flash_sim.c"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True, text=True)
    return out / "powerloss"


def run_powerloss(exe: Path, saves: int, steps: int, sector: int, unit: int) -> dict[str, int]:
    r = subprocess.run([str(exe), str(saves), str(steps), str(sector), str(unit)], capture_output=True, text=True,
                       timeout=600, check=False)
    m = _LINE.search(r.stdout)
    assert m, r.stdout + r.stderr
    words = m.group(1).split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])} | {"exit": r.returncode}


@pytest.fixture(scope="module")
def powerloss(tmp_path_factory):
    g, _ = train_ops_model()
    tg = fuse_updates(build_training_graph(g, PLAN, UpdateConfig(momentum=0.9)))
    return build_powerloss(tmp_path_factory.mktemp("powerloss"), tg)


@pytest.mark.parametrize("sector,unit", [(256, 8), (1024, 4)])
def test_power_cut_at_every_operation_of_100_saves_never_corrupts(powerloss, sector, unit):
    r = run_powerloss(powerloss, saves=100, steps=2, sector=sector, unit=unit)
    assert r["exit"] == 0 and r["corrupt"] == 0 and r["violations"] == 0 and r["failed_saves"] == 0, r
    assert r["saves"] == 100
    assert r["cuts"] == r["erase_cuts"] + r["program_cuts"] == r["previous"] + r["new"]
    # every operation of every save, before and torn: at least one erase and several programs per save
    assert r["erase_cuts"] >= 2 * 100 and r["program_cuts"] >= 2 * 100 * 3
    assert r["previous"] > 0  # "new" only when a torn header program happens to complete (and after the clean save)
