"""Pravega's table segments (segmentstore.pravega.tables, table_segment, wire_tables): every table command
over raw sockets with Pravega's answers at the edges (bad versions, missing keys, delta positions),
a failed update leaving the table as it was, malformed commands, and the tables' durability and
compaction under a random workload checked against a model."""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from pravega_helpers import WireClient

from segmentstore import ManualClock, SegmentStore
from segmentstore.errors import StorageError
from segmentstore.pravega import wire_replies as rep
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.auth import DelegationTokens
from segmentstore.pravega.endpoints import PravegaEndpoints
from segmentstore.pravega.errors import TableKeyBadVersionError, TableKeyNotFoundError
from segmentstore.pravega.table_log import RECORD_HEADER
from segmentstore.pravega.table_segment import NO_VERSION, NOT_EXISTS
from segmentstore.pravega.tables import TABLE_PREFIX, TableSegments, tables_of
from segmentstore.pravega.wire import TableKey, TableValue
from segmentstore.pravega.wire_server import WireLimits

T = "sc/rg_kvtable/0.#epoch.0"


@pytest.fixture
def store(clock: ManualClock) -> Iterator[SegmentStore]:
    s = SegmentStore(clock=clock)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def ep(store: SegmentStore) -> Iterator[PravegaEndpoints]:
    e = PravegaEndpoints(store, "127.0.0.1", 0, 0, None, WireLimits(tail_wait_s=0.3))
    e.start()
    try:
        yield e
    finally:
        e.stop()


def _k(data: bytes, version: int = NO_VERSION) -> TableKey:
    return TableKey(4 + len(data) + 8, data, version)


def _put(
    rid: int, entries: list[tuple[bytes, bytes, int]], offset: int = -1, table: str = T
) -> req.UpdateTableEntries:
    wire = tuple((_k(k, ver), TableValue(4 + len(v), v)) for k, v, ver in entries)
    return req.UpdateTableEntries(rid, table, "", wire, offset)


def _remove(rid: int, keys: list[tuple[bytes, int]], offset: int = -1) -> req.RemoveTableKeys:
    return req.RemoveTableKeys(rid, T, "", tuple(_k(k, v) for k, v in keys), offset)


def _size(key: bytes, value: bytes) -> int:
    return RECORD_HEADER.size + len(key) + len(value)


def _read(c: WireClient, *keys: bytes) -> list[tuple[bytes, bytes, int]]:
    got = c.call(req.ReadTable(99, T, "", tuple(_k(k) for k in keys)))
    assert isinstance(got, rep.TableRead), got
    return [(k.data, v.data, k.key_version) for k, v in got.entries]


def _everything(c: WireClient) -> list[tuple[bytes, bytes, int]]:
    got = c.call(req.ReadTableEntries(98, T, "", 1000, b""))
    assert isinstance(got, rep.TableEntriesRead), got
    return [(k.data, v.data, k.key_version) for k, v in got.entries]


