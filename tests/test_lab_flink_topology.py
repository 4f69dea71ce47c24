"""The lab's ``flink`` strategy in its two job topologies (``strategies.flink_source``).

``reader`` (the default) is how Pravega's connectors run: a subtask per reader of the
group, each a watermark generator over what its reader delivers, combined by Flink's
valve; ``segment_union`` is one bounded source per segment, unioned, which under scaling
ends event time when a sealed segment's source finishes (docs/engines.md).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.lab import lab_scenario_from_dict, run_compare
from bench.lab.compare import LabResult
from bench.lab.compared_strategies import FlinkStrategy, LabEvent
from bench.lab.flink_reader import FlinkReaderStrategy
from bench.lab.lab_scenario import LabStrategies
from bench.spec.errors import ScenarioError
from segmentstore import ManualClock
from segmentstore.limits import INT64_MAX, INT64_MIN

S = 1_700_000_000_000

SCALING: dict[str, Any] = {  # one on-time writer, one segment split every 10 s, two readers
    "name": "flink-topology",
    "duration_ms": 30_000,
    "stream": {"name": "lab/topo", "segments": 1},
    "scaling": {"every_ms": 10_000, "mode": "split"},
    "writers": [
        {"name": "w", "keys": [f"k{i}" for i in range(8)], "workload": {"kind": "constant", "rate_per_s": 20}}
    ],
    "readers": [{"name": "r", "count": 2}],
    "pipeline": {"ordering": True, "window_ms": 2000},
    "strategies": {"flink_bound_ms": 500, "flink_idle_timeout_ms": 2000, "flink_interval_ms": 500},
}


def _run(d: dict[str, Any], topology: str) -> LabResult:
    d = copy.deepcopy(d)
    d["strategies"]["flink_source"] = topology
    return run_compare(lab_scenario_from_dict(d))


def test_the_reader_topology_is_the_default_and_a_bad_one_is_refused_naming_the_field() -> None:
    d = copy.deepcopy(SCALING)
    d["duration_ms"] = 2_000
    assert isinstance(run_compare(lab_scenario_from_dict(d)).strategies["flink"], FlinkReaderStrategy)
    d["strategies"]["flink_source"] = "segment_union"
    st = run_compare(lab_scenario_from_dict(d)).strategies["flink"]
    assert type(st) is FlinkStrategy and st.topology == "segment_union"
    d["strategies"]["flink_source"] = "segments"
    with pytest.raises(
        ScenarioError, match=r"^strategies\.flink_source: must be one of reader, segment_union"
    ):
        lab_scenario_from_dict(d)


def test_under_scaling_segment_union_ends_event_time_and_the_reader_topology_does_not() -> None:
    """The point of issue #34: the union of per-segment sources loses everything after the first
    scale because the sealed segment's source finished at +inf while its successors were not
    aligned yet; subtasks of readers never finish, so the same events are on time."""
    union = _run(SCALING, "segment_union")
    su = union.strategies["flink"]
    assert isinstance(su, FlinkStrategy) and type(su) is FlinkStrategy
    su._check()
    first_scale = union.scale_events_ms[0]
    # the reason: at the scale's tick the sealed segment's source ends, +inf goes through the valve
    assert su.emitted[-1] == (S + first_scale, INT64_MAX)
    sealed = "lab/topo/0.#epoch.0"
    assert su._emitters[sealed].watermark == INT64_MAX and sealed in su._finished
    late = [a for a in su.arrivals if a[6]]
    assert late and all(a[0] > S + first_scale for a in late)  # every event after it is late ...
    assert all(a[6] for a in su.arrivals if a[0] > S + first_scale)
    assert len(late) > len(su.arrivals) / 2  # ... most of the run
    reader = _run(SCALING, "reader")
    sr = reader.strategies["flink"]
    assert isinstance(sr, FlinkReaderStrategy)
    sr._check()
    assert reader.row("flink")["late"] == 0 and reader.row("flink")["delivered"] == len(su.arrivals)
    assert sr.emitted[-1][1] < INT64_MAX and sr.emitted[-1][0] == S + SCALING["duration_ms"]
    # why nothing is late: r-1 had no segment and went idle (it held nothing back); the split
    # gave it one of the successors (a rebalance), and its first higher watermark made it active
    idle_timeout = SCALING["strategies"]["flink_idle_timeout_ms"]
    assert sr.statuses == [(S + idle_timeout + 500, "r-1", "idle"), (S + first_scale, "r-1", "active")]
    assert {a[1] for a in sr.arrivals if a[0] < S + first_scale} == {"r-0"}
    assert {a[1] for a in sr.arrivals if a[0] > S + first_scale} == {"r-0", "r-1"}
    assert reader.row("flink")["windows_fired"] > 2 * union.row("flink")["windows_fired"]


def _subtasks(*readers: str) -> tuple[FlinkReaderStrategy, ManualClock]:
    clock = ManualClock(S)
    cfg = LabStrategies(flink_bound_ms=0, flink_idle_timeout_ms=300, flink_interval_ms=100)
    st = FlinkReaderStrategy(cfg, 1000, clock)
    st.on_readers(readers)
    return st, clock


def _deliver(st: FlinkReaderStrategy, clock: ManualClock, reader: str, seq: int, et: int) -> None:
    st.deliver(
        LabEvent(
            clock.now(), "lab/s", "lab/s/0", 0 if reader == "a" else 1, seq, S + et, clock.now(), 32, reader
        )
    )


def _tick(st: FlinkReaderStrategy, clock: ManualClock, t: int) -> int:
    clock.set(S + t)
    st.on_tick(t, ())
    st._check()
    return st.pipeline.watermark


def test_a_subtask_whose_reader_crashed_goes_idle_and_rejoins_unaligned_when_it_restarts() -> None:
    """Flink's valve over subtasks: the minimum over active, aligned ones; a subtask whose reader
    delivers nothing goes idle after the timeout (and stops holding the minimum back); back,
    it is active with its next higher watermark, but aligned (holding the minimum) only once it
    reaches the combined watermark; the combined watermark never decreases."""
    st, clock = _subtasks("a", "b")
    _deliver(st, clock, "a", 0, 1000)
    _deliver(st, clock, "b", 0, 500)
    assert _tick(st, clock, 0) == S + 499  # the minimum: b's (a's emit alone left b at "none yet")
    seen = [S + 499]
    for k in range(1, 8):  # b's reader crashed: only a delivers
        _deliver(st, clock, "a", k, 1000 + 100 * k)
        seen.append(_tick(st, clock, 100 * k))
    # b's inactivity starts at the emit of t=100; idle at the first emit more than 300 ms later
    assert st.statuses == [(S + 500, "b", "idle")]
    assert seen[:5] == [S + 499] * 5 and seen[5] == S + 1499  # then a alone: max - 1
    assert seen == sorted(seen)
    # b's reader restarts and delivers an old event: late (below the combined watermark), but its
    # generator's higher watermark makes the subtask active, not yet aligned: a keeps leading
    _deliver(st, clock, "b", 1, 600)
    assert st.arrivals[-1][6] is True
    assert _tick(st, clock, 800) == S + 1699 and st.statuses[-1] == (S + 800, "b", "active")
    _deliver(st, clock, "a", 8, 1900)
    _deliver(st, clock, "b", 2, 1750)  # below the combined watermark a's emit makes: still unaligned
    assert _tick(st, clock, 900) == S + 1899
    _deliver(st, clock, "b", 3, 2500)  # b's watermark reaches the combined one: aligned again ...
    assert _tick(st, clock, 1000) == S + 1899
    _deliver(st, clock, "a", 9, 3000)
    assert _tick(st, clock, 1100) == S + 2499  # ... and it holds the minimum
    assert st.pipeline.late == 1  # only the old one: 1750 came in before a's emit moved it past


def test_an_idle_subtask_releases_event_time_and_a_subtask_never_ends() -> None:
    """A subtask whose reader has no segment holds event time at "none yet" only until its idleness
    timeout; no +inf ever reaches the valve (the emitted watermarks stay finite)."""
    st, clock = _subtasks("a", "b", "c")
    wms = []
    for k in range(10):
        _deliver(st, clock, "a", k, 100 * k + 50)
        wms.append(_tick(st, clock, 100 * k))
    # b and c (nothing read: inactive from the first emit) hold Long.MIN_VALUE until idle at t=400
    assert wms[:4] == [INT64_MIN] * 4
    assert st.statuses == [(S + 400, "b", "idle"), (S + 400, "c", "idle")]
    assert wms[4:] == [S + 100 * k + 49 for k in range(4, 10)] and all(wm < INT64_MAX for _, wm in st.emitted)
    assert [e.watermark for e in st._sub_emitters[1:]] == [INT64_MIN, INT64_MIN]


def test_subtasks_are_the_group_readers_and_unknown_readers_are_refused() -> None:
    st, clock = _subtasks("a", "b")
    assert st.subtasks == ("a", "b") and st.slots == {"a": 0, "b": 1}
    with pytest.raises(Exception, match="not a subtask"):
        _deliver(st, clock, "z", 0, 10)
    with pytest.raises(Exception, match="fixed when it starts"):
        st.on_readers(("a", "b"))


def test_reader_topology_invariants_hold_every_tick_under_crashes_restarts_and_auto_scaling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stress run: random reader crashes and restarts, store outages, load-driven scaling;
    ``_check()`` after every tick; every delivered event reached a subtask that its reader is."""
    d = {
        "name": "flink-stress",
        "seed": 3,
        "duration_ms": 12_000,
        "stream": {"name": "lab/stress", "segments": 2},
        "scaling": {"mode": "auto", "every_ms": 2000, "target_rate_per_s": 150, "min_segments": 1},
        "writers": [
            {
                "name": "w",
                "count": 2,
                "key_count": 16,
                "workload": {"kind": "poisson", "rate_per_s": 150},
                "disorder": {"kind": "exponential", "ms": 100},
            }
        ],
        "readers": [
            {
                "name": "r",
                "count": 3,
                "mtbf_ms": 3000,
                "offline_after_ms": 500,
                "restart_ms": {"kind": "exponential", "ms": 800},
            }
        ],
        "faults": {"store_mtbf_ms": 5000, "store_downtime_ms": 300},
        "pipeline": {"ordering": True, "window_ms": 1000},
        "strategies": {"flink_idle_timeout_ms": 700},
    }
    checks = [0]
    tick = FlinkReaderStrategy.on_tick

    def checked_tick(self: FlinkReaderStrategy, t_ms: int, rows: Any) -> None:
        tick(self, t_ms, rows)
        self._check()
        checks[0] += 1

    monkeypatch.setattr(FlinkReaderStrategy, "on_tick", checked_tick)
    r = run_compare(lab_scenario_from_dict(d))
    st = r.strategies["flink"]
    assert isinstance(st, FlinkReaderStrategy)
    assert checks[0] == d["duration_ms"] // 100 + 1
    kinds = {k for _, _, k in st.transitions}
    assert {"crash", "restart"} <= kinds and r.scale_events_ms  # the stress happened
    assert {s for _, _, s in st.statuses} == {"idle", "active"}
    row = r.row("flink")
    assert row["delivered"] == len(st.arrivals) and row["duplicates"] == len(st.redelivered)


