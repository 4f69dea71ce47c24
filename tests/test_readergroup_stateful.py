"""Reader groups under random histories: docs/design.md §4 invariants 1 and 2 after every step.

A hypothesis state machine over a ``ManualClock`` and the embedded client (and, with
fewer examples, the remote client through a server on loopback): writers,
transactions (committed, aborted, rolled over a scale), splits and merges, readers
joining, crashing (with or without their last position) and leaving, per-event and
batch reads, checkpoints, resets to the head, the tail or a checkpoint (new epochs),
clock advances and watermark-advancer passes. Checked on every read: no event at or
below a watermark the group emitted in its epoch (invariant 1), each reader's
watermarks strictly ascend within an epoch, nothing of an older epoch is delivered,
ingestion times are the store's, and the reader's ``_check()`` (its segment inputs
too); after every step: the group watermark never decreases within an epoch, and
``_check()`` of the group state, every reader and the store. At the
end the readers drain the streams and every event of the current epoch — every event
in the store at or after the epoch's starting positions, successors included — was
delivered at least once.

Run longer with ``pytest tests/test_readergroup_stateful.py --hypothesis-profile=long``.
"""

from __future__ import annotations

from concurrent.futures import Future

from batches import event_rows
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import CheckpointAbortedError, MaxCheckpointsExceededError
from readergroup.format.events import KIND_EVENT, decode_frames
from readergroup.group_state.checkpoint import Checkpoint
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead, EventReader, ReadKind
from readergroup.writing.transaction import Transaction, TransactionalEventWriter
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.net.server import SegmentStoreServer

STREAMS = ("sim/a", "sim/b")
MAX_READERS = 4


