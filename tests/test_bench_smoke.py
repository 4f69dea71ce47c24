"""Every benchmark module imports and runs at the ``tiny`` size, so that none can rot: its ``run``
called here (or by the test named in ``RUN_ELSEWHERE``), and its ``test_*`` functions through
``pytest bench/perf``, which for a module without them runs ``run("tiny")`` itself (then that is
its run here).

Benchmarks are not tests (docs/design.md §5): nothing here is timed or compared. The modules
are listed from the ``bench/perf`` folder, not imported to be found, so one that fails
to import is a failing test here, never a skip. ``SLOW`` modules (Spark) are marked
``slow`` and share the suite's Spark session.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import spark_fixture  # noqa: F401 (fixture)

from bench.perf.suite import check_rows, discover
from bench.perf.test_whole_runs import runs_whole

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "bench" / "perf"
MODULES = sorted(p.stem for p in PERF.glob("bench_*.py"))


def _slow(name: str) -> bool:
    try:
        mod = importlib.import_module(f"bench.perf.{name}")
    except Exception:  # the test imports it again, and fails with the error
        return False
    return bool(getattr(mod, "SLOW", False))


RUN_ELSEWHERE = {  # the module's tiny run is another test's, which runs it as users do
    "bench_spark": "tests/test_cli.py::test_bench_spark_prints_its_table_and_no_spark_noise",
}


def _whole_run_benchmarked(name: str) -> bool:
    """``pytest bench/perf`` runs the module's ``run("tiny")`` and checks its rows
    (``bench/perf/test_whole_runs.py``: a module with no ``test_*`` functions, not ``SLOW``), so
    ``test_pytest_benchmark_collects_and_runs_every_module`` runs it already."""
    try:
        mod = importlib.import_module(f"bench.perf.{name}")
    except Exception:  # the test imports it again, and fails with the error
        return False
    return runs_whole(mod) and not getattr(mod, "SLOW", False)


def _params() -> list[Any]:
    return [
        pytest.param(n, id=n, marks=[pytest.mark.slow] if _slow(n) else [])
        for n in MODULES
        if n not in RUN_ELSEWHERE and not _whole_run_benchmarked(n)
    ]


def test_every_area_has_its_module_and_none_lies_outside_bench_perf() -> None:
    assert discover() == MODULES
    areas = ("index", "store", "durable", "server", "reader", "waiting", "sim", "spark", "spark_io")
    assert {f"bench_{a}" for a in areas} <= set(MODULES)
    stray = [
        p.relative_to(ROOT)
        for top in ROOT.iterdir()
        if top.is_dir() and not top.name.startswith(".") and top.name not in ("runs", "build")
        for p in top.rglob("bench_*.py")
        if PERF not in p.parents
    ]
    assert stray == [], f"benchmark modules belong in bench/perf (found by name there only): {stray}"


@pytest.mark.parametrize("name", _params())
def test_module_runs_at_tiny_size(name: str, request: pytest.FixtureRequest) -> None:
    mod = importlib.import_module(f"bench.perf.{name}")
    params = list(inspect.signature(mod.run).parameters)
    assert params[:1] == ["size"], f"{name}.run must take the size ('tiny', 'quick' or 'full'), has {params}"
    if getattr(mod, "SLOW", False):
        request.getfixturevalue("spark")  # the module gets (not creates) the suite's Spark session
    rows = check_rows(name, mod.run("tiny"))
    assert all(isinstance(r["name"], str) and r["name"] and isinstance(r["unit"], str) for r in rows)


def test_pytest_benchmark_collects_and_runs_every_module(tmp_path: Path) -> None:
    """``pytest bench/perf`` (timing off, tiny size) runs every module's ``test_*`` functions or whole run."""
    report = tmp_path / "perf.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(PERF), "--benchmark-disable", "--bench-size=tiny",
         "-p", "no:cacheprovider", "-q", f"--junitxml={report}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran: dict[str, int] = {}
    for case in ET.parse(report).iter("testcase"):
        if case.find("skipped") is None:
            name = case.get("name", "")
            whole = name.startswith("test_run[")  # test_whole_runs.py: test_run[bench_x]
            module = name[len("test_run[") : -1] if whole else case.get("classname", "").rsplit(".", 1)[-1]
            ran[module] = ran.get(module, 0) + 1
    fast = [n for n in MODULES if not _slow(n)]
    assert all(ran.get(n, 0) >= 1 for n in fast), f"benchmark tests run per module: {ran}"
    whole = {n for n in MODULES if _whole_run_benchmarked(n)}  # their only tiny run in the suite
    assert whole and all(ran.get(n, 0) == 1 for n in whole), f"whole runs: {ran}"


