"""File-system faults: a failed operation changes nothing, before and after a restart, and says which file.

A full disk (ENOSPC) or a directory that cannot be written (EACCES) is injected at the
file layer (``disk_faults``). Every operation refused so is absent after a restart too
(also after kill -9), the client (embedded or remote) gets a ``StorageError`` naming
the path instead of an internal server error, and a store that cannot write its log at
start-up opens read-only: it serves reads and refuses writes with ``StoreReadOnlyError``.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from disk_faults import disk_fault

from segmentstore import (
    AttributeUpdate,
    ManualClock,
    SegmentStore,
    StorageError,
    StoreConfig,
    StoreReadOnlyError,
)
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.controller.controller import controller_of
from segmentstore.core.operations import CreateSegment
from segmentstore.durable.log import scan_log
from segmentstore.net.server import SegmentStoreServer

T0 = 1_000_000
CFG = StoreConfig(advancer_thread=False, sync="always")


def _open(d: Path) -> SegmentStore:
    return SegmentStore(ManualClock(T0), CFG, data_dir=d)


@pytest.fixture(params=["embedded", "remote"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SegmentStore, SegmentStoreClient]]:
    """A durable store and a client of it (direct, or through a server on loopback)."""
    store = _open(tmp_path / "d")
    try:
        if request.param == "embedded":
            yield store, EmbeddedClient(store)
        else:
            with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
                yield store, c
    finally:
        store.close()


def _files(d: Path) -> set[str]:
    return {p.name for p in (d / "segments").iterdir()}


# ---------------------------------------------------------------------- a failed operation changes nothing
@pytest.mark.parametrize("where", ["segments", "log"])
def test_a_create_the_disk_refuses_is_absent_before_and_after_a_restart(
    served: tuple[SegmentStore, SegmentStoreClient], tmp_path: Path, where: str
) -> None:
    """The data file cannot be made (a read-only directory), or the log cannot be written
    (a full disk): the create fails with a StorageError naming that file, and the segment,
    its transaction and any file made for them are absent, also after a restart."""
    store, client = served
    d = tmp_path / "d"
    client.create_segment("parent")
    before = _files(d)
    err = errno.EACCES if where == "segments" else errno.ENOSPC
    with disk_fault(d / where, err, open_error=where == "segments") as failed:
        with pytest.raises(StorageError) as e1:
            client.create_segment("lost")
        with pytest.raises(StorageError) as e2:
            client.create_transaction("parent")
    assert failed, "the fault was never hit"
    for e in (e1.value, e2.value):
        assert e.errno == err
        assert e.path in failed and e.path in str(e), e
        assert f"/{where}/" in e.path
        assert "internal server error" not in str(e)
    assert not client.exists("lost")
    assert store.list_segments() == ["parent"]
    assert _files(d) == before, "a file made for the failed create was left behind"
    logged = [op for op in scan_log(d / "log", repair=False) if isinstance(op, CreateSegment)]
    assert [op.name for op in logged] == ["parent"], "a failed create is in the log (it would come back)"
    client.create_segment("later")  # the store goes on once the disk takes writes
    store.close()
    with _open(d) as again:
        assert sorted(again.list_segments()) == ["later", "parent"]
        again._check()


def test_appends_merges_and_updates_the_log_refuses_change_nothing(
    served: tuple[SegmentStore, SegmentStoreClient], tmp_path: Path
) -> None:
    store, client = served
    d = tmp_path / "d"
    client.create_segment("s")
    client.append("s", b"kept")
    txn = client.create_transaction("s")
    client.append(txn, b"txn")
    client.seal(txn)
    with disk_fault(d / "log"):
        with pytest.raises(StorageError, match="operation log file"):
            client.append("s", b"lost")
        with pytest.raises(StorageError, match="operation log file"):
            client.merge_transaction(txn)
        with pytest.raises(StorageError, match="operation log file"):
            client.update_attributes("s", [AttributeUpdate(7, 1)])
        with pytest.raises(StorageError, match="operation log file"):
            client.seal("s")
    for s in (store, None):
        if s is None:
            store.close()
            s = _open(d)
        try:
            assert s.read("s", 0, 100).data == b"kept"
            assert s.exists(txn) and not s.get_info("s").sealed
            assert 7 not in s.get_attributes("s")
            s._check()
        finally:
            if s is not store:
                s.close()


def test_stream_changes_the_disk_refuses_leave_no_stream_and_no_transaction(
    served: tuple[SegmentStore, SegmentStoreClient], tmp_path: Path
) -> None:
    store, client = served
    d = tmp_path / "d"
    client.create_stream("sc/kept", 2)
    with disk_fault(d / "log"):
        with pytest.raises(StorageError, match="operation log file"):
            client.create_stream("sc/lost", 3)
        with pytest.raises(StorageError, match="operation log file"):
            client.begin_transaction("sc/kept")
    assert client.list_streams() == ["sc/kept"]
    before = sorted(store.list_segments())
    store.close()
    with _open(d) as again:
        assert sorted(again.list_segments()) == before
        assert controller_of(again).list_streams() == ["sc/kept"]
        controller_of(again).create_stream("sc/lost", 3)  # the name is free
        again._check()


# ---------------------------------------------------------------------- kill -9 after a failed create
CRASHER = r"""
import errno, os, sys
from segmentstore import ManualClock, SegmentStore, StoreConfig
d = sys.argv[1]
s = SegmentStore(ManualClock(1_000_000), StoreConfig(advancer_thread=False, sync="always"), data_dir=d)
s.create_segment("parent")
real_open = os.open
def refuse(path, flags, *a, **k):
    if "/segments/" in os.fspath(path) and flags & os.O_CREAT:
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
    return real_open(path, flags, *a, **k)
