"""What the segment-store endpoint does with each wire command, answered as Pravega's segment store does.

Appends (``SetupAppend`` then ``AppendBlockEnd``): a writer first sets up on a segment of
a Pravega-framed stream and learns its last stored event number there (``i64::MIN`` if
none; sealed segments answer too). Each block must be whole Pravega events (type 0,
lengths adding up to the block, as many as it says): it is then one store append
carrying the writer's 128-bit id and the block's last event number, stamped by the
ingestion clock like any append, and acknowledged with ``DataAppended`` (the segment's
length after it). The store deduplicates on (writer id, event number), durably: a block
sent again after a reconnect or a restart is acknowledged and not stored twice; one
that overlaps what is stored has its stored events cut off first. A refusal is
Pravega's: ``SegmentIsSealed``, ``NoSuchSegment``, ``WrongHost`` (the store is closing),
and the writer must set up again, as Pravega's appends require after a failure.

Reads (``ReadSegment``): up to 2 MiB from the request's offset; at the tail the read
waits for data, a seal or a watermark move, at most ``tail_wait_s`` (Pravega's waits
up to a minute, but the client gives up after 30 s), then answers an empty read at the
tail. Info, seal and truncation of a stream segment as Pravega's; deleting a stream
segment is the controller's (``deleteStream``).

A segment of no stream is ``NoSuchSegment``; one of an ingestwm-framed stream is
``OperationUnsupported`` saying why; a command ingestwm does not serve (``SealTableSegment``,
...) is ``OperationUnsupported`` naming it. Conditional appends, transient segments and merges
are ``wire_conditional``'s, table segments ``wire_tables``'; a Pravega transaction's segment
names map onto the store's through ``PravegaStreams.store_segment``.
Delegation tokens are checked where a command carries one (``AuthTokenCheckFailed``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    StoreClosedError,
)
from ..future_read import FutureRead
from ..results import SegmentRead as StoreRead
from ..store import SegmentStore
from . import wire_replies as rep
from . import wire_requests as req
from .auth import DelegationTokens
from .errors import AuthTokenError, FramingError, WireFormatError
from .translate import PravegaStreams
from .wire import EVENT_TYPE, HEADER, NULL_EVENT_NUMBER, OLDEST_COMPATIBLE_VERSION, WIRE_VERSION

__all__ = ["Connection", "WriterState", "HANDLERS", "MAX_READ_BYTES", "event_starts"]

_log = logging.getLogger(__name__)

MAX_READ_BYTES = 2 * 1024 * 1024
"""Most bytes one ``SegmentRead`` carries (Pravega's segment store's limit)."""
_ILLEGAL_ARGUMENT = 0  # ErrorMessage's code for an IllegalArgumentException


@dataclass(slots=True)
class WriterState:
    """A writer set up on this connection: its segment (as the client names it, and the store's name for
    it: they differ for a Pravega transaction's segments), its last acknowledged event number (from the
    store at set-up), and the last event number it sent on this connection (they may only grow: a block
    sent again after a reconnect is older than what is stored, and is acknowledged without being stored)."""

    segment: str
    acked: int
    received: int
    stored: str = ""

    def __post_init__(self) -> None:
        self.stored = self.stored or self.segment


class Connection(Protocol):
    """What a handler needs of a connection (``wire_server``)."""

    store: SegmentStore
    streams: PravegaStreams
    tokens: DelegationTokens | None
    tail_wait_s: float
    writers: dict[int, WriterState]

    def send(self, reply: Any) -> None: ...

    def close(self, why: str) -> None: ...

    def authenticated(self) -> None: ...

    def wait(self, fut: FutureRead, seconds: float, done: Callable[[FutureRead], None]) -> None: ...


# ---------------------------------------------------------------------- checks shared by the handlers
def _token_ok(conn: Connection, rid: int, segment: str, token: str) -> bool:
    """Check a command's delegation token; answer ``AuthTokenCheckFailed`` and return False if refused."""
    if conn.tokens is None:
        return True
    try:
        conn.tokens.verify(token, conn.streams.stream_of_segment(segment))
    except (AuthTokenError, SegmentNotFoundError) as e:
        expired = isinstance(e, AuthTokenError) and e.expired
        conn.send(rep.AuthTokenCheckFailed(rid, str(e), 1 if expired else 0))
        return False
    conn.authenticated()
    return True