def test_updates_with_key_versions_answer_as_pravega(store: SegmentStore, ep: PravegaEndpoints) -> None:
    with WireClient(ep.segment_port) as c:
        assert c.call(req.CreateTableSegment(1, T, "")) == rep.SegmentCreated(1, T)
        again = c.call(req.CreateTableSegment(2, T, ""))
        assert isinstance(again, rep.SegmentAlreadyExists) and again.request_id == 2
        # unconditional: versions are the entries' offsets in the table's log
        ok = c.call(_put(3, [(b"a", b"1", NO_VERSION), (b"b", b"22", NOT_EXISTS)]))
        assert ok == rep.TableEntriesUpdated(3, (0, _size(b"a", b"1")))
        va, vb = ok.updated_versions
        assert _read(c, b"a", b"b", b"zz") == [(b"a", b"1", va), (b"b", b"22", vb), (b"zz", b"", -1)]
        before = (_everything(c), store.get_info(TABLE_PREFIX + T).length)
        refusals = [
            (_put(4, [(b"a", b"x", NOT_EXISTS)]), rep.TableKeyBadVersion),  # must not exist, exists
            (_put(5, [(b"a", b"x", vb)]), rep.TableKeyBadVersion),  # another key's version
            (_put(6, [(b"new", b"x", va)]), rep.TableKeyDoesNotExist),  # a version of a missing key
            # every condition checked first: one bad key refuses the others too ...
            (_put(7, [(b"c", b"x", NO_VERSION), (b"a", b"x", 12345)]), rep.TableKeyBadVersion),
            # ... and a missing key outranks a bad version, as in Pravega's ContainerKeyIndex
            (_put(8, [(b"a", b"x", 12345), (b"new", b"x", 7)]), rep.TableKeyDoesNotExist),
            (_remove(9, [(b"a", vb)]), rep.TableKeyBadVersion),
            (_remove(10, [(b"gone", 3)]), rep.TableKeyDoesNotExist),
        ]
        for cmd, kind in refusals:
            got = c.call(cmd)
            assert isinstance(got, kind) and got.request_id == cmd.request_id and got.segment == T, (cmd, got)
        # a conditional length (table_segment_offset) that is not the table's: SegmentIsTruncated with it
        length = before[1]
        stale = c.call(_put(11, [(b"c", b"x", NO_VERSION)], offset=length - 1))
        assert stale == rep.SegmentIsTruncated(11, T, length, stale.server_stack_trace, length - 1)
        assert (_everything(c), store.get_info(TABLE_PREFIX + T).length) == before  # nothing changed
        # the same key twice with the version it has: both pass, the last value wins (as the synchronizer's)
        twice = c.call(_put(12, [(b"a", b"2", va), (b"a", b"3", va), (b"b", b"4", vb)], offset=length))
        assert isinstance(twice, rep.TableEntriesUpdated) and len(twice.updated_versions) == 3
        v1, v2, v3 = twice.updated_versions
        assert length == v1 < v2 < v3
        assert _read(c, b"a", b"b") == [(b"a", b"3", v2), (b"b", b"4", v3)]
        assert c.call(_remove(13, [(b"a", v2), (b"never", NOT_EXISTS), (b"never2", NO_VERSION)])) == (
            rep.TableKeysRemoved(13, T)
        )
        assert _read(c, b"a", b"b") == [(b"a", b"", -1), (b"b", b"4", v3)]
        info = c.call(req.GetTableSegmentInfo(14, T, ""))
        assert info == rep.TableSegmentInfo(14, T, 0, store.get_info(TABLE_PREFIX + T).length, 1, 0)
    tables_of(store)._check()


def test_keys_and_entries_are_paged_with_continuation_tokens(ep: PravegaEndpoints) -> None:
    keys = [b"key-%02d" % i for i in range(25)]
    with WireClient(ep.segment_port) as c:
        c.call(req.CreateTableSegment(1, T, ""))
        versions = c.call(_put(2, [(k, k.upper(), NO_VERSION) for k in reversed(keys)])).updated_versions
        version_of = dict(zip(reversed(keys), versions, strict=True))
        for cls, reply in (
            (req.ReadTableKeys, rep.TableKeysRead),
            (req.ReadTableEntries, rep.TableEntriesRead),
        ):
            token, pages = b"", []
            while True:
                got = c.call(cls(3, T, "", 10, token))
                assert isinstance(got, reply), got
                items = got.keys if isinstance(got, rep.TableKeysRead) else tuple(k for k, _ in got.entries)
                if not items:
                    assert got.continuation_token == token  # an empty page ends it, and stays empty
                    break
                pages.append([(k.data, k.key_version) for k in items])
                token = got.continuation_token
            assert [len(p) for p in pages] == [10, 10, 5]
            assert [x for p in pages for x in p] == [(k, version_of[k]) for k in keys]  # in key order
        bad = c.call(req.ReadTableKeys(4, T, "", 10, b"not a token"))
        assert (
            isinstance(bad, rep.ErrorMessage) and bad.error_code == 0 and "continuation token" in bad.message
        )
        assert isinstance(
            c.call(req.ReadTableEntries(5, "sc/none_kvtable/0.#epoch.0", "", 10, b"")), rep.NoSuchSegment
        )


