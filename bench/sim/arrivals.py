"""One writer instance's events — when they are produced, their keys, event times, sizes, and when
they reach the store — drawn from the scenario and the seed; shared by the simulator and the lab.

``EventSource`` walks a writer's production windows (``tick_ms``; ``schedule``: each
listed time) and returns each window's events as a ``Batch`` of numpy arrays:

- arrivals: ``constant`` / ``bursty`` / ``periodic_idle`` integrate the rate and keep
  the fractional remainder (deterministic, evenly spaced); ``poisson`` draws the count
  of each window from a Poisson law and the times uniformly; ``mmpp`` alternates
  exponential calm and burst periods (a two-state Markov-modulated Poisson process);
  ``trace`` replays a CSV or Parquet file; ``schedule`` lists the events;
- event time: the writer's clock — ``start_time_ms`` + production time, plus
  ``clock_drift_ppm`` of it (per instance, optionally drawn), plus
  ``event_time_skew_ms`` — minus a ``disorder`` delay (fixed, uniform, exponential,
  lognormal); a trace's own event times replace the clock;
- ``ready``: the hand-over (the window's end; a scheduled event's time) plus a
  ``write_latency`` draw.

Each random part draws from its own generator (``Seeds.rng("writers.<instance>.<part>")``),
so adding a writer does not change the others' draws. O(events) numpy work per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..spec.errors import ScenarioError
from ..spec.scenario import WriterSpec
from ..spec.seeds import Seeds
from .workloads import expected_events, generation_times

__all__ = ["Batch", "EventSource", "read_trace", "writer_keys"]


@dataclass(frozen=True, slots=True)
class Batch:
    """Events of one production window, in production order (arrays of equal length)."""

    gen: np.ndarray
    """Production time, ms since the run's start (int64)."""
    key_idx: np.ndarray
    """Index into the source's ``keys`` (int64)."""
    et: np.ndarray
    """Event time, ms since the epoch (int64)."""
    ready: np.ndarray
    """When the event reaches the store, ms since the run's start (int64)."""
    sizes: np.ndarray | None
    """Payload bytes per event (trace ``size`` column), else ``None`` (``payload_bytes``)."""

    def __len__(self) -> int:
        return len(self.gen)


def writer_keys(spec: WriterSpec, instance: str, trace_keys: list[str] | None = None) -> list[str]:
    """The instance's routing keys: ``keys``, the schedule's or trace's, or ``key_count`` generated ones."""
    if spec.keys:
        keys = list(spec.keys)
    elif spec.workload.kind == "schedule":
        keys = sorted({e.key for e in spec.workload.events})
    elif trace_keys is not None:
        keys = sorted(set(trace_keys))
    else:
        width = len(str(spec.key_count - 1))
        keys = [f"{instance}-{i:0{width}d}" for i in range(spec.key_count)]
    need = (
        {e.key for e in spec.workload.events}
        if spec.workload.kind == "schedule"
        else set(trace_keys)
        if trace_keys is not None
        else set()
    )
    missing = sorted(need - set(keys))
    if missing:
        raise ScenarioError(
            f"the workload uses keys {missing[:5]} that are not in keys", f"writers.{spec.name}.keys"
        )
    return keys


_TRACE_COLUMNS = ("time_ms", "key", "event_time_ms", "size")


