"""Spark source throughput at equal rows per micro-batch, measured side by side in one session.

Four queries run in one local[2] SparkSession into the ``noop`` sink, each for several
micro-batches of the same number of rows (10^6; ``--quick`` uses 2 * 10^5 and says so)
over 2 partitions, after one warm-up micro-batch, in five rounds of the four, after a whole
unmeasured round of (a), (b) and (d) (with one micro-batch each instead, the JVM's warm-up
still fell on the first measured round: its (a)/(b) and (d)/(b) were the lowest of the run,
0.79 and 0.72 against 0.85-1.05). (a), (b) and (d) measure 8 micro-batches a round, (c)
and the warm-up round 4: with 4, one slow micro-batch of either side (the ceiling's own
ranged from 634 to 1,031 ms in one query on a quiet machine) moved a round's (d)/(b) by
up to 0.1, and two runs had rounds at 0.73 and 0.76 beside medians of 0.89 and 0.84; the
fastest and slowest micro-batch of (b) and (d) are printed. A round runs (a), half of
(b), (d), the other half of (b), (c); the next one (c), half of (b), (d), the other half,
(a): (d) sits between the two halves of the ceiling it is compared with, and (a) next to
one, so a load from elsewhere that rises or falls over a round weighs on both sides of a
ratio (the machine is shared: with (c) between (b) and (d), rounds had (d)/(b) of 0.68
and 1.19 in one run; with (b) only before (d), a run on a loaded machine had rounds of
0.62 and 1.53 around a median of 0.80). The figure of each is ``numInputRows /
triggerExecution`` summed over its measured micro-batches (Spark's
``processedRowsPerSecond``; (b)'s over both halves), the median over the rounds; (a)/(b)
and (d)/(b) are also printed round by round:

- (a) ``ingestwm``: ``format("ingestwm")`` reading a store served on the loopback
  (2 segments, 32-byte payloads, ``maxEventsPerTrigger`` = rows per batch): the
  driver plans frame-exact ranges, executors read them through ``RemoteClient``,
  decode frames and yield Arrow batches.
- (b) ``ceiling``: a minimal Python streaming source of the same 10-column schema whose
  ``read()`` yields prebuilt Arrow batches of 65,536 rows holding the rows (a) delivers
  (same names, keys, payloads; checked before timing): no store, no decoding. The
  most any Python data source gets through PySpark's Arrow hand-over here.
- (c) ``rate-micro-batch`` with the same ``rowsPerBatch``: rows generated in the JVM,
  the reference for Spark itself. It never runs dry, so each of its micro-batches is one
  ``availableNow`` query on a shared checkpoint (a running query would be stopped in the
  middle of a batch); (a) and (b) run dry after their batches and are stopped idle.
- (d) ``ingestwm`` in the setup users run: ``ingestwm serve`` in its own process
  (``serving.serve_in_process``) and the data written by a default ``EventWriter`` over
  ``RemoteClient`` (64 keys hashed unevenly over 2 segments, appends as the writer's
  pipeline makes them; the layout is printed), same options as (a). Its stream's name is
  as long as (a)'s, so that it hands the JVM as many bytes per row as (b). Its goal: at
  least 0.8x (b) in every round, not only in the median.

It prints rows/s and the ratios (a)/(b) and (b)/(c), and where the time of (a) and (d)
goes: per micro-batch, running the tasks (Spark's ``addBatch``) and the rest of the
trigger on the driver, beside (b)'s; driver planning (``latestOffset`` + ``queryPlanning``); and,
measured on one thread in this process over the same ranges (``read_range`` with no
fetch thread, its calls timed), fetching the bytes, decoding the frames, looking up
ingestion times and building Arrow; then the same read path with its fetch thread; and the
CPU per row that (b)'s and (d)'s whole queries cost each kind of process (from ``/proc``, on
Linux): the JVM, PySpark's Python workers, (d)'s ``ingestwm serve``; of the workers' CPU, the
time in the kernel, and their page faults per 1,000 rows (workers that gave the memory of a
read back to the kernel faulted it in again at the next: ~6 per 1,000 rows, an eighth of
their CPU). With both cores busy, (d)/(b) comes to about (b)'s CPU per row over (d)'s: the
JVM's share is the same on both sides, the rest is what the source adds.
(a)'s server runs in this process too, so its figures include the server's work; (d)'s
fetch is the wait for the other process. Before timing, (a) and (d) are each checked on
a small stream written as theirs (``spark_data.check_delivery``), through the same
streaming path and options: every event once, every column equal to what the per-event
decoder and ``watermark_at`` give; and after each round, before the next, each timed
micro-batch of (a) and (d) is checked to hold exactly the events between its start and end
offsets, none read twice (``spark_data.check_batch_counts``). The machine is shared and
small: compare the ratios of one run, not figures across runs.
Run ``python -m bench.perf.bench_spark [--quick | --tiny]``.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from readergroup.format.frame_batch import decode_events
from segmentstore import SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

from .serving import ProcessTimes, process_times, serve_in_process
from .spark_data import (
    PARTITIONS,
    ceiling_source,
    check_batch_counts,
    check_ceiling,
    check_delivery,
    preload,
    preload_served,
    raise_if_failed,
    retried,
)
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "available_now_batches", "SLOW"]

SLOW = True  # minutes: its pytest-benchmark run needs --bench-slow (bench.perf.suite)

_ROUNDS = 5
"""Rounds of (a), (b), (c), (d) (one at ``--tiny``); the figures are the medians over the rounds."""
_GOAL = 0.8
"""(d)/(b) in every round: the served setup's goal (issue #27)."""
_SERVED = "bench/user"
"""(d)'s stream: a name as long as (a)'s ``bench/main``, so that its stream and segment columns
are as wide as the ceiling's (which carries (a)'s names)."""


