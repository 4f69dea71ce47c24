"""Multi-stage event-time pipelines: a chain of operators after the reordering step, with lag per stage.

``pipeline.stages`` in a scenario is a list of stages; the reordering operator's output
(each event as ``(writer, 1)`` at its event time) and its watermarks enter the first,
each stage's output enters the next. Two kinds, both ``flink_compat`` operators that
forward watermarks as Flink's do:

- ``window``: keyed tumbling event-time windows of ``window_ms`` (``WindowOperator``)
  combining values with ``function`` (``sum`` or ``max``); a result leaves when the
  watermark reaches the window's end - 1, as ``(key, value)`` with that timestamp.
- ``aggregate``: a keyed running ``sum``/``max`` (Flink's ``KeyedStream.reduce``): each
  record updates its key's total and leaves at once, with its own timestamp, as
  ``(key, total)``.

``key: all`` puts every record under one key (Flink's ``windowAll`` / a constant key);
``key: key`` keeps the record's key (the writer, at the first stage).

Each stage's input is delayed by ``delay_ms`` of simulated time (network and processing
between operators: records and watermarks alike, in order — a FIFO). The chain is
pumped whenever the reordering step emits and before every sample, so at each sample
every stage has processed exactly what reached it by then.

Lag per stage (sampled every ``metrics.sample_ms``; ``now`` is the simulated ingestion
clock, ``W_k(now)`` the last watermark stage ``k`` emitted, ``F_k(now)`` the largest
timestamp of a record it emitted; stage 0 is the reordering step):

- watermark lag ``L_k = now - W_k(now)``. Since ``W_k(now) = W_{k-1}(now - delay_k)`` and
  watermarks never decrease, ``L_k >= L_{k-1}``, with equality when ``delay_k = 0``.
- output lag ``O_k = now - F_k(now)``: how old the newest result is, in event time. A
  window stage's results are timestamped at their window's end - 1, so ``O_k`` grows
  with each stage's window size even when the watermark lags do not.
- result latency (window stages): ``emitted - window end`` for each result.
"""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from flink_compat import (
    DiscardingOutput,
    StreamRecord,
    TumblingEventTimeWindows,
    Watermark,
    WindowOperator,
    WindowResult,
)
from flink_compat.operators import StreamOperator
from segmentstore.checks import checked
from segmentstore.limits import INT64_MIN

from ..spec.errors import OutputError
from ..spec.scenario import StageSpec
from .recorder import stats
from .sentinels import real_time

__all__ = ["StageChain", "STAGE_COLUMNS", "StageRow", "write_stages_csv"]

STAGE_COLUMNS = ("t_ms", "stage", "watermark", "wm_lag_ms", "output_frontier", "output_lag_ms", "records_out")
"""Columns of ``stages.csv``: one row per sample and stage (stage 0: the reordering step)."""

StageRow = tuple[int, int, int | None, int | None, int | None, int | None, int]
"""One ``stages.csv`` row (``STAGE_COLUMNS``)."""

_ALL = "all"


def write_stages_csv(out_dir: Path, rows: Sequence[StageRow]) -> Path:
    """Write ``stages.csv`` (``STAGE_COLUMNS``, empty cells for none); raises ``OutputError``."""
    path = out_dir / "stages.csv"
    try:
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(STAGE_COLUMNS)
            w.writerows(["" if v is None else v for v in r] for r in rows)
    except OSError as e:
        raise OutputError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
    return path


class _Function:
    """``sum`` or ``max`` of values, as a window aggregate (accumulator ``None`` until a value)."""

    __slots__ = ("fn",)

    def __init__(self, name: str) -> None:
        self.fn: Callable[[float, float], float] = (lambda a, b: a + b) if name == "sum" else max

    def create_accumulator(self) -> float | None:
        return None

    def add(self, value: Any, acc: float | None) -> float:
        v = value[1]
        return v if acc is None else self.fn(acc, v)

    def get_result(self, acc: float | None) -> float:
        return 0 if acc is None else acc


class _Running(StreamOperator):
    """Keyed running ``sum``/``max``: emits ``(key, total)`` for each record, at the record's timestamp."""

    def __init__(self, function: str, key: Callable[[Any], Hashable]) -> None:
        super().__init__()
        self._fn = _Function(function).fn
        self._key = key
        self.totals: dict[Hashable, float] = {}

    def process_element(self, record: StreamRecord[Any]) -> None:
        k = self._key(record.value)
        old = self.totals.get(k)
        total = record.value[1] if old is None else self._fn(old, record.value[1])
        self.totals[k] = total
        self.output.collect(record.replace((k, total)))

    @checked
    def _check(self) -> None:
        super()._check()
        assert all(isinstance(v, (int, float)) for v in self.totals.values())