class ReaderGroupMachine(RuleBasedStateMachine):
    REMOTE = False  # True: the group talks to the store through a server on loopback
    CLOCK: type[ManualClock] = ManualClock
    TIME_DOMAIN = TimeDomain.INGESTION_TIME
    REPLICAS_MAY_FALL_BEHIND = False  # True: a replica may miss a compaction (several replicas)

    def __init__(self) -> None:
        super().__init__()
        self.clock = self.CLOCK(1_000_000)
        cfg = StoreConfig(max_watermark_lag_ms=40, polling_period_ms=10, advancer_thread=False)
        self.store = SegmentStore(clock=self.clock, config=cfg)
        self.server: SegmentStoreServer | None = None
        self.client: SegmentStoreClient
        if self.REMOTE:
            self.server = SegmentStoreServer(self.store)
            self.client = RemoteClient(("127.0.0.1", self.server.start()), timeout_s=20)
        else:
            self.client = EmbeddedClient(self.store)
        self.readers: dict[str, EventReader] = {}
        self.next_reader = 0
        self.next_event = 0
        self.next_checkpoint = 0
        self.refused = 0  # checkpoints refused at the group's limit of outstanding ones
        self.txns: list[Transaction] = []
        self.emitted: dict[int, int] = {}  # epoch -> highest watermark emitted by any reader
        self.last_wm: dict[tuple[str, int], int] = {}
        self.delivered: set[bytes] = set()  # payloads delivered in the current epoch
        self.pending: list[Future[Checkpoint]] = []
        self.checkpoints: list[Checkpoint] = []

    # ------------------------------------------------------------------ set-up
    @initialize(
        streams=st.integers(1, 2),
        segments=st.integers(1, 3),
        interval=st.sampled_from([0, 7, 50]),
        buffer=st.sampled_from([64, 200, 1 << 16]),
        kept=st.integers(1, 3),
    )
    def setup(self, streams: int, segments: int, interval: int, buffer: int, kept: int) -> None:
        self.streams = STREAMS[:streams]
        for s in self.streams:
            self.client.create_stream(s, segments)
        self.interval = interval
        cfg = ReaderGroupConfig(
            self.streams,
            time_domain=self.TIME_DOMAIN,
            position_report_interval_ms=interval,
            read_buffer_bytes=buffer,
            checkpoints_kept=kept,  # every checkpoint's future completes, however few are kept
        )
        self.group = ReaderGroup("sim", cfg, self.client, self.clock)
        self.writers = {s: EventWriter(self.client, s) for s in self.streams}
        self.txw = {s: TransactionalEventWriter(self.client, s) for s in self.streams}
        self._start_epoch()
        self.group_wm, self.group_epoch = self.group.group_watermark, self.group.epoch

    def _start_epoch(self) -> None:
        """Remember where the current epoch starts: its readable segments' positions."""
        self.start = {r.segment.name: r.position for r in self.group.segments() if r.status != "future"}
        self.delivered = set()

    def _stream(self, i: int) -> str:
        return self.streams[i % len(self.streams)]

    def _payload(self) -> bytes:
        self.next_event += 1
        return f"ev{self.next_event}".encode()

    # ------------------------------------------------------------------ writers and transactions
    @rule(i=st.integers(0, 1), n=st.integers(1, 6), key=st.integers(0, 9), step=st.integers(0, 4))
    def write(self, i: int, n: int, key: int, step: int) -> None:
        w = self.writers[self._stream(i)]
        for j in range(n):
            self.clock.advance(step)
            et = self.clock.now() - 10 if j % 2 else None
            w.write_event(f"key{(key + j) % 10}", self._payload(), event_time=et).result(30)  # stored now

    @precondition(lambda self: len(self.txns) < 3)
    @rule(i=st.integers(0, 1))
    def begin_txn(self, i: int) -> None:
        self.txns.append(self.txw[self._stream(i)].begin_txn())

    @precondition(lambda self: self.txns)
    @rule(i=st.integers(0, 2), n=st.integers(1, 4), key=st.integers(0, 9))
    def txn_write(self, i: int, n: int, key: int) -> None:
        txn = self.txns[i % len(self.txns)]
        for j in range(n):
            txn.write_event(f"key{(key + j) % 10}", self._payload())

    @precondition(lambda self: self.txns)
    @rule(i=st.integers(0, 2), commit=st.booleans())
    def txn_end(self, i: int, commit: bool) -> None:
        txn = self.txns.pop(i % len(self.txns))
        self.clock.advance(1)
        if commit:
            txn.commit()
        else:
            txn.abort()

    # ------------------------------------------------------------------ scaling
    @rule(i=st.integers(0, 1), which=st.integers(0, 10), at=st.floats(0.1, 0.9))
    def split(self, i: int, which: int, at: float) -> None:
        s = self._stream(i)
        active = self.client.get_stream(s).active_segments
        if len(active) >= 5:
            return
        seg = active[which % len(active)]
        mid = seg.key_low + (seg.key_high - seg.key_low) * at
        self.clock.advance(1)
        self.client.scale_stream(s, [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])

    @rule(i=st.integers(0, 1), which=st.integers(0, 10))
    def merge(self, i: int, which: int) -> None:
        s = self._stream(i)
        active = self.client.get_stream(s).active_segments
        if len(active) < 2:
            return
        k = which % (len(active) - 1)
        a, b = active[k], active[k + 1]
        self.clock.advance(1)
        self.client.scale_stream(s, [a.name, b.name], [(a.key_low, b.key_high)])

    # ------------------------------------------------------------------ readers
    @precondition(lambda self: len(self.readers) < MAX_READERS)
    @rule()
    def add_reader(self) -> None:
        rid = f"r{self.next_reader}"
        self.next_reader += 1
        self.readers[rid] = self.group.create_reader(rid)

    @precondition(lambda self: self.readers)
    @rule(i=st.integers(0, 10), with_position=st.booleans())
    def crash_reader(self, i: int, with_position: bool) -> None:
        rid = sorted(self.readers)[i % len(self.readers)]
        reader = self.readers.pop(rid)
        self.group.reader_offline(rid, reader.get_position() if with_position else None)

    @precondition(lambda self: self.readers)
    @rule(i=st.integers(0, 10))
    def close_reader(self, i: int) -> None:
        rid = sorted(self.readers)[i % len(self.readers)]
        self.readers.pop(rid).close()

    @precondition(lambda self: self.readers)
    @rule(i=st.integers(0, 10), n=st.integers(1, 40), batch=st.booleans())
    def read(self, i: int, n: int, batch: bool) -> None:
        rid = sorted(self.readers)[i % len(self.readers)]
        self._read(self.readers[rid], n, batch)

    def _read(self, reader: EventReader, n: int, batch: bool) -> int:
        """Read up to ``n`` times, checking invariants 1 and 2 on each result; returns non-empty reads."""
        got = 0
        for _ in range(n):
            if batch:
                b = reader.read_batch(max_events=7)
                assert b.epoch == self.group.epoch, "a batch of an older epoch was delivered"
                if b.watermark is not None:
                    self._watermark(reader.reader_id, b.epoch, b.watermark)
                for row in event_rows(b):
                    self._event(b.epoch, *row)
                if not len(b) and b.watermark is None and b.checkpoint_name is None:
                    break
                got += 1
            else:
                r = reader.read_next_event()
                assert r.epoch == self.group.epoch, "a read of an older epoch was delivered"
                if r.kind is ReadKind.EMPTY:
                    break
                self._result(reader.reader_id, r)
                got += 1
            reader._check()
        self._collect_checkpoints()
        return got

    def _result(self, rid: str, r: EventRead) -> None:
        if r.is_watermark:
            assert r.watermark is not None
            self._watermark(rid, r.epoch, r.watermark)
        elif r.is_event:
            assert r.segment is not None and r.ingestion_time is not None and r.payload is not None
            self._event(r.epoch, r.segment, r.position, r.ingestion_time, r.payload)

    def _watermark(self, rid: str, epoch: int, wm: int) -> None:
        key = (rid, epoch)
        assert key not in self.last_wm or wm > self.last_wm[key], "a reader's watermarks must strictly ascend"
        self.last_wm[key] = wm
        self.emitted[epoch] = max(wm, self.emitted.get(epoch, wm))

    def _event(self, epoch: int, segment: str, offset: int, it: int, payload: bytes) -> None:
        wm = self.emitted.get(epoch)
        if self.TIME_DOMAIN is TimeDomain.INGESTION_TIME:
            assert wm is None or it > wm, f"late ingestion: {payload!r} at {it} after watermark {wm}"
        assert it == self.client.ingestion_time_at(segment, offset)
        assert offset >= self.start.get(segment, 0), f"{payload!r} is before the epoch's start (PIP-194)"
        self.delivered.add(payload)

    # ------------------------------------------------------------------ checkpoints and resets
    @rule()
    def checkpoint(self) -> None:
        self.next_checkpoint += 1
        self._initiate(self.group, f"cp{self.next_checkpoint}")

    def _initiate(self, group: ReaderGroup, name: str) -> None:
        """Initiate ``name``; refused only while the group's limit of outstanding checkpoints is
        reached in the replica that refused (caught up with the log by the refusal)."""
        try:
            self.pending.append(group.initiate_checkpoint(name))
        except MaxCheckpointsExceededError:
            limit = group.config.max_outstanding_checkpoints
            outstanding = [cp.name for cp in group.state.model.checkpoints]
            assert len(outstanding) >= limit, (name, limit, outstanding)
            self.refused += 1

    def _collect_checkpoints(self) -> None:
        for f in [f for f in self.pending if f.done()]:
            self.pending.remove(f)
            try:
                self.checkpoints.append(f.result())
            except CheckpointAbortedError as e:  # by a reset; never lost for want of room, unless
                # its replica fell behind a compaction (only the kept ones are in the snapshot)
                behind = self.REPLICAS_MAY_FALL_BEHIND and "fell behind a compaction" in str(e)
                assert "reset" in str(e) or behind, e

    @rule(to=st.sampled_from(["head", "tail", "checkpoint"]), which=st.integers(0, 5))
    def reset(self, to: str, which: int) -> None:
        self._collect_checkpoints()
        if to == "checkpoint" and self.checkpoints:
            self.group.reset_to(self.checkpoints[-1 - which % len(self.checkpoints)])
        elif to == "tail":
            self.group.reset_to([self.client.get_tail_cut(s) for s in self.streams])
        else:
            self.group.reset_to([self.client.get_head_cut(s) for s in self.streams])
        self._collect_checkpoints()
        self._start_epoch()

    # ------------------------------------------------------------------ time
    @rule(ms=st.integers(0, 120), advance=st.booleans())
    def tick(self, ms: int, advance: bool) -> None:
        self.clock.advance(ms)
        if advance:
            self.store.advance_idle_watermarks()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def state_is_consistent(self) -> None:
        if not hasattr(self, "group"):
            return
        gw, epoch = self.group.group_watermark, self.group.epoch
        if epoch == self.group_epoch:
            assert gw >= self.group_wm, "the group watermark decreased within an epoch"
        self.group_wm, self.group_epoch = gw, epoch
        self.group._check()  # (also: only what is live is kept, see GroupModel._check)
        for r in self.readers.values():
            r._check()
        self.store._check()

    def teardown(self) -> None:
        try:
            if hasattr(self, "group"):
                self._drain_and_check()
        finally:
            self.client.close()
            if self.server is not None:
                self.server.stop()
            self.store.close()

    def _drain_and_check(self) -> None:
        for txn in self.txns:
            txn.abort()
        if not self.readers:
            self.add_reader()
        quiet = 0
        for _ in range(200):
            got = sum(self._read(r, 100_000, batch=False) for r in list(self.readers.values()))
            self.clock.advance(self.interval + 1)
            quiet = quiet + 1 if got == 0 else 0
            if quiet >= 3:
                break
        expected = self._expected()
        missing = expected - self.delivered
        assert not missing, f"epoch {self.group.epoch}: {len(missing)} never delivered: {sorted(missing)[:5]}"
        self.group._check()

    def _expected(self) -> set[bytes]:
        """Payloads in the store at or after the current epoch's starting positions (successors too)."""
        out: set[bytes] = set()
        todo = [(name, off) for name, off in self.start.items()]
        seen: set[str] = set()
        while todo:
            name, off = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            info = self.client.get_info(name)
            data = b""
            pos = off
            while pos < info.length:
                r = self.client.read(name, pos, 1 << 20)
                data += r.data
                pos += len(r.data)
            frames, _ = decode_frames(data, off)
            out |= {f.payload for f in frames if f.kind == KIND_EVENT}
            todo += [(s.segment.name, 0) for s in self.client.get_successors(name)]
        return out


if settings.get_current_profile_name() == "long":
    _SETTINGS = settings.get_profile("long")
else:
    _SETTINGS = settings(
        max_examples=150,
        stateful_step_count=60,
    )

ReaderGroupMachine.TestCase.settings = _SETTINGS
TestReaderGroupStateful = ReaderGroupMachine.TestCase


class RemoteReaderGroupMachine(ReaderGroupMachine):
    REMOTE = True


RemoteReaderGroupMachine.TestCase.settings = settings(
    _SETTINGS, max_examples=max(5, _SETTINGS.max_examples // 5)
)
TestReaderGroupStatefulRemote = RemoteReaderGroupMachine.TestCase