def read_trace(path: str, where: str) -> tuple[np.ndarray, list[str], np.ndarray | None, np.ndarray | None]:
    """A trace file's (time_ms, keys, event_time_ms or None, size or None), sorted by time (stable).

    CSV (header row) or Parquet (``.parquet``); ``time_ms`` and ``key`` are required.
    Raises ``ScenarioError`` naming ``where`` (the field) and the file.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            table = pq.read_table(p)
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(p, convert_options=pcsv.ConvertOptions(column_types={"key": pa.string()}))
    except (OSError, pa.ArrowInvalid) as e:
        raise ScenarioError(f"cannot read trace {path!r}: {e}", where) from None
    cols = set(table.column_names)
    for need in ("time_ms", "key"):
        if need not in cols:
            raise ScenarioError(
                f"trace {path!r} has no column {need!r} (columns: {', '.join(table.column_names)}; "
                f"expected {', '.join(_TRACE_COLUMNS)})",
                where,
            )
    if table.num_rows == 0:
        raise ScenarioError(f"trace {path!r} has no rows", where)

    def ints(name: str) -> np.ndarray:
        col = table.column(name)
        if col.null_count:
            raise ScenarioError(f"trace {path!r}: column {name!r} has empty values", where)
        try:
            return np.asarray(pc.cast(col, pa.int64()).to_numpy(), np.int64)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ScenarioError(f"trace {path!r}: column {name!r} must hold integers", where) from None

    t = ints("time_ms")
    if (t < 0).any():
        raise ScenarioError(f"trace {path!r}: time_ms must be >= 0", where)
    order = np.argsort(t, kind="stable")
    keys = [str(k) for k in table.column("key").to_pylist()]
    et = ints("event_time_ms")[order] if "event_time_ms" in cols else None
    size = ints("size")[order] if "size" in cols else None
    if size is not None and (size < 8).any():
        raise ScenarioError(f"trace {path!r}: size must be >= 8 (writer and sequence ids)", where)
    return t[order], [keys[i] for i in order.tolist()], et, size


def _sort_window(times: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """``np.sort(times)`` of int64 times in ``[t0, t1)``, by counting if the window is short. O(n + span)."""
    n, span = len(times), t1 - t0
    if not n or span > 4 * n + 1_024:
        return np.sort(times)
    counts = np.bincount(times - t0, minlength=span)
    return np.repeat(np.arange(t0, t0 + len(counts), dtype=np.int64), counts)


class EventSource:
    """The events of one writer instance, window by window. Deterministic given the seed."""

    __slots__ = (
        "_burst",
        "_carry",
        "_cursor",
        "_drift_ppm",
        "_end",
        "_key_pos",
        "_rng_arrivals",
        "_rng_disorder",
        "_rng_latency",
        "_sched",
        "_sched_i",
        "_switch_at",
        "_trace",
        "keys",
        "name",
        "produced",
        "spec",
        "start_time_ms",
    )

    def __init__(
        self, spec: WriterSpec, instance: str, start_time_ms: int, end_ms: int, seeds: Seeds
    ) -> None:
        self.spec = spec
        self.name = instance
        self.start_time_ms = start_time_ms
        stop = spec.stop_ms if spec.stop_ms is not None else end_ms
        self._end = min(stop, end_ms)
        wl = spec.workload
        trace_keys: list[str] | None = None
        self._trace: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None] | None = None
        if wl.kind == "trace":
            t, tkeys, et, size = read_trace(wl.trace, f"writers.{spec.name}.workload.trace")
            trace_keys = tkeys
            self.keys = writer_keys(spec, instance, tkeys)
            pos = {k: i for i, k in enumerate(self.keys)}
            self._trace = (t, np.array([pos[k] for k in tkeys], np.int64), et, size)
        else:
            self.keys = writer_keys(spec, instance, trace_keys)
        self._key_pos = {k: i for i, k in enumerate(self.keys)}
        self._sched: list[tuple[int, list[int], list[int]]] = []
        if wl.kind == "schedule":
            by_time: dict[int, tuple[list[int], list[int]]] = {}
            for e in sorted(wl.events, key=lambda e: e.at_ms):
                ks, offs = by_time.setdefault(e.at_ms, ([], []))
                ks.append(self._key_pos[e.key])
                offs.append(e.event_time_offset_ms)
            self._sched = [(at, ks, offs) for at, (ks, offs) in sorted(by_time.items())]
        self._sched_i = 0
        self._rng_arrivals = seeds.rng(f"writers.{instance}.arrivals")
        self._rng_disorder = seeds.rng(f"writers.{instance}.disorder")
        self._rng_latency = seeds.rng(f"writers.{instance}.write_latency")
        drift = spec.clock_drift_ppm
        if spec.clock_drift_sd_ppm > 0:
            drift += float(seeds.rng(f"writers.{instance}.clock_drift").normal(0.0, spec.clock_drift_sd_ppm))
        self._drift_ppm = drift
        self._carry = 0.0
        self._cursor = spec.start_ms
        self.produced = 0
        self._burst = False
        self._switch_at = spec.start_ms + self._sojourn(False) if wl.kind == "mmpp" else 0.0

    # ------------------------------------------------------------------ windows
    @property
    def drift_ppm(self) -> float:
        return self._drift_ppm

    def exhausted(self) -> bool:
        s = self.spec
        return s.max_events is not None and self.produced >= s.max_events

    def next_handover(self) -> int | None:
        """When the next window's events are handed over (ms since start), or ``None`` when done."""
        if self.exhausted():
            return None
        if self._sched:
            if self._sched_i >= len(self._sched):
                return None
            at = self._sched[self._sched_i][0]
            return None if at >= self._end else at
        if self._cursor >= self._end:
            return None
        return min(self._cursor + self.spec.tick_ms, self._end)

    def produce_next(self) -> Batch:
        """The events of the next window (``next_handover()`` must not be ``None``)."""
        s = self.spec
        if self._sched:
            at, ks, offs = self._sched[self._sched_i]
            self._sched_i += 1
            if at < s.start_ms:
                return self._empty()
            n = self._cap(len(ks))
            gen = np.full(n, at, np.int64)
            key_idx = np.array(ks[:n], np.int64)
            et = self._clock(gen) + np.array(offs[:n], np.int64)
            return self._finish(gen, key_idx, et, at, None)
        t0 = self._cursor
        t1 = min(t0 + s.tick_ms, self._end)
        self._cursor = t1
        if self._trace is not None:
            tt, tk, tet, tsize = self._trace
            a, b = np.searchsorted(tt, [t0, t1], side="left")
            b = a + self._cap(int(b - a))
            gen = tt[a:b]
            et = tet[a:b] if tet is not None else self._clock(gen)
            return self._finish(gen, tk[a:b], et, t1, None if tsize is None else tsize[a:b])
        gen = self._arrivals(t0, t1)
        n = len(gen)
        key_idx = (self.produced + np.arange(n, dtype=np.int64)) % len(self.keys)
        return self._finish(gen, key_idx, self._clock(gen), t1, None)

    def produce_until(self, t: int) -> list[Batch]:
        """Every window handed over at or before ``t``, in order."""
        out = []
        while (h := self.next_handover()) is not None and h <= t:
            b = self.produce_next()
            if len(b):
                out.append(b)
        return out

    # ------------------------------------------------------------------ parts
    def _cap(self, n: int) -> int:
        m = self.spec.max_events
        return n if m is None else max(0, min(n, m - self.produced))

    def _empty(self) -> Batch:
        e = np.empty(0, np.int64)
        return Batch(e, e, e, e, None)

    def _clock(self, gen: np.ndarray) -> np.ndarray:
        """The writer's clock at production times ``gen`` (epoch ms): start + gen + drift + skew."""
        et = gen + (self.start_time_ms + self.spec.event_time_skew_ms)
        if self._drift_ppm:
            et = et + np.floor(gen * (self._drift_ppm * 1e-6)).astype(np.int64)
        return et.astype(np.int64, copy=False)

    def _finish(
        self, gen: np.ndarray, key_idx: np.ndarray, et: np.ndarray, handover: int, sizes: np.ndarray | None
    ) -> Batch:
        n = len(gen)
        self.produced += n
        s = self.spec
        if s.disorder.active and n:
            et = et - s.disorder.draw(self._rng_disorder, n)
        if s.write_latency.active and n:
            ready = s.write_latency.draw(self._rng_latency, n)  # a new array: shifted in place
            ready += handover
        else:
            ready = np.full(n, handover, np.int64)
        return Batch(gen.astype(np.int64, copy=False), key_idx, et, ready, sizes)

    def _arrivals(self, t0: int, t1: int) -> np.ndarray:
        """Production times of a rate workload in ``[t0, t1)`` (sorted int64)."""
        wl, s = self.spec.workload, self.spec
        rel0, rel1 = t0 - s.start_ms, t1 - s.start_ms
        if wl.kind == "poisson":
            lam = expected_events(wl, rel0, rel1)
            n = self._cap(int(self._rng_arrivals.poisson(lam)))
            return _sort_window(self._uniform(t0, t1, n), t0, t1)
        if wl.kind == "mmpp":
            parts = []
            t = float(t0)
            while t < t1:
                end = min(float(t1), self._switch_at)
                rate = wl.burst_rate_per_s if self._burst else wl.rate_per_s
                k = int(self._rng_arrivals.poisson(rate * (end - t) / 1000.0))
                if k:
                    parts.append(self._uniform(t, end, k))
                if end >= self._switch_at:
                    self._burst = not self._burst
                    self._switch_at = end + self._sojourn(self._burst)
                t = end
            gen = np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)
            return gen[: self._cap(len(gen))]
        x = self._carry + expected_events(wl, rel0, rel1)
        n = int(x)
        self._carry = x - n
        return generation_times(t0, t1, self._cap(n))

    def _uniform(self, t0: float, t1: float, n: int) -> np.ndarray:
        x = self._rng_arrivals.uniform(t0, t1, size=n)
        np.floor(x, out=x)  # in place: no temporaries (each a fresh allocation of n floats)
        np.minimum(x, math.ceil(t1) - 1, out=x)
        return x.astype(np.int64)

    def _sojourn(self, burst: bool) -> float:
        wl = self.spec.workload
        mean = wl.burst_ms if burst else max(1, wl.burst_every_ms - wl.burst_ms)
        return max(1.0, float(self._rng_arrivals.exponential(mean)))

    def _check(self) -> None:
        assert self.produced >= 0
        assert self.spec.max_events is None or self.produced <= self.spec.max_events
