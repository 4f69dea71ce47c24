"""Scenario files: errors name the field, overrides parse typed values; workload maths and framing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.sim.workloads import FrameBuilder, expected_events, payload_ids
from bench.spec import ScenarioError, load_scenario, scenario_from_dict, shipped_scenarios
from bench.spec.scenario import WorkloadSpec, apply_overrides
from readergroup.format.events import decode_columns, decode_frames, encode_event

BASE = {"name": "t", "duration_ms": 1000, "writers": [{"name": "w"}], "readers": [{"name": "r"}]}


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_loads(name: str) -> None:
    assert load_scenario(name).name == name


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({**BASE, "store": {"max_lag": 1}}, "store.max_lag", "unknown field"),
        ({**BASE, "duration_ms": "long"}, "duration_ms", "must be an int"),
        ({**BASE, "duration_ms": 0}, "duration_ms", ">= 1"),
        ({"name": "t"}, "duration_ms", "is required"),
        (
            {**BASE, "writers": [{"name": "w", "workload": {"kind": "sine"}}]},
            "writers.0.workload.kind",
            "one of",
        ),
        (
            {**BASE, "writers": [{"name": "w", "workload": {"rate_per_s": -1}}]},
            "writers.0.workload.rate_per_s",
            ">= 0",
        ),
        (
            {**BASE, "readers": [{"name": "r", "join_ms": 500, "leave_ms": 100}]},
            "readers.0.leave_ms",
            "before",
        ),
        (
            {**BASE, "readers": [{"name": "r", "noack": {"start_ms": 5, "end_ms": 5}}]},
            "readers.0.noack.end_ms",
            "not after",
        ),
        ({**BASE, "writers": [{"name": "w"}, {"name": "w"}]}, "writers", "repeat"),
        ({**BASE, "stream": {"name": "nostream"}}, "stream.name", "scope/name"),
        ({**BASE, "pipeline": {"window_ms": 10}}, "pipeline.window_ms", "ordering"),
        ({**BASE, "metrics": {"plots": "yes"}}, "metrics.plots", "true or false"),
    ],
)
def test_validation_errors_name_the_field(data: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(data)
    assert e.value.field == field
    assert words in str(e.value)
    assert str(e.value).startswith(field)


def test_overrides_parse_typed_values_and_address_items_by_index_or_name() -> None:
    data = apply_overrides(
        BASE,
        [
            "store.polling_period_ms=250",
            "writers.w.workload.rate_per_s=12.5",
            "writers.0.keys=[a, b]",
            "readers.r.rate_per_s=null",
            "metrics.plots=false",
            "scaling.at_ms=[100, 200]",
            "description=two words",
        ],
    )
    sc = scenario_from_dict(data)
    assert sc.store.polling_period_ms == 250
    assert sc.writers[0].workload.rate_per_s == 12.5
    assert sc.writers[0].keys == ("a", "b")
    assert sc.readers[0].rate_per_s is None
    assert sc.metrics.plots is False
    assert sc.scaling.at_ms == (100, 200)
    assert sc.description == "two words"
    assert BASE["writers"] == [{"name": "w"}]  # the input is not modified


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("store.nope=1", "store.nope"),
        ("writers.9.name=x", "writers.9"),
        ("writers.zz.tick_ms=5", "writers.zz"),
        ("store.polling_period_ms.x=1", "store.polling_period_ms.x"),
        ("store.polling_period_ms=[1", "store.polling_period_ms"),
    ],
)
def test_bad_overrides_name_the_key(override: str, field: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(apply_overrides(BASE, [override]))
    assert e.value.field == field


def test_unknown_scenario_and_bad_files_are_scenario_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="unknown scenario 'no-such'"):
        load_scenario("no-such")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="mapping"):
        load_scenario(listy)
    good = tmp_path / "good.yaml"
    good.write_text("name: mine\nduration_ms: 10\n")
    assert load_scenario(good, ["duration_ms=20"], seed=4).duration_ms == 20
    assert load_scenario(good, seed=4).seed == 4


def test_workload_rates_integrate_over_bursts_and_idle_periods() -> None:
    assert expected_events(WorkloadSpec(rate_per_s=100.0), 0, 1500) == pytest.approx(150)
    bursty = WorkloadSpec(
        kind="bursty", rate_per_s=10.0, burst_rate_per_s=100.0, burst_ms=1000, burst_every_ms=10000
    )
    assert expected_events(bursty, 0, 20000) == pytest.approx(2 * (100 + 9 * 10))
    assert expected_events(bursty, 500, 1500) == pytest.approx(0.5 * 100 + 0.5 * 10)
    idle = WorkloadSpec(kind="periodic_idle", rate_per_s=10.0, active_ms=3000, idle_ms=2000)
    assert expected_events(idle, 0, 10000) == pytest.approx(60)
    assert expected_events(idle, 3000, 5000) == 0
    # additive over any split point
    for t in (1, 999, 2500, 3001, 7777):
        assert expected_events(idle, 0, t) + expected_events(idle, t, 10000) == pytest.approx(60)


@pytest.mark.parametrize("keys", [["k-1", "k-2", "k-3"], ["a", "bb", "ccc"]])
def test_frame_builder_writes_the_events_wire_format(keys: list[str]) -> None:
    fb = FrameBuilder(7, keys, 12)
    key_idx = np.array([0, 2, 1, 0])
    et = np.array([5, -3, 2**40, 0])
    seq = np.array([10, 11, 12, 13])
    blob = fb.build(key_idx, et, seq)
    expected = b"".join(
        encode_event(keys[k], (7).to_bytes(4, "little") + int(s).to_bytes(4, "little") + bytes(4), int(t))
        for k, t, s in zip(key_idx, et, seq, strict=True)
    )
    assert blob == expected
    frames, used = decode_frames(blob)
    assert used == len(blob) and [f.routing_key for f in frames] == [keys[k] for k in key_idx]
    cols, _ = decode_columns(blob * 3)
    w, s = payload_ids(cols["payload"].slice(2, 5))
    assert w.tolist() == [7] * 5
    assert s.tolist() == [12, 13, 10, 11, 12]


def test_the_simulators_kernels_give_the_same_outputs_as_its_numpy_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers frame batches by segment and split their pending events (write latency, a
    transaction's), the recorder counts them and readers merge blocks in numba kernels once
    loaded: the same bytes written as without them (stochastic, several segments)."""
    from readergroup.format import events

    spec: dict[str, object] = {
        **BASE,
        "duration_ms": 1_000,
        "stream": {"name": "k/s", "segments": 6},
        "writers": [
            {
                "name": "w",
                "count": 2,
                "key_count": 40,
                "tick_ms": 100,
                "workload": {"kind": "poisson", "rate_per_s": 4_000},
                "disorder": {"kind": "lognormal", "ms": 20},
                "write_latency": {"kind": "exponential", "ms": 50},
            },
            {  # in transactions: the split keeps the due events a transaction holds on to
                "name": "t",
                "key_count": 20,
                "tick_ms": 100,
                "workload": {"kind": "poisson", "rate_per_s": 2_000},
                "write_latency": {"kind": "exponential", "ms": 80},
                "commit_interval_ms": 300,
            },
        ],
        "readers": [{"name": "r", "count": 2, "poll_ms": 250}],
        "group": {"max_event_time_lag_ms": 5},  # events late by event time are counted
        "metrics": {"sample_ms": 500, "plots": False},
    }
    events._kernels()
    for event_log in (False, True):  # without it the recorder counts in a kernel; with it, every event
        spec["metrics"] = {"sample_ms": 500, "plots": False, "event_log": event_log}
        out = _outputs_with_and_without_kernels(spec, tmp_path / str(event_log), monkeypatch)
        assert {"summary.json", "series.csv"} <= set(out)
        assert b'"late_event_time": 0,' not in out["summary.json"]
        assert not event_log or out["events.csv"].count(b"\n") > 2_000


