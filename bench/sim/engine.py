"""The simulation engine: build the world, start every actor, sample metrics, summarise.

``run_scenario(scenario)`` returns a ``SimResult`` (``bench.sim.result``: the JSON-ready
summary, the recorder with its series, the pipeline's ordered and late records);
``bench.study.sim_outputs.write_result`` writes ``summary.json``, the CSV (and optional
Parquet) series and the plots. The same scenario and seed give byte-identical files: all
randomness comes from numpy generators spawned per component from the seed
(``bench.spec.seeds``), SimPy
orders same-time events by scheduling order, and wall-clock time (``SimResult.wall_s``)
is never written.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Callable, Generator, Iterator
from typing import Any

import simpy

from readergroup.reading.frontier import event_time_watermark
from segmentstore import SegmentNotFoundError, SegmentStore
from segmentstore.clock import monotonic_s, process_s

from ..spec.scenario import Scenario, scenario_to_dict
from .actors import World, WriterActor, advancer, instance_names, scaler
from .holder import HOLDER_COLUMNS, held_summary, holder
from .reader_process_actors import ProcessReaderActor, ServedReaders
from .readers import ReaderActor
from .recorder import stats
from .result import SimResult
from .sentinels import real_time

__all__ = ["run_scenario"]

Proc = Generator[simpy.Event, Any, None]


def _sample(world: World) -> None:
    """One row of the series (and per-segment rows). O(segments)."""
    rec, group, client, pipe = world.recorder, world.group, world.client, world.pipeline
    t = int(world.env.now)
    now = world.clock.now()
    gw = real_time(group.group_watermark)
    unread = 0
    rows = group.segments()
    keep = world.scenario.metrics.segments
    lengths = rec.segment_lengths
    for r in rows:
        name = r.segment.name
        try:
            length = client.get_info(name).length
        except SegmentNotFoundError:
            length = r.position
        lengths[name] = length
        unread += max(0, length - r.position)
        if keep:
            wm = real_time(r.watermark)
            rec.segment_rows.append(
                (t, name, r.owner or "", r.status, r.position, length, wm, None if wm is None else now - wm)
            )
    held = holder(rows, lengths, world.store) if gw is not None else (None, None, None)
    adv = world.store.advancer_stats
    lag = world.scenario.group.max_event_time_lag_ms
    if pipe is not None and pipe.chain is not None:
        pipe.chain.sample(t, now)
    rec.add_sample(
        {
            "t_ms": t,
            "time_ms": now,
            "group_watermark": gw,
            "group_lag_ms": None if gw is None else now - gw,
            "event_time_watermark": pipe.event_time_watermark
            if pipe is not None
            else (None if gw is None else real_time(event_time_watermark(gw, lag))),
            "events_written": int(rec.written.sum()),
            "events_delivered": int(rec.delivered.sum()),
            "events_unique": rec.events_unique,
            "duplicates": rec.duplicates,
            "late_ingestion": int(rec.late_ingestion.sum()),
            "late_event_time": int(rec.late_event_time.sum()),
            "late_dropped": pipe.late_dropped if pipe is not None else 0,
            "buffered": pipe.buffered if pipe is not None else 0,
            "windows_fired": len(pipe.firings) if pipe is not None else 0,
            "unread_bytes": unread,
            "group_segments": len(rows),
            "active_segments": len(client.get_stream(world.stream).active_segments),
            "readers_online": len(group.online_readers()),
            "advancer_passes": adv.passes,
            "advancer_advanced": adv.segments_advanced,
            "scale_events": len(rec.scale_events),
            **dict(zip(HOLDER_COLUMNS, held, strict=True)),
        }
    )


def _sampler(world: World) -> Proc:
    env, every, end = world.env, world.scenario.metrics.sample_ms, world.end_ms
    _sample(world)
    t = 0
    while t < end:
        t = min(t + every, end)
        yield env.timeout(t - env.now)
        yield env.timeout(0)  # after the actors due at the same time
        _sample(world)


def _progress(world: World, report: Callable[[int], None]) -> Proc:
    env, end = world.env, world.end_ms
    step = max(1, end // 200)
    while env.now < end:
        yield env.timeout(min(step, end - env.now))
        report(int(env.now))


_GC_YOUNG = 100_000
"""Allocations between two collections of the youngest generation while a simulation runs (Python's
default: 700). A poll allocates and drops hundreds of objects, few in cycles; collecting every 700
cost 3-7 % of a run at 4,096 segments and 1,000 readers."""


@contextlib.contextmanager
def _young_gc() -> Iterator[None]:
    """While the simulation runs: the objects made before (the world: store, group, readers) frozen out of
    the collector's passes (``gc.freeze``), and its youngest generation collected every ``_GC_YOUNG``
    allocations; as they were after. Nothing the simulation computes depends on it."""
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count() == 0  # (someone else's freeze is left alone)
    if frozen:
        gc.freeze()
    gc.set_threshold(max(threshold[0], _GC_YOUNG), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if frozen:
            gc.unfreeze()


def run_scenario(
    scenario: Scenario,
    progress: Callable[[int], None] | None = None,
    after: Callable[[SegmentStore], None] | None = None,
) -> SimResult:
    """Simulate ``scenario`` to its end on the real store and reader group; returns the result.

    ``after`` is called with the store once the simulation has ended, before the store
    is closed (the demo serves it to a Spark query).
    """
    t0 = monotonic_s()
    world = World(scenario)
    try:
        if scenario.group.processes:  # here, not in World: the process actors build on World
            world.served = ServedReaders(world.store, "sim")
        env = world.env
        writers = [WriterActor(world, spec, i, name) for i, (spec, name) in enumerate(world.writer_specs)]
        specs = [(spec, name) for spec in scenario.readers for name in instance_names(spec.name, spec.count)]
        actor = ProcessReaderActor if scenario.group.processes else ReaderActor
        readers = [actor(world, spec, name, ch) for ch, (spec, name) in enumerate(specs)]
        setup = monotonic_s() - t0
        cpu0 = process_s()
        env.process(advancer(world))
        env.process(scaler(world))
        for wa in writers:
            env.process(wa.process())
        for ra in readers:
            env.process(ra.process())
        env.process(_sampler(world))
        if progress is not None:
            env.process(_progress(world, progress))
        with _young_gc():
            env.run(until=scenario.duration_ms + 1)
        run_cpu = process_s() - cpu0
        summary = _summary(world, writers, readers)
        if after is not None:
            after(world.store)
        pipe = world.pipeline
        return SimResult(
            scenario,
            summary,
            world.recorder,
            tuple(pipe.ordered) if pipe else (),
            tuple(pipe.late) if pipe else (),
            tuple(pipe.firings) if pipe else (),
            monotonic_s() - t0,
            setup,
            tuple(pipe.chain.rows) if pipe and pipe.chain else (),
            run_cpu,
        )
    finally:
        world.close()


def _summary(world: World, writers: list[WriterActor], readers: list[ReaderActor]) -> dict[str, Any]:
    sc, rec, pipe = world.scenario, world.recorder, world.pipeline
    samples = rec.samples
    last = samples[-1]
    per_writer: dict[str, Any] = {}
    ordered_by: dict[int, list[int]] = {}
    late_by: dict[int, int] = {}
    if pipe is not None:
        for _, w, _, t in pipe.ordered:
            ordered_by.setdefault(w, []).append(t)
        for _, w, _, _ in pipe.late:
            late_by[w] = late_by.get(w, 0) + 1
    for wa in writers:
        i = wa.index
        row: dict[str, Any] = {
            "written": int(rec.written[i]),
            "delivered": int(rec.delivered[i]),
            "late_ingestion": int(rec.late_ingestion[i]),
            "late_event_time": int(rec.late_event_time[i]),
        }
        if wa.commits:
            row["transactions_committed"] = wa.commits
        if pipe is not None:
            ts = ordered_by.get(i, [])
            row["ordered_output"] = len(ts)
            row["late_dropped"] = late_by.get(i, 0)
            row["output_in_event_time_order"] = all(a <= b for a, b in itertools.pairwise(ts))
        per_writer[wa.name] = row
    adv = world.store.advancer_stats
    duration_s = sc.duration_ms / 1000.0
    out: dict[str, Any] = {
        "scenario": sc.name,
        "seed": sc.seed,
        "random": sc.random_parts,
        "duration_ms": sc.duration_ms,
        "start_time_ms": sc.start_time_ms,
        "parameters": scenario_to_dict(sc),
        "events": {
            "written": int(rec.written.sum()),
            "delivered": int(rec.delivered.sum()),
            "unique": rec.events_unique,
            "duplicates": rec.duplicates,
            "missing": rec.events_missing,
            "late_ingestion": int(rec.late_ingestion.sum()),
            "late_event_time": int(rec.late_event_time.sum()),
        },
        "writers": per_writer,
        "watermark": {
            "final_group_watermark": last["group_watermark"],
            "final_lag_ms": last["group_lag_ms"],
            "lag_ms": stats(r["group_lag_ms"] for r in samples),
            "held_by": held_summary(samples, rec.segment_lengths),
            "returned": rec.watermarks_returned,
            "reader_violations": rec.watermark_violations,
            "group_samples_decreasing": rec.group_samples_decreasing,
            "monotonic": rec.watermark_violations == 0 and rec.group_samples_decreasing == 0,
        },
        "advancer": {
            "passes": adv.passes,
            "segments_examined": adv.segments_examined,
            "segments_advanced": adv.segments_advanced,
            "advances_per_s": round(adv.segments_advanced / duration_s, 3),
            "examined_per_pass": round(adv.segments_examined / adv.passes, 3) if adv.passes else 0,
        },
        "scaling": {"events": len(rec.scale_events), "history": rec.scale_events},
        "faults": _faults(world),
        "readers": {ra.name: _reader_row(ra) for ra in readers},
    }
    if world.outages:
        out["store_outages"] = [{"start_ms": a, "end_ms": b} for a, b in world.outages]
    if world.last_write_ms is not None and world.last_write_ms < sc.duration_ms:
        out["watermark"]["idle"] = {
            "from_ms": world.last_write_ms,
            "bound_ms": sc.store.max_watermark_lag_ms + sc.store.polling_period_ms,
            "lag_ms": stats(r["group_lag_ms"] for r in samples if r["t_ms"] >= world.last_write_ms),
        }
    if pipe is not None:
        pipe._check()
        lat = [t - end for t, _, _, end, _ in pipe.firings]
        out["pipeline"] = {
            "event_time_watermark": pipe.event_time_watermark,
            "ordered_output": len(pipe.ordered),
            "late_dropped": pipe.late_dropped,
            "buffered_final": pipe.buffered,
            "buffered_max": max((r["buffered"] for r in samples), default=0),
            "in_event_time_order": True,
            "windows_fired": len(pipe.firings),
            "window_latency_ms": stats(lat),
        }
        if pipe.chain is not None:
            out["pipeline"]["stages"] = pipe.chain.summary()
    return out


def _reader_row(ra: ReaderActor) -> dict[str, Any]:
    row: dict[str, Any] = {"state": ra.state, "events": ra.events}
    if getattr(ra, "crashes", 0) and ra.spec.mtbf_ms is not None:
        row["crashes"] = ra.crashes
        row["restarts"] = ra.restarts
    return row


def _faults(world: World) -> list[dict[str, Any]]:
    """For each no-ack fault: the group watermark once the fault settled, at its end, and at the run's end.

    "Settled" is one position report interval plus one poll after the fault began: the
    time the other readers need to report what they acknowledged before it.
    """
    sc, samples = world.scenario, world.recorder.samples
    out: list[dict[str, Any]] = []
    for spec in sc.readers:
        f = spec.noack
        if f is None:
            continue
        end = f.end_ms if f.end_ms is not None else sc.duration_ms
        settled = f.start_ms + sc.group.position_report_interval_ms + spec.poll_ms
        during = [r["group_watermark"] for r in samples if settled <= r["t_ms"] < end]
        after = [r["group_watermark"] for r in samples if r["t_ms"] >= end]
        out.append(
            {
                "reader": spec.name,
                "kind": "noack",
                "start_ms": f.start_ms,
                "end_ms": f.end_ms,
                "settled_ms": settled,
                "watermark_settled": during[0] if during else None,
                "watermark_before_end": during[-1] if during else None,
                "stalled": bool(during) and len(set(during)) == 1,
                "watermark_final": after[-1] if after else None,
                "resumed": bool(during and after) and after[-1] is not None and after[-1] > during[-1],
            }
        )
    return out
