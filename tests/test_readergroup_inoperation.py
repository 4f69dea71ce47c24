"""Reader groups as they run in operation: a clock that ticks on every reading, restores, exactness.

The state machine of ``test_readergroup_stateful`` (invariants 1 and 2 of docs/design.md §4
over random scaling, transactions, seals, reader join/crash/leave, checkpoints and
resets) run again with what the manual clock hides and two more checks:

- the clock moves 1 ms on every reading, as a busy wall clock does, so the two
  predecessors of a merge are sealed in different milliseconds;
- a new group can start from the last checkpoint's cuts (a restore in another process);
- **per-key order**: within an epoch, the first delivery of each event of a routing key
  (written by one writer, outside transactions) comes after the first delivery of
  every earlier event of that key;
- **exact delivery**: every event of the epoch is delivered, and none twice unless a
  reader went offline without its position in that epoch (its unreported reads are
  delivered again, at least once).

Run over the embedded client and over ``RemoteClient`` against a served store.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from test_readergroup_stateful import ReaderGroupMachine

from readergroup.config import ReaderGroupConfig
from readergroup.reading.group import ReaderGroup
from segmentstore import TickingClock


class InOperationMachine(ReaderGroupMachine):
    CLOCK = TickingClock

    def __init__(self) -> None:
        super().__init__()
        self.key_log: dict[tuple[str, str], list[bytes]] = {}  # (stream, key) -> payloads in write order
        self.order: dict[bytes, tuple[tuple[str, str], int]] = {}
        self.first_seen: dict[tuple[str, str], int] = {}
        self.counts: Counter[bytes] = Counter()
        self.lossy = False  # a reader went offline without its position in this epoch

    # ------------------------------------------------------------------ writers remember per-key order
    @rule(i=st.integers(0, 1), n=st.integers(1, 6), key=st.integers(0, 9), step=st.integers(0, 4))
    def write(self, i: int, n: int, key: int, step: int) -> None:
        s = self._stream(i)
        w = self.writers[s]
        self._before_write(s)
        for j in range(n):
            self.clock.advance(step)
            k = f"key{(key + j) % 10}"
            p = self._payload()
            log = self.key_log.setdefault((s, k), [])
            self.order[p] = ((s, k), len(log))
            log.append(p)
            w.write_event(k, p, event_time=self._event_time(s, j, p)).result(30)  # stored at this time

    def _before_write(self, stream: str) -> None:
        """A hook: what a writer does before a run of writes (the event-time machine re-joins)."""

    def _event_time(self, stream: str, j: int, payload: bytes) -> int | None:
        return self.clock.now() - 10 if j % 2 else None

    # ------------------------------------------------------------------ restores
    @precondition(lambda self: self.checkpoints)
    @rule(which=st.integers(0, 5))
    def restart_group_from_checkpoint(self, which: int) -> None:
        """A new group (another process's) from a checkpoint's cuts: the old readers are gone."""
        self._collect_checkpoints()
        cp = self.checkpoints[-1 - which % len(self.checkpoints)]
        for _rid, r in list(self.readers.items()):
            r.close()
        self.readers.clear()
        cfg = ReaderGroupConfig(
            self.streams,
            starting_cuts=tuple(cp.stream_cuts()),
            time_domain=self.TIME_DOMAIN,
            position_report_interval_ms=self.interval,
            read_buffer_bytes=self.group.config.read_buffer_bytes,
        )
        self.group = ReaderGroup(f"sim{self.next_checkpoint}-{which}", cfg, self.client, self.clock)
        self.pending.clear()
        self.checkpoints.clear()
        self.emitted.clear()
        self.last_wm.clear()
        self._start_epoch()
        self.group_wm, self.group_epoch = self.group.group_watermark, self.group.epoch

    def _start_epoch(self) -> None:
        super()._start_epoch()
        self.first_seen = {}
        self.counts = Counter()
        self.lossy = False

    @precondition(lambda self: self.readers)
    @rule(i=st.integers(0, 10), with_position=st.booleans())
    def crash_reader(self, i: int, with_position: bool) -> None:
        if not with_position:
            self.lossy = True
        super().crash_reader(i, with_position)

    # ------------------------------------------------------------------ checks on every event
    def _event(self, epoch: int, segment: str, offset: int, it: int, payload: bytes) -> None:
        first = payload not in self.delivered
        super()._event(epoch, segment, offset, it, payload)
        self.counts[payload] += 1
        assert self.lossy or self.counts[payload] == 1, f"{payload!r} delivered twice without a crash"
        if first and payload in self.order:
            key, index = self.order[payload]
            last = self.first_seen.get(key, -1)
            assert index > last, (
                f"per-key order broken on {key}: {payload!r} (#{index}) after #{last} "
                f"({self.key_log[key][last]!r})"
            )
            self.first_seen[key] = index


_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=50,
)
InOperationMachine.TestCase.settings = _SETTINGS
TestReaderGroupInOperation = InOperationMachine.TestCase


class RemoteInOperationMachine(InOperationMachine):
    REMOTE = True


RemoteInOperationMachine.TestCase.settings = settings(_SETTINGS, max_examples=12)
TestReaderGroupInOperationRemote = RemoteInOperationMachine.TestCase
