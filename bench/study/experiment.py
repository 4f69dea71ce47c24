"""Runs of ``simulate`` and ``compare`` over seeds (replications) and grid points (sweeps).

A *task* is plain data — ``{"tool", "point", "seed", "params", "scenario"}`` with the
scenario as a raw mapping — so it crosses process and Spark boundaries without
pickling objects from disk. ``run_task`` (module-level: workers import it) runs one and
returns its *metrics*, a flat mapping of numbers:

- ``simulate``: ``SIM_METRICS`` (events, lateness, group-watermark lag, the advancer's
  work, monotonicity) and a ``group_lag_ms`` series over time;
- ``compare``: ``<strategy>.<metric>`` for every strategy row and ``LAB_METRICS``, and
  each strategy's watermark-lag series.

``execute`` runs tasks in-process (one task), in a process pool (``jobs`` workers, each
simulation reporting its simulated time to one progress bar), or one per Spark task.
On Spark, the custom strategies' modules that live on the driver's path only are
shipped to the executors first (``strategy_shipping``: refused on the driver, before
Spark starts, when one cannot be), and a run that fails there with the simulator's
error comes back as one line (``ExecutorError``), not retried and without a traceback.
The pool's workers fork from a forkserver that imported the simulator and loaded its
numba kernels once (``worker_preload``; spawned where there is no forkserver), so a
worker starts in milliseconds rather than paying ~2 s of imports and kernel loading; the
pool is kept for the process's next ``execute`` calls (``shutdown_pool`` ends it), so
its workers stay warm across them.
``aggregate`` turns the runs of one point into mean, sd and a 95 % Student-t interval per
metric, kept inside the metric's domain (``bench.study.stats``).
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import queue
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ..spec.errors import ExecutorError, ScenarioError, SimulationError
from ..spec.scenario import scenario_from_dict
from .run_options import RunOptions
from .stats import domain_of, summarise

__all__ = [
    "TOOLS",
    "SIM_METRICS",
    "LAB_METRICS",
    "run_task",
    "execute",
    "spark_execute",
    "aggregate",
    "aggregate_series",
    "sim_metrics",
    "lab_metrics",
    "replication_tasks",
    "shutdown_pool",
]

_DEFAULT = RunOptions()

TOOLS = ("simulate", "compare")

SIM_METRICS = (
    "events_written",
    "events_delivered",
    "duplicates",
    "late_ingestion",
    "late_event_time",
    "lag_mean_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "idle_lag_max_ms",
    "advances_per_s",
    "examined_per_pass",
    "scale_events",
    "late_dropped",
    "window_latency_mean_ms",
    "window_latency_max_ms",
    "monotonic",
)
"""What one simulation reports (docs/metrics.md defines each)."""

LAB_METRICS = (
    "events",
    "delivered",
    "duplicates",
    "late",
    "late_fraction",
    "completeness",
    "windows_fired",
    "wm_lag_mean_ms",
    "wm_lag_max_ms",
    "result_latency_p50_ms",
    "result_latency_max_ms",
    "buffer_peak_events",
    "buffer_peak_bytes",
)
"""What the lab reports per strategy (docs/metrics.md defines each)."""


def sim_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics of one simulation's summary."""
    wm, ev = summary["watermark"], summary["events"]
    idle = wm.get("idle")
    pipe = summary.get("pipeline")
    return {
        "events_written": ev["written"],
        "events_delivered": ev["delivered"],
        "duplicates": ev["duplicates"],
        "late_ingestion": ev["late_ingestion"],
        "late_event_time": ev["late_event_time"],
        "lag_mean_ms": wm["lag_ms"]["mean"],
        "lag_p99_ms": wm["lag_ms"]["p99"],
        "lag_max_ms": wm["lag_ms"]["max"],
        "idle_lag_max_ms": idle["lag_ms"]["max"] if idle else None,
        "advances_per_s": summary["advancer"]["advances_per_s"],
        "examined_per_pass": summary["advancer"]["examined_per_pass"],
        "scale_events": summary["scaling"]["events"],
        "late_dropped": pipe["late_dropped"] if pipe else None,
        "window_latency_mean_ms": pipe["window_latency_ms"]["mean"] if pipe else None,
        "window_latency_max_ms": pipe["window_latency_ms"]["max"] if pipe else None,
        "monotonic": wm["monotonic"],
    }


