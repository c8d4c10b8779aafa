"""Where the search's fine-tunes run: this machine (``LocalExecutor``: in this process or a pool of forked
workers) or a Ray cluster (``RayExecutor``: one Ray task per fine-tune).

A fine-tune is ``measure.finetune_accuracy(plan json[, steps, seed])`` over a job (measure.prepare_job: the
model, the images, the frozen features, the sample order), a pure function of its arguments: an executor only
decides where it runs, so every executor gives the same results, bit for bit. Results come back to the caller
(``on_result``), which keeps the on-disk cache, whichever machine computed them.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tinytrain.errors import UsageError
from tinytrain.search import measure

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class LocalExecutor:
    """``workers`` <= 1: in this process; else a pool of that many forked processes (the job is inherited)."""

    workers: int = 1

    def run(self, job: dict, tasks: list[tuple], on_result, deadline: float | None, progress=None) -> bool:
        """Run ``tasks`` ((key, plan json[, steps, seed]): ``finetune_accuracy``'s arguments), calling
        ``on_result(key, result)`` as each ends. False when the deadline stopped it before every task ran."""
        if not tasks:
            return True
        measure.set_job(job)
        if self.workers <= 1:
            for key, *arguments in tasks:
                if deadline is not None and time.time() > deadline:
                    return False
                on_result(key, measure.finetune_accuracy(*arguments))
                if progress is not None:
                    progress.update(1)
            return True
        import multiprocessing as mp

        pool = mp.get_context("fork").Pool(self.workers, initializer=_default_sigterm)
        try:
            pending = {key: pool.apply_async(measure.finetune_accuracy, tuple(arguments)) for key, *arguments in tasks}
            return _collect(pending, lambda p: [k for k, r in p.items() if r.ready()], lambda r: r.get(), on_result,
                            deadline, progress)
        finally:
            pool.terminate()
            pool.join()


def _default_sigterm() -> None:
    """A forked worker ends at once on the SIGTERM of ``Pool.terminate``: a handler it inherited (the command's,
    tinytrain.firmware.emulator.ending_on_signals, or a library's) would run Python in a worker that may hold the
    pool's queue lock, and ``terminate`` then waits for it for good."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass(frozen=True)
class RayExecutor:
    """One Ray task per fine-tune (1 CPU each). Connects to ``address`` (a running cluster: "auto", "HOST:6379",
    "ray://HOST:10001"), to the Ray instance this process already started (``ray.init``), or starts a local one
    with ``num_cpus`` (None: every core). The job is put once in Ray's object store and shared by the tasks. With
    an address the tinytrain package of this process is shipped to the workers (``runtime_env`` ``py_modules``),
    so they run the driver's arithmetic; they need its dependencies (numpy, jinja2, ...) and a C compiler (gcc)."""

    address: str | None = None
    num_cpus: int | None = None

    def run(self, job: dict, tasks: list[tuple], on_result, deadline: float | None, progress=None) -> bool:
        """As ``LocalExecutor.run``."""
        if not tasks:
            return True
        ray = _ray()
        if not ray.is_initialized():
            if self.address:  # the cluster's workers get this tinytrain package (its folder)
                package = str(Path(__file__).resolve().parents[1])
                ray.init(address=self.address, runtime_env={"py_modules": [package]}, log_to_driver=False)
            else:
                ray.init(num_cpus=self.num_cpus, log_to_driver=False, include_dashboard=False)
        finetune = ray.remote(num_cpus=1, max_retries=0)(_finetune_task)
        job_ref = ray.put(job)
        pending = {key: finetune.remote(job_ref, *arguments) for key, *arguments in tasks}
        def finished(p: dict) -> list:
            ready, _ = ray.wait(list(p.values()), num_returns=len(p), timeout=0)
            ready = set(ready)
            return [k for k, r in p.items() if r in ready]

        try:
            return _collect(pending, finished, ray.get, on_result, deadline, progress)
        finally:
            for ref in pending.values():
                ray.cancel(ref, force=True)


def _finetune_task(job: dict, *arguments) -> dict:
    """A Ray task: one fine-tune over ``job`` (resolved from the object store in the worker)."""
    measure.set_job(job)
    return measure.finetune_accuracy(*arguments)


def _collect(pending: dict, finished, get, on_result, deadline: float | None, progress) -> bool:
    """Hand each result of ``pending`` (key -> handle; ``finished(pending)``: the keys done) to ``on_result`` as it
    ends; False when the deadline stopped it first (``pending`` then holds what did not run)."""
    while pending:
        done = finished(pending)
        for k in done:
            on_result(k, get(pending.pop(k)))
            if progress is not None:
                progress.update(1)
        if deadline is not None and time.time() > deadline and pending:
            return False
        if not done:
            time.sleep(0.05)
    return True


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'tinytrain[cluster]'") from None
    return ray


def make_executor(name: str, workers: int = 1, address: str | None = None):
    """The executor of ``tinytrain plan --executor NAME [--workers N] [--address ADDR]``."""
    if name not in EXECUTORS:
        raise UsageError(f"--executor {name}: choose one of {', '.join(EXECUTORS)}")
    if name == "local":
        if address:
            raise UsageError("--address needs --executor ray")
        return LocalExecutor(workers)
    _ray()
    return RayExecutor(address, workers if workers > 1 and not address else None)