def _refused(
    conn: Connection, rid: int, segment: str, e: SegmentStoreError, offset: int = -1, stored: str = ""
) -> None:
    """Answer a store or translation error as Pravega's segment store answers it (``segment`` as the client
    names it, ``stored`` the store's name if another)."""
    if isinstance(e, SegmentNotFoundError):
        conn.send(rep.NoSuchSegment(rid, segment, str(e), offset))
    elif isinstance(e, SegmentSealedError):
        conn.send(rep.SegmentIsSealed(rid, segment, str(e), offset))
    elif isinstance(e, SegmentTruncatedError):
        start = _start_offset(conn, stored or segment)
        conn.send(rep.SegmentIsTruncated(rid, segment, start, str(e), offset))
    elif isinstance(e, FramingError):
        conn.send(rep.OperationUnsupported(rid, str(e), ""))
    elif isinstance(e, StoreClosedError):
        conn.send(rep.WrongHost(rid, segment, "", f"this segment store is closing: {e}"))
    elif isinstance(e, (BadOffsetError, InvalidArgumentError)):  # Pravega's IllegalArgumentException
        conn.send(rep.ErrorMessage(rid, segment, str(e), _ILLEGAL_ARGUMENT))
    else:  # the store refuses writes (read-only disk, ...): the client reconnects and tries again
        conn.close(f"segment {segment!r}: {type(e).__name__}: {e}")


def _start_offset(conn: Connection, segment: str) -> int:
    try:
        return conn.store.get_info(segment).start_offset
    except SegmentStoreError:
        return 0


def _resolve(conn: Connection, rid: int, segment: str, token: str, offset: int = -1) -> str | None:
    """Token, then a segment of a Pravega-framed stream (or a transaction segment of one): the store's name
    for it (``PravegaStreams.store_segment``); answers the refusal and returns None if not."""
    if not _token_ok(conn, rid, segment, token):
        return None
    try:
        return conn.streams.store_segment(segment)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, offset)
        return None


def event_starts(data: bytes | memoryview, where: str) -> list[int]:
    """The offsets of the whole Pravega events ``data`` holds (type 0, lengths adding up to it). O(events).

    ``WireFormatError`` naming ``where`` and the byte if anything else is there.
    """
    starts: list[int] = []
    pos, n = 0, len(data)
    while pos < n:
        if pos + HEADER.size > n:
            raise WireFormatError(f"{where}: {n - pos} bytes at byte {pos} are not a whole event header")
        kind, length = HEADER.unpack_from(data, pos)
        if kind != EVENT_TYPE or length < 0 or pos + HEADER.size + length > n:
            raise WireFormatError(
                f"{where}: the bytes at {pos} are not a whole Pravega event (type {kind}, length {length}, "
                f"{n - pos - HEADER.size} bytes left)"
            )
        starts.append(pos)
        pos += HEADER.size + length
    return starts


# ---------------------------------------------------------------------- the connection's own commands
def _hello(conn: Connection, cmd: req.Hello) -> None:
    conn.send(req.Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION))
    if cmd.low_version > WIRE_VERSION or cmd.high_version < OLDEST_COMPATIBLE_VERSION:
        conn.close(
            f"incompatible wire versions: the client speaks {cmd.low_version}..{cmd.high_version}, "
            f"this server {OLDEST_COMPATIBLE_VERSION}..{WIRE_VERSION}"
        )


def _keep_alive(conn: Connection, cmd: req.KeepAlive) -> None:
    conn.send(req.KeepAlive())


def _padding(conn: Connection, cmd: req.Padding) -> None:
    pass


# ---------------------------------------------------------------------- appends
def _setup_append(conn: Connection, cmd: req.SetupAppend) -> None:
    rid, segment = cmd.request_id, cmd.segment
    stored = _resolve(conn, rid, segment, cmd.delegation_token)
    if stored is None:
        return
    try:
        last = conn.store.get_writer_event_number(stored, cmd.writer_id)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, stored=stored)
        return
    last = NULL_EVENT_NUMBER if last is None else last
    conn.writers[cmd.writer_id] = WriterState(segment, last, NULL_EVENT_NUMBER, stored)
    conn.send(rep.AppendSetup(rid, segment, cmd.writer_id, last))


def _append_block_end(conn: Connection, cmd: req.AppendBlockEnd) -> None:
    writer, rid, last = cmd.writer_id, cmd.request_id, cmd.last_event_number
    state = conn.writers.get(writer)
    if state is None:
        raise WireFormatError(
            f"AppendBlockEnd of writer {writer:032x} without a SetupAppend on this connection"
        )
    where = f"AppendBlockEnd of writer {writer:032x} on {state.segment!r}"
    if cmd.num_event <= 0 or cmd.size_of_whole_events != len(cmd.data):
        raise WireFormatError(
            f"{where}: {cmd.num_event} events of {cmd.size_of_whole_events} bytes, "
            f"but {len(cmd.data)} bytes came"
        )
    if last < state.received:
        raise WireFormatError(f"{where}: event number {last} went backwards (after {state.received})")
    starts = event_starts(cmd.data, where)
    if len(starts) != cmd.num_event:
        raise WireFormatError(f"{where}: {len(starts)} whole events, but the block says {cmd.num_event}")
    state.received = last
    store, segment = conn.store, state.stored
    try:
        stored = store.get_writer_event_number(segment, writer)
        data = cmd.data
        first = last - cmd.num_event + 1
        if stored is not None and first <= stored < last:  # the start of the block is stored already
            data = data[starts[stored - first + 1] :]
        r = store.append(segment, data, writer_uuid=writer, event_number=last)
    except SegmentStoreError as e:
        del conn.writers[writer]  # as Pravega's: after a failed append, the writer sets up again
        _refused(conn, rid, state.segment, e, last, segment)
        return
    previous, state.acked = state.acked, max(state.acked, last)
    conn.send(rep.DataAppended(writer, last, previous, rid, r.offset + r.length))