def lab_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``<strategy>.<metric>`` of the lab's rows, for the numeric metrics."""
    out: dict[str, Any] = {}
    for row in rows:
        for m in LAB_METRICS:
            if m in row:
                out[f"{row['strategy']}.{m}"] = row[m]
    return out


def run_task(
    task: Mapping[str, Any], progress: Callable[[int], None] | None = None, out_dir: str | None = None
) -> dict[str, Any]:
    """Run one task; returns ``{"point", "seed", "params", "metrics", "series", "random"}``.

    ``progress`` is called with the simulated time (ms) as the run advances; with
    ``out_dir`` the run's own outputs (summary and series, no plots) are written there.
    """
    from pathlib import Path

    sc = scenario_from_dict(task["scenario"])
    series: dict[str, list[tuple[int, float | None]]] = {}
    if task["tool"] == "simulate":
        from ..sim.engine import run_scenario
        from .sim_outputs import write_result

        result = run_scenario(sc, progress=progress)
        metrics = sim_metrics(result.summary)
        series["group_lag_ms"] = [(r["t_ms"], r["group_lag_ms"]) for r in result.recorder.samples]
        if out_dir is not None:
            write_result(result, Path(out_dir))
    elif task["tool"] == "compare":
        from ..lab.compare import run_compare
        from .compare_report import write_outputs

        lab = run_compare(sc, progress=progress)
        metrics = lab_metrics(lab.rows)
        for row in lab.rows:  # row columns beyond LAB_METRICS a caller asks for (``tune``: the p99)
            for m in task.get("lab_columns") or ():
                if m in row:
                    metrics[f"{row['strategy']}.{m}"] = row[m]
        for name, samples in lab.series.items():
            series[f"{name}.wm_lag_ms"] = [
                (t, None if wm is None else sc.start_time_ms + t - wm) for t, wm, _, _ in samples
            ]
        if out_dir is not None:
            write_outputs(lab, Path(out_dir), plots=False)
    else:
        raise ScenarioError(f"unknown tool {task['tool']!r}: one of {', '.join(TOOLS)}")
    return {
        "point": task.get("point", 0),
        "seed": sc.seed,
        "params": dict(task.get("params") or {}),
        "metrics": metrics,
        "series": series,
        "random": sc.random_parts,
    }


