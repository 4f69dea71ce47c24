"""Offset planning on the driver side: starting offsets, the next micro-batch's end, segment ranges.

The planner runs where Spark plans micro-batches (the query's Python runner process)
and talks to the store through one ``SegmentStoreClient``. Per stream it keeps a
frontier of segments with positions. A segment sealed and read to its end is
*complete*; its successors join (at offset 0) once all their predecessors are
complete (Pravega's order, so per-routing-key order holds across scaling), and then
it is *done*. Streams matching a pattern join at their head when they appear.
Admission control (``maxEventsPerTrigger``, ``maxBytesPerTrigger``) shares the budget
evenly among segments with data, ends at frame boundaries, and always admits at least
one frame; the store finds the boundaries where the bytes are (``scan_records``: event
frames are length-prefixed records), so planning moves no event bytes (``admission``);
``prepare_next`` asks for the next micro-batch's scans while the current one runs. A
``target`` bounds a run (``availableNow``, batch reads): segments of the target cut
never pass it and never hand over to successors, no stream joins, and the watermark
never passes the target's.

The watermark of an offset is the minimum of ``watermark_at(segment, position)`` over
the frontier (done segments aside; complete segments without successors, i.e. of a
sealed stream, count only when nothing else is left), never below the previous one.
With ``timeDomain = event`` it is instead the writers' asserted watermark at the
frontier's positions (``readergroup.group_state.event_time.ProducerWatermarks``, as an
``EVENT_TIME`` reader group computes it at its acknowledged positions): the minimum
over the active writers of what each asserted before those positions, minus one. A
stream that joins later (pattern) may hold events ingested before the watermark the
query already passed (as a new Kafka partition would): they are delivered, and they are
late in event time if their event time is at or below the event-time watermark.

Costs per micro-batch: one ``segment_states`` call for the whole frontier (infos,
watermarks at the positions and at the tails, successors of sealed segments: one round
trip per ``MAX_STATE_REQUESTS`` segments, however wide the streams), one more for the
successors that join, one for the watermarks at the ends when a limit (or a truncation)
ends segments short of their tails, and one ``list_streams`` with a pattern; with a
limit, a ``scan_records`` per segment and round (one per 16 MiB), none of those that
``prepare_next`` asked for while the micro-batch before ran. A truncated segment's
head watermark costs a ``watermark_at``. ``timeDomain = event`` adds what
``ProducerWatermarks`` reads: the writers' markers in the bytes that arrived (the infos
come from the same call), and once per segment met, its snapshots and stream segment
(one ``get_stream`` per stream for the active ones).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
from collections.abc import Callable
from dataclasses import dataclass

from readergroup.errors import ReaderGroupError
from readergroup.format.pravega_frames import is_pravega_framed
from readergroup.group_state.event_time import ProducerWatermarks
from readergroup.reading.frontier import NO_WATERMARK, frontier_watermark, ready_successors
from segmentstore import SegmentState
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.errors import (
    SegmentNotFoundError,
    SegmentStoreError,
    SegmentTruncatedError,
    StreamNotFoundError,
)
from segmentstore.results import SegmentInfo
from segmentstore.stream_metadata import StreamSegment

from .admission import READ_ALL, Admission, Limit, water_fill
from .errors import DataLossError, InvalidOptionError
from .offsets import SourceOffset, StreamOffset
from .options import EVENT, Position, SourceOptions

__all__ = ["Limit", "SegmentRange", "Planner", "READ_ALL", "water_fill", "NO_WATERMARK"]

_log = logging.getLogger("spark_source")


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """Bytes ``[begin, end)`` of one segment of one stream, both at frame boundaries."""

    stream: str
    segment: str
    begin: int
    end: int
    pravega: bool = False
    """The stream holds Pravega's event framing (``readergroup.format.pravega_frames``)."""