# ---------------------------------------------------------------------- reads and segment control
def _read_segment(conn: Connection, cmd: req.ReadSegment) -> None:
    rid, segment, offset = cmd.request_id, cmd.segment, cmd.offset
    stored = _resolve(conn, rid, segment, cmd.delegation_token, offset)
    if stored is None:
        return
    length = min(MAX_READ_BYTES, max(HEADER.size, cmd.suggested_length))
    try:
        fut = conn.store.read_future(stored, offset, length)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, offset, stored)
        return

    def done(f: FutureRead) -> None:
        try:
            r: StoreRead = f.result()
        except SegmentStoreError as e:
            _refused(conn, rid, segment, e, offset, stored)
            return
        conn.send(rep.SegmentRead(segment, offset, r.at_tail, r.end_of_segment, r.data, rid))

    if fut.done():
        done(fut)
    else:
        conn.wait(fut, conn.tail_wait_s, done)


def _segment_info(conn: Connection, cmd: req.GetStreamSegmentInfo) -> None:
    rid, segment = cmd.request_id, cmd.segment_name
    stored = _resolve(conn, rid, segment, cmd.delegation_token)
    if stored is None:
        return
    try:
        i = conn.store.get_info(stored)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, stored=stored)
        return
    conn.send(
        rep.StreamSegmentInfo(
            rid, segment, True, i.sealed, False, i.last_write_time, i.length, i.start_offset
        )
    )


def _seal_segment(conn: Connection, cmd: req.SealSegment) -> None:
    rid, segment = cmd.request_id, cmd.segment
    stored = _resolve(conn, rid, segment, cmd.delegation_token)
    if stored is None:
        return
    try:
        conn.store.seal(stored)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, stored=stored)
        return
    conn.send(rep.SegmentSealed(rid, segment))


def _truncate_segment(conn: Connection, cmd: req.TruncateSegment) -> None:
    rid, segment, offset = cmd.request_id, cmd.segment, cmd.truncation_offset
    stored = _resolve(conn, rid, segment, cmd.delegation_token, offset)
    if stored is None:
        return
    try:
        if offset > conn.store.get_info(stored).start_offset:  # below the start: truncated already
            conn.store.truncate(stored, offset)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, offset, stored)
        return
    conn.send(rep.SegmentTruncated(rid, segment))


def _delete_segment(conn: Connection, cmd: req.DeleteSegment) -> None:
    rid, segment = cmd.request_id, cmd.segment
    if _resolve(conn, rid, segment, cmd.delegation_token) is None:
        return
    conn.send(
        rep.OperationUnsupported(
            rid, f"DeleteSegment of {segment!r}: a stream's segments go with the stream (deleteStream)", ""
        )
    )


def _unsupported(name: str) -> Callable[[Connection, Any], None]:
    def refuse(conn: Connection, cmd: Any) -> None:
        conn.send(rep.OperationUnsupported(cmd.request_id, f"{name} is not served by ingestwm yet", ""))

    return refuse


def _broken(name: str) -> Callable[[Connection, Any], None]:
    def refuse(conn: Connection, cmd: Any) -> None:
        raise WireFormatError(
            f"{name} outside an append block is not served (the Rust client sends whole blocks)"
        )

    return refuse


HANDLERS: dict[type, Callable[[Connection, Any], None]] = {
    req.Hello: _hello,
    req.KeepAlive: _keep_alive,
    req.Padding: _padding,
    req.SetupAppend: _setup_append,
    req.AppendBlockEnd: _append_block_end,
    req.ReadSegment: _read_segment,
    req.GetStreamSegmentInfo: _segment_info,
    req.SealSegment: _seal_segment,
    req.TruncateSegment: _truncate_segment,
    req.DeleteSegment: _delete_segment,
    req.AppendBlock: _broken("AppendBlock"),
    req.PartialEvent: _broken("PartialEvent"),
    req.Event: _broken("Event"),
}
"""The handler of every request type; those not here answer ``OperationUnsupported`` (``unsupported``)."""
for _cls in (
    req.ConditionalAppend,
    req.ConditionalBlockEnd,
    req.CreateSegment,
    req.UpdateSegmentPolicy,
    req.GetSegmentAttribute,
    req.UpdateSegmentAttribute,
    req.CreateTransientSegment,
    req.MergeSegments,
    req.MergeSegmentsBatch,
    req.MergeTableSegments,
    req.SealTableSegment,
    req.FlushToStorage,
    req.ListStorageChunks,
):
    HANDLERS[_cls] = _unsupported(_cls.__name__)