def replication_tasks(
    tool: str,
    data: Mapping[str, Any],
    seed: int,
    replications: int,
    point: int = 0,
    params: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One task per seed ``seed, seed + 1, ...`` of the raw scenario ``data``."""
    out = []
    for i in range(replications):
        d = dict(data)
        d["seed"] = seed + i
        d["replications"] = 1
        out.append(
            {"tool": tool, "point": point, "seed": seed + i, "params": dict(params or {}), "scenario": d}
        )
    return out


# ---------------------------------------------------------------------- executing


_progress_queue: list[Any] = []
"""The worker's end of the progress queue (set by ``_init_worker`` as the process starts)."""


def _init_worker(q: Any) -> None:
    _progress_queue[:] = [q]


def _pool_context() -> Any:
    """Workers forked from a forkserver that imported the simulator and loaded its kernels once
    (``worker_preload``), where the platform has one; else spawned (each imports them itself)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([f"{__package__}.worker_preload"])
    return ctx


def _worker(
    task: dict[str, Any], ident: tuple[int, int], out_dir: str | None, progress: bool = True
) -> dict[str, Any]:
    """``run_task`` in a pool worker, reporting its simulated time to the progress queue if shown."""
    if not progress:  # no bar: no progress process in the simulation, no messages
        return run_task(task, None, out_dir)
    q = _progress_queue[0]
    last = [0]

    def report(t_ms: int) -> None:
        q.put((ident, t_ms - last[0]))
        last[0] = t_ms

    res = run_task(task, report, out_dir)
    q.put((ident, int(task["scenario"]["duration_ms"]) - last[0]))
    return res


def execute(
    tasks: Sequence[dict[str, Any]],
    options: RunOptions = _DEFAULT,
    out_dirs: Sequence[str | None] | None = None,
    label: str = "",
) -> list[dict[str, Any]]:
    """Run every task where ``options`` say (local processes or Spark tasks); results in task order."""
    show_progress, jobs = options.progress, options.jobs
    if options.executor == "spark":
        from .strategy_shipping import ship_plan

        ship_plan(tasks)  # a custom strategy that cannot reach the executors: refused before Spark starts
        from pyspark.sql import SparkSession

        from spark_source.session import local_session

        ours = SparkSession.getActiveSession() is None  # a caller's session is used, and left running
        spark = local_session("ingestwm-experiment", master=options.master)
        try:
            return spark_execute(spark.sparkContext, tasks, show_progress, label)
        finally:
            if ours:
                spark.stop()
    from tqdm import tqdm

    if show_progress is None:
        show_progress = sys.stderr.isatty()
    dirs = list(out_dirs) if out_dirs is not None else [None] * len(tasks)
    total = sum(int(t["scenario"]["duration_ms"]) for t in tasks) / 1000.0
    workers = max(1, min(jobs or multiprocessing.cpu_count(), len(tasks)))
    with tqdm(total=total, unit="sim s", desc=label, disable=not show_progress, leave=False) as bar:
        if workers == 1:
            results = []
            for t, d in zip(tasks, dirs, strict=True):

                def report(t_ms: int, base: float = bar.n) -> None:
                    bar.update(base + t_ms / 1000.0 - bar.n)

                start = bar.n
                results.append(run_task(t, report if show_progress else None, d))
                bar.update(start + int(t["scenario"]["duration_ms"]) / 1000.0 - bar.n)
            return results
        pool, q = _warm_pool(workers)
        call = next(_calls)
        try:
            futures: dict[Future[dict[str, Any]], int] = {
                pool.submit(_worker, t, (call, i), d, show_progress): i
                for i, (t, d) in enumerate(zip(tasks, dirs, strict=True))
            }
            out: list[dict[str, Any] | None] = [None] * len(tasks)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(q, bar, call)
                for f in done:
                    out[futures[f]] = f.result()
            _drain(q, bar, call)
        except BaseException:
            shutdown_pool()  # a failed run, an interrupt: the next call starts afresh
            raise
        return [r for r in out if r is not None]


_pool: list[tuple[int, ProcessPoolExecutor, Any]] = []
"""The process's worker pool: ``(workers, pool, progress queue)``, kept between ``execute`` calls."""
_calls = itertools.count()


def _warm_pool(workers: int) -> tuple[ProcessPoolExecutor, Any]:
    """The pool of ``workers`` processes, made on first use and kept for the next calls (so its
    workers stay warm across a sweep's or a benchmark's ``execute`` calls: imports, kernels, the
    first run's one-time costs are paid once per worker, not per call). Another size replaces it;
    ``shutdown_pool`` (also at exit) ends it."""
    if _pool and _pool[0][0] == workers:
        return _pool[0][1], _pool[0][2]
    shutdown_pool()
    ctx = _pool_context()
    q = ctx.Queue()
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(q,))
    _pool.append((workers, pool, q))
    return pool, q


def shutdown_pool() -> None:
    """End the kept worker pool, if any (its workers exit once their runs are done). Idempotent."""
    while _pool:
        _, pool, q = _pool.pop()
        pool.shutdown(wait=True, cancel_futures=True)
        q.close()


atexit.register(shutdown_pool)