os.open = refuse
for call, arg in ((s.create_segment, "lost"), (s.create_transaction, "parent")):
    try:
        call(arg)
        print("created", flush=True)
    except Exception as e:
        print(type(e).__name__, e, flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_failed_create_stays_absent_after_kill_9(tmp_path: Path) -> None:
    d = tmp_path / "d"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.run(
        [sys.executable, "-c", CRASHER, str(d)], capture_output=True, text=True, timeout=120, env=env
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2 and all(
        line.startswith("StorageError cannot create segment data file") for line in lines
    ), p.stdout + p.stderr
    with _open(d) as s:
        assert s.list_segments() == ["parent"]
        s._check()


# ---------------------------------------------------------------------- a full disk at start-up
def test_a_store_on_a_full_disk_starts_read_only_serves_reads_refuses_writes(tmp_path: Path) -> None:
    d = tmp_path / "d"
    with _open(d) as s:
        s.create_segment("s")
        s.append("s", b"abc")
        s.update_attributes("s", [AttributeUpdate(5, 9)])
        wm = s.watermark_at("s", 0)
    with disk_fault(d) as failed:
        store = _open(d)
        try:
            cause = store.read_only
            assert isinstance(cause, StorageError) and cause.errno == errno.ENOSPC
            assert "/log/wal-" in cause.path and cause.path in failed and cause.path in str(cause)
            with (
                SegmentStoreServer(store) as srv,
                RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as remote,
            ):
                for c in (EmbeddedClient(store), remote):
                    assert c.read("s", 0, 10).data == b"abc"
                    assert c.get_attributes("s")[5] == 9
                    assert c.watermark_at("s", 0) == wm
                    assert c.exists("s") and c.get_info("s").length == 3
                    for method, args in (
                        (c.append, ("s", b"x")),
                        (c.create_segment, ("t",)),
                        (c.update_attributes, ("s", [AttributeUpdate(5, 10)])),
                        (c.seal, ("s",)),
                    ):
                        with pytest.raises(StoreReadOnlyError, match="read-only") as e:
                            method(*args)  # type: ignore[operator]
                        assert e.value.path == cause.path and cause.path in str(e.value)
            assert store.advance_idle_watermarks() == []
            store._check()
        finally:
            store.close()
    with _open(d) as s:  # space again: writable, nothing lost
        assert s.read_only is None
        s.append("s", b"d")
        assert s.read("s", 0, 10).data == b"abcd"


def test_a_disk_that_fills_while_the_store_runs_fails_writes_until_space_is_back(tmp_path: Path) -> None:
    """Snapshots fall due while the disk is full: they fail (leaving no temporary file), every
    write fails changing nothing, and once there is space the store writes and restarts whole."""
    d = tmp_path / "d"
    cfg = StoreConfig(advancer_thread=False, sync="always", snapshot_every_ops=3)
    with SegmentStore(ManualClock(T0), cfg, data_dir=d) as s:
        s.create_segment("s")
        for i in range(5):
            s.append("s", bytes([i]))
        with disk_fault(d):
            for _ in range(5):
                with pytest.raises(StorageError) as e:
                    s.append("s", b"x")
                assert e.value.errno == errno.ENOSPC and str(d) in e.value.path
            assert s.read_only is None  # running: no switch, the next write tries again
        assert not [p for p in d.rglob("*.tmp")], "a failed snapshot left its temporary file"
        for i in range(5, 10):
            s.append("s", bytes([i]))
        s._check()
    with _open(d) as s:
        assert s.read("s", 0, 100).data == bytes(range(10))
        s._check()