def _measured(progress: list[dict[str, Any]], rows_per_batch: int) -> list[dict[str, Any]]:
    """The full micro-batches (at least half the target rows), the first one (warm-up) left out."""
    full = [p for p in progress if p["numInputRows"] >= rows_per_batch // 2]
    return full[1:]


def _rate_of(measured: list[dict[str, Any]]) -> float:
    rows = sum(p["numInputRows"] for p in measured)
    ms = sum(p["durationMs"]["triggerExecution"] for p in measured)
    return rows / (ms / 1000.0) if ms else 0.0


def _phases(progress: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean ms per micro-batch running its tasks (``addBatch``) and on the driver (the rest)."""
    tasks = sum(p["durationMs"].get("addBatch", 0) for p in progress) / len(progress)
    total = sum(p["durationMs"]["triggerExecution"] for p in progress) / len(progress)
    return tasks, total - tasks


def _planning(progress: list[dict[str, Any]]) -> float:
    """Mean ms per micro-batch of ``latestOffset`` + ``queryPlanning`` (offsets, Spark's plan)."""
    total = sum(
        p["durationMs"].get("latestOffset", 0) + p["durationMs"].get("queryPlanning", 0) for p in progress
    )
    return float(total) / len(progress)


def _run_batches(
    df: Any, rows_per_batch: int, batches: int, rows_read: list[int] | None = None
) -> list[dict[str, Any]]:
    """Run ``df`` into ``noop`` until ``batches`` full micro-batches after the warm-up; their progress
    (``rows_read``, if given, gets the rows of every micro-batch the query ran).

    ``df`` reads a source that runs dry (``ingestwm`` over a preloaded stream, the capped
    ceiling): once the batches are in, the query reads what is left
    (``processAllAvailable``) and is stopped idle, so no task is cut short.
    """
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="0 seconds")
            .start()
        )
        deadline = monotonic_s() + 600
        try:
            while len(_measured(list(q.recentProgress), rows_per_batch)) < batches:
                raise_if_failed(q)
                if monotonic_s() > deadline:
                    raise TimeoutError(f"fewer than {batches} full micro-batches in 600 s")
                q.awaitTermination(0.1)
            q.processAllAvailable()
            progress = list(q.recentProgress)
            if rows_read is not None:
                rows_read.append(sum(p["numInputRows"] for p in progress))
            return _measured(progress, rows_per_batch)[:batches]
        finally:
            q.stop()


def available_now_batches(start: Callable[[str], Any], batches: int) -> list[dict[str, Any]]:
    """Progress of ``batches`` micro-batches, each one ``availableNow`` query, on one checkpoint.

    ``start(checkpoint)`` starts the query (``rate-micro-batch`` gives one batch of
    ``rowsPerBatch`` rows per ``availableNow`` query and continues from the checkpoint).
    A source that never runs dry, read by a running query, could only be stopped in the
    middle of a batch; these queries end by themselves.
    """
    progress: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        for _ in range(batches):
            q = start(ckpt)
            try:
                if not q.awaitTermination(600):
                    raise TimeoutError("an availableNow micro-batch did not end in 600 s")
            except Exception:
                raise_if_failed(q)
                raise
            finally:
                q.stop()
            progress += list(q.recentProgress)
    return progress


def _ingestwm(
    spark: Any,
    endpoint: str,
    stream: str,
    rows_per_batch: int,
    batches: int,
    rows_read: list[int] | None = None,
) -> Any:
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .option("maxEventsPerTrigger", str(rows_per_batch))
        .load()
    )
    return _run_batches(df, rows_per_batch, batches, rows_read)


