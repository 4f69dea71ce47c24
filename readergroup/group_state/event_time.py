"""The ``EVENT_TIME`` watermark of a reader group: producer assertions at its acknowledged positions.

Pulsar's watermark cursor tracks the subscription's mark-delete point so the watermark
never runs ahead of messages a failed consumer will get again. Here the positions are
the group's *acknowledged* positions (what readers reported), so a crashed reader's
unacknowledged events, redelivered from those positions, are never behind it.

For each incomplete segment ``X`` of the group at acknowledged position ``p`` the
*effective* per-writer state is what ``X``'s own markers before ``p`` say
(``SegmentWatermarkCursor``), laid over what ``X`` *inherits* from its predecessors:
each writer at the highest time it asserted in any predecessor, idle if idle in all
(a successor is written only after its predecessors are sealed, so every assertion made
in them covers it). Per stream and writer ``w``:

- ``w`` *holds* the watermark (bound ``-inf``) if it is missing from some segment's
  state that may still hold its events after an assertion — it joined, but that
  segment's reader has not passed its first marker yet (a sealed segment whose markers
  never name ``w`` holds only events written before ``w`` joined, and is skipped). A
  writer counts as joined as soon as its marker is *anywhere* in an incomplete segment,
  also past the acknowledged position: the cursors look ahead to the tail for joins, so
  a writer that joined before the watermark passed its assertion is never overtaken;
- in a segment where ``w`` is idle at the position, its next events there follow a
  re-join marker: that marker's time bounds it if the look-ahead found one, else the
  segment says nothing of ``w`` (a later re-join asserts at least what ``w`` asserted
  anywhere before); ``w`` *drops out* if no segment bounds it;
- otherwise its bound is the minimum over segments of its asserted time.

Successors a group does not list yet (their predecessors are not read to the end) may
already hold a writer's events written after an assertion: every not-listed successor
of a sealed segment counts as a segment at position 0 (its state there is what its
predecessors end with), so it holds a writer it has not seen join.

The watermark is the minimum bound over writers and streams, minus one (assertions are
inclusive, watermarks exclusive), raised to the highest value returned in the epoch
(never decreasing); ``INT64_MIN`` while no writer is active. With truthful writers no
event delivered after it is ``<=`` it (a writer's events before its first assertion are
unconstrained: the PIP's "send an initial watermark eagerly"). False assertions make
true late events, which the readers count.

Costs: per call O(segments x writers) plus the cursor scans of the bytes acknowledged
since the last call; a segment met for the first time costs one snapshot load and a
scan of at most ``snapshot_bytes``; the look-ahead scans each byte once per epoch;
predecessors are found by walking the stream's history from its head cut once
(O(segments in the history) store calls, memoised).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping

from segmentstore import SegmentNotFoundError, StreamSegment
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX, INT64_MIN
from segmentstore.results import SegmentInfo

from ..format.events import KIND_WATERMARK, frame_length
from ..format.producer_watermarks import SegmentWatermarkCursor, load_snapshots, scan_markers

__all__ = ["ProducerWatermarks", "WriterStates"]


WriterStates = dict[int, tuple[int, bool]]
"""``{writer id: (highest asserted time, idle)}``."""


def _overlay(base: WriterStates, top: WriterStates) -> WriterStates:
    """``top`` (later markers) over ``base``: time is the maximum, idleness comes from ``top``. O(w)."""
    out = dict(base)
    for w, (t, idle) in top.items():
        old = out.get(w)
        out[w] = (t if old is None else max(t, old[0]), idle)
    return out


def _merge_predecessors(finals: Iterable[WriterStates]) -> WriterStates:
    """What a successor inherits: per writer the highest time, idle only if idle in every predecessor."""
    out: WriterStates = {}
    for f in finals:
        for w, (t, idle) in f.items():
            old = out.get(w)
            out[w] = (t, idle) if old is None else (max(t, old[0]), idle and old[1])
    return out


class _Ahead:
    """A segment's look-ahead: scanned to, writers joining there, their markers from ``base`` on."""

    __slots__ = ("base", "found", "marks", "scanned")

    def __init__(self, position: int) -> None:
        self.base = self.scanned = position
        self.found: set[int] = set()
        self.marks: deque[tuple[int, int, int]] = deque()  # (offset, writer, time), by offset