def test_delta_reads_move_forward_and_answer_pravegas_edges(
    store: SegmentStore, ep: PravegaEndpoints
) -> None:
    with WireClient(ep.segment_port) as c:
        c.call(req.CreateTableSegment(1, T, ""))
        empty = c.call(req.ReadTableEntriesDelta(2, T, "", 0, 10))
        assert empty == rep.TableEntriesDeltaRead(2, T, (), False, True, 0)
        for i in range(12):
            c.call(_put(3, [(b"k%d" % (i % 5), b"v%d" % i, NO_VERSION)]))
        v_k0 = _read(c, b"k0")[0][2]
        c.call(_put(4, [(b"tomb", b"tombstone", NO_VERSION)]))
        c.call(_remove(5, [(b"k1", NO_VERSION), (b"tomb", NO_VERSION)]))
        length = store.get_info(TABLE_PREFIX + T).length
        # followed from 0 three keys at a time, every position moves forward and ends at the length
        position, seen, positions = 0, {}, []
        while True:
            got = c.call(req.ReadTableEntriesDelta(6, T, "", position, 3))
            assert isinstance(got, rep.TableEntriesDeltaRead) and not got.should_clear
            if not got.entries:  # the rest were removals: skipped over, to the end
                assert got.reached_end and got.last_position == length
                break
            assert len(got.entries) <= 3 and got.last_position > position
            assert got.reached_end == (got.last_position == length)
            seen.update({k.data: (v.data, k.key_version) for k, v in got.entries})
            position = got.last_position
            positions.append(position)
        assert positions == sorted(set(positions))
        # a key removed in a reply's range is left out of it (Pravega's delta never says a key went);
        # k1 was seen in an earlier reply, before its removal, as a reader would have seen it
        assert b"tomb" not in seen and seen.pop(b"k1")[0] == b"v11"
        assert seen == {k: (v, ver) for k, v, ver in _everything(c)}
        assert seen[b"k0"] == (b"v10", v_k0)
        # one reply holds the latest of each key changed from the position on
        whole = c.call(req.ReadTableEntriesDelta(7, T, "", 0, 100))
        assert whole.last_position == length and len(whole.entries) == 4  # k0, k2, k3, k4
        for bad in (
            length + 1,
            -1,
            3,
            length - 1,
        ):  # past the end, negative, inside a record: IllegalArgument
            got = c.call(req.ReadTableEntriesDelta(8, T, "", bad, 10))
            assert isinstance(got, rep.ErrorMessage) and got.error_code == 0 and str(bad) in got.message, got
        missing = c.call(req.ReadTableEntriesDelta(9, "sc/x_kvtable/0.#epoch.0", "", 0, 10))
        assert isinstance(missing, rep.NoSuchSegment)  # the client's "the reader group is deleted"


def test_deleting_a_table_segment(store: SegmentStore, ep: PravegaEndpoints) -> None:
    with WireClient(ep.segment_port) as c:
        c.call(req.CreateTableSegment(1, T, ""))
        c.call(_put(2, [(b"k", b"v", NO_VERSION)]))
        not_empty = c.call(req.DeleteTableSegment(3, T, True, ""))
        assert isinstance(not_empty, rep.TableSegmentNotEmpty) and not_empty.request_id == 3
        assert _read(c, b"k")[0][1] == b"v"
        assert c.call(req.DeleteTableSegment(4, T, False, "")) == rep.SegmentDeleted(4, T)
        assert not store.exists(TABLE_PREFIX + T)
        for cmd in (
            req.DeleteTableSegment(5, T, False, ""),
            _put(6, [(b"k", b"v", NO_VERSION)]),
            req.ReadTable(7, T, "", (_k(b"k"),)),
            req.GetTableSegmentInfo(8, T, ""),
        ):
            got = c.call(cmd)
            assert isinstance(got, rep.NoSuchSegment) and got.segment == T, got
        assert c.call(req.CreateTableSegment(9, T, "")) == rep.SegmentCreated(9, T)
        assert c.call(req.DeleteTableSegment(10, T, True, "")) == rep.SegmentDeleted(10, T)
        # a table is no stream segment: stream commands do not reach it
        assert isinstance(c.call(req.ReadSegment(T, 0, 100, "", 11)), rep.NoSuchSegment)