def test_spark_bench_round_check_counts_each_timed_batch_and_refuses_wrong_or_repeated_rows(
    client: Any,
) -> None:
    """``check_batch_counts`` (run after every round of bench_spark): rows == events between the offsets.

    Over the store in this process and over ``RemoteClient`` (the served setup's (d)). A batch
    that delivered a row too many or too few, or one that read a segment again, fails the round.
    """
    import json

    from bench.perf.spark_data import check_batch_counts
    from readergroup.format.events import encode_event

    client.create_stream("b/s", 2)
    segs = sorted(s.name for s in client.get_stream("b/s").active_segments)
    frame = encode_event("k", b"p" * 10, 1)
    appended = [frame * 30, frame * 20]
    for seg, data in zip(segs, appended, strict=True):
        client.append(seg, data)

    def offset(a: int, b: int) -> str:
        return json.dumps(
            {"streams": {"b/s": {"positions": {segs[0]: a, segs[1]: b}}}, "v": 1, "watermark": 0}
        )

    f = len(frame)
    batches = [
        {"numInputRows": 15, "sources": [{"startOffset": offset(0, 0), "endOffset": offset(10 * f, 5 * f)}]},
        {
            "numInputRows": 35,
            "sources": [{"startOffset": offset(10 * f, 5 * f), "endOffset": offset(30 * f, 20 * f)}],
        },
    ]
    assert check_batch_counts(client, "b/s", batches) == 50
    short = [dict(batches[0]), {**batches[1], "numInputRows": 34}]
    with pytest.raises(AssertionError, match="delivered 34 rows; its offsets hold 35 events"):
        check_batch_counts(client, "b/s", short)
    again = [
        batches[0],
        {**batches[1], "sources": [{"startOffset": offset(0, 5 * f), "endOffset": offset(30 * f, 20 * f)}]},
    ]
    with pytest.raises(AssertionError, match=r"read .* from 0 again"):
        check_batch_counts(client, "b/s", again)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux's /proc")
def test_process_times_count_a_process_cpu_in_user_space_and_the_kernel_and_its_page_faults() -> None:
    """What the benchmarks' CPU rows read (``bench_spark``'s per kind of process): a process that computes
    and touches fresh memory moves its user seconds and its page faults; a process gone reads zeros."""
    import mmap
    import os

    from bench.perf.serving import ProcessTimes, process_cpu_s, process_times

    done = subprocess.run(
        [sys.executable, "-c", "import os, time; print(os.getpid()); time.sleep(0.2)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process_times(int(done.stdout)) == ProcessTimes(0.0, 0.0, 0)  # (gone: reaped)
    before = process_times(os.getpid())
    assert sum(i * i for i in range(3_000_000)) > 0  # CPU in user space (~0.2 s), no system call
    # fresh pages, faulted in on first touch: an anonymous mapping of its own (a bytearray may come
    # from memory malloc kept from an earlier test in this process, its pages touched already)
    with mmap.mmap(-1, 16 << 20) as touched:
        for page in range(0, len(touched), 4096):
            touched[page] = 1
        after = process_times(os.getpid())
    assert after.user_s - before.user_s >= 0.05
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    huge = thp.exists() and "[always]" in thp.read_text()  # (then 2 MiB pages: 8 faults)
    assert after.minor_faults - before.minor_faults >= (8 if huge else 1_000)  # 4,096 pages touched
    assert after.system_s >= before.system_s
    assert process_cpu_s(os.getpid()) >= after.user_s + after.system_s