class ProducerWatermarks:
    """Materialises a group's event-time watermark from writer markers at acknowledged positions.

    Not thread-safe: the reader-group state calls it under its lock.
    """

    def __init__(
        self, client: SegmentStoreClient, snapshot_bytes: int = 1 << 16, read_bytes: int = 1 << 20
    ) -> None:
        self.client = client
        self.snapshot_bytes = snapshot_bytes
        self.read_bytes = read_bytes
        self._cursors: dict[str, SegmentWatermarkCursor] = {}
        self._preds: dict[str, tuple[str, ...]] = {}
        self._succ: dict[str, tuple[str, ...]] = {}
        self._succ_segments: dict[str, list[StreamSegment]] = {}
        self._epoch_of: dict[str, int] = {}
        self._inherited: dict[str, WriterStates] = {}
        self._final: dict[str, WriterStates] = {}
        self._sealed: set[str] = set()
        self._ahead: dict[str, _Ahead] = {}  # segment -> what its look-ahead found
        self._epoch: int | None = None
        self._given: Mapping[str, SegmentInfo] = {}  # infos handed to the current call
        self._floor = INT64_MIN
        self.bounds: dict[str, dict[int, int]] = {}
        """Per stream, the bound of every writer that counted at the last call (``INT64_MIN``: holding)."""

    # ------------------------------------------------------------------ queries
    def watermark(
        self,
        epoch: int,
        rows: Iterable[tuple[StreamSegment, int]],
        infos: Mapping[str, SegmentInfo] | None = None,
    ) -> int:
        """The event-time watermark for segments at acknowledged positions ``rows`` in ``epoch``.

        ``INT64_MIN`` while no writer is active; never decreasing within an epoch.
        ``infos``: segments' infos the caller has just asked for (``segment_states``), used
        instead of a ``get_info`` each for this call: a look-ahead scans to their lengths.
        """
        self._given = infos or {}
        try:
            return self._watermark(epoch, rows)
        finally:
            self._given = {}

    def _info(self, name: str) -> SegmentInfo:
        info = self._given.get(name)
        return info if info is not None else self.client.get_info(name)

    def _watermark(self, epoch: int, rows: Iterable[tuple[StreamSegment, int]]) -> int:
        if epoch != self._epoch:
            self._epoch = epoch
            self._floor = INT64_MIN
            self._ahead.clear()
        by_stream: dict[str, list[tuple[StreamSegment, WriterStates]]] = defaultdict(list)
        joining: dict[str, set[int]] = defaultdict(set)
        seen: set[str] = set()
        given = list(rows)
        for seg, pos in given:
            joining[seg.stream] |= self._look_ahead(seg.name, pos)  # also learns which are sealed
        for seg, pos in given + self._unread_descendants(given, joining):
            seen.add(seg.name)
            by_stream[seg.stream].append((seg, self.effective(seg, pos)))
        for name in [n for n in self._cursors if n not in seen]:
            del self._cursors[name]
            self._ahead.pop(name, None)
        low = INT64_MAX
        self.bounds = {}
        for stream, items in by_stream.items():
            bounds = self._stream_bounds(items, joining[stream])
            self.bounds[stream] = bounds
            if bounds:
                low = min(low, min(bounds.values()))
        if low != INT64_MAX:
            wm = low - 1 if low > INT64_MIN else INT64_MIN
            if wm > self._floor:
                self._floor = wm
        return self._floor

    def effective(self, seg: StreamSegment, position: int) -> WriterStates:
        """The writers' state at ``position`` of ``seg``: its markers before it over what it inherits."""
        cur = self._cursors.get(seg.name)
        if cur is None:
            cur = self._cursors[seg.name] = SegmentWatermarkCursor(
                self.client, seg.name, position, self.snapshot_bytes, self.read_bytes
            )
        elif position >= cur.position:
            cur.advance_to(position, self._given.get(seg.name))
        else:
            cur.seek(position)
        return _overlay(self._inherit(seg.name, seg.stream), cur.tracker.marks())

    # ------------------------------------------------------------------ internals
    def _unread_descendants(
        self, rows: list[tuple[StreamSegment, int]], joining: dict[str, set[int]]
    ) -> list[tuple[StreamSegment, int]]:
        """Successors (transitively) of the sealed segments in ``rows`` that are not rows themselves.

        A reader group lists a successor only once its predecessors are read to the end,
        but events a writer wrote after an assertion may already be in it: each counts as
        a row at position 0 (its state there is what its predecessors end with). One
        ``get_successors`` per sealed segment, memoised.
        """
        have = {seg.name for seg, _ in rows}
        out: list[tuple[StreamSegment, int]] = []
        stack = [seg for seg, _ in rows if seg.name in self._sealed]
        while stack:
            for succ in self._successors(stack.pop()):
                if succ.name in have:
                    continue
                have.add(succ.name)
                out.append((succ, 0))
                joining[succ.stream] |= self._look_ahead(succ.name, 0)
                if succ.name in self._sealed:
                    stack.append(succ)
        return out

    def _successors(self, seg: StreamSegment) -> list[StreamSegment]:
        """The successors of sealed ``seg`` (memoised with their predecessors)."""
        got = self._succ_segments.get(seg.name)
        if got is None:
            infos = self.client.get_successors(seg.name)
            got = self._succ_segments[seg.name] = [i.segment for i in infos]
            self._succ[seg.name] = tuple(i.segment.name for i in infos)
            for i in infos:
                self._preds[i.segment.name] = tuple(i.predecessors)
                self._epoch_of[i.segment.name] = i.segment.epoch
        return got

    def _look_ahead(self, name: str, position: int) -> set[int]:
        """Writers with a watermark marker in ``name`` at or after ``position`` (scanned to the tail).

        Also keeps those markers (offset, writer, time) from ``position`` on, for
        ``_rejoin_time``. Each byte is scanned once per epoch while positions move forward.
        """
        a = self._ahead.get(name)
        if a is None or position < a.base:
            a = self._ahead[name] = _Ahead(position)
        marks = a.marks
        while marks and marks[0][0] < position:
            marks.popleft()
        a.base = position
        pos = max(a.scanned, position)
        try:
            info = self._info(name)
        except SegmentNotFoundError:
            return a.found
        length = info.length
        if info.sealed:
            self._sealed.add(name)
        while pos < length:
            r = self.client.read(name, pos, min(self.read_bytes, length - pos))
            if not r.data:
                break
            markers, consumed = scan_markers(r.data, r.offset)
            if consumed == 0:  # one frame longer than a read
                need = frame_length(r.data) or 0
                r = self.client.read(name, pos, need)
                markers, consumed = scan_markers(r.data, r.offset)
                if consumed == 0:
                    break
            for m in markers:
                if m.kind == KIND_WATERMARK:
                    a.found.add(m.writer)
                    marks.append((m.offset, m.writer, m.time if m.time is not None else INT64_MIN))
            pos += consumed
        a.scanned = pos
        return a.found

    def _rejoin_time(self, name: str, writer: int) -> int | None:
        """The time of ``writer``'s first watermark marker in ``name`` at or after the position
        last looked ahead from: where a writer idle there re-joins (``None``: not yet). O(markers ahead)."""
        a = self._ahead.get(name)
        if a is not None:
            for _, w, t in a.marks:
                if w == writer:
                    return t
        return None

    def _stream_bounds(
        self, items: list[tuple[StreamSegment, WriterStates]], joining: set[int]
    ) -> dict[int, int]:
        writers: set[int] = set(joining)
        for _, eff in items:
            writers.update(eff)
        out: dict[int, int] = {}
        for w in sorted(writers):
            bound = INT64_MAX
            active = False
            for seg, eff in items:
                s = eff.get(w)
                if s is None:
                    if self._may_hold(seg, w):
                        bound, active = INT64_MIN, True
                        break
                    continue
                if not s[1]:
                    bound = min(bound, s[0])
                    active = True
                else:  # idle here: its next events here follow a re-join marker, at that marker's time
                    t = self._rejoin_time(seg.name, w)
                    if t is not None:
                        bound = min(bound, t)
                        active = True
            if active:
                out[w] = bound
        return out

    def _may_hold(self, seg: StreamSegment, writer: int) -> bool:
        """Whether ``seg`` may hold events of ``writer`` after an assertion it has not reached yet."""
        name = seg.name
        if name not in self._sealed:
            try:
                if not self._info(name).sealed:
                    return True
            except SegmentNotFoundError:
                return False
            self._sealed.add(name)
        return writer in self._final_state(name, seg.stream)

    def _inherit(self, name: str, stream: str) -> WriterStates:
        """What ``name`` inherits from its predecessors (memoised; ancestors done oldest epoch first)."""
        got = self._inherited.get(name)
        if got is not None:
            return got
        if name not in self._preds:
            self._explore(stream)
        todo: list[str] = []
        stack = [name]
        while stack:
            n = stack.pop()
            if n in self._inherited or n in todo:
                continue
            todo.append(n)
            stack.extend(p for p in self._preds.get(n, ()) if p not in self._final)
        for n in sorted(todo, key=lambda n: (self._epoch_of.get(n, 0), n)):
            preds = self._preds.get(n, ())
            self._inherited[n] = _merge_predecessors(self._final_state(p, stream) for p in preds)
        return self._inherited[name]

    def _final_state(self, name: str, stream: str) -> WriterStates:
        """The effective state at the end of sealed segment ``name`` (memoised)."""
        got = self._final.get(name)
        if got is not None:
            return got
        local: WriterStates
        try:
            length = self.client.get_info(name).length
            cur = SegmentWatermarkCursor(self.client, name, length, self.snapshot_bytes, self.read_bytes)
            local = cur.tracker.marks()
        except SegmentNotFoundError:  # deleted: its last snapshot, if any
            snaps = load_snapshots(self.client, name)
            local = {m.writer: (m.time, m.idle) for m in snaps[-1].writers} if snaps else {}
        final = _overlay(self._inherit(name, stream), local)
        self._final[name] = final
        return final

    def _explore(self, stream: str) -> None:
        """Learn the stream's segment DAG from its head cut (``get_successors`` of unexplored ones)."""
        client = self.client
        stack: list[str] = []
        for name, _ in client.get_head_cut(stream).positions:
            if name not in self._preds:
                self._preds[name] = ()
                self._epoch_of[name] = client.get_segment(name).epoch
            stack.append(name)
        visited: set[str] = set()
        while stack:
            n = stack.pop()
            if n in visited:
                continue
            visited.add(n)
            succ = self._succ.get(n)
            if succ is None:
                infos = client.get_successors(n)
                if not infos:
                    continue
                succ = self._succ[n] = tuple(i.segment.name for i in infos)
                for i in infos:
                    self._preds[i.segment.name] = tuple(i.predecessors)
                    self._epoch_of[i.segment.name] = i.segment.epoch
            stack.extend(succ)

    @checked
    def _check(self) -> None:
        """Assert cursors are consistent and every memoised final state extends its inheritance."""
        for name, cur in self._cursors.items():
            assert cur.segment == name
            cur._check()
        for name, final in self._final.items():
            inh = self._inherited.get(name, {})
            for w, (t, _) in inh.items():
                assert w in final and final[w][0] >= t, f"{name}: writer {w} lost its inherited time"