def test_table_commands_need_a_delegation_token_when_the_server_has_one(store: SegmentStore) -> None:
    ep = PravegaEndpoints(store, "127.0.0.1", 0, 0, "secret", WireLimits())
    ep.start()
    try:
        with WireClient(ep.segment_port) as c:
            refused = c.call(req.CreateTableSegment(1, T, ""))
            assert isinstance(refused, rep.AuthTokenCheckFailed) and not store.exists(TABLE_PREFIX + T)
            token = DelegationTokens("secret").issue("sc/rg_kvtable")
            assert c.call(req.CreateTableSegment(2, T, token)) == rep.SegmentCreated(2, T)
            put = req.UpdateTableEntries(3, T, token, ((_k(b"k"), TableValue(5, b"v")),), -1)
            assert isinstance(c.call(put), rep.TableEntriesUpdated)
    finally:
        ep.stop()


@pytest.mark.parametrize(
    "payload, why",
    [
        (struct.pack(">q", 1) + struct.pack(">H", 1) + b"t", "UpdateTableEntries: the payload ends"),
        (
            struct.pack(">q", 1)
            + struct.pack(">H", len(T))
            + T.encode()
            + b"\0\0"
            + struct.pack(">I", 10**6),
            "UpdateTableEntries: a count of 1000000 items cannot fit",
        ),
    ],
)
def test_a_malformed_table_command_closes_only_its_connection(
    store: SegmentStore, ep: PravegaEndpoints, caplog: pytest.LogCaptureFixture, payload: bytes, why: str
) -> None:
    with WireClient(ep.segment_port) as good:
        good.call(req.CreateTableSegment(1, T, ""))
        good.call(_put(2, [(b"k", b"v", NO_VERSION)]))
        with (
            WireClient(ep.segment_port) as bad,
            caplog.at_level(logging.WARNING, "segmentstore.pravega.wire_server"),
        ):
            bad.send_raw(struct.pack(">ii", 74, len(payload)) + payload)
            assert bad.closed_by_server()
        assert any(why in r.getMessage() for r in caplog.records), caplog.text
        assert _read(good, b"k")[0][1] == b"v"  # the others and the table are untouched
        too_long = good.call(_put(3, [(b"x" * 8193, b"v", NO_VERSION)]))
        assert isinstance(too_long, rep.ErrorMessage) and "8193" in too_long.message
        assert _everything(good) == [(b"k", b"v", 0)]


Model = dict[str, dict[bytes, tuple[bytes, int]]]


