"""Model against engine: one ``Verdict`` per scenario and strategy, from the recorded runs.

- ``spark``: batch by batch, the model's ``SparkBatch`` against Spark's progress report
  and sink: the batch watermark, the rows dropped by watermark (the de-duplication's
  ``numRowsDroppedByWatermark``; the window aggregation must drop none), the windows
  emitted (start, count) and the input rows. Exact means every batch agrees.
- ``flink``: event by event, the watermark the event met at the late filter and
  whether it was late, and the windows fired before the end of input (start, count, the
  watermark that fired it).
  The driven Java job (``FlinkReplay.driven``) has no regime: exact if all agree, else
  differs, the note saying where (the first event, window and move that differ). For the
  paced replay, exact means all agree and the run stayed in the regime: its slips in bounds
  (``FlinkReplay.slips_in_bounds``), every move of the combined watermark at the late filter
  before the next release, and, where the moves differ, the emits surely in slot order;
  a replay out of the regime is ``out of regime`` whatever it found (the note says what
  differed, if anything, and the slips), one in it that disagrees ``differs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy
from ..lab.lab_scenario import lab_strategies
from ..lab.spark_model import SparkStrategy
from .flink_engine import FlinkReplay
from .spark_engine import SparkReplay

__all__ = ["Verdict", "spark_verdict", "flink_verdict", "not_run", "OUT_OF_REGIME"]

EXACT, DIFFERS, NOT_RUN, OUT_OF_REGIME = "exact", "differs", "not run", "out of regime"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One table row: model vs engine for late events, complete windows and the watermark."""

    scenario: str
    strategy: str
    engine: str  # "Spark 4.1.0", "Flink 2.3.0", or the engine's name when not run
    late_model: int | None = None
    late_engine: int | None = None
    windows_model: int | None = None
    windows_engine: int | None = None
    wm_checked: int = 0  # batches (Spark) or arrivals (Flink) whose watermark was compared
    wm_equal: int = 0
    wm_max_diff_ms: int | None = None
    verdict: str = NOT_RUN
    note: str = ""
    pace_ms: int | None = None  # Flink: the replay's wall-clock ms per lab tick (the one judged)
    runner: str | None = None  # Flink: "java" (driven, no pace) or "python" (paced)

    def as_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__slots__}


def not_run(scenario: str, strategy: str, engine: str, why: str) -> Verdict:
    return Verdict(scenario, strategy, engine, verdict=NOT_RUN, note=why)


_NO_WATERMARK = -(2**62)
_MAX_WM = 2**63 - 1
"""At or below it a watermark is still the engines' initial Long.MIN_VALUE (none yet)."""


def _diff(a: int, b: int) -> int:
    return abs(a - b)


def _wm(wm: int) -> str:
    """A watermark in a note: its value, or what it stands for."""
    return "none yet" if wm <= _NO_WATERMARK else ("+inf" if wm >= _MAX_WM else str(wm))


def spark_verdict(result: LabResult, replay: SparkReplay) -> Verdict:
    """Compare the Spark model's batches with what Spark reported for the same batches."""
    st = result.strategies["spark"]
    assert isinstance(st, SparkStrategy)
    notes: list[str] = []
    wm_equal, max_diff = 0, 0
    branches = max(1, len(replay.inputs))  # each input's branch scans the one source: Spark counts its rows
    for mb, eb in zip(st.batches, replay.batches, strict=True):
        d = _diff(mb.watermark, eb.watermark)
        wm_equal += d == 0
        max_diff = max(max_diff, d)
        late = eb.dropped[0] if eb.dropped else 0
        if late != mb.late and len(notes) < 3:
            notes.append(f"batch {mb.index} (t={mb.t_ms} ms): late {mb.late} vs {late}")
        if sorted(mb.fired) != sorted(eb.fired) and len(notes) < 3:
            notes.append(f"batch {mb.index} (t={mb.t_ms} ms): windows {list(mb.fired)} vs {list(eb.fired)}")
        if eb.input_rows != max(1, len(mb.rows)) * branches and len(notes) < 3:
            notes.append(
                f"batch {mb.index}: {eb.input_rows} input rows ({branches} inputs), "
                f"the model had {len(mb.rows)}"
            )
    if replay.window_dropped:
        notes.append(f"the window aggregation dropped {replay.window_dropped} rows")
    model_fired = [f for b in st.batches for f in b.fired]
    exact = not notes and wm_equal == len(st.batches)
    return Verdict(
        result.scenario.name,
        "spark",
        f"Spark {replay.version}",
        late_model=sum(b.late for b in st.batches),
        late_engine=replay.late,
        windows_model=len(model_fired),
        windows_engine=len(replay.fired),
        wm_checked=len(st.batches),
        wm_equal=wm_equal,
        wm_max_diff_ms=max_diff,
        verdict=EXACT if exact else DIFFERS,
        note="; ".join(notes) or f"{len(st.batches)} micro-batches, each identical",
    )


