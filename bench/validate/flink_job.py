"""``ingestwm validate``'s PyFlink job, in a subprocess: ``python -m bench.validate.flink_job SPEC OUT``.

It only imports PyFlink (and the standard library), so a missing PyFlink or Java, or a
crashed JVM, ends this process and not the caller. SPEC (JSON, written by
``flink_engine``) holds the splits' events, each with the index of the lab's periodic
emit that first saw it, and the timing; OUT receives one JSON document: every event's
arrival at the late filter (watermark then, late or not, pacing slip), every window
fired, and Flink's version.

The job: one ``from_collection`` per split, paced by a flat-map that sleeps until each
element's release time (``t0 + release * pace_ms``; ``t0`` is agreed through a file so
all splits share it), then ``assign_timestamps_and_watermarks(for_bounded_out_of_orderness
(bound).with_idleness(idle))``; the splits are unioned (Flink's valve takes the minimum
over active, aligned inputs); a process function sends events at or below the current
watermark to a side output (the lab's late events) and the rest to event-time tumbling
windows that count. A start marker per split (released one pace before the first
emit, with a timestamp far in the past) is the split's first activity; an end marker
finishes the split's source (its watermark becomes +inf, as a finished split leaves).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

__all__ = ["main", "EVENT", "START", "END"]

EVENT, START, END = 0, 1, 2
_PAST = -(2**62)


def _t0(path: str, margin_s: float) -> float:
    """The shared start time: the first split to get here writes it, the others read it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        for _ in range(2000):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return float(text)
            time.sleep(0.005)
        raise RuntimeError(f"no start time in {path}") from None
    t0 = time.time() + margin_s
    os.write(fd, f"{t0!r}\n".encode())
    os.close(fd)
    return t0


def main(spec_path: str, out_path: str) -> None:
    from pyflink.common import Configuration, Duration, Time, Types, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner
    from pyflink.datastream import (
        FlatMapFunction,
        KeyedProcessFunction,
        OutputTag,
        ProcessWindowFunction,
        StreamExecutionEnvironment,
    )
    from pyflink.datastream.window import TumblingEventTimeWindows
    from pyflink.version import __version__ as flink_version

    with open(spec_path) as f:
        spec = json.load(f)
    pace = spec["pace_ms"] / 1000.0
    sync_file, margin = spec["sync_file"], spec["start_margin_s"]

    class Pace(FlatMapFunction):  # type: ignore[misc]
        def open(self, runtime_context: Any) -> None:
            self.t0 = _t0(sync_file, margin)

        def flat_map(self, value: Any) -> Any:
            kind, release, writer, seq, et = value
            target = self.t0 + release * pace
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            slip = int((time.time() - target) * 1000)
            if kind == EVENT:
                yield (EVENT, writer, seq, et, slip)
            elif kind == START:
                yield (START, 0, 0, _PAST, slip)

    class EventTime(TimestampAssigner):  # type: ignore[misc]
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return int(value[3])

    arrivals_tag = OutputTag("arrivals", Types.STRING())

    class LateFilter(KeyedProcessFunction):  # type: ignore[misc]
        def process_element(self, value: Any, ctx: Any) -> Any:
            if value[0] != EVENT:
                return
            wm = ctx.timer_service().current_watermark()
            late = value[3] <= wm
            yield arrivals_tag, json.dumps(["arr", value[1], value[2], value[3], wm, late, value[4]])
            if not late:
                yield value

    class Count(ProcessWindowFunction):  # type: ignore[misc]
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            n = sum(1 for _ in elements)
            yield json.dumps(["win", context.window().start, n, context.current_watermark()])

    conf = Configuration()
    conf.set_string("python.fn-execution.bundle.size", "1")
    conf.set_string("python.fn-execution.bundle.time", "1")
    conf.set_string("pipeline.auto-watermark-interval", f"{spec['interval_ms']} ms")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_python_executable(sys.executable)
    env.set_parallelism(1)
    row = Types.TUPLE([Types.INT(), Types.DOUBLE(), Types.LONG(), Types.LONG(), Types.LONG()])
    out_row = Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG()])
    strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(spec["bound_ms"]))
        .with_idleness(Duration.of_millis(spec["idle_ms"]))
        .with_timestamp_assigner(EventTime())
    )
    streams = []
    for split in spec["splits"]:
        elements = [(START, float(split["start"]), 0, 0, 0)]
        elements += [(EVENT, float(r), int(w), int(s), int(et)) for r, w, s, et in split["events"]]
        elements.append((END, float(split["end"]), 0, 0, 0))
        ds = env.from_collection(elements, type_info=row).flat_map(Pace(), output_type=out_row)
        streams.append(ds.assign_timestamps_and_watermarks(strategy))
    union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    judged = union.key_by(lambda v: 0, key_type=Types.INT()).process(LateFilter(), output_type=out_row)
    windows = (
        judged.key_by(lambda v: 0, key_type=Types.INT())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(spec["window_ms"])))
        .process(Count(), output_type=Types.STRING())
    )
    lines: list[Any] = []
    with windows.union(judged.get_side_output(arrivals_tag)).execute_and_collect() as results:
        for line in results:
            lines.append(json.loads(line))
    with open(out_path, "w") as f:
        json.dump({"version": flink_version, "records": lines}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