def _random_ops(tables: TableSegments, rng: random.Random, steps: int, model: Model) -> None:
    """A random workload of conditional and unconditional updates and removals, checked against ``model``."""
    names = sorted(model)
    for _ in range(steps):
        name = rng.choice(names)
        m = model[name]
        keys = [b"k%d" % rng.randrange(12) for _ in range(rng.randint(1, 3))]

        def version_for(k: bytes, m: dict[bytes, tuple[bytes, int]] = m) -> int:
            roll = rng.random()
            if roll < 0.3:
                return NO_VERSION
            if roll < 0.5:
                return NOT_EXISTS
            if roll < 0.9 and k in m:
                return m[k][1]
            return rng.randrange(0, 5000)

        conds = [(k, version_for(k)) for k in keys]
        expect_missing = any(v not in (NO_VERSION, NOT_EXISTS) and k not in m for k, v in conds)
        expect_bad = any(k in m and v != NO_VERSION and v != m[k][1] for k, v in conds)
        before = tables.table(name).length
        if rng.random() < 0.7:
            entries = [(k, b"v%d" % rng.randrange(10**6) * rng.randint(1, 40), v) for k, v in conds]
            try:
                versions = tables.put(name, entries, -1)
            except TableKeyNotFoundError:
                assert expect_missing
            except TableKeyBadVersionError:
                assert expect_bad and not expect_missing
            else:
                assert not expect_missing and not expect_bad
                for (k, val, _), ver in zip(entries, versions, strict=True):
                    m[k] = (val, ver)
        else:
            try:
                tables.remove(name, conds, -1)
            except TableKeyNotFoundError:
                assert expect_missing
            except TableKeyBadVersionError:
                assert expect_bad and not expect_missing
            else:
                assert not expect_missing and not expect_bad
                for k, _ in conds:
                    m.pop(k, None)
        t = tables.table(name)
        if expect_missing or expect_bad:
            assert t.length == before  # a refused update leaves the table as it was
        t._check()
        got = tables.get(name, sorted(m))
        assert {k: (v, ver) for k, v, ver in got} == m


def test_tables_under_a_random_workload_compact_and_survive_a_restart(tmp_path: Path) -> None:
    rng = random.Random(7)
    names = ["s/a_kvtable/0.#epoch.0", "s/b_kvtable/0.#epoch.0"]
    store = SegmentStore(clock=ManualClock(1_000), data_dir=tmp_path / "d")
    tables = TableSegments(store, compact_min_bytes=2_000)
    for n in names:
        tables.create(n)
    model: Model = {n: {} for n in names}
    _random_ops(tables, rng, 600, model)
    tables._check()
    assert tables.compactions >= 3
    compacted = tables.table(names[0])
    assert compacted.start > 0 and store.get_info(TABLE_PREFIX + names[0]).start_offset == compacted.start
    # a reader behind the compaction is told to clear, and gets every live key from the start on
    entries, should_clear, reached_end, last = tables.delta(names[0], 0, 1000, 1 << 20)
    assert should_clear and reached_end and last == compacted.length
    assert {k: (v, ver) for k, v, ver in entries} == model[names[0]]
    store.close()  # the log is all there is: the index is replayed from it
    store = SegmentStore(clock=ManualClock(1_000), data_dir=tmp_path / "d")
    try:
        again = tables_of(store)
        for n in names:
            assert {k: (v, ver) for k, v, ver in again.get(n, sorted(model[n]))} == model[n]
            again.table(n)._check()
        _random_ops(again, rng, 100, model)  # and carries on, conditions matching the versions recovered
    finally:
        store.close()


def test_an_update_the_store_refuses_leaves_the_table_as_it_was(
    store: SegmentStore, ep: PravegaEndpoints
) -> None:
    tables = tables_of(store)
    tables.create(T)
    (v,) = tables.put(T, [(b"k", b"v", NO_VERSION)], -1)
    inner = store.append

    def full_disk(*args: object, **kw: object) -> object:
        raise StorageError("cannot write the log: No space left on device (errno 28)", "wal", 28)

    store.append = full_disk  # type: ignore[method-assign]
    try:
        with pytest.raises(StorageError):
            tables.put(T, [(b"k", b"w", v), (b"k2", b"x", NOT_EXISTS)], -1)
        with pytest.raises(StorageError):
            tables.remove(T, [(b"k", v)], -1)
        with WireClient(ep.segment_port) as c:  # over the wire: the connection closes, the client retries
            c.send(_put(1, [(b"k", b"w", v)]))
            assert c.closed_by_server()
    finally:
        store.append = inner  # type: ignore[method-assign]
    assert tables.get(T, [b"k", b"k2"]) == [(b"k", b"v", v), (b"k2", b"", NOT_EXISTS)]
    assert store.get_info(TABLE_PREFIX + T).length == tables.table(T).length
    tables._check()
    assert tables.put(T, [(b"k", b"w", v)], -1) != [v]  # and the same update goes through once it can
