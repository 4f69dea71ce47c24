"""``ingestwm validate``'s PyFlink job, in a subprocess: ``python .../bench/validate/flink_job.py SPEC OUT``.

It only imports PyFlink (and the standard library), so a missing PyFlink or Java, or a
crashed JVM, ends this process and not the caller, and its Python needs nothing else.
SPEC (JSON, written by ``flink_engine``) holds one or more scenarios and, per split, the
steps of its paced replay; OUT receives one JSON
document: every bundle's arrival at the late filter (the watermark it met there, the
late flag of each of its events, when it arrived), every window fired (with the
watermark that fired it and when), how late each pacer woke and each bundle reached
the operator after the union (a key selector; separately for the releases in which a
source ends), every move of the combined watermark at the late filter (an event-time
timer one above it, re-armed at each move), and Flink's version.

The job, per split: ``from_source(NumberSequenceSource)`` → ``Pace``, a Python flat-map
in a task of its own (its mailbox thread takes one record at a time) that turns step
``i`` into the split's ``i``-th step: *wait* (sleep until its wall time, emit nothing),
*bundle* (at its wall time, one record with all the events the lab's periodic emit saw
first, its timestamp their maximum event time), *prime* and *mark* (records with a
timestamp far in the past: the first through the Python operators, at the start, and
the split's first activity) or *end* (sleep; the source's end waits behind it in the
task's input, and Flink sends ``+inf``) → ``assign_timestamps_and_watermarks(
for_bounded_out_of_orderness(bound).with_idleness(idle))``, in the same task. The
splits are unioned into a keyed process function, the late filter (an event at or
below the current watermark is late: a side output), whose on-time events go to
event-time tumbling windows that count (by each event's own event time).

Why steps and not a sleeping pacer per record: the periodic emit is a processing-time
timer of the pacer's task, run by its mailbox thread between two records. A sleep inside
the chain blocks it, so Flink emits exactly after a *wait* step and never inside a
*bundle* (one record: Flink cannot see half of it); the emit interval is set longer
than a bundle step and shorter than a wait, so it emits once per wait (docs/engines.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

__all__ = ["main", "WAIT", "BUNDLE", "MARK", "END", "EVENT", "PRIME", "IDLE_WAIT", "SEND", "TIMER"]

WAIT, BUNDLE, MARK, END, EVENT, PRIME = 0, 1, 2, 3, 4, 5
IDLE_WAIT = 6  # not a step: how late the waits before a split's mark woke (it emits nothing then)
# not a step: the latest a wait's periodic emit can have been sent, after the wait's wall time. Flink
# runs the emit (a timer due during the wait) in the task's mailbox after the wait's record and
# before the next record, so the next step's call into the pacer bounds the emit's send from above
SEND = 7
# not a step: the emit timer's margin (ms, <= 0 in the regime): due after the step before each wait
# (the call of the wait came first) and by the wait's end (the call after the wait before, plus
# the interval, came before the wait woke), so that exactly one emit follows each wait
TIMER = 8
_PAST = -(2**62)
_MAX = 2**63 - 1


def _t0(path: str, lead_s: float, ready: tuple[int, int] | None = None) -> float:
    """The shared wall time of tick 0, ``lead_s`` after every split's pacer is ready.

    ``ready`` (split index, splits): a pacer announces itself and, if it is the last,
    writes the start time; everyone else (the other pacers, the late filter, the
    windows) reads it from ``path``.
    """
    folder = os.path.dirname(path)
    if ready is not None:
        index, splits = ready
        with open(os.path.join(folder, f"ready-{index}"), "w") as f:
            f.write("1")
        if all(os.path.exists(os.path.join(folder, f"ready-{i}")) for i in range(splits)):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, f"{time.time() + lead_s!r}\n".encode())
                os.close(fd)
    for _ in range(60000):
        try:
            with open(path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            text = ""
        if text.endswith("\n") or (text and text[-1].isdigit()):
            try:
                return float(text)
            except ValueError:
                pass
        time.sleep(0.005)
    raise RuntimeError(f"no start time in {path} after 300 s: not every split's pacer started")


def main(spec_path: str, out_path: str) -> None:
    from pyflink.common import Configuration, Duration, Types, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner
    from pyflink.datastream import (
        FlatMapFunction,
        KeyedProcessFunction,
        KeySelector,
        OutputTag,
        ProcessWindowFunction,
        StreamExecutionEnvironment,
    )
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.window import EventTimeTrigger, TimeWindow, TimeWindowSerializer, WindowAssigner
    from pyflink.version import __version__ as flink_version

    with open(spec_path) as f:
        spec = json.load(f)
    pace = spec["pace_ms"] / 1000.0
    sync_dir = os.path.dirname(spec["sync_file"])
    scenarios = spec["scenarios"]
    globals_ = [(j, i) for j, sc in enumerate(scenarios) for i in range(len(sc["splits"]))]

    class Pace(FlatMapFunction):  # type: ignore[misc]
        """Step ``i`` of split ``index`` of scenario ``j``: sleep until its wall time, emit its record."""

        def __init__(self, j: int, index: int) -> None:
            self.j, self.index = j, index

        def open(self, runtime_context: Any) -> None:
            with open(spec_path) as f:
                split = json.load(f)["scenarios"][self.j]["splits"][self.index]
            self.steps, self.mark = split["steps"], int(split["first"]) - 1
            me = globals_.index((self.j, self.index))
            self.t0 = _t0(spec["sync_file"], spec["lead_s"], (me, len(globals_)))
            self.max_slip = {WAIT: 0.0, BUNDLE: 0.0, MARK: 0.0, END: 0.0, IDLE_WAIT: 0.0, SEND: 0.0}
            self.max_slip[TIMER] = -pace
            self.over: list[list[float]] = []  # (tick, ms) of the first steps that slipped a quarter pace
            self.sends: list[list[float]] = []  # per wait from the mark on: tick, woke and sent by (ms late)
            # the last wait: tick, wall time, woke (s late), called (ms after its wall time)
            self.pending: tuple[float, float, float, float] | None = None
            self.last_wait: tuple[float, float] | None = None  # the last wait's wake, the call after it
            self.after_wait = False
            self.interval = spec["interval_ms"] / 1000.0

        def flat_map(self, value: Any) -> Any:
            entered = time.time()
            if self.after_wait and self.last_wait is not None:  # the call after a wait: its emit was sent
                self.last_wait = (self.last_wait[0], entered)
            self.after_wait = False
            if self.pending is not None:  # the wait before this step: its emit was sent by now
                w_tick, w_target, w_woke, w_entered = self.pending
                self.pending = None
                self.max_slip[SEND] = max(self.max_slip[SEND], entered - w_target)
                self.sends.append(
                    [w_tick, round(w_woke * 1000, 3), round((entered - w_target) * 1000, 3), w_entered]
                )
            kind, tick, events = self.steps[int(value)]
            target = self.t0 + tick * pace
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            woke = time.time()
            slip = woke - target
            if kind == WAIT:
                if int(value) >= 3 and self.last_wait is not None:
                    prev_woke, prev_next = self.last_wait
                    margin = max(entered - (prev_woke + self.interval), prev_next + self.interval - woke)
                    self.max_slip[TIMER] = max(self.max_slip[TIMER], margin)
                self.last_wait = (woke, woke)
                self.after_wait = True
            if int(value) >= 3:  # the prime and the first two waits are warm-up
                # before its mark the split is idle (after the prime) and its emits send nothing:
                # those waits only need to keep the emit timer after them (a quarter pace)
                slot = IDLE_WAIT if kind == WAIT and tick < self.mark else kind
                self.max_slip[slot] = max(self.max_slip[slot], slip)
                if slot == WAIT:
                    self.pending = (tick, target, slip, round((entered - target) * 1000, 3))
                if slip * 4 > pace and len(self.over) < 20:
                    self.over.append([tick, round(slip * 1000, 1)])
            if kind == BUNDLE:
                top = max(e[2] for e in events)
                yield (BUNDLE, self.index, round(tick), top, json.dumps(events))
            elif kind == MARK:
                yield (MARK, self.index, round(tick), _PAST, "[]")
            elif kind == PRIME:  # below the mark's time, so the mark's watermark still activates
                yield (MARK, self.index, round(tick), _PAST - 1, "[]")

        def close(self) -> None:
            with open(os.path.join(sync_dir, f"slip-{self.j}-{self.index}.json"), "w") as f:
                doc = {str(k): round(v * 1000, 3) for k, v in self.max_slip.items()}
                json.dump(dict(doc, over=self.over, sends=self.sends), f)

    class RecordTime(TimestampAssigner):  # type: ignore[misc]
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return int(value[3])

    def bundle_row() -> Any:  # a fresh one each time: one that met the JVM no longer pickles
        return Types.TUPLE([Types.INT(), Types.INT(), Types.LONG(), Types.STRING()])

    class Arrival(KeySelector):  # type: ignore[misc]
        """The first operator after the union (it combines the sources): how late each bundle got there."""

        def __init__(self, j: int) -> None:
            self.j = j

        def open(self, runtime_context: Any) -> None:
            self.t0 = _t0(spec["sync_file"], spec["lead_s"])
            self.ends = set(scenarios[self.j]["end_releases"])
            self.late = {"arrival": 0.0, "end arrival": 0.0}

        def get_key(self, value: Any) -> int:
            if value[0] == BUNDLE:
                late = time.time() - (self.t0 + value[2] * pace)
                kind = "end arrival" if value[2] in self.ends else "arrival"
                self.late[kind] = max(self.late[kind], late)
            return 0

        def close(self) -> None:
            with open(os.path.join(sync_dir, f"arrival-{self.j}.json"), "w") as f:
                json.dump({k: round(v * 1000, 3) for k, v in self.late.items()}, f)

    class LateFilter(KeyedProcessFunction):  # type: ignore[misc]
        """Each event of a bundle at or below the current watermark is late (side output)."""

        def __init__(self, j: int, tag: Any) -> None:
            self.j, self.tag = j, tag

        def open(self, runtime_context: Any) -> None:
            self.t0 = _t0(spec["sync_file"], spec["lead_s"])
            self.armed = False

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            """Every move of the combined watermark (a timer one above it, re-armed at each move)."""
            wm = ctx.timer_service().current_watermark()
            if wm < _MAX:
                ctx.timer_service().register_event_time_timer(wm + 1)
            at = round((time.time() - self.t0) * 1000, 3)
            yield self.tag, json.dumps(["move", self.j, wm, at])

        def process_element(self, value: Any, ctx: Any) -> Any:
            wm = ctx.timer_service().current_watermark()
            if not self.armed:  # the first record (a prime): from here on, every move is logged
                self.armed = True
                ctx.timer_service().register_event_time_timer(wm + 1)
            if value[0] != BUNDLE:
                return
            at = round((time.time() - self.t0) * 1000, 3)
            judged, on_time = [], []
            for writer, seq, et, dup in json.loads(value[4]):
                if dup:
                    continue  # a redelivered event: the lab's de-duplication drops it before this
                late = et <= wm
                judged.append([writer, seq, et, late])
                if not late:
                    on_time.append(et)
            if on_time:  # one record: the window operator assigns it to each of its events' windows
                yield (value[1], value[2], value[3], json.dumps(on_time))
            yield self.tag, json.dumps(["arr", self.j, value[1], value[2], wm, at, judged])

    class ByEventTime(WindowAssigner):  # type: ignore[misc]
        """Tumbling windows of each event's own event time: a bundle goes to each of its events' windows."""

        def __init__(self, window_ms: int) -> None:
            self.window_ms = window_ms

        def assign_windows(self, element: Any, timestamp: int, context: Any) -> Any:
            w = self.window_ms
            starts = {et - et % w for et in json.loads(element[3])}
            return [TimeWindow(s, s + w) for s in sorted(starts)]

        def get_default_trigger(self, env: Any) -> Any:
            return EventTimeTrigger()

        def get_window_serializer(self) -> Any:
            return TimeWindowSerializer()

        def is_event_time(self) -> bool:
            return True

    class Count(ProcessWindowFunction):  # type: ignore[misc]
        """The window's events: those of its bundles whose event time falls in it."""

        def __init__(self, j: int) -> None:
            self.j = j

        def open(self, runtime_context: Any) -> None:
            self.t0 = _t0(spec["sync_file"], spec["lead_s"])

        def process(self, key: Any, context: Any, elements: Any) -> Any:
            w = context.window()
            n = sum(1 for b in elements for et in json.loads(b[3]) if w.start <= et < w.end)
            at = round((time.time() - self.t0) * 1000, 3)
            yield json.dumps(["win", self.j, w.start, n, context.current_watermark(), at])

    conf = Configuration()
    # a bundle of one record: each Python operator finishes its bundle after every record (and
    # before every watermark) at once, so the bundle timer has nothing to flush; Flink's default
    # (1 s) instead of 1 ms, at which each operator's timer thread woke 1,000 times a second: the
    # test's paced job at 400 ms per emit took the machine 36 CPU s instead of 64-73 (its JVM 19
    # instead of 38-41), its largest slips 35-48 ms instead of 35-64; the same verdicts
    conf.set_string("python.fn-execution.bundle.size", "1")
    conf.set_string("python.fn-execution.bundle.time", "1000")
    conf.set_string("pipeline.auto-watermark-interval", f"{spec['interval_ms']} ms")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_python_executable(sys.executable)
    env.set_parallelism(1)
    env.set_buffer_timeout(0)  # every record and watermark leaves its task at once
    step_row = Types.TUPLE([Types.INT(), Types.INT(), Types.INT(), Types.LONG(), Types.STRING()])
    outputs = []
    for j, sc in enumerate(scenarios):
        strategy = (
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(sc["bound_ms"]))
            .with_idleness(Duration.of_millis(sc["idle_ms"]))
            .with_timestamp_assigner(RecordTime())
        )
        streams = []
        for i, split in enumerate(sc["splits"]):
            steps = NumberSequenceSource(0, len(split["steps"]) - 1)
            ds = env.from_source(steps, WatermarkStrategy.no_watermarks(), f"s{j}-split-{i}")
            # the pacer in a task of its own (not chained to the source): the source's end (and
            # its +inf) then waits in the pacer's input behind the last step, instead of following
            # it after the source asked the job's coordinator for another split (a round trip)
            paced = ds.flat_map(Pace(j, i), output_type=step_row).name(f"s{j}-pace-{i}").start_new_chain()
            streams.append(paced.assign_timestamps_and_watermarks(strategy))
        union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
        arrivals_tag = OutputTag(f"arrivals-{j}", Types.STRING())
        window_late_tag = OutputTag(f"window-late-{j}", bundle_row())
        on_time = union.key_by(Arrival(j), key_type=Types.INT()).process(
            LateFilter(j, arrivals_tag), output_type=bundle_row()
        )
        windows = (
            on_time.key_by(lambda v: 0, key_type=Types.INT())
            .window(ByEventTime(int(sc["window_ms"])))
            .side_output_late_data(window_late_tag)
            .process(Count(j), output_type=Types.STRING())
        )
        window_late = windows.get_side_output(window_late_tag).map(
            lambda v, j=j: json.dumps(["wlate", j, v[0], v[1], len(json.loads(v[3]))]),
            output_type=Types.STRING(),
        )
        outputs += [windows, on_time.get_side_output(arrivals_tag), window_late]
    lines: list[Any] = []
    with outputs[0].union(*outputs[1:]).execute_and_collect() as results:
        for line in results:
            lines.append(json.loads(line))
    slips: list[dict[str, float]] = [{} for _ in scenarios]
    over: list[list[Any]] = [[] for _ in scenarios]
    sends: list[dict[int, Any]] = [{} for _ in scenarios]  # per scenario, per split: its waits' sends
    for j in range(len(scenarios)):
        try:
            with open(os.path.join(sync_dir, f"arrival-{j}.json")) as f:
                slips[j].update((k, float(v)) for k, v in json.load(f).items())
        except FileNotFoundError:
            slips[j]["missing"] = 1.0
    for j, i in globals_:
        try:
            with open(os.path.join(sync_dir, f"slip-{j}-{i}.json")) as f:
                for k, v in json.load(f).items():
                    if k == "over":
                        over[j].extend(v)
                    elif k == "sends":
                        sends[j][i] = v
                    else:
                        slips[j][k] = max(slips[j].get(k, 0.0), float(v))
        except FileNotFoundError:
            slips[j]["missing"] = 1.0
    with open(out_path, "w") as f:
        doc = {"version": flink_version, "records": lines, "slips_ms": slips, "over": over, "sends": sends}
        json.dump(doc, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
