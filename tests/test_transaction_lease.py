"""Transaction leases (Pravega's transaction timeout): an open transaction left unwritten is aborted.

A writer that dies or a Spark task attempt that fails leaves its transaction open; the
store aborts it once its lease (``StoreConfig.transaction_lease_ms``, counted on the
ingestion clock from its last write or ping) runs out, in the advancer's pass, and
counts it in ``advancer_stats``. Sealed (committing) transactions stay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from readergroup import TransactionalEventWriter
from segmentstore import (
    ManualClock,
    SegmentNotFoundError,
    SegmentStore,
    StoreConfig,
    WallClock,
)
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

LEASE = 5_000


@pytest.fixture
def leased(clock: ManualClock) -> Iterator[SegmentStore]:
    s = SegmentStore(clock=clock, config=StoreConfig(transaction_lease_ms=LEASE))
    try:
        yield s
    finally:
        s.close()


def test_an_unwritten_transaction_is_aborted_when_its_lease_runs_out(
    leased: SegmentStore, clock: ManualClock
) -> None:
    leased.create_segment("p")
    idle = leased.create_transaction("p")
    busy = leased.create_transaction("p")
    committing = leased.create_transaction("p")
    leased.append(committing, b"c")
    leased.seal(committing)
    waiting = leased.read_future(idle, 0, 10)
    clock.advance(LEASE - 1)
    leased.append(busy, b"x")  # a write renews the lease
    leased.advance_idle_watermarks()
    assert leased.exists(idle)
    clock.advance(1)
    leased.advance_idle_watermarks()
    assert not leased.exists(idle) and leased.exists(busy) and leased.exists(committing)
    with pytest.raises(SegmentNotFoundError, match="expired"):
        waiting.wait(5)
    assert leased.advancer_stats.transactions_expired == 1
    clock.advance(LEASE)
    leased.advance_idle_watermarks()
    assert not leased.exists(busy) and leased.exists(committing)
    assert leased.advancer_stats.transactions_expired == 2
    assert leased.merge_transaction(committing) == 0  # a sealed one is committed still
    assert leased.read("p", 0, 10).data == b"c"
    leased._check()


def test_an_expiry_is_durable(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    config = StoreConfig(transaction_lease_ms=LEASE, advancer_thread=False)
    with SegmentStore(clock=clock, config=config, data_dir=tmp_path) as st:
        st.create_segment("p")
        txn = st.create_transaction("p")
        st.append(txn, b"lost")
        kept = st.create_transaction("p")
        clock.advance(LEASE)
        st.append(kept, b"kept")
        st.advance_idle_watermarks()
        assert not st.exists(txn)
    with SegmentStore(clock=clock, config=config, data_dir=tmp_path) as st:
        assert not st.exists(txn) and st.exists(kept)
        st._check()


@pytest.fixture(params=["embedded", "remote"])
def leased_client(request: pytest.FixtureRequest, leased: SegmentStore) -> Iterator[SegmentStoreClient]:
    if request.param == "embedded":
        yield EmbeddedClient(leased)
        return
    with SegmentStoreServer(leased) as server, RemoteClient(("127.0.0.1", server.port), timeout_s=20) as c:
        yield c


def test_a_pinged_stream_transaction_lives_and_an_expired_one_cannot_commit(
    leased: SegmentStore, leased_client: SegmentStoreClient, clock: ManualClock
) -> None:
    leased_client.create_stream("t/s", 3)
    writer = TransactionalEventWriter(leased_client, "t/s", writer_id=7)
    pinged = writer.begin_txn()
    dead = writer.begin_txn()
    pinged.write_event("k", b"a")
    dead.write_event("k", b"b")
    dead.flush()
    for _ in range(3):
        clock.advance(LEASE - 1)
        pinged.ping()
        leased.advance_idle_watermarks()
    pinged.commit()
    with pytest.raises(SegmentNotFoundError):
        dead.commit()
    dead.abort()  # aborting an expired transaction is fine: nothing is left
    payloads = []
    for seg in leased_client.get_stream("t/s").active_segments:
        payloads.append(leased_client.read(seg.name, 0, 1 << 20).data)
    data = b"".join(payloads)
    assert b"a" in data and b"b" not in data
    assert leased.advancer_stats.transactions_expired == 3  # the 3 segments of ``dead``
    leased._check()


def test_the_advancer_thread_expires_transactions_on_a_wall_clock() -> None:
    config = StoreConfig(transaction_lease_ms=100, polling_period_ms=20, advancer_thread=True)
    with SegmentStore(clock=WallClock(), config=config) as st:
        st.create_segment("p")
        txn = st.create_transaction("p")
        deadline = monotonic_s() + 30
        while st.exists(txn) and monotonic_s() < deadline:
            threading.Event().wait(0.02)
        assert not st.exists(txn)
        assert st.advancer_stats.transactions_expired == 1
