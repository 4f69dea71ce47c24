"""``wait_any``: one wait across many segments, woken by data, a watermark rise, a seal or an error.

Over the embedded and the remote client (the ``client`` fixture) and on the store itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from segmentstore import (
    AttributeUpdate,
    InvalidArgumentError,
    ManualClock,
    SegmentStore,
    StoreClosedError,
    StoreConfig,
)
from segmentstore.client import SegmentStoreClient

_LONG_MS = 30_000  # a wait that only an event ends: if the wake-up is lost, the result is ()


def _segments(client: SegmentStoreClient, n: int) -> list[tuple[str, int, int]]:
    """``n`` empty segments, each requested at its tail with the watermark a tail read gives."""
    out = []
    for i in range(n):
        client.create_segment(f"w/{i}")
        r = client.read(f"w/{i}", 0, 10)
        out.append((f"w/{i}", 0, r.watermark))
    return out


def _waiting_reads(store: SegmentStore) -> int:
    c = store._container
    with c.lock:
        return sum(len(s.futures) for s in c.active_segments())


def _later(action: Callable[[], object], delay_s: float = 0.05) -> threading.Thread:
    t = threading.Timer(delay_s, action)
    t.start()
    return t


def test_nothing_new_waits_its_time_and_leaves_nothing_registered(
    client: SegmentStoreClient, store: SegmentStore
) -> None:
    reqs = _segments(client, 3)
    assert client.wait_any(reqs, 0) == ()
    assert client.wait_any(reqs, 30) == ()
    assert _waiting_reads(store) == 0


@pytest.mark.parametrize("what", ["data", "seal", "watermark", "delete", "truncate"])
def test_ready_at_once(client: SegmentStoreClient, clock: ManualClock, what: str) -> None:
    reqs = _segments(client, 3)
    client.append("w/0", b"abc")
    reqs[0] = ("w/0", 3, client.read("w/0", 3, 1).watermark)  # caught up again
    if what == "data":
        client.append("w/1", b"x")
    elif what == "seal":
        client.seal("w/1")
    elif what == "watermark":
        clock.advance(5)
        client.update_attributes("w/1", [AttributeUpdate(1, 1)])  # a write with no bytes
    elif what == "delete":
        client.delete("w/1")
    else:
        client.append("w/0", b"defg")
        client.truncate("w/0", 5)  # below the requested offset 3: its read would raise
        reqs[1], reqs[0] = reqs[0], reqs[1]
    assert client.wait_any(reqs, 0) == (1,)
    assert client.wait_any(reqs, _LONG_MS) == (1,)


def test_a_request_for_an_older_watermark_is_ready(client: SegmentStoreClient) -> None:
    reqs = _segments(client, 2)
    name, off, wm = reqs[1]
    reqs[1] = (name, off, wm - 1)  # the caller has not seen the current tail watermark yet
    assert client.wait_any(reqs, 0) == (1,)


@pytest.mark.parametrize("what", ["data", "seal", "watermark", "delete"])
def test_a_waiting_call_is_woken(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock, what: str
) -> None:
    reqs = _segments(client, 4)

    def act() -> None:
        clock.advance(3)
        if what == "data":
            store.append("w/2", b"new")
        elif what == "seal":
            store.seal("w/2")
        elif what == "watermark":
            store.update_attributes("w/2", [AttributeUpdate(7, 7)])
        else:
            store.delete("w/2")

    t = _later(act)
    try:
        assert client.wait_any(reqs, _LONG_MS) == (2,)
    finally:
        t.join()
    assert _waiting_reads(store) == 0


def test_the_advancer_moving_an_idle_segment_wakes_it(clock: ManualClock) -> None:
    from segmentstore.client import EmbeddedClient

    with SegmentStore(clock=clock, config=StoreConfig(max_watermark_lag_ms=100)) as s:
        c = EmbeddedClient(s)
        reqs = _segments(c, 2)
        clock.advance(150)

        def advance() -> None:
            s.advance_idle_watermarks()

        t = _later(advance)
        try:
            assert c.wait_any(reqs, _LONG_MS) == (0, 1)  # both idle: both rise in one pass
        finally:
            t.join()


def test_every_request_ready_at_the_wake_up_is_named(client: SegmentStoreClient, store: SegmentStore) -> None:
    reqs = _segments(client, 5)
    for i in (1, 3):
        store.append(f"w/{i}", b"x")
    assert client.wait_any(reqs, _LONG_MS) == (1, 3)


def test_concurrent_waiters_on_one_segment_all_wake(client: SegmentStoreClient, store: SegmentStore) -> None:
    reqs = _segments(client, 2)
    got: list[tuple[int, ...]] = []
    threads = [threading.Thread(target=lambda: got.append(client.wait_any(reqs, _LONG_MS))) for _ in range(4)]
    for th in threads:
        th.start()
    t = _later(lambda: store.append("w/1", b"x"), 0.2)
    for th in [*threads, t]:
        th.join()
    assert got == [(1,)] * 4
    assert _waiting_reads(store) == 0


@pytest.mark.parametrize(
    ("requests", "wait_ms", "named"),
    [
        ([], 0, "between 1 and"),
        ("w/0", 0, "sequence of"),
        ([("w/0", 0)], 0, "request 0"),
        ([("w/0", 0, 0), ("w/1", -1, 0)], 0, "request 1"),
        ([("w/0", 0, 2**63)], 0, "request 0"),
        ([(7, 0, 0)], 0, "request 0"),
        ([("w/0", True, 0)], 0, "request 0"),
        ([("w/0", 0, 0)], -5, "wait_ms"),
        ([("w/0", 0, 0)], 1.5, "wait_ms"),
    ],
)
def test_bad_requests_are_refused_and_register_nothing(
    client: SegmentStoreClient, store: SegmentStore, requests: object, wait_ms: object, named: str
) -> None:
    _segments(client, 2)
    with pytest.raises(InvalidArgumentError, match=named):
        client.wait_any(requests, wait_ms)  # type: ignore[arg-type]
    assert _waiting_reads(store) == 0


def test_a_missing_segment_is_ready_so_its_read_reports_it(client: SegmentStoreClient) -> None:
    reqs = [*_segments(client, 1), ("w/none", 0, 0)]
    assert client.wait_any(reqs, _LONG_MS) == (1,)


def test_closing_the_store_fails_a_waiting_call(clock: ManualClock) -> None:
    store = SegmentStore(clock=clock)
    store.create_segment("s")
    fut = store.wait_any([("s", 0, store.read("s", 0, 1).watermark)])
    assert not fut.done()
    store.close()
    with pytest.raises(StoreClosedError):
        fut.result(timeout=10)


def test_a_timeout_racing_a_wake_up_completes_once(store: SegmentStore) -> None:
    store.create_segment("s")
    for _ in range(200):
        n = store.get_info("s").length
        fut = store.wait_any([("s", n, store.read("s", n, 0).watermark)])
        t = threading.Thread(target=lambda: store.append("s", b"x"))
        t.start()
        got = fut.wait(0.0005)
        t.join()
        assert got in ((), (0,))
        assert fut.result() == got
    assert _waiting_reads(store) == 0
