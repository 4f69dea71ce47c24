"""``ingestion_runs``: a range's bytes as runs of one ingestion time, in one call (issue 14).

The Spark source gives every event its ingestion time from it. What it relies on: for
every byte of the range, the time of the first run whose last offset is at or above the
byte is ``ingestion_time_at`` of that byte; runs are in offset order and end at the
range's last byte; the same over a served store, after truncation and on a ticking
clock; bad ranges are refused naming the segment, and change nothing.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segmentstore import ManualClock, SegmentStore, TickingClock
from segmentstore.client import SegmentStoreClient
from segmentstore.errors import (
    BadOffsetError,
    InvalidArgumentError,
    SegmentNotFoundError,
    SegmentTruncatedError,
)

_names = itertools.count()


def check_runs(client: SegmentStoreClient, seg: str, begin: int, end: int) -> np.ndarray:
    runs = client.ingestion_runs(seg, begin, end)
    assert runs.dtype == np.int64 and runs.shape[0] == 2
    if begin == end:
        assert runs.shape == (2, 0)
        return runs
    lasts, times = runs
    assert lasts[-1] == end - 1 and lasts[0] >= begin
    assert np.all(np.diff(lasts) > 0) and np.all(np.diff(times) >= 0)
    offsets = np.arange(begin, end)
    want = [client.ingestion_time_at(seg, int(o)) for o in offsets]
    assert times[np.searchsorted(lasts, offsets)].tolist() == want
    return runs


@settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # below the profile's 100: each example writes a store
@given(
    steps=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), min_size=1, max_size=25),
    cut=st.integers(0, 10**6),
    a=st.integers(0, 10**6),
    b=st.integers(0, 10**6),
)
def test_every_byte_gets_its_ingestion_time(
    client: SegmentStoreClient, clock: ManualClock, steps: list[tuple[int, int]], cut: int, a: int, b: int
) -> None:
    """Appends at equal and rising times, a truncation, any range: embedded and remote."""
    seg = f"runs-{next(_names)}"
    client.create_segment(seg)
    for n, step in steps:
        clock.advance(step)
        client.append(seg, bytes(n))
    length = client.get_info(seg).length
    start = cut % length
    client.truncate(seg, start)
    lo, hi = sorted((start + a % (length - start + 1), start + b % (length - start + 1)))
    runs = check_runs(client, seg, lo, hi)
    assert runs.shape[1] <= len(steps)  # a few per append, never per byte
    assert client.get_info(seg).start_offset == start  # nothing changed


def test_runs_on_a_clock_of_its_own(ticking: tuple[TickingClock, SegmentStoreClient]) -> None:
    _, client = ticking
    client.create_segment("t")
    for i in range(50):
        client.append("t", bytes(1 + i % 7))
    length = client.get_info("t").length
    runs = check_runs(client, "t", 0, length)
    assert runs.shape[1] == 50  # every append at its own millisecond
    check_runs(client, "t", 3, length - 2)


def test_bad_ranges_name_the_segment_and_change_nothing(client: SegmentStoreClient) -> None:
    client.create_segment("r")
    client.append("r", b"0123456789")
    client.truncate("r", 4)
    with pytest.raises(SegmentTruncatedError, match=r"'r'.*begin 2.*4"):
        client.ingestion_runs("r", 2, 8)
    with pytest.raises(BadOffsetError, match=r"'r'.*end 11.*10"):
        client.ingestion_runs("r", 4, 11)
    with pytest.raises(InvalidArgumentError, match=r"'r'.*end 5 is below begin 7"):
        client.ingestion_runs("r", 7, 5)
    with pytest.raises(InvalidArgumentError, match=r"'r'.*2\.5"):
        client.ingestion_runs("r", 4, 2.5)  # type: ignore[arg-type]
    with pytest.raises(SegmentNotFoundError, match="'nope'"):
        client.ingestion_runs("nope", 0, 1)
    assert client.ingestion_runs("r", 10, 10).shape == (2, 0)
    info = client.get_info("r")
    assert (info.start_offset, info.length) == (4, 10)


def test_a_store_with_many_index_entries() -> None:
    """Thousands of runs (the numba-sized index): the runs of a middle range, exactly."""
    clock = ManualClock(5)
    with SegmentStore(clock=clock) as s:
        s.create_segment("big")
        for i in range(6_000):
            clock.advance(1 + i % 2)
            s.append("big", bytes(1 + i % 5))
        length = s.get_info("big").length
        runs = s.ingestion_runs("big", 1_000, length - 1_000)
        lasts, times = runs
        offsets = np.arange(1_000, length - 1_000)
        assert np.array_equal(times[np.searchsorted(lasts, offsets)], s.watermarks_at("big", offsets) + 1)
        s._check()


@pytest.mark.parametrize("cap", [1, 2, 7])
def test_a_range_of_many_runs_is_answered_in_parts(
    client: SegmentStoreClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, cap: int
) -> None:
    """Over ``MAX_RUNS`` runs, each answer covers a prefix, so no reply grows with the range;
    asking again from the byte after each (``runs_of``) gives every byte its time."""
    import segmentstore.core.watermark_index as wi
    from spark_source.fetching import runs_of

    client.create_segment("many")
    for i in range(30):
        clock.advance(1)
        client.append("many", bytes(1 + i % 4))
    length = client.get_info("many").length
    whole = client.ingestion_runs("many", 2, length - 1)  # 29 runs: byte 2 is in the second append
    monkeypatch.setattr(wi, "MAX_RUNS", cap)
    first = client.ingestion_runs("many", 2, length - 1)
    assert np.array_equal(first, whole[:, :cap]) and first[0, -1] < length - 2  # a prefix
    runs = runs_of(client, "many", 2, length - 1)
    assert np.array_equal(runs, whole) and runs[0, -1] == length - 2
    offsets = np.arange(2, length - 1)
    want = [client.ingestion_time_at("many", int(o)) for o in offsets]
    assert runs[1][np.searchsorted(runs[0], offsets)].tolist() == want


def test_runs_of_refuses_an_answer_that_makes_no_progress(store: SegmentStore) -> None:
    """A store answering without runs from the asked byte would loop the reader forever: it is an error."""
    from segmentstore.client import EmbeddedClient
    from segmentstore.errors import ProtocolError
    from spark_source.fetching import runs_of

    class Stuck(EmbeddedClient):
        def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
            return np.array([[begin - 1], [5]], np.int64)  # a run ending before the asked byte

    c = Stuck(store)
    c.create_segment("x")
    c.append("x", b"abc")
    with pytest.raises(ProtocolError, match=r"'x'.*\[1, 3\)"):
        runs_of(c, "x", 1, 3)