def flink_verdict(result: LabResult, replay: FlinkReplay) -> Verdict:
    """Compare the Flink model's arrivals and windows with Flink's on the paced replay."""
    st = result.strategies["flink"]
    assert isinstance(st, FlinkStrategy)
    wm_equal, max_diff, late_diff, missing, one_none = 0, 0, 0, 0, 0
    step, start = lab_strategies(result.scenario).flink_interval_ms, result.scenario.start_time_ms
    first: str | None = None  # where the first event that differs is (the model's delivery order)
    for clock, split, writer, seq, et, wm, late in st.arrivals:
        got = replay.arrivals.get((writer, seq))
        both_none = got is not None and max(wm, got[0]) <= _NO_WATERMARK
        if first is None and (got is None or got[1] != late or (got[0] != wm and not both_none)):
            release = -(-(clock - start) // step)
            flink = "nothing" if got is None else f"{_wm(got[0])}{' (late)' if got[1] else ''}"
            first = (
                f"the first event that differs: writer {writer} seq {seq} (event time {et}, "
                f"release {release}, {split}) met {_wm(wm)}{' (late)' if late else ''} in the model, "
                f"{flink} in Flink"
            )
        if got is None:
            missing += 1
            continue
        late_diff += got[1] != late
        # both engines start at Long.MIN_VALUE ("no watermark yet"): equal when both have none;
        # one without is a difference with no size, kept out of the largest difference in ms
        none_m, none_f = wm <= _NO_WATERMARK, got[0] <= _NO_WATERMARK
        if none_m or none_f:
            wm_equal += none_m and none_f
            one_none += none_m != none_f
            continue
        d = _diff(wm, got[0])
        wm_equal += d == 0
        max_diff = max(max_diff, d)
    # each window with the combined watermark that fired it (an intermediate one of its tick:
    # Flink's valve takes the sources' emits one channel at a time)
    fired = zip(st.pipeline.firings, st.fired_at, strict=True)
    model_fired = sorted({(s, c, wm) for (_, s, _, c), wm in fired})
    # the end of input fires every window left in Flink (at +inf, or the driven job knows at which
    # moves: those after the lab's last tick, where a split's +inf lets the others' minimum through);
    # the lab's run just stops
    starts = {f[0] for f in model_fired}
    ends_at = _MAX_WM
    if replay.driven and replay.end_moves:
        ends_at = [wm for wm in replay.moves if wm > _NO_WATERMARK][-replay.end_moves]
    engine_fired = [f for f in replay.fired if f[2] < ends_at or f[0] in starts]
    notes = []
    if missing:
        notes.append(f"{missing} events never reached Flink's late filter")
    if late_diff:
        notes.append(f"{late_diff} events late in one and not the other")
    if [f[:2] for f in model_fired] != [f[:2] for f in engine_fired]:
        only_m = len({f[:2] for f in model_fired} - {f[:2] for f in engine_fired})
        only_f = len({f[:2] for f in engine_fired} - {f[:2] for f in model_fired})
        notes.append(f"windows: {only_m} only in the model, {only_f} only in Flink")
    elif model_fired != engine_fired:
        pairs = [(a, b) for a, b in zip(model_fired, engine_fired, strict=True) if a != b]
        notes.append(
            f"{len(pairs)} windows fired at another watermark in Flink (the first, starting at "
            f"{pairs[0][0][0]}: {_wm(pairs[0][0][2])} in the model, {_wm(pairs[0][1][2])} in Flink)"
        )
    if replay.window_late:
        notes.append(f"Flink's window operator found {replay.window_late} events late after the late filter")
    if one_none:
        notes.append(f"{one_none} events met a watermark in one engine and none yet in the other")
    other = len(st.arrivals) - missing - wm_equal - one_none
    if other:
        notes.append(f"{other} events met another watermark in Flink")
    if first is not None:
        notes.append(first)
    # every move of the combined watermark, the intermediate ones within a tick included: the
    # model's must be Flink's (after Flink's warm-up at "none yet"; the end of input adds more)
    model_moves = [wm for _, wm in st.emitted]
    engine_moves = [wm for wm in replay.moves if wm > _NO_WATERMARK]
    if replay.driven:  # every move within the lab's ticks is known: all of them must be the model's
        engine_moves = engine_moves[: len(engine_moves) - replay.end_moves]
    unsure: list[str] = []  # what takes the run out of the regime, beyond FlinkReplay.slips_in_bounds
    if engine_moves[: len(model_moves)] != model_moves or (replay.driven and engine_moves != model_moves):
        i = next(
            (i for i, (a, b) in enumerate(zip(model_moves, engine_moves, strict=False)) if a != b),
            min(len(model_moves), len(engine_moves)),
        )
        model_at = _wm(model_moves[i]) if i < len(model_moves) else "none left"
        engine_at = _wm(engine_moves[i]) if i < len(engine_moves) else "none left"
        clock = st.emitted[min(i, len(st.emitted) - 1)][0] if st.emitted else start
        upto = -(-(clock - start) // step)
        notes.append(
            f"the combined watermark moved {len(model_moves)} times in the model, and Flink's moves "
            f"differ from move {i} (model {model_at}, Flink {engine_at}; the model's tick {upto})"
        )
        # another order of a tick's emits at the union changes the moves (and only so shows): a
        # difference is the model's only if every emit up to there surely ran right after its
        # wait and left in slot order (the driven job: by construction)
        slip, tick, what = replay.order_slip_ms(upto)
        if slip > 0 and not replay.driven:
            unsure.append(
                f"up to tick {upto} (that move's) the emits were not surely "
                + ("sent in slot order" if what == "order" else "each right after its wait")
                + f" ({what}: {slip:.1f} ms at tick {tick})"
            )
    margin = None if replay.driven else _move_margin(result, replay, st)
    if margin is not None and margin[0] > 0:
        unsure.append(
            f"a move of the combined watermark at tick {margin[1]} reached the late filter "
            f"{margin[0]:.1f} ms after release {margin[1] + 1}'s first bundle"
        )
    agreed = not notes and wm_equal == len(st.arrivals)
    in_regime = replay.driven or (replay.slips_in_bounds and not unsure)
    if not in_regime:
        slips = ""
        if not replay.slips_in_bounds:
            slips = (
                f"slips {dict(replay.slips_ms)} ms (pace {replay.timing.pace_ms} ms, {replay.slots} emit "
                f"slots: allowed {replay.emit_slip_ms:g} ms for ends, a quarter pace for bundles, marks "
                f"and arrivals where a source ends, a half for other arrivals)"
            )
        notes.append("; ".join([*unsure, *([slips] if slips else [])]))
        if agreed:
            notes.append("everything compared agreed")
    verdict = EXACT if agreed and in_regime else (DIFFERS if in_regime else OUT_OF_REGIME)
    ok = f"{len(st.arrivals)} events, each met the same watermark"
    if replay.driven:
        ok += f"; {len(model_moves)} moves of the combined watermark, each the same"
    if margin is not None:
        ok += f"; every move reached the late filter >= {-margin[0]:.1f} ms before the next release"
    return Verdict(
        result.scenario.name,
        f"flink ({st.topology})",
        f"Flink {replay.version}",
        late_model=sum(1 for a in st.arrivals if a[6]),
        late_engine=replay.late,
        windows_model=len(model_fired),
        windows_engine=len(engine_fired),
        wm_checked=len(st.arrivals),
        wm_equal=wm_equal,
        wm_max_diff_ms=max_diff,
        verdict=verdict,
        note="; ".join(notes) or ok,
        pace_ms=None if replay.driven else replay.timing.pace_ms,
        runner="java" if replay.driven else "python",
    )


def _move_margin(result: LabResult, replay: FlinkReplay, st: FlinkStrategy) -> tuple[float, int] | None:
    """The latest a move of the combined watermark reached Flink's late filter after the first
    bundle of the release after its tick (ms, negative: before it), and that tick; over the
    moves that are the model's (their tick is known), None if none can be placed.

    Informative: in the regime every emit was sent before the next release's bundles and the
    way from the union to the late filter is one queue, so this stays below 0; a move after
    that bundle makes its events meet another watermark, which the comparison counts."""
    if not replay.move_at_ms:
        return None
    step = lab_strategies(result.scenario).flink_interval_ms
    start = result.scenario.start_time_ms
    engine = [(at, wm) for at, wm in zip(replay.move_at_ms, replay.moves, strict=True) if wm > _NO_WATERMARK]
    first = dict(replay.release_at_ms)
    worst: tuple[float, int] | None = None
    for (clock, wm), (at, got) in zip(st.emitted, engine, strict=False):
        if wm != got:
            break
        tick = -(-(clock - start) // step)
        nxt = first.get(tick + 1)
        if nxt is not None and (worst is None or at - nxt > worst[0]):
            worst = (at - nxt, tick)
    return worst
