"""A reader's failure schedule (``bench.sim.failure_schedule``): one reading of its join, leave,
crash, offline, restart and stall times for the simulator's readers and the lab's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.sim import run_scenario
from bench.sim.failure_schedule import FailureSchedule, Session, Transition, failure_stream, timeline
from bench.spec.errors import SimulationError
from bench.spec.scenario import DelaySpec, NoAckFault, ReaderSpec, scenario_from_dict
from bench.spec.seeds import Seeds


def _plan(spec: ReaderSpec, seed: int, until_ms: int = 60_000, name: str = "r") -> tuple[Transition, ...]:
    return timeline(spec, Seeds(seed).rng(failure_stream(name)), until_ms)


def _random(mtbf: float = 5_000, offline: int = 1_000, restart: float = 2_000, **kw: object) -> ReaderSpec:
    return ReaderSpec(
        name="r",
        mtbf_ms=mtbf,
        offline_after_ms=offline,
        restart_ms=DelaySpec("fixed", restart),
        **kw,  # type: ignore[arg-type]
    )


@given(
    seed=st.integers(0, 2**32),
    mtbf=st.floats(100, 20_000),
    offline=st.integers(0, 3_000),
    restart=st.integers(0, 3_000),
    join=st.integers(0, 5_000),
)
def test_random_crashes_are_declared_offline_then_restart_in_order(
    seed: int, mtbf: float, offline: int, restart: int, join: int
) -> None:
    spec = _random(mtbf, offline, restart, join_ms=join)
    plan = _plan(spec, seed, 30_000)
    assert plan == _plan(spec, seed, 30_000)  # deterministic per seed
    assert plan[0] == Transition(join, "join")
    times = [t.t_ms for t in plan]
    assert times == sorted(times) and times[-1] <= 30_000
    kinds = [t.kind for t in plan]
    for i, tr in enumerate(plan):  # join/restart, crash, offline, restart, crash, ...
        if tr.kind == "crash":
            assert kinds[i - 1] in ("join", "restart")
            assert tr.t_ms > plan[i - 1].t_ms  # a session lasts at least 1 ms
            if i + 1 < len(plan):
                assert plan[i + 1] == Transition(tr.t_ms + offline, "offline")
        if tr.kind == "restart":
            assert plan[i - 1] == Transition(plan[i - 2].t_ms + offline, "offline")
            assert tr.t_ms == plan[i - 1].t_ms + restart
    assert set(kinds) <= {"join", "crash", "offline", "restart"}


def test_the_same_seed_gives_the_same_crashes_and_another_seed_others() -> None:
    spec = _random()
    assert _plan(spec, 1) == _plan(spec, 1)
    assert _plan(spec, 1) != _plan(spec, 2)
    assert _plan(spec, 1, name="r-0") != _plan(spec, 1, name="r-1")  # each instance its own stream
    assert _plan(spec, 1)[:6] == _plan(spec, 1, until_ms=120_000)[:6]  # a longer run adds later ones
    crashes = [t for t in _plan(spec, 1, 600_000) if t.kind == "crash"]
    assert 60 < len(crashes) < 140  # one per ~8 s: 5 s up on average, 1 s to offline, 2 s to restart


def test_a_scheduled_crash_is_for_good_and_a_leave_ends_the_random_ones() -> None:
    crash = _plan(_random(crash_ms=20_000), 3)
    assert crash[-2:] == (Transition(20_000, "crash"), Transition(21_000, "offline"))
    assert sum(t.kind == "restart" for t in crash) >= 1  # random crashes before it restart
    leave = _plan(_random(leave_ms=20_000), 3)
    assert leave[-1].kind == "leave" and leave[-1].t_ms >= 20_000
    assert [t.kind for t in leave].count("leave") == 1
    calm = _plan(ReaderSpec(name="r", join_ms=500, leave_ms=9_000), 3)
    assert calm == (Transition(500, "join"), Transition(9_000, "leave"))


def test_at_one_instant_a_leave_comes_first_then_a_scheduled_crash_then_a_random_one() -> None:
    sched = FailureSchedule(_random(mtbf=1, leave_ms=100), Seeds(1).rng("x"))
    s = sched.session(0)
    assert s.failure_ms == 1 and s.due(1) == "failure" and s.due(100) == "leave"
    sched = FailureSchedule(_random(mtbf=1, crash_ms=100), Seeds(1).rng("x"))
    assert sched.session(0).due(100) == "crash"
    assert sched.crashed("crash", 100).restart_ms is None  # for good
    sched = FailureSchedule(_random(mtbf=1), Seeds(1).rng("x"))
    sched.session(0)
    out = sched.crashed("failure", 7)
    assert (out.crashed_ms, out.offline_ms, out.restart_ms) == (7, 1_007, 3_007)


def test_a_stall_defers_what_falls_in_it_and_a_stall_for_good_ends_the_schedule() -> None:
    spec = ReaderSpec(name="r", crash_ms=15_000, noack=NoAckFault(10_000, 20_000))
    assert _plan(spec, 1) == (
        Transition(0, "join"),
        Transition(10_000, "stall"),
        Transition(20_000, "resume"),
        Transition(20_000, "crash"),  # it crashes once it moves again
        Transition(21_000, "offline"),
    )
    forever = ReaderSpec(name="r", leave_ms=15_000, noack=NoAckFault(10_000, None))
    assert _plan(forever, 1) == (Transition(0, "join"), Transition(10_000, "stall"))


def test_sessions_follow_when_the_reader_really_rejoined_and_misuse_is_named() -> None:
    sched = FailureSchedule(_random(), Seeds(1).rng(failure_stream("r")))
    first = sched.session(0)
    assert first.failure_ms is not None and _plan(_random(), 1)[1] == Transition(first.failure_ms, "crash")
    late = first.failure_ms + 40  # a busy reader noticed its crash 40 ms late
    sched._check()
    out = sched.crashed("failure", late)
    assert out.offline_ms == late + 1_000 and out.restart_ms == late + 3_000
    sched._check()
    with pytest.raises(SimulationError, match=r"reader 'r': a session cannot start at 5 ms"):
        sched.session(5)
    with pytest.raises(SimulationError, match=r"reader 'r': no session running at 9 ms"):
        sched.crashed("failure", 9)


def test_the_in_process_simulator_crashes_and_restarts_on_the_schedule() -> None:
    sc = scenario_from_dict(
        {
            "name": "flaky",
            "seed": 4,
            "duration_ms": 20_000,
            "stream": {"name": "sim/flaky", "segments": 2},
            "writers": [
                {"name": "w", "workload": {"kind": "constant", "rate_per_s": 100}, "stop_ms": 17_000}
            ],
            "readers": [
                {
                    "name": "r",
                    "count": 2,
                    "mtbf_ms": 3_000,
                    "offline_after_ms": 200,
                    "restart_ms": {"kind": "fixed", "ms": 300},
                }
            ],
            "metrics": {"plots": False, "sample_ms": 500},
        }
    )
    summary = run_scenario(sc).summary
    for name in ("r-0", "r-1"):
        plan = _plan(sc.readers[0], sc.seed, sc.duration_ms, name)
        row = summary["readers"][name]
        assert row["crashes"] == [t.kind for t in plan].count("crash") >= 2, (row, plan)
        assert row["restarts"] == [t.kind for t in plan].count("restart"), (row, plan)
    assert summary["events"]["missing"] == 0


_TIME = st.none() | st.integers(0, 50)


@given(
    leave=_TIME, crash=_TIME, failure=st.none() | st.integers(1, 50), stall=_TIME,
    stall_for=st.none() | st.integers(1, 20), now=st.integers(0, 80),
)  # fmt: skip
def test_a_session_says_what_is_due_and_when_it_next_changes_at_every_instant(
    leave: int | None,
    crash: int | None,
    failure: int | None,
    stall: int | None,
    stall_for: int | None,
    now: int,
) -> None:
    """A reader asks its session at every wake-up what is due (a leave before a crash, a scheduled crash
    before a random one, then a stall) and when to look next: the first leave, crash or stall start
    after now, whatever comes first; before the first of them, nothing is due."""
    end = None if stall is None or stall_for is None else stall + stall_for
    s = Session(0, leave, crash, failure, stall, end)
    due = (
        "leave" if leave is not None and now >= leave
        else "crash" if crash is not None and now >= crash
        else "failure" if failure is not None and now >= failure
        else "stall" if stall is not None and stall <= now and (end is None or now < end)
        else None
    )  # fmt: skip
    assert s.due(now) == due
    later = [t for t in (leave, crash, stall, failure) if t is not None and t > now]
    assert s.next_change(now) == (min(later) if later else None)
    s._check()
    assert s == Session(0, leave, crash, failure, stall, end)  # (first_ms is derived: not compared)