def test_validate_replays_the_reader_topology_as_one_paced_source_per_subtask() -> None:
    """``ingestwm validate``'s Flink job for the reader topology: a split per subtask, from the
    first tick to the last (it never ends before the replay does), its slot the subtask's
    index, its bundles exactly what its reader delivered, tick by tick in order; and the verdict
    names the topology."""
    from bench.validate.flink_engine import FlinkReplay, FlinkTiming, flink_spec
    from bench.validate.flink_job import BUNDLE, END
    from bench.validate.verdict import flink_verdict

    r = _run(SCALING, "reader")
    st = r.strategies["flink"]
    assert isinstance(st, FlinkReaderStrategy)
    spec = flink_spec(r, FlinkTiming(pace_ms=200))
    last = SCALING["duration_ms"] // 500
    assert [(s["name"], s["first"], s["last"], s["slot"]) for s in spec["splits"]] == [
        ("r-0", 0, last, 0),
        ("r-1", 0, last, 1),
    ]
    assert spec["end_releases"] == [last + 1] and spec["slots"] == 2
    for split in spec["splits"]:
        steps = split["steps"]
        assert [s[0] for s in steps].count(END) == 1 and steps[-1][0] == END
        carried = [(w, q) for kind, _t, evs in steps if kind == BUNDLE for w, q, _et, _dup in evs]
        assert carried == [(a[2], a[3]) for a in st.arrivals if a[1] == split["name"]]
    # a replay that did what the model did is exact, and the row says which topology it checked
    replay = FlinkReplay(
        arrivals={(w, q): (wm, late) for _, _, w, q, _, wm, late in st.arrivals},
        fired=[(f[1], f[3], wm) for f, wm in zip(st.pipeline.firings, st.fired_at, strict=True)],
        max_slip_ms=1.0,
        version="2.3.0",
        timing=FlinkTiming(pace_ms=200),
        slips_ms=(("bundle", 1.0), ("end", 1.0)),
        slots=2,
        moves=(-(2**63), *(wm for _, wm in st.emitted)),
    )
    v = flink_verdict(r, replay)
    assert (v.strategy, v.verdict) == ("flink (reader)", "exact"), v.note
    assert v.wm_equal == v.wm_checked == len(st.arrivals) and len(st.arrivals) > 500


