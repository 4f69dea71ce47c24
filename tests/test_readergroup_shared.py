"""One reader group, two replicas: the in-operation state machine with readers in two "processes".

The machine of ``test_readergroup_inoperation`` (scaling, transactions, readers joining,
crashing and leaving, checkpoints, resets and restores on a ticking clock; per-key
order and exact delivery) with the group's state shared through its log in the store:
a second ``ReaderGroup`` object joins the group (``ReaderGroup.open``), as another
process would, and every reader, offline declaration, checkpoint and reset goes
through one replica or the other, at random. Each replica sees the other's updates
only by catching up with the log, so conditional appends conflict and retry here
deterministically (one thread, a ticking clock). On top of the inherited checks:

- every replica's group watermark never decreases within an epoch, every replica's
  state is valid (``_check()``, which also fails if a snapshot in the log ever differed
  from a replica at its position), and after catching up both replicas are equal;
- a reset made through one replica reaches the readers of the other at their next
  sync: until then they may still deliver reads of the old epoch (checked against that
  epoch's watermarks), and once one of them delivered a read of the new epoch it never
  delivers an older one again (PIP-194 across processes).

Run over the embedded client and over ``RemoteClient`` against a served store.
"""

from __future__ import annotations

from batches import event_rows
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from test_readergroup_inoperation import InOperationMachine
from test_readergroup_stateful import MAX_READERS

from readergroup.config import TimeDomain
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind


