"""Each strategy as if alone, and one workload for ``simulate`` and ``compare``.

A strategy's row is what it measures on the workload alone: running it beside any other
set of strategies (``strategies.only``), with the writers' producer assertions on or off,
or with custom strategies added, changes none of its numbers. And ``compare`` runs the
workload ``simulate`` runs: the same appends (bytes, ingestion times, seals: events,
commits, no markers) and the same ingestion-time group watermark at every sample, on
every shipped scenario; the producer's asserted copy holds the same events, with its
markers beside them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_lab import TINY

from bench.lab import lab_scenario_from_dict, lab_scenarios, load_lab_scenario, run_compare
from bench.lab.compare import ASSERTED, EVENTS, LabResult
from bench.sim.engine import run_scenario
from bench.spec.scenario import Scenario, StrategiesSpec, load_scenario, shipped_scenarios
from readergroup.format.events import KIND_EVENT, decode_columns
from segmentstore import SegmentStore

LAB = sorted(lab_scenarios())
EVENT_TIME = ("producer",)  # the shipped scenarios' strategies that read the asserted copy


def _names(sc: Scenario) -> tuple[str, ...]:
    return (sc.strategies or StrategiesSpec()).names


def _assertions_off(sc: Scenario) -> list[str]:
    return [f"writers.{w.name}.assert_every_ms=null" for w in sc.writers]


def _same_row(got: LabResult, want: LabResult, name: str, how: str) -> None:
    """``name``'s row, sample series and group watermarks in ``got`` are ``want``'s, value by value."""
    a, b = got.row(name), want.row(name)
    differ = {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert not differ, f"{want.scenario.name}: {name} {how} differs (got, all together): {differ}"
    assert got.series[name] == want.series[name], f"{name} {how}: its samples differ"
    assert got.group_watermarks[name] == want.group_watermarks[name], (
        f"{name} {how}: its group watermarks differ"
    )
    assert got.copies[name] == want.copies[name]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", LAB)
def test_each_strategy_alone_measures_what_it_measures_beside_the_others(scenario: str) -> None:
    together = run_compare(load_lab_scenario(scenario))
    names = _names(together.scenario)
    assert [r["strategy"] for r in together.rows] == list(names)
    for name in names:
        alone = run_compare(load_lab_scenario(scenario, [f"strategies.only=[{name}]"]))
        assert [r["strategy"] for r in alone.rows] == [name]
        assert alone.events_written == together.events_written
        _same_row(alone, together, name, "alone")
    # without the writers' assertions, every strategy that does not read them measures the same
    others = [n for n in names if together.copies[n] == EVENTS]
    sc = together.scenario
    quiet = run_compare(
        load_lab_scenario(scenario, [f"strategies.only=[{', '.join(others)}]", *_assertions_off(sc)])
    )
    for name in others:
        _same_row(quiet, together, name, "without the writers' assertions")


def test_the_assertions_reach_only_the_strategies_in_the_event_time_domain() -> None:
    """The tiny scenario's ingestion row does not see the producer's markers: with them off, or
    with custom strategies beside it (one of each domain), every other row is unchanged."""
    from test_lab_plugins import _me

    with_all = run_compare(lab_scenario_from_dict(TINY))
    assert with_all.copies == {
        "ingestion": EVENTS,
        "producer": ASSERTED,
        "flink": EVENTS,
        "spark": EVENTS,
    }
    off = {**TINY, "writers": [{**TINY["writers"][0], "assert_every_ms": None}]}  # type: ignore[index]
    quiet = run_compare(lab_scenario_from_dict(off))
    for name in ("ingestion", "flink", "spark"):
        _same_row(quiet, with_all, name, "without the assertions")
    assert quiet.row("producer")["wm_lag_mean_ms"] is None  # nothing asserted: no watermark at all
    custom = [
        {"name": "mine", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 500}},
        {"name": "told", "class_path": _me("Asserted"), "params": {"lag_ms": 0}},
    ]
    more = run_compare(
        lab_scenario_from_dict({**TINY, "strategies": {**TINY["strategies"], "custom": custom}})
    )  # type: ignore[dict-item]
    assert more.copies["mine"] == EVENTS and more.copies["told"] == ASSERTED
    for name in ("ingestion", "producer", "flink", "spark"):
        _same_row(more, with_all, name, "beside two custom strategies")


def test_only_names_strategies_that_exist_once() -> None:
    from bench.lab import LabScenarioError

    with pytest.raises(LabScenarioError, match=r"strategies\.only\.1: no strategy 'storm'"):
        lab_scenario_from_dict({**TINY, "strategies": {**TINY["strategies"], "only": ["flink", "storm"]}})  # type: ignore[dict-item]
    with pytest.raises(LabScenarioError, match=r"strategies\.only\.1: 'flink' is named twice"):
        lab_scenario_from_dict({**TINY, "strategies": {**TINY["strategies"], "only": ["flink", "flink"]}})  # type: ignore[dict-item]
    r = run_compare(
        lab_scenario_from_dict({**TINY, "strategies": {**TINY["strategies"], "only": ["spark", "ingestion"]}})
    )  # type: ignore[dict-item]
    assert [row["strategy"] for row in r.rows] == ["ingestion", "spark"]  # in the table's order
    assert set(r.series) == set(r.strategies) == {"ingestion", "spark"}


# ---------------------------------------------------------------------- one workload


def _read_all(store: SegmentStore, name: str) -> bytes:
    info = store.get_info(name)
    out, off = bytearray(), info.start_offset
    while off < info.length:
        r = store.read(name, off, info.length - off)
        out += bytes(r.data)
        off += len(r.data)
    return bytes(out)


def _runs(store: SegmentStore, name: str) -> np.ndarray:
    """The ingestion-time runs of the whole segment (``ingestion_runs`` asked again past a prefix)."""
    info = store.get_info(name)
    parts, begin = [], info.start_offset
    while begin < info.length:
        part = store.ingestion_runs(name, begin, info.length)
        parts.append(part)
        begin = int(part[0][-1]) + 1
    return np.concatenate(parts, axis=1) if parts else np.empty((2, 0), np.int64)


def _appends(store: SegmentStore, stream: str) -> dict[str, Any]:
    """Every segment of ``stream`` (transaction segments included): its bytes, the ingestion time of
    each run of them, its creation and last write time, whether it is sealed."""
    out: dict[str, Any] = {}
    for name in sorted(store.list_segments()):
        if not name.startswith(stream + "/"):
            continue  # reader groups' state, producer-watermark snapshots
        info = store.get_info(name)
        runs = store.ingestion_runs(name, info.start_offset, info.length)
        out[name] = (
            _read_all(store, name),
            runs.tolist(),
            info.creation_time,
            info.last_write_time,
            info.sealed,
        )
    return out


def _events(store: SegmentStore, stream: str) -> dict[str, list[tuple[Any, ...]]]:
    """Per segment of ``stream``, its events in order: key, payload, event time, ingestion time."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name in sorted(store.list_segments()):
        if not name.startswith(stream + "/"):
            continue
        info = store.get_info(name)
        cols, _ = decode_columns(_read_all(store, name), info.start_offset, events_only=True)
        assert (cols["kind"] == KIND_EVENT).all()
        runs = _runs(store, name)  # each run's last offset and time
        it = runs[1][np.searchsorted(runs[0], cols["offset"], side="left")].tolist()
        out[name] = list(
            zip(
                cols["routing_key"].to_pylist(),
                cols["payload"].to_pylist(),
                cols["event_time"].tolist(),
                it,
                strict=True,
            )
        )
    return out