def spark_execute(
    sc: Any,
    tasks: Sequence[dict[str, Any]],
    show_progress: bool | None = None,
    label: str = "",
    on_progress: Callable[[int], None] | None = None,
    poll_s: float = 0.25,
) -> list[dict[str, Any]]:
    """Run every task as one Spark task (one job); results in task order.

    The custom strategies' modules on the driver's path only are added to ``sc`` first
    (``strategy_shipping.ship``). A run that raises the simulator's error on an executor
    (a module that does not import there, a strategy that fails) makes this raise one
    ``ExecutorError`` naming the executor, the point and the seed.

    Progress is per simulation: the job runs on a thread of its own, in a job group of its
    own, and this thread reads Spark's status tracker every ``poll_s`` for the tasks
    completed so far (a bar in runs; ``on_progress(done)`` each time the count moves).
    """
    from tqdm import tqdm

    from .strategy_shipping import ship

    ship(sc, tasks)
    if show_progress is None:
        show_progress = sys.stderr.isatty()
    group = f"ingestwm-experiment-{uuid.uuid4().hex}"
    outcome: dict[str, Any] = {}

    def collect() -> None:
        sc.setJobGroup(group, f"ingestwm experiment {label}".strip())
        try:
            outcome["runs"] = sc.parallelize(list(tasks), max(1, len(tasks))).map(_spark_task).collect()
        except BaseException as e:  # re-raised on the caller's thread
            outcome["error"] = e

    def completed() -> int:
        tracker = sc.statusTracker()
        n = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                st = tracker.getStageInfo(stage)
                n += st.numCompletedTasks if st is not None else 0
        return min(n, len(tasks))

    worker = threading.Thread(target=collect, name="ingestwm-experiment-job", daemon=True)
    done = 0
    with tqdm(total=len(tasks), unit="run", desc=label, disable=not show_progress, leave=False) as bar:
        worker.start()
        finished = False
        while not finished:  # one look after the job ended too: its last runs are counted
            worker.join(poll_s)
            finished = not worker.is_alive()
            now = len(tasks) if finished and "runs" in outcome else completed()
            if now > done:
                bar.update(now - done)
                done = now
                if on_progress is not None:
                    on_progress(done)
    if "error" in outcome:
        raise outcome["error"]
    runs = list(outcome["runs"])
    for r in runs:
        if "failed" in r:
            raise _executor_error(r["failed"])
    return runs


_IMPORT_HINT = (
    " (the executors import a custom strategy's module from what the driver ships, a .py module"
    " or package of them on its path, or from what is installed on every worker; docs/strategies.md)"
)


def _spark_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """``run_task`` on an executor; the simulator's error comes back as data: ``{"failed": {...}}``.

    Returned, not raised: Spark would retry the task (4 times on a cluster) and the
    driver would see the executor's traceback wrapped in Py4J's.
    """
    try:
        return run_task(task)
    except SimulationError as e:
        import socket

        return {
            "failed": {
                "error": str(e),
                "import": isinstance(e, ScenarioError) and e.field.endswith("class_path"),
                "host": socket.gethostname(),
                "point": task.get("point", 0),
                "seed": task.get("seed"),
            }
        }


def _executor_error(failed: Mapping[str, Any]) -> ExecutorError:
    hint = _IMPORT_HINT if failed["import"] else ""
    return ExecutorError(
        f"on Spark executor {failed['host']} (point {failed['point']}, seed {failed['seed']}): "
        f"{failed['error']}{hint}"
    )


def _drain(q: Any, bar: Any, call: int) -> None:
    """Progress of call ``call``'s runs onto ``bar`` (a late report of an earlier call is dropped)."""
    while True:
        try:
            ident, dt = q.get_nowait()
        except queue.Empty:
            return
        if ident[0] == call:
            bar.update(dt / 1000.0)


# ---------------------------------------------------------------------- aggregating


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per metric (first-seen order): n, mean, sd, ci95, low, high (in its domain), clipped over the runs."""
    names: list[str] = []
    for r in runs:
        for k in r["metrics"]:
            if k not in names:
                names.append(k)
    return {k: summarise((r["metrics"].get(k) for r in runs), domain_of(k)) for k in names}


def aggregate_series(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per series, per sample time: the summary across runs (mean and 95 % interval: the bands)."""
    out: dict[str, list[dict[str, Any]]] = {}
    names = sorted({k for r in runs for k in r["series"]})
    for name in names:
        by_t: dict[int, list[Any]] = {}
        for r in runs:
            for t, v in r["series"].get(name, []):
                by_t.setdefault(int(t), []).append(v)
        dom = domain_of(name)
        out[name] = [{"t_ms": t, **summarise(vs, dom)} for t, vs in sorted(by_t.items())]
    return out
