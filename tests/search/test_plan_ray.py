"""`tinytrain plan --executor ray`: the fine-tunes as Ray tasks on a local Ray instance (2 CPUs) measure exactly
what the local executor measures — the same contributions, finalists and plan, the same cache entries."""

import json
import shutil

import pytest

import tinytrain
from onnx_models import write_tiny_task

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tinytrain[cluster]'; scripts/setup.sh does)")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="no host C compiler (gcc)")]
SEARCH = dict(sram="8k", new_head=2, held_out=0.25, ft_steps=12, bias_k=(1, 2, 4), generations=5, population=12)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_tiny_task(tmp_path_factory.mktemp("ray"))


def _accuracies(cache_dir) -> dict:
    (path,) = [p for p in cache_dir.iterdir() if not p.name.startswith("memory-")]
    return {k: v["accuracy"] for k, v in json.loads(path.read_text())["results"].items()}


def test_ray_tasks_measure_the_same_contributions_as_local_workers(files, tmp_path):
    model, data = str(files / "tiny.onnx"), str(files / "tiny.npz")
    local = tinytrain.plan(model, data, workers=2, cache=str(tmp_path / "local"), **SEARCH)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = tinytrain.plan(model, data, executor="ray", cache=str(tmp_path / "ray"), **SEARCH)
    finally:
        ray.shutdown()
    assert local.report["finetunes_run"] > 5 and on_ray.report["finetunes_run"] == local.report["finetunes_run"]
    assert on_ray.report["contributions"] == local.report["contributions"]
    assert on_ray.report["finalists"] == local.report["finalists"] and on_ray.plan == local.plan
    assert _accuracies(tmp_path / "ray") == _accuracies(tmp_path / "local")  # every cached fine-tune, bit for bit
    assert on_ray.report["measurement"]["executor"] == "ray"


def test_executor_options_are_checked():
    from tinytrain.search.executors import LocalExecutor, RayExecutor, make_executor

    assert make_executor("local", 2) == LocalExecutor(2)
    assert make_executor("ray", 2) == RayExecutor(None, 2) and make_executor("ray", 1, "auto") == RayExecutor("auto")
    with pytest.raises(tinytrain.UsageError, match="--address needs --executor ray"):
        make_executor("local", 1, "auto")
    with pytest.raises(tinytrain.UsageError, match="choose one of"):
        make_executor("dask")