def _markers(store: SegmentStore, stream: str) -> int:
    n = 0
    for name in store.list_segments():
        if name.startswith(stream + "/"):
            cols, _ = decode_columns(_read_all(store, name), store.get_info(name).start_offset)
            n += int(np.count_nonzero(cols["kind"] != KIND_EVENT))
    return n


def _lab_ready(name: str) -> list[str]:
    """Overrides that let the lab run a shipped scenario made for ``simulate`` (windows, a finer step)."""
    if name in LAB:
        return []
    return ["pipeline.ordering=true", "pipeline.window_ms=1000", "strategies.tick_ms=50"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", shipped_scenarios())
def test_simulate_and_compare_run_one_workload(scenario: str) -> None:
    over = [*_lab_ready(scenario), "strategies.only=[ingestion, producer]"]
    sc = load_scenario(scenario, over)
    stream = sc.stream.name
    seen: dict[str, tuple[dict[str, Any], dict[str, list[tuple[Any, ...]]], int]] = {}

    def keep(copy: str, store: SegmentStore) -> None:
        seen[copy] = (_appends(store, stream), _events(store, stream), _markers(store, stream))

    sim = run_scenario(sc, after=lambda store: keep("simulate", store))
    lab = run_compare(load_lab_scenario(scenario, over), after=keep)
    assert set(seen) == {"simulate", EVENTS, ASSERTED}
    appends, events, markers = seen["simulate"]
    assert markers == 0 and seen[EVENTS][2] == 0  # simulate's writers assert nothing: no marker anywhere
    assert sum(len(e) for e in events.values()) == sim.summary["events"]["written"] == lab.events_written
    assert seen[EVENTS][0] == appends, "compare's workload is not simulate's: the appends differ"
    assert seen[ASSERTED][1] == events, "the producer's copy holds other events"
    assert (seen[ASSERTED][2] > 0) == any(w.assert_every_ms is not None for w in sc.writers)
    lab_wm = dict(lab.group_watermarks["ingestion"])
    sim_wm = {s["t_ms"]: s["group_watermark"] for s in sim.recorder.samples}
    assert lab_wm == sim_wm, "the ingestion strategy's group watermark is not the simulator's"
    assert lab.scale_events_ms == tuple(dict.fromkeys(e["t_ms"] for e in sim.recorder.scale_events))