class _Stage(DiscardingOutput):
    """One stage: its input queue (due time, element), its operator, and what it emitted."""

    __slots__ = (
        "chain",
        "frontier",
        "index",
        "latencies",
        "op",
        "queue",
        "records_in",
        "records_out",
        "spec",
        "watermark",
    )

    def __init__(self, spec: StageSpec, chain: StageChain, index: int) -> None:
        self.spec = spec
        self.chain = chain
        self.index = index
        self.queue: deque[tuple[int, StreamRecord[Any] | Watermark]] = deque()
        key: Callable[[Any], Hashable] = (lambda v: _ALL) if spec.key == _ALL else (lambda v: v[0])
        if spec.kind == "window":
            assert spec.window_ms is not None
            self.op: StreamOperator = WindowOperator(
                TumblingEventTimeWindows.of(spec.window_ms), _Function(spec.function), key_selector=key
            )
        else:
            self.op = _Running(spec.function, key)
        self.op.setup(self)
        self.watermark = INT64_MIN
        self.frontier = INT64_MIN
        self.records_in = self.records_out = 0
        self.latencies: list[int] = []

    # the operator's output: on to the next stage
    def collect(self, record: StreamRecord[Any]) -> None:
        v = record.value
        if isinstance(v, WindowResult):
            self.latencies.append(self.chain.time - v.window.end)
            v = (v.key, v.value)
        assert record.timestamp is not None
        self.records_out += 1
        self.frontier = max(self.frontier, record.timestamp)
        self.chain.forward(self.index + 1, StreamRecord(v, record.timestamp))

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermark = watermark.timestamp
        self.chain.forward(self.index + 1, watermark)

    def process(self, element: StreamRecord[Any] | Watermark) -> None:
        if isinstance(element, Watermark):
            self.op.process_watermark(element)
        else:
            self.records_in += 1
            self.op.process_element(element)

    @property
    def late_dropped(self) -> int:
        return self.op.num_late_records_dropped if isinstance(self.op, WindowOperator) else 0


class StageChain:
    """The stages of ``pipeline.stages``, fed by the reordering step; O(log w) per record per window stage."""

    def __init__(self, specs: tuple[StageSpec, ...]) -> None:
        self.stages = [_Stage(s, self, i) for i, s in enumerate(specs)]
        self.time = INT64_MIN  # the simulated time of what is being processed (its due time)
        self.input_watermark = INT64_MIN  # stage 0's: the reordering step's watermark
        self.input_frontier = INT64_MIN
        self.input_records = 0
        self.rows: list[StageRow] = []

    # ------------------------------------------------------------------ inputs (from the reordering step)
    def input_record(self, key: int, ts: int, now: int) -> None:
        """An event the reordering step released (in event-time order), now."""
        self.input_records += 1
        self.input_frontier = max(self.input_frontier, ts)
        self.time = now
        self.forward(0, StreamRecord((key, 1), ts))
        self.pump(now)

    def input_watermark_at(self, watermark: int, now: int) -> None:
        """The reordering step's watermark, now."""
        self.input_watermark = watermark
        self.time = now
        self.forward(0, Watermark(watermark))
        self.pump(now)

    def forward(self, index: int, element: StreamRecord[Any] | Watermark) -> None:
        """Queue ``element`` for stage ``index`` (nothing after the last), due after its delay."""
        if index < len(self.stages):
            st = self.stages[index]
            st.queue.append((self.time + st.spec.delay_ms, element))

    def pump(self, now: int) -> None:
        """Process, stage by stage, every queued element due at or before ``now``, at its due time."""
        for st in self.stages:
            q = st.queue
            while q and q[0][0] <= now:
                due, element = q.popleft()
                self.time = due
                st.process(element)

    # ------------------------------------------------------------------ measurements
    def sample(self, t_ms: int, now: int) -> None:
        """Pump to ``now``, then one row per stage (0: the reordering step) into ``rows``."""
        self.pump(now)
        levels = [(self.input_watermark, self.input_frontier, self.input_records)]
        levels += [(s.watermark, s.frontier, s.records_out) for s in self.stages]
        for k, (wm, fr, n) in enumerate(levels):
            w, f = real_time(wm), real_time(fr)  # none yet and +inf: no time, no lag (``sentinels``)
            self.rows.append(
                (t_ms, k, w, None if w is None else now - w, f, None if f is None else now - f, n)
            )

    def names(self) -> list[str]:
        """Stage names, ``reorder`` first (stage 0)."""
        return ["reorder", *(s.spec.name for s in self.stages)]

    def summary(self) -> list[dict[str, Any]]:
        """Per stage (0: the reordering step): its settings, records, and lag statistics over the samples."""
        out: list[dict[str, Any]] = []
        for k, name in enumerate(self.names()):
            rows = [r for r in self.rows if r[1] == k]
            item: dict[str, Any] = {"stage": k, "name": name}
            if k:
                st = self.stages[k - 1]
                sp = st.spec
                item.update(
                    kind=sp.kind,
                    window_ms=sp.window_ms,
                    key=sp.key,
                    function=sp.function,
                    delay_ms=sp.delay_ms,
                    records_in=st.records_in,
                    records_out=st.records_out,
                    late_dropped=st.late_dropped,
                    queued=len(st.queue),
                )
                if sp.kind == "window":
                    item["result_latency_ms"] = stats(st.latencies)
            else:
                item.update(kind="reorder", records_out=self.input_records)
            item["wm_lag_ms"] = stats(r[3] for r in rows if r[3] is not None)
            item["output_lag_ms"] = stats(r[5] for r in rows if r[5] is not None)
            out.append(item)
        return out

    @checked
    def _check(self) -> None:
        prev = self.input_watermark
        for st in self.stages:
            st.op._check()
            assert st.watermark <= prev, f"stage {st.spec.name} is ahead of its input's watermark"
            prev = st.watermark
            dues = [d for d, _ in st.queue]
            assert dues == sorted(dues), f"stage {st.spec.name}'s queue is out of time order"