def _outputs_with_and_without_kernels(
    spec: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, bytes]:
    """The files a run writes (no manifest: its wall-clock figures), the same with the kernels as without."""
    from bench.sim import actors, recorder, run_scenario, workloads
    from bench.study import write_result
    from readergroup.reading import reader

    outs = []
    for kernels in (True, False):
        if kernels:  # every batch through the kernels
            monkeypatch.setattr(workloads, "_KERNEL_MIN_EVENTS", 1)
            monkeypatch.setattr(workloads, "_KERNEL_LOADED_MIN_EVENTS", 1)
            assert workloads.sim_kernels(1) is not None and reader._merge_kernel() is not None
        else:
            for module in (workloads, recorder, actors):
                monkeypatch.setattr(module, "sim_kernels", lambda n: None)
            monkeypatch.setattr(reader, "_merge_kernel", lambda: None)
        out = tmp_path / str(kernels)
        write_result(run_scenario(scenario_from_dict(spec)), out)
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "manifest.json"})
        monkeypatch.undo()
    assert outs[0] == outs[1]
    return outs[0]


def test_a_lab_run_whose_readers_poll_often_loads_their_kernels_first_and_simulate_does_not() -> None:
    """A lab world whose readers poll ``READER_KERNEL_MIN_POLLS`` times or more in all imports the
    readers' frame and merge kernels before it runs (else small writes never would, and every block
    is decoded and merged in Python); a shorter one does not pay the import, nor does the simulator's
    world (its readers gained nothing from them). In a fresh interpreter: this one has them loaded."""
    code = """
import json, sys
from bench.lab.compare import READER_KERNEL_MIN_POLLS, _LabWorld
from bench.sim.actors import World
from bench.spec import scenario_from_dict
base = json.loads(sys.argv[1])
polls = READER_KERNEL_MIN_POLLS
out = []
for world, spec in (
    (_LabWorld, {**base, "duration_ms": 100 * polls // 2 - 100}),  # 2 readers every 100 ms: one poll short
    (World, {**base, "duration_ms": 100 * polls // 2}),
    (_LabWorld, {**base, "duration_ms": 100 * polls // 2}),
):
    world(scenario_from_dict(spec)).close()
    out.append([m in sys.modules for m in
                ("readergroup.format._frame_kernels", "readergroup.reading._batch_kernels")])
print(json.dumps(out))
"""
    base = {**BASE, "readers": [{"name": "r", "count": 2, "poll_ms": 100}]}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(base)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[False, False], [False, False], [True, True]]