def test_validate_checks_each_topology_asked_for_in_a_row_of_its_own(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--flink-source`` (repeatable): a Flink row per topology, each from a lab run in that
    topology; none given: the scenario's own; an unknown one is refused before anything runs."""
    import yaml

    from bench.validate import FlinkTiming, ValidateError
    from bench.validate import run as run_mod
    from bench.validate.verdict import Verdict

    d = copy.deepcopy(SCALING)
    d["duration_ms"] = 2_000
    path = tmp_path / "topo.yaml"
    path.write_text(yaml.safe_dump(d))
    checked: list[str] = []

    def fake_flink(result: LabResult, *_a: Any, **_k: Any) -> Verdict:
        st = result.strategies["flink"]
        assert isinstance(st, FlinkStrategy)
        checked.append(type(st).__name__)
        return Verdict(result.scenario.name, f"flink ({st.topology})", "Flink 2.3.0", verdict="exact")

    monkeypatch.setattr(run_mod, "validate_flink", fake_flink)
    monkeypatch.setattr(run_mod, "flink_available", lambda python=None: None)
    timing = FlinkTiming(pace_ms=100)
    both = run_mod.validate(
        [str(path)], ["flink"], lambda: None, timing, flink_sources=("segment_union", "reader")
    )
    assert [v.strategy for v in both] == ["flink (segment_union)", "flink (reader)"]
    assert checked == ["FlinkStrategy", "FlinkReaderStrategy"]
    own = run_mod.validate([str(path)], ["flink"], lambda: None, timing)
    assert [v.strategy for v in own] == ["flink (reader)"]
    checked.clear()
    with pytest.raises(ValidateError, match="no Flink topology 'segments'"):
        run_mod.validate([str(path)], ["flink"], lambda: None, timing, flink_sources=("segments",))
    assert not checked


def test_outputs_say_which_topology_the_flink_row_used(tmp_path: Any) -> None:
    import json

    from bench.study import format_table, write_outputs

    d = copy.deepcopy(SCALING)
    d["duration_ms"] = 2_000
    for topology in ("reader", "segment_union"):
        r = _run(d, topology)
        assert format_table(r).splitlines()[0].endswith(f"; flink: {topology} topology")
        write_outputs(r, tmp_path / topology, plots=False)
        assert json.loads((tmp_path / topology / "compare.json").read_text())["flink_source"] == topology


def test_a_lab_event_built_without_a_reader_still_works() -> None:
    """Plug-ins' own tests build ``LabEvent`` positionally with the eight fields it had."""
    e = LabEvent(S, "lab/s", "lab/s/0", 0, 1, S - 5, S, 32)
    assert e.reader == "" and (e.writer, e.seq, e.nbytes) == (0, 1, 32)