class SharedGroupMachine(InOperationMachine):
    REPLICAS_MAY_FALL_BEHIND = True  # a replica that does not look for a while misses compactions

    def __init__(self) -> None:
        super().__init__()
        self.replicas: list[ReaderGroup] = []
        self.home: dict[str, int] = {}  # reader -> the replica it was created through
        self.may_lag: set[str] = set()  # readers that may still deliver the epoch before the last reset
        self.epoch_now = 0
        self.replica_wm: dict[int, tuple[int, int]] = {}  # replica -> (epoch, group watermark)

    def _replica(self, side: int) -> ReaderGroup:
        return self.replicas[side % len(self.replicas)]

    def _start_epoch(self) -> None:
        if not self.replicas or self.replicas[0] is not self.group:
            self.replicas = [self.group, ReaderGroup.open(self.group.name, self.client, self.clock)]
            for g, every in zip(self.replicas, (5, 8), strict=True):  # compact often: snapshots mid-log
                g.state.synchronizer.snapshot_interval = every
            self.replica_wm.clear()
            self.may_lag.clear()
        self.epoch_now = self.group.epoch
        super()._start_epoch()

    # ------------------------------------------------------------------ readers through either replica
    @precondition(lambda self: len(self.readers) < MAX_READERS)
    @rule(side=st.integers(0, 1))
    def add_reader(self, side: int = 1) -> None:  # type: ignore[override]
        rid = f"r{self.next_reader}"
        self.next_reader += 1
        self.readers[rid] = self._replica(side).create_reader(rid)
        self.home[rid] = side % 2

    @precondition(lambda self: self.readers)
    @rule(i=st.integers(0, 10), with_position=st.booleans(), side=st.integers(0, 1))
    def crash_reader(self, i: int, with_position: bool, side: int) -> None:  # type: ignore[override]
        """Declared offline through either replica (the reader's own or the other process's)."""
        if not with_position:
            self.lossy = True
        rid = sorted(self.readers)[i % len(self.readers)]
        reader = self.readers.pop(rid)
        self._replica(side).reader_offline(rid, reader.get_position() if with_position else None)

    @rule(side=st.integers(0, 1))
    def checkpoint(self, side: int) -> None:  # type: ignore[override]
        self.next_checkpoint += 1
        self._initiate(self._replica(side), f"cp{self.next_checkpoint}")

    @rule(to=st.sampled_from(["head", "tail", "checkpoint"]), which=st.integers(0, 5), side=st.integers(0, 1))
    def reset(self, to: str, which: int, side: int) -> None:  # type: ignore[override]
        self._collect_checkpoints()
        g = self._replica(side)
        if to == "checkpoint" and self.checkpoints:
            g.reset_to(self.checkpoints[-1 - which % len(self.checkpoints)])
        elif to == "tail":
            g.reset_to([self.client.get_tail_cut(s) for s in self.streams])
        else:
            g.reset_to([self.client.get_head_cut(s) for s in self.streams])
        self._collect_checkpoints()
        self.may_lag = {rid for rid in self.readers if self.home[rid] != side % 2}
        self._start_epoch()

    @rule(side=st.integers(0, 1))
    def catch_up(self, side: int) -> None:
        """A replica catches up with the log without reading (a process that only watches)."""
        self._replica(side).refresh()

    @precondition(lambda self: len({self.home[r] for r in self.readers}) == 2)
    @rule(i=st.integers(0, 10), j=st.integers(0, 10), n=st.integers(1, 20), batch=st.booleans())
    def read_interleaved(self, i: int, j: int, n: int, batch: bool) -> None:
        """A reader of each replica reads in turn: each appends on a log the other moved (conflicts)."""
        left = sorted(r for r in self.readers if self.home[r] == 0)
        right = sorted(r for r in self.readers if self.home[r] == 1)
        a, b = self.readers[left[i % len(left)]], self.readers[right[j % len(right)]]
        for _ in range(n):
            self._read(a, 1, batch)
            self._read(b, 1, batch)

    @rule()
    def replicas_agree(self) -> None:
        """After catching up, both replicas are the same state."""
        for g in self.replicas:
            g.refresh()
        a, b = (g.state.model.to_obj() for g in self.replicas)
        assert a == b, "two replicas at the same log position differ"

    # ------------------------------------------------------------------ reads: old epochs only until synced
    def _read(self, reader: EventReader, n: int, batch: bool) -> int:
        got = 0
        rid = reader.reader_id
        for _ in range(n):
            if batch:
                b = reader.read_batch(max_events=7)
                self._epoch_ok(rid, b.epoch, bool(len(b)) or b.watermark is not None)
                if b.watermark is not None:
                    self._watermark(rid, b.epoch, b.watermark)
                for row in event_rows(b):
                    self._event(b.epoch, *row)
                if not len(b) and b.watermark is None and b.checkpoint_name is None:
                    break
                got += 1
            else:
                r = reader.read_next_event()
                if r.kind is ReadKind.EMPTY:
                    break
                self._epoch_ok(rid, r.epoch, True)
                self._result(rid, r)
                got += 1
            reader._check()
        self._collect_checkpoints()
        return got

    def _epoch_ok(self, rid: str, epoch: int, delivered: bool) -> None:
        assert epoch <= self.epoch_now, f"{rid} delivered epoch {epoch}, the group is in {self.epoch_now}"
        if epoch < self.epoch_now:
            assert rid in self.may_lag, f"{rid} delivered epoch {epoch} after it synced with {self.epoch_now}"
        elif delivered:
            self.may_lag.discard(rid)

    def _event(self, epoch: int, segment: str, offset: int, it: int, payload: bytes) -> None:
        if epoch == self.epoch_now:
            super()._event(epoch, segment, offset, it, payload)
            return
        wm = self.emitted.get(epoch)  # a lagging reader's old epoch: still no late ingestion in it
        if self.TIME_DOMAIN is TimeDomain.INGESTION_TIME:
            assert wm is None or it > wm, f"late ingestion in old epoch {epoch}: {payload!r} at {it} <= {wm}"
        assert it == self.client.ingestion_time_at(segment, offset)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def replicas_are_consistent(self) -> None:
        """Each replica as it is (not caught up): valid, its watermark never decreasing in an epoch."""
        for i, g in enumerate(self.replicas):
            epoch, gw = g.state.epoch, g.state.group_watermark
            prev = self.replica_wm.get(i)
            if prev is not None and prev[0] == epoch:
                assert gw >= prev[1], f"replica {i}: the group watermark decreased within epoch {epoch}"
            self.replica_wm[i] = (epoch, gw)
            g.state._check()


_SETTINGS = settings(
    max_examples=80,
    stateful_step_count=50,
)
SharedGroupMachine.TestCase.settings = _SETTINGS
TestReaderGroupShared = SharedGroupMachine.TestCase


class RemoteSharedGroupMachine(SharedGroupMachine):
    REMOTE = True


RemoteSharedGroupMachine.TestCase.settings = settings(_SETTINGS, max_examples=15)
TestReaderGroupSharedRemote = RemoteSharedGroupMachine.TestCase