class Planner:
    """Offsets and ranges for one query. Caches immutable facts (sealed lengths, successors)."""

    def __init__(
        self,
        client: SegmentStoreClient,
        options: SourceOptions,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._options = options
        self._warn = warn or _log.warning
        self._successors: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self._sealed_length: dict[str, int] = {}
        self._infos: dict[str, SegmentInfo] = {}
        self._seen_length: dict[str, int] = {}  # each segment's length when the planner last looked
        self._deleted: set[str] = set()  # segments found deleted (reported once), complete from then on
        self._dropped: set[str] = set()  # checkpointed streams no longer selected (reported once)
        self._producer = ProducerWatermarks(client) if options.time_domain == EVENT else None
        self._segments: dict[str, StreamSegment] = {}  # key ranges and epochs never change
        self._states: dict[str, SegmentState] = {}  # this planning call's: each segment's first answer
        self._wms: dict[tuple[str, int], int | None] = {}  # this planning call's watermarks known
        self._framings: dict[str, bool] = {}  # stream -> Pravega-framed (a stream's framing never changes)
        self._admission = Admission(client, self.pravega)

    def _fresh(self) -> None:
        """Forget what the store said in the last planning call (lengths and watermarks move)."""
        self._infos = {}
        self._states = {}
        self._wms = {}

    def _ask(self, pairs: list[tuple[str, int]]) -> None:
        """One ``segment_states`` call for the ``(segment, position)`` pairs not known yet. O(pairs)."""
        todo = sorted({p for p in pairs if p not in self._wms})
        if not todo:
            return
        for st in self._client.segment_states(todo):
            self._wms[(st.name, st.position)] = st.watermark
            if st.name in self._states:
                continue
            self._states[st.name] = st
            if st.info is None:
                continue
            info = self._infos[st.name] = st.info
            self._wms.setdefault((st.name, info.length), st.tail_watermark)
            self._seen_length[st.name] = info.length
            if info.sealed:
                self._sealed_length[st.name] = info.length
                if st.name not in self._successors:  # a sealed segment's successors never change
                    self._successors[st.name] = [
                        (i.segment.name, tuple(i.predecessors)) for i in st.successors
                    ]

    def pravega(self, stream: str) -> bool:
        """Whether ``stream`` holds Pravega's event framing (one ``get_stream`` per stream and query);
        ``StreamFramingError`` for a framing no reader decodes; a deleted stream: ingestwm's."""
        known = self._framings.get(stream)
        if known is None:
            try:
                framing = self._client.get_stream(stream).framing
            except StreamNotFoundError:
                return False
            known = self._framings[stream] = is_pravega_framed(stream, framing)
        return known

    # ------------------------------------------------------------------ streams
    def selected_streams(self) -> list[str]:
        """The explicit streams plus those matching a pattern now, sorted. O(streams)."""
        names = set(self._options.streams)
        if self._options.patterns:
            for name in self._client.list_streams(None):
                if any(fnmatch.fnmatchcase(name, p) for p in self._options.patterns):
                    names.add(name)
        return sorted(names)

    def selects(self, stream: str) -> bool:
        """Whether option stream names ``stream`` or a pattern of it matches it. O(patterns)."""
        return stream in self._options.streams or any(
            fnmatch.fnmatchcase(stream, p) for p in self._options.patterns
        )

    def _stream_start(self, stream: str, position: Position) -> dict[str, int]:
        cut = position.cut_of(stream)
        if cut is not None:
            self._ask(sorted(cut.items()))
            for segment in cut:
                self._info(segment)  # raises SegmentNotFoundError naming it
                if not segment.startswith(stream + "/"):
                    raise InvalidOptionError(
                        f"the cut of stream {stream!r} names segment {segment!r} of another stream"
                    )
            return cut
        if position.kind == "latest":
            return self._client.get_tail_cut(stream).as_dict()
        return self._client.get_head_cut(stream).as_dict()

    # ------------------------------------------------------------------ offsets
    def initial_offset(self) -> SourceOffset:
        """Where a new query starts (option startingPosition); no watermark yet: the first batch has one."""
        self._fresh()
        streams = {
            s: StreamOffset(self._stream_start(s, self._options.starting)) for s in self.selected_streams()
        }
        return SourceOffset(streams, NO_WATERMARK)

    def target_offset(self, ending: Position | None = None) -> SourceOffset:
        """The bound of a run: each stream's tail cut now, or ``ending``'s cut where it has one."""
        self._fresh()
        ending = ending or Position("latest")
        streams = {}
        for s in self.selected_streams():
            cut = ending.cut_of(s)
            streams[s] = StreamOffset(cut if cut is not None else self._client.get_tail_cut(s).as_dict())
        return SourceOffset(streams, self._watermark(streams, None, at_target=True))

    def next_offset(self, start: SourceOffset, limit: Limit, target: SourceOffset | None) -> SourceOffset:
        """The end of the next micro-batch from ``start``; ``start`` itself when there is nothing new.

        The first micro-batch of a query (``start`` has no watermark yet) reads nothing and
        only carries the watermark at the starting positions (with ``emitWatermarkRows``),
        so that Spark knows it before the first events arrive and can tell they are late.
        """
        self._fresh()
        self._ask(
            [
                (seg, pos)
                for stream, so in start.streams.items()
                if self.selects(stream)
                for seg, pos in so.positions.items()
                if seg not in so.done
            ]
        )
        if start.watermark == NO_WATERMARK and self._options.emit_watermark_rows:
            first = self._watermark(dict(start.streams), None)
            if target is not None:
                first = min(first, target.watermark)
            if first != NO_WATERMARK:
                return SourceOffset(start.streams, first)
        ends: dict[str, dict[str, int]] = {}
        starts: dict[str, dict[str, int]] = {}
        caps: dict[tuple[str, str], int] = {}
        joining = Position("earliest", self._options.starting.cuts)
        candidates = set(target.streams) if target is not None else set(self.selected_streams())
        for stream in sorted(candidates | {s for s in start.streams if self._still_selected(s)}):
            so = start.stream(stream)
            if so is None:  # a stream that appeared (pattern) or is new to this checkpoint: join at its head
                ends[stream] = self._stream_start(stream, joining)
                starts[stream] = dict(ends[stream])
            else:
                ends[stream] = {seg: pos for seg, pos in so.positions.items() if seg not in so.done}
                starts[stream] = {}
            self._add_caps(stream, list(ends[stream]), ends, starts, caps, target)
        self._admission.admit(ends, caps, limit, self._created())
        done: dict[str, set[str]] = {}
        for _ in range(1000):  # successors join; without a limit they are read in this batch too
            joined = self._join_successors(ends, starts, target, done)
            if not joined or not limit.unlimited:
                break
            caps = {}
            self._ask([(seg, 0) for _, seg in joined])
            for stream, seg in joined:
                self._add_caps(stream, [seg], ends, starts, caps, target)
            self._admission.admit(ends, caps, limit, self._created())
        offsets = {s: StreamOffset(ends[s], frozenset(done.get(s, ())), starts[s]) for s in ends}
        watermark = self._watermark(offsets, target.watermark if target is not None else None)
        end = SourceOffset(offsets, max(watermark, start.watermark))
        if not end.moved_from(start) and (
            not self._options.emit_watermark_rows or end.watermark == start.watermark
        ):
            return start  # nothing to read (dropping done segments alone is no reason for a batch)
        return end

    def prepare_next(self, start: SourceOffset, limit: Limit) -> None:
        """Ask the store now for the record scans that ``next_offset(start, limit)`` is about to need.

        Its first round of admission from ``start`` (each segment with data, up to its length
        now), with the answers kept for that call (``admission``); nothing else is asked or
        remembered, and a store error is left for the planning to meet. Only with a limit and
        without a target (a running query's next micro-batch). O(segments + scans).
        """
        if limit.unlimited:
            return
        pairs = {
            (stream, seg): pos
            for stream, so in start.streams.items()
            if self.selects(stream)
            for seg, pos in so.positions.items()
            if seg not in so.done
        }
        try:
            asks = sorted((seg, pos) for (_, seg), pos in pairs.items())
            states = {st.name: st for st in self._client.segment_states(asks)}
            ends: dict[str, dict[str, int]] = {}
            caps: dict[tuple[str, str], int] = {}
            created: dict[str, int] = {}
            for (stream, seg), pos in pairs.items():
                info = states[seg].info if seg in states else None
                if info is None or info.start_offset > pos or info.length <= pos:
                    continue
                ends.setdefault(stream, {})[seg] = pos
                caps[(stream, seg)] = info.length
                created[seg] = info.creation_time
            self._admission.prepare(ends, caps, limit, created)
        except (SegmentStoreError, ReaderGroupError) as e:  # the planning meets it and says so
            _log.debug("scanning ahead failed: %s", e)

    def _created(self) -> dict[str, int]:
        """This planning call's segments' creation times (its ``segment_states`` answers)."""
        return {seg: info.creation_time for seg, info in self._infos.items()}

    def _still_selected(self, stream: str) -> bool:
        """A stream of the checkpoint that option stream no longer selects is not read (said once)."""
        if self.selects(stream):
            return True
        if stream not in self._dropped:
            self._dropped.add(stream)
            self._warn(
                f"stream {stream!r} is in the checkpoint but no longer in option stream "
                f"({', '.join(self._options.streams + self._options.patterns)}): it is not read any more"
            )
        return False

    def _add_caps(
        self,
        stream: str,
        segments: list[str],
        ends: dict[str, dict[str, int]],
        starts: dict[str, dict[str, int]],
        caps: dict[tuple[str, str], int],
        target: SourceOffset | None,
    ) -> None:
        tcut = target.stream(stream) if target is not None else None
        for seg in segments:
            cap = self._cap(stream, seg, ends[stream][seg], tcut, ends[stream], starts[stream])
            if cap is not None and cap > ends[stream][seg]:
                caps[(stream, seg)] = cap

    def ranges(self, start: SourceOffset, end: SourceOffset) -> list[SegmentRange]:
        """The non-empty segment ranges of the micro-batch from ``start`` to ``end``. O(segments)."""
        out: list[SegmentRange] = []
        if end == start:
            return out
        for stream, eo in end.streams.items():
            so = start.stream(stream)
            for seg, pos in eo.positions.items():
                if seg in eo.starts:
                    begin = eo.starts[seg]
                elif so is not None and seg in so.positions and seg not in so.done:
                    begin = so.positions[seg]
                else:
                    begin = 0
                if pos > begin:
                    out.append(SegmentRange(stream, seg, begin, pos, self.pravega(stream)))
        return out

    @checked
    def _check(self) -> None:
        """Assert the caches' invariants: lengths >= 0 (a sealed one is the last seen), each cached
        successor names its predecessor."""
        for seg, length in self._sealed_length.items():
            assert length >= 0, (seg, length)
            assert self._seen_length.get(seg) == length, (seg, length, self._seen_length.get(seg))
        assert all(length >= 0 for length in self._seen_length.values()), self._seen_length
        for seg, succ in self._successors.items():
            names = [name for name, _ in succ]
            assert len(names) == len(set(names)), (seg, names)
            assert all(seg in preds for _, preds in succ), (seg, succ)

    # ------------------------------------------------------------------ internals
    def _info(self, seg: str) -> SegmentInfo:
        info = self._infos.get(seg)
        if info is None:
            st = self._states.get(seg)
            if st is not None and st.info is None:
                raise SegmentNotFoundError(st.error or f"segment {seg!r} does not exist")
            info = self._infos[seg] = self._client.get_info(seg)
            self._seen_length[seg] = info.length
            if info.sealed:
                self._sealed_length[seg] = info.length
        return info

    def _complete(self, seg: str, pos: int) -> bool:
        """Sealed and read to the end (a deleted segment counts as complete)."""
        if seg in self._deleted:
            return True
        length = self._sealed_length.get(seg)
        if length is not None:
            return pos >= length
        try:
            info = self._info(seg)
        except SegmentNotFoundError:
            return True
        return info.sealed and pos >= info.length

    def _cap(
        self,
        stream: str,
        seg: str,
        pos: int,
        tcut: StreamOffset | None,
        ends: dict[str, int],
        starts: dict[str, int],
    ) -> int | None:
        """How far ``seg`` may be read now; handles truncation and deletion (option failOnDataLoss)."""
        if seg in self._deleted:
            return None
        try:
            info = self._info(seg)
        except SegmentNotFoundError:
            self._deleted.add(seg)
            seen = self._sealed_length.get(seg, self._seen_length.get(seg))
            if seen is None or pos < seen:
                what = (
                    "never looked at by this query" if seen is None else f"{seen} bytes long when last seen"
                )
                self._data_loss(f"segment {seg!r} of stream {stream!r} was deleted at offset {pos} ({what})")
            return None
        if info.start_offset > pos:
            self._data_loss(
                f"segment {seg!r} of stream {stream!r} was truncated at {info.start_offset}, "
                f"above the query's offset {pos}"
            )
            ends[seg] = starts[seg] = pos = info.start_offset
        if tcut is not None and seg in tcut.positions:
            return max(pos, min(info.length, tcut.positions[seg]))
        if tcut is not None and not info.sealed:
            return pos  # not active when the target was taken: nothing of it belongs to this run
        return info.length

    def _data_loss(self, message: str) -> None:
        if self._options.fail_on_data_loss:
            raise DataLossError(message + " (set option failOnDataLoss=false to skip lost data)")
        self._warn(message + "; skipping it (failOnDataLoss=false)")

    def _successors_of(self, seg: str) -> list[tuple[str, tuple[str, ...]]]:
        cached = self._successors.get(seg)
        if cached is None:
            try:
                infos = self._client.get_successors(seg)
            except SegmentNotFoundError:
                infos = ()  # deleted with its stream: nothing follows it
            # other errors (a lost connection, a timeout, a closed store) propagate: they say
            # nothing about the successors, and caching "none" would drop every later event.
            # Asked only of complete (sealed) segments, whose successors never change.
            cached = [(i.segment.name, tuple(i.predecessors)) for i in infos]
            self._successors[seg] = cached
        return cached

    def _join_successors(
        self,
        ends: dict[str, dict[str, int]],
        starts: dict[str, dict[str, int]],
        target: SourceOffset | None,
        done: dict[str, set[str]],
    ) -> list[tuple[str, str]]:
        """Add the successors whose predecessors are all complete (marking those done); returns them."""
        joined: list[tuple[str, str]] = []
        for stream, positions in ends.items():
            tcut = target.stream(stream) if target is not None else None
            finished = done.setdefault(stream, set())
            complete = {s for s, p in positions.items() if s not in finished and self._complete(s, p)}
            for seg in sorted(complete):
                if seg in self._deleted:
                    finished.add(seg)  # read in full (or its loss reported): nothing follows it
                    continue
                if tcut is not None and seg in tcut.positions:
                    continue  # active when the target was taken: its successors come after it
                succ = self._successors_of(seg)
                if succ and len(ready_successors(succ, complete | finished)) == len(succ):
                    for name, _ in succ:
                        if name not in positions:
                            positions[name] = starts[stream][name] = 0
                            joined.append((stream, name))
                    finished.add(seg)
        return joined

    def _watermark(self, streams: dict[str, StreamOffset], cap: int | None, at_target: bool = False) -> int:
        """Min of ``watermark_at`` over the frontier; see the module docstring.

        ``at_target``: positions ahead of the query's (a run's bound), which must not raise
        the floor the producer watermark keeps for the query's own positions.
        """
        self._ask(
            [(seg, p) for so in streams.values() for seg, p in so.positions.items() if seg not in so.done]
        )
        if self._producer is not None:
            pw = ProducerWatermarks(self._client) if at_target else self._producer
            return self._producer_watermark(streams, cap, pw)
        live: list[int] = []
        final: list[int] = []
        for stream, so in streams.items():
            for seg, pos in so.positions.items():
                if seg in so.done:
                    continue
                known = self._wms.get((seg, pos))
                try:  # a position the store could not answer for (gone, truncated): as one call would
                    w = known if known is not None else self._client.watermark_at(seg, pos)
                except SegmentNotFoundError:
                    continue  # deleted: nothing more comes from it
                except SegmentTruncatedError:
                    try:  # read from its new start on: that bounds what is left of it
                        head = self._client.get_info(seg).start_offset
                        if self._options.fail_on_data_loss:  # (planning its range warns otherwise)
                            self._data_loss(
                                f"segment {seg!r} of stream {stream!r} was truncated at {head}, "
                                f"above the query's offset {pos}"
                            )
                        w = self._client.watermark_at(seg, head)
                    except (SegmentNotFoundError, SegmentTruncatedError):
                        continue
                if self._complete(seg, pos) and not self._successors_of(seg):
                    final.append(w)
                else:
                    live.append(w)
        return frontier_watermark(live, final, cap)

    def _producer_watermark(
        self, streams: dict[str, StreamOffset], cap: int | None, pw: ProducerWatermarks
    ) -> int:
        """The writers' watermark at the frontier's positions (``timeDomain = event``)."""
        rows: list[tuple[StreamSegment, int]] = []
        for stream, so in streams.items():
            if any(n not in self._segments for n in so.positions):  # one call for the active ones
                with contextlib.suppress(StreamNotFoundError):
                    self._segments.update(
                        (s.name, s) for s in self._client.get_stream(stream).active_segments
                    )
            for name, pos in so.positions.items():
                if name in so.done:
                    continue
                seg = self._segments.get(name)
                if seg is None:
                    try:
                        seg = self._segments[name] = self._client.get_segment(name)
                    except SegmentNotFoundError:
                        continue  # deleted: failOnDataLoss is the read's business
                rows.append((seg, pos))
        w = pw.watermark(0, rows, self._infos)  # NO_WATERMARK while no writer asserted anything
        return w if cap is None or w == NO_WATERMARK else min(w, cap)
