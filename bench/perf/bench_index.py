"""Benchmark of the watermark index against plain baselines, measured side by side.

Run ``python -m bench.perf.bench_index [--quick | --tiny]``. Every figure is the best of a few
repeats, each baseline timed in the same loop as the index so that machine load hits
both alike. ``ratio`` is how many times faster the index is than ``ratio_vs``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from segmentstore.core.watermark_index import WatermarkIndex

from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main"]

_BISECT_QUERIES = 200_000  # the per-query bisect baseline runs on this many queries at most


def _best(fns: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Best wall time of each function over ``repeats`` rounds, run interleaved."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def _build(n: int, seed: int) -> tuple[WatermarkIndex, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """An index of ``n`` writes (sizes 1..200 bytes, distinct timestamps), and its ends/times."""
    rng = np.random.default_rng(seed)
    ends = np.cumsum(rng.integers(1, 201, n)).astype(np.int64)
    tss = 1_000_000 + np.cumsum(rng.integers(1, 4, n)).astype(np.int64)
    idx = WatermarkIndex(1_000_000)
    idx.record_writes(ends, tss)
    return idx, ends, tss


def _startup() -> list[Row]:
    """Import cost without numba, and kernel start-up (numba import + cache load) in a fresh process."""
    code = (
        "import sys, time\n"
        "t0 = time.perf_counter()\n"
        "from segmentstore.core.watermark_index import WatermarkIndex\n"
        "t1 = time.perf_counter()\n"
        "assert 'numba' not in sys.modules, 'numba imported eagerly'\n"
        "import numpy as np\n"
        "w = WatermarkIndex(0); w.record_write(10, 5)\n"
        "t2 = time.perf_counter()\n"
        "w.watermarks_at(np.arange(11))\n"
        "t3 = time.perf_counter()\n"
        "print(t1 - t0, t3 - t2)\n"
    )
    best = [float("inf"), float("inf")]
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        vals = [float(x) for x in res.stdout.split()]
        best = [min(b, v) for b, v in zip(best, vals, strict=True)]
    return [
        row("import segmentstore.core.watermark_index (no numba)", best[0], "s"),
        row("first batch call: numba import + cached kernels", best[1], "s"),
    ]


def _reference(ends: npt.NDArray[np.int64], tss: npt.NDArray[np.int64], q: npt.NDArray[np.int64]) -> Any:
    """``watermark_at`` as defined (docs/design.md §1): time of the write holding each byte, or the tail."""
    times = np.append(tss, tss[-1])
    return times[np.searchsorted(ends, q, side="right")] - 1


def _check(idx: WatermarkIndex, ends: npt.NDArray[np.int64], tss: npt.NDArray[np.int64]) -> None:
    """The index answers like ``_reference`` at 1000 offsets, the first, the last and the tail."""
    length = int(ends[-1])
    q = np.concatenate([np.random.default_rng(5).integers(0, length, 1000), [0, length - 1, length]])
    got, want = idx.watermarks_at(q), _reference(ends, tss, q)
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise BenchmarkError(f"watermarks_at({int(q[bad])}) = {int(got[bad])}, expected {int(want[bad])}")
    if idx.watermark_at(int(q[0])) != int(want[0]):
        raise BenchmarkError(f"watermark_at({int(q[0])}) differs from watermarks_at")


def _append_contenders(n: int) -> dict[str, Callable[[], object]]:
    """record_write / record_time in a Python loop, SortedDict insertions, record_writes in bulk; checked."""
    from sortedcontainers import SortedDict

    rng = np.random.default_rng(1)
    ends = np.cumsum(rng.integers(1, 201, n)).tolist()
    tss = (1_000 + np.arange(n)).tolist()
    pairs = list(zip(ends, tss, strict=True))
    e_arr = np.asarray(ends, np.int64)
    t_arr = np.asarray(tss, np.int64)

    def ours() -> WatermarkIndex:
        w = WatermarkIndex(0)
        rw = w.record_write
        for e, t in pairs:
            rw(e, t)
        return w

    def same_ts() -> WatermarkIndex:
        w = WatermarkIndex(0)
        rw = w.record_write
        for e, _ in pairs:
            rw(e, 7)
        return w

    def sdict() -> SortedDict:
        d = SortedDict()
        for e, t in pairs:
            d[e - 1] = t - 1
        return d

    def tail() -> WatermarkIndex:
        w = WatermarkIndex(0)
        rt = w.record_time
        for t in tss:
            rt(t)
        return w

    def bulk() -> WatermarkIndex:
        w = WatermarkIndex(0)
        w.record_writes(e_arr, t_arr)
        return w

    _check(ours(), e_arr, t_arr)
    _check(bulk(), e_arr, t_arr)
    if len(same_ts()) != 2 or tail().tail_time != tss[-1]:
        raise BenchmarkError("same-timestamp writes did not share one entry, or the tail did not rise")
    return {"record_write": ours, "same_ts": same_ts, "sorteddict": sdict, "record_time": tail, "bulk": bulk}


def _appends(n: int, repeats: int) -> list[Row]:
    """record_write / record_time in a Python loop vs SortedDict insertions."""
    c = _append_contenders(n)
    names = ["record_write", "same_ts", "sorteddict", "record_time"]
    t_ours, t_same, t_sd, t_tail = _best([c[k] for k in names], repeats)
    (t_bulk,) = _best([c["bulk"]], repeats)
    return [
        row("record_write (distinct ts)", t_ours / n * 1e9, "ns/op"),
        row("record_write appends/s", n / t_ours, "ops/s", "SortedDict insert", t_sd / t_ours),
        row("record_write (same ts, entry extended)", t_same / n * 1e9, "ns/op"),
        row("record_time (tail raise)", t_tail / n * 1e9, "ns/op"),
        row("record_writes bulk", n / t_bulk, "writes/s", "record_write loop", t_ours / t_bulk),
    ]


def _single_contenders(n: int, nq: int) -> dict[str, Callable[[], object]]:
    """``nq`` single ``watermark_at`` calls on an index of ``n`` writes, the same ``bisect_left`` calls
    on a list, and ``nq`` tail lookups; checked against the definition first."""
    idx, ends, tss = _build(n, seed=n)
    _check(idx, ends, tss)
    offs_list = (ends - 1).tolist()
    rng = np.random.default_rng(2)
    qs = rng.integers(0, int(ends[-1]), nq).tolist()
    tq = [idx.length] * nq
    wa = idx.watermark_at
    wa(qs[0])  # load the kernels outside the timing

    def ours() -> None:
        for q in qs:
            wa(q)

    def bis() -> None:
        for q in qs:
            bisect_left(offs_list, q)

    def tail() -> None:
        for q in tq:
            wa(q)

    return {"watermark_at": ours, "bisect": bis, "tail": tail}


def _single(sizes: list[int], nq: int, repeats: int) -> list[Row]:
    """Single lookups from Python vs bisect_left on a Python list of the same offsets."""
    rows: list[Row] = []
    c: dict[str, Callable[[], object]] = {}
    for n in sizes:
        c = _single_contenders(n, nq)
        t_ours, t_bis = _best([c["watermark_at"], c["bisect"]], repeats)
        rows.append(
            row(
                f"watermark_at, {n:.0e} entries",
                t_ours / nq * 1e9,
                "ns/op",
                "bisect_left on a list",
                t_bis / t_ours,
            )
        )
    (t_tail,) = _best([c["tail"]], repeats)
    rows.append(row("watermark_at tail", t_tail / nq * 1e9, "ns/op"))
    return rows


def _batch_contenders(n: int, nq: int) -> dict[str, Callable[[], object]]:
    """Batch lookups (random and sorted, ``nq`` queries) on an index of ``n`` writes, and their baselines."""
    idx, ends, tss = _build(n, seed=3)
    _check(idx, ends, tss)
    offs = idx.entries()[0]
    rng = np.random.default_rng(4)
    q = rng.integers(0, int(ends[-1]) + 1, nq).astype(np.int64)
    qsorted = np.sort(q)
    out = np.empty(nq, np.int64)
    sub = q[:_BISECT_QUERIES].tolist()
    offs_list = offs.tolist()
    idx.watermarks_at(q[:100], assume_sorted=False)

    def bis() -> None:
        for x in sub:
            bisect_left(offs_list, x)

    def rnd() -> None:
        idx.watermarks_at(q, out=out, assume_sorted=False)

    def rnd_alloc() -> None:
        idx.watermarks_at(q)

    def np_rnd() -> None:
        np.searchsorted(offs, q)

    def srt() -> None:
        idx.watermarks_at(qsorted, out=out, assume_sorted=True)

    def srt_detect() -> None:
        idx.watermarks_at(qsorted)

    def np_srt() -> None:
        np.searchsorted(offs, qsorted)

    mid = q[:1000].copy()

    def rnd_mid() -> None:
        for _ in range(100):
            idx.watermarks_at(mid)

    def np_mid() -> None:
        for _ in range(100):
            np.searchsorted(offs, mid)

    return {
        "bisect": bis,
        "random": rnd,
        "random_alloc": rnd_alloc,
        "np_random": np_rnd,
        "sorted": srt,
        "sorted_detect": srt_detect,
        "np_sorted": np_srt,
        "mid": rnd_mid,
        "np_mid": np_mid,
    }


def _batch(n: int, nq: int, repeats: int) -> list[Row]:
    """Batch lookups (random and sorted) vs numpy.searchsorted and a per-query bisect loop."""
    import numba

    c = _batch_contenders(n, nq)
    t_mid, t_np_mid = _best([c["mid"], c["np_mid"]], repeats)
    names = ["bisect", "random", "random_alloc", "np_random", "sorted", "sorted_detect", "np_sorted"]
    t_bis, t_rnd, t_rnd_a, t_np, t_srt, t_srt_d, t_np_s = _best([c[k] for k in names], repeats)
    per_bis = t_bis / min(nq, _BISECT_QUERIES)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        t_rnd1, t_srt1 = _best([c["random"], c["sorted"]], repeats)
    finally:
        numba.set_num_threads(threads)
    ns = 1e9 / nq
    tag = f"{n:.0e} entries, {nq:.0e} queries"
    return [
        row(
            f"watermarks_at random, {tag}",
            t_rnd * ns,
            "ns/query",
            "per-query bisect loop",
            per_bis / (t_rnd / nq),
        ),
        row("  same", t_rnd * ns, "ns/query", "numpy.searchsorted", t_np / t_rnd),
        row(
            "  same, out allocated by the call",
            t_rnd_a * ns,
            "ns/query",
            "numpy.searchsorted",
            t_np / t_rnd_a,
        ),
        row(f"  same, 1 thread (of {threads})", t_rnd1 * ns, "ns/query", "numpy.searchsorted", t_np / t_rnd1),
        row(
            f"watermarks_at sorted, {tag}",
            t_srt * ns,
            "ns/query",
            "numpy.searchsorted (sorted)",
            t_np_s / t_srt,
        ),
        row(
            "  same, sortedness detected (assume_sorted=None), out allocated",
            t_srt_d * ns,
            "ns/query",
            "numpy.searchsorted (sorted)",
            t_np_s / t_srt_d,
        ),
        row(
            f"  same, 1 thread (of {threads})",
            t_srt1 * ns,
            "ns/query",
            "numpy.searchsorted (sorted)",
            t_np_s / t_srt1,
        ),
        row(
            "watermarks_at, 1000 random queries per call",
            t_mid / 100 * 1e6,
            "us/call",
            "numpy.searchsorted",
            t_np_mid / t_mid,
        ),
        row("per-query bisect loop (baseline)", per_bis * 1e9, "ns/query"),
        row("numpy.searchsorted random (baseline)", t_np * ns, "ns/query"),
        row("numpy.searchsorted sorted (baseline)", t_np_s * ns, "ns/query"),
    ]


def _sizes(size: Size) -> dict[str, Any]:
    return sized(
        size,
        tiny={
            "appends": 2_000,
            "single": [1_000, 10_000],
            "nq": 2_000,
            "batch": (10_000, 20_000),
            "rounds": 1,
        },
        quick={
            "appends": 200_000,
            "single": [1_000, 100_000],
            "nq": 100_000,
            "batch": (100_000, 1_000_000),
            "rounds": 3,
        },
        full={
            "appends": 1_000_000,
            "single": [1_000, 100_000, 1_000_000],
            "nq": 300_000,
            "batch": (1_000_000, 10_000_000),
            "rounds": 5,
        },
    )


def run(size: Size = "full") -> list[Row]:
    """Measure everything; rows of name/value/unit/ratio_vs/ratio."""
    p = _sizes(size)
    rows = _startup() if size != "tiny" else []
    n, nq = p["batch"]
    rows += _appends(p["appends"], min(p["rounds"], 3))
    rows += _single(p["single"], p["nq"], min(p["rounds"], 3))
    rows += _batch(n, nq, p["rounds"])
    return rows


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def test_record_write(benchmark: Any, bench_size: Size) -> None:
    benchmark(_append_contenders(_sizes(bench_size)["appends"])["record_write"])


def test_record_write_same_timestamp(benchmark: Any, bench_size: Size) -> None:
    benchmark(_append_contenders(_sizes(bench_size)["appends"])["same_ts"])


def test_record_time(benchmark: Any, bench_size: Size) -> None:
    benchmark(_append_contenders(_sizes(bench_size)["appends"])["record_time"])


def test_record_writes_bulk(benchmark: Any, bench_size: Size) -> None:
    benchmark(_append_contenders(_sizes(bench_size)["appends"])["bulk"])


def test_watermark_at_single(benchmark: Any, bench_size: Size) -> None:
    p = _sizes(bench_size)
    benchmark(_single_contenders(p["single"][-1], p["nq"])["watermark_at"])


def test_watermark_at_tail(benchmark: Any, bench_size: Size) -> None:
    p = _sizes(bench_size)
    benchmark(_single_contenders(p["single"][0], p["nq"])["tail"])


def test_watermarks_at_random(benchmark: Any, bench_size: Size) -> None:
    benchmark(_batch_contenders(*_sizes(bench_size)["batch"])["random"])


def test_watermarks_at_sorted(benchmark: Any, bench_size: Size) -> None:
    benchmark(_batch_contenders(*_sizes(bench_size)["batch"])["sorted"])


def test_watermarks_at_1000_queries_per_call(benchmark: Any, bench_size: Size) -> None:
    benchmark(_batch_contenders(*_sizes(bench_size)["batch"])["mid"])


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_index [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "smaller sizes (seconds, not a minute)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