def _rate_micro_batch(spark: Any, rows_per_batch: int, batches: int) -> Any:
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", PARTITIONS)
        .load()
    )

    def start(ckpt: str) -> Any:
        w = df.writeStream.format("noop").option("checkpointLocation", ckpt)
        return w.trigger(availableNow=True).start()

    return _measured(available_now_batches(start, batches + 1), rows_per_batch)[:batches]


def _ceiling(spark: Any, rows_per_batch: int, batches: int, rows_read: list[int] | None = None) -> Any:
    df = spark.readStream.format("ingestwm_bench_ceiling").option("batches", str(batches + 1)).load()
    return _run_batches(df, rows_per_batch, batches, rows_read)


_ROLES = ("the JVM", "Python workers", "`ingestwm serve`")


def _cpu_by_role(serve_pid: int) -> dict[int, tuple[str, ProcessTimes]] | None:
    """Each process of the JVM (Spark), PySpark's Python workers and the served store, by pid: its
    role and what it used so far, from ``/proc`` (``None`` where there is none). O(processes)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    out: dict[int, tuple[str, ProcessTimes]] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:  # (gone meanwhile)
            continue
        pid = int(d.name)
        if pid == serve_pid:
            role = _ROLES[2]
        elif b"pyspark.daemon" in cmd:
            role = _ROLES[1]
        elif b"java" in cmd and b"org.apache.spark" in cmd:
            role = _ROLES[0]
        else:
            continue
        out[pid] = (role, process_times(pid))
    return out


def _cpu_added(
    before: dict[int, tuple[str, ProcessTimes]] | None,
    after: dict[int, tuple[str, ProcessTimes]] | None,
    into: dict[tuple[str, str], float],
) -> None:
    """Add to ``into`` what each role's processes used between two ``_cpu_by_role``: CPU seconds
    (``cpu``), of them in the kernel (``system``), minor page faults (``faults``). A process that
    started meanwhile counts from zero; one that ended meanwhile is not counted (its last figures
    are gone with it: a worker PySpark replaced)."""
    if before is None or after is None:
        return
    zero = ProcessTimes(0.0, 0.0, 0)
    for pid, (role, now) in after.items():
        then = before.get(pid, (role, zero))[1]
        for what, v in (
            ("cpu", now.user_s + now.system_s - then.user_s - then.system_s),
            ("system", now.system_s - then.system_s),
            ("faults", now.minor_faults - then.minor_faults),
        ):
            into[role, what] = into.get((role, what), 0.0) + v


def _read_split(endpoint: str, client: SegmentStoreClient, stream: str) -> dict[str, float]:
    """Seconds per row of (a)'s executor work, phase by phase, on one thread over the whole stream.

    The phases of ``spark_source.reading.read_range`` run without its fetch thread:
    ``client.read`` (fetch), ``decode_events`` (decode), ``ingestion_runs`` (ingestion
    times) and the rest (arrow: columns and the record batch), measured by running
    ``read_range`` with those calls wrapped. ``pipelined``: the same ranges read with
    the fetch thread, nothing wrapped.
    """
    import spark_source.reading as reading

    spent = {"fetch": 0.0, "decode": 0.0, "ingestion": 0.0}

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = monotonic_s()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += monotonic_s() - t0

        return call

    ranges = [(s.name, client.get_info(s.name).length) for s in client.get_stream(stream).active_segments]
    meta = reading.BatchMeta(0, 0)

    def read_all(remote: RemoteClient, ahead: int) -> int:
        return sum(
            b.num_rows
            for seg, length in ranges
            for b in reading.read_range(remote, stream, seg, 0, length, meta, ahead=ahead)
        )

    remote = RemoteClient(endpoint, read_ahead=False)
    setattr(reading, "decode_events", timed("decode", decode_events))  # noqa: B010
    try:
        remote.read = timed("fetch", remote.read)  # type: ignore[method-assign]
        remote.ingestion_runs = timed("ingestion", remote.ingestion_runs)  # type: ignore[method-assign]
        t0 = monotonic_s()
        rows = read_all(remote, 0)
        total = monotonic_s() - t0
    finally:
        setattr(reading, "decode_events", decode_events)  # noqa: B010
        remote.close()
    with RemoteClient(endpoint, read_ahead=False) as plain:
        t0 = monotonic_s()
        piped_rows = read_all(plain, reading.FETCH_AHEAD)
        pipelined = monotonic_s() - t0
    assert piped_rows == rows
    arrow = total - sum(spent.values())
    return {
        "rows": rows,
        **{k: v / rows for k, v in spent.items()},
        "arrow": arrow / rows,
        "pipelined": pipelined / rows,
    }


def run(size: Size = "full") -> list[Row]:
    """Measure (a), (b) and (c) in one session at equal rows per micro-batch; rows for ``ingestwm bench``."""
    from spark_source.session import local_session

    rows_per_batch = sized(size, 20_000, 200_000, 1_000_000)
    batches = sized(size, 1, 2, 8)  # (a), (b), (d): measured micro-batches per round
    rate_batches = sized(size, 1, 2, 4)  # (c): one availableNow query each; also the warm-up round's
    rounds_n = sized(size, 1, _ROUNDS, _ROUNDS)
    events = rows_per_batch * (batches + 2)  # a warm-up batch, the measured ones, and slack
    note = f" (--{size}; the goal is stated at 1,000,000)" if size != "full" else ""
    what = f"{rows_per_batch:,} rows/batch{note}"
    store = SegmentStore(clock=WallClock(), config=StoreConfig(advancer_thread=False))
    server = SegmentStoreServer(store)
    server.start()
    endpoint = f"127.0.0.1:{server.port}"
    serve_process, serve_port = serve_in_process()
    served = f"127.0.0.1:{serve_port}"
    try:
        client = EmbeddedClient(store)
        preload(client, "bench/check", 20_000)
        preload(client, "bench/main", events)
        preload_served(served, "bench/usrchk", 20_000)
        # 64 keys hash to the 2 segments unevenly (about 45:55): 30 % more events, so that the
        # smaller segment still has a backlog in the last measured batch (the planner shares a
        # batch's events evenly among the segments with data; when one runs dry, one task reads all)
        layout = preload_served(served, _SERVED, events * 13 // 10)
        # --tiny is a smoke run: a JVM that warms up with C1 only starts sooner; figures need C2
        spark = local_session("ingestwm-bench", log_level="fatal", fast_start=size == "tiny")
        retried(lambda: check_delivery(spark, endpoint, client, "bench/check", rows_per_batch))
        with RemoteClient(served, timeout_s=120) as remote:
            retried(lambda: check_delivery(spark, served, remote, "bench/usrchk", rows_per_batch))
        segments = [seg.name for seg in client.get_stream("bench/main").active_segments]
        check_ceiling(client, "bench/main", segments)
        spark.dataSource.register(ceiling_source(rows_per_batch, "bench/main", segments))

        def queries(
            n: int, rows_read: list[int] | None = None
        ) -> dict[str, Callable[[], list[dict[str, Any]]]]:
            return {
                "a": lambda: _ingestwm(spark, endpoint, "bench/main", rows_per_batch, n),
                "b": lambda: _ceiling(spark, rows_per_batch, n, rows_read),
                "c": lambda: _rate_micro_batch(spark, rows_per_batch, rate_batches),
                "d": lambda: _ingestwm(spark, served, _SERVED, rows_per_batch, n, rows_read),
            }

        if size != "tiny":  # a whole round unmeasured: the JVM's and the workers' warm-up
            for k in "abd":  # would land on the first round (its (a)/(b) and (d)/(b) were the lowest)
                retried(queries(rate_batches)[k])
        rounds: list[tuple[list[dict[str, Any]], ...]] = []
        # CPU of (b)'s and (d)'s whole queries (their warm-up and last micro-batches too) by process, per row
        # (a query ``retried`` after a failure: its failed attempt's CPU counts, its rows do not; rare)
        cpu: dict[str, dict[tuple[str, str], float]] = {"b": {}, "d": {}}
        rows_read: dict[str, list[int]] = {"b": [], "d": []}
        with RemoteClient(served, timeout_s=120) as remote:
            half = max(1, batches // 2)
            for i in range(rounds_n):  # (b) in two halves, just before and just after (d); (a) next to (b)
                ran: dict[str, list[dict[str, Any]]] = {"b": []}
                for k in "ab-d-c" if i % 2 == 0 else "cb-d-a":
                    if k in "-d":
                        q = "b" if k == "-" else "d"
                        before = _cpu_by_role(serve_process.pid)
                        got = retried(queries(half if q == "b" else batches, rows_read[q])[q])
                        _cpu_added(before, _cpu_by_role(serve_process.pid), cpu[q])
                        ran[q] = ran.get(q, []) + got if q == "b" else got
                    else:
                        ran[k] = retried(queries(batches)[k])
                rounds.append(tuple(ran[k] for k in "abcd"))
                check_batch_counts(client, "bench/main", ran["a"])  # before the next round's timing
                check_batch_counts(remote, _SERVED, ran["d"])
        split = _read_split(endpoint, client, "bench/main")
        with RemoteClient(served, timeout_s=120) as remote:
            split_served = _read_split(served, remote, _SERVED)
    finally:
        server.stop()
        store.close()
        serve_process.terminate()
        try:
            serve_process.wait(60)
        except subprocess.TimeoutExpired:  # a loaded machine: do not leave it running
            serve_process.kill()
            serve_process.wait()
    rates = [tuple(_rate_of(r) for r in one) for one in rounds]
    a, b, c, d = (statistics.median(r[i] for r in rates) for i in range(4))
    a_over_b = [r[0] / r[1] for r in rates]
    d_over_b = [r[3] / r[1] for r in rates]
    planning_ms, b_planning_ms, d_planning_ms = (
        _planning([p for one in rounds for p in one[i]]) for i in (0, 1, 3)
    )
    (a_exec, a_driver), (b_exec, b_driver), (d_exec, d_driver) = (
        _phases([p for one in rounds for p in one[i]]) for i in (0, 1, 3)
    )
    batch_ms = [[p["durationMs"]["triggerExecution"] for one in rounds for p in one[i]] for i in range(4)]
    phases = ("fetch", "decode", "ingestion", "arrow")
    cpu_rows: list[Row] = []
    if all(cpu[q] and sum(rows_read[q]) for q in "bd"):  # (Linux's /proc)
        per = {q: {k: v / sum(rows_read[q]) for k, v in cpu[q].items()} for q in "bd"}
        total = {q: sum(per[q].get((r, "cpu"), 0.0) for r in _ROLES) * 1e6 for q in "bd"}
        workers = _ROLES[1]
        cpu_rows = [
            *(
                row(f"({q}) CPU per row over its queries: {r}", per[q].get((r, "cpu"), 0.0) * 1e6, "us/row")
                for q in "bd"
                for r in (_ROLES if q == "d" else _ROLES[:2])
            ),
            *(
                row(
                    f"({q}) Python workers' CPU per row in the kernel",
                    per[q].get((workers, "system"), 0.0) * 1e6,
                    "us/row",
                )
                for q in "bd"
            ),
            *(
                row(
                    f"({q}) Python workers' page faults per 1,000 rows",
                    per[q].get((workers, "faults"), 0.0) * 1e3,
                    "faults",
                )
                for q in "bd"
            ),
            row("(b) CPU per row, all its processes", total["b"], "us/row"),
            row(
                "(d) CPU per row, all its processes",
                total["d"],
                "us/row",
                "(b) CPU per row",
                total["d"] / total["b"],
            ),
        ]
    per_row_us = {k: split[k] * 1e6 for k in phases}
    one_thread = 1e6 / sum(per_row_us.values())
    pipelined = 1 / split["pipelined"]
    return [
        row(f"(c) spark rate-micro-batch, {what}", c, "rows/s", "itself", 1.0),
        row(f"(b) python ceiling (prebuilt Arrow), {what}", b, "rows/s", "(c) rate-micro-batch", b / c),
        row(f"(a) spark ingestwm source, {what}", a, "rows/s", "(b) python source ceiling", a / b),
        row(
            "(a)/(b) in each round: " + ", ".join(f"{x:.2f}" for x in a_over_b),
            statistics.median(a_over_b),
            "x",
        ),
        row(
            f"(d) spark ingestwm source, `ingestwm serve` process, EventWriter data, {what}",
            d,
            "rows/s",
            "(b) python source ceiling",
            d / b,
        ),
        row(
            "(d)/(b) in each round: " + ", ".join(f"{x:.2f}" for x in d_over_b),
            statistics.median(d_over_b),
            "x",
        ),
        row(
            f"(d)/(b) lowest round: {'meets' if min(d_over_b) >= _GOAL else 'BELOW'} the goal (>= {_GOAL})",
            min(d_over_b),
            "x",
        ),
        *(
            row(
                f"{w} micro-batch ms, median (fastest {min(t):,.0f}, slowest {max(t):,.0f})",
                statistics.median(t),
                "ms",
            )
            for w, t in (("(b)", batch_ms[1]), ("(d)", batch_ms[3]))
        ),
        *(row(f"(d) layout: {k}", v, "") for k, v in layout.items()),
        row("(a) per micro-batch: tasks (addBatch)", a_exec, "ms", "(b) tasks (addBatch)", a_exec / b_exec),
        row("(b) per micro-batch: tasks (addBatch)", b_exec, "ms"),
        row(
            "(a) per micro-batch: driver (the rest)",
            a_driver,
            "ms",
            "(b) driver (the rest)",
            a_driver / b_driver,
        ),
        row("(b) per micro-batch: driver (the rest)", b_driver, "ms"),
        row(
            "(a) driver planning per micro-batch",
            planning_ms,
            "ms",
            "(b) planning",
            planning_ms / b_planning_ms,
        ),
        row("(b) driver planning per micro-batch", b_planning_ms, "ms"),
        row("(d) per micro-batch: tasks (addBatch)", d_exec, "ms", "(b) tasks (addBatch)", d_exec / b_exec),
        row(
            "(d) per micro-batch: driver (the rest)",
            d_driver,
            "ms",
            "(b) driver (the rest)",
            d_driver / b_driver,
        ),
        row(
            "(d) driver planning per micro-batch",
            d_planning_ms,
            "ms",
            "(b) planning",
            d_planning_ms / b_planning_ms,
        ),
        row("(a) fetch bytes, 1 thread", per_row_us["fetch"], "us/row"),
        row("(a) decode frames, 1 thread", per_row_us["decode"], "us/row"),
        row("(a) ingestion times (ingestion_runs), 1 thread", per_row_us["ingestion"], "us/row"),
        row("(a) build Arrow, 1 thread", per_row_us["arrow"], "us/row"),
        row("(a) read path, 1 thread", one_thread, "rows/s", "(a) spark ingestwm source", one_thread / a),
        row(
            "(a) read path, fetch thread ahead",
            pipelined,
            "rows/s",
            "(a) read path, 1 thread",
            pipelined / one_thread,
        ),
        *(row(f"(d) {k}, 1 thread", split_served[k] * 1e6, "us/row") for k in phases),
        row(
            "(d) read path, fetch thread ahead",
            1 / split_served["pipelined"],
            "rows/s",
            "(a) read path, fetch thread ahead",
            split["pipelined"] / split_served["pipelined"],
        ),
        *cpu_rows,
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_spark [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "2 * 10^5 rows per micro-batch instead of 10^6")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
