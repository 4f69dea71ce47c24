"""Conditional appends and large events on the wire, as the 0.3.7 client's byte streams and writers use them.

- ``ConditionalBlockEnd`` (a ``ByteStream`` write, a chunk of a large event) and
  ``ConditionalAppend`` (one event) of a writer set up on the segment: stored only if
  the segment's length is the expected offset, as one store append carrying the
  writer's id and event number (deduplicated like any of its appends), answered with
  ``DataAppended``; another length is ``ConditionalCheckFailed`` (nothing stored, the
  writer stays set up: the client fails those events and must reset, as on Pravega).
  A block sent again whose event number is stored already is acknowledged first, as
  Pravega's segment store does, whatever the offset now. A byte stream's bytes are the
  client's own: a Pravega event reader of that stream sees them as they are.
- Events over 8 MiB (``src/segment/large_writer.rs``): ``CreateTransientSegment`` makes
  a scratch segment for the event (a store transaction segment of the stream segment,
  named by the store), the client fills it with conditional blocks, and
  ``MergeSegments`` appends it to the stream segment at once, stamped by the ingestion
  clock like any merge, after checking that it holds whole Pravega events (a merge that
  would garble the stream is refused with ``ErrorMessage``). An unmerged scratch segment
  is aborted by the store's transaction lease. Events over 8 MiB written into a
  transaction are refused (a transaction segment has no transient segments here).

A ``SetupAppend`` on a segment of a transaction committed or aborted by now is answered
``AppendSetup`` and its appends ``NoSuchSegment``, as on Pravega, where a commit or
abort completes after its reply: a client writing into a transaction it aborts at once
sets up before the abort completes there (refusing the set-up would make the 0.3.7
client's writer panic, it has no connection to write on).

The handlers register into ``wire_handlers.HANDLERS`` when this module is imported
(``wire_server`` imports it).
"""

from __future__ import annotations

from ..errors import BadOffsetError, SegmentStoreError
from . import wire_replies as rep
from . import wire_requests as req
from .errors import WireFormatError
from .translate import TRANSACTION_SEPARATOR
from .wire import EVENT_TYPE, HEADER, NULL_EVENT_NUMBER
from .wire_handlers import HANDLERS, Connection, WriterState, _refused, _resolve, _token_ok, event_starts

__all__ = ["conditional_append"]

_ILLEGAL_ARGUMENT = 0
_READ_CHUNK = 4 * 1024 * 1024


def conditional_append(
    conn: Connection, writer: int, event_number: int, offset: int, data: bytes, rid: int
) -> None:
    """Store ``data`` for ``writer`` if the segment's length is ``offset``; answer as Pravega does."""
    state = conn.writers.get(writer)
    if state is None:
        raise WireFormatError(
            f"a conditional append of writer {writer:032x} without a SetupAppend on this connection"
        )
    where = f"conditional append of writer {writer:032x} on {state.segment!r}"
    if not data:
        raise WireFormatError(f"{where}: no data")
    if event_number < state.received:
        raise WireFormatError(f"{where}: event number {event_number} went backwards (after {state.received})")
    state.received = event_number
    store, segment = conn.store, state.stored
    try:
        stored = store.get_writer_event_number(segment, writer)
        if stored is not None and event_number <= stored:  # sent again: stored already
            _acknowledge(conn, state, writer, event_number, rid, store.get_info(segment).length)
            return
        r = store.append(segment, data, expected_offset=offset, writer_uuid=writer, event_number=event_number)
    except BadOffsetError:
        conn.send(rep.ConditionalCheckFailed(writer, event_number, rid))
        return
    except SegmentStoreError as e:
        del conn.writers[writer]  # as after any failed append: the writer sets up again
        _refused(conn, rid, state.segment, e, offset, segment)
        return
    _acknowledge(conn, state, writer, event_number, rid, r.offset + r.length)


def _acknowledge(
    conn: Connection, state: WriterState, writer: int, event_number: int, rid: int, end: int
) -> None:
    previous, state.acked = state.acked, max(state.acked, event_number)
    conn.send(rep.DataAppended(writer, event_number, previous, rid, end))


def _conditional_block_end(conn: Connection, cmd: req.ConditionalBlockEnd) -> None:
    conditional_append(conn, cmd.writer_id, cmd.event_number, cmd.expected_offset, cmd.data, cmd.request_id)


def _conditional_event(conn: Connection, cmd: req.ConditionalAppend) -> None:
    framed = HEADER.pack(EVENT_TYPE, len(cmd.event)) + cmd.event  # stored as every event is: framed
    conditional_append(conn, cmd.writer_id, cmd.event_number, cmd.expected_offset, framed, cmd.request_id)


def _create_transient(conn: Connection, cmd: req.CreateTransientSegment) -> None:
    rid, segment = cmd.request_id, cmd.segment
    stored = _resolve(conn, rid, segment, cmd.delegation_token)
    if stored is None:
        return
    if TRANSACTION_SEPARATOR in stored:
        conn.send(
            rep.ErrorMessage(
                rid,
                segment,
                f"CreateTransientSegment of {segment!r}: events over 8 MiB cannot be written into a "
                "transaction segment here; write them outside the transaction",
                _ILLEGAL_ARGUMENT,
            )
        )
        return
    try:
        name = conn.store.create_transaction(stored)
    except SegmentStoreError as e:
        _refused(conn, rid, segment, e, stored=stored)
        return
    conn.send(rep.SegmentCreated(rid, name))


def _merge_segments(conn: Connection, cmd: req.MergeSegments) -> None:
    rid, target, source = cmd.request_id, cmd.target, cmd.source
    stored = _resolve(conn, rid, target, cmd.delegation_token)
    if stored is None:
        return
    src = _resolve(conn, rid, source, cmd.delegation_token)
    if src is None:
        return
    store = conn.store
    try:
        if src != source or store.get_info(src).parent != stored:
            conn.send(
                rep.ErrorMessage(
                    rid,
                    target,
                    f"MergeSegments of {source!r} into {target!r}: only a transient segment of {target!r} "
                    "merges here (a Pravega transaction commits through the controller)",
                    _ILLEGAL_ARGUMENT,
                )
            )
            return
        if not store.get_info(src).sealed:
            store.seal(src)
        data = _whole(conn, src)
        event_starts(data, f"MergeSegments of {source!r} into {target!r}")
        result = store.merge_transaction_result(src, stored)
    except WireFormatError as e:  # not whole events: merging would garble the stream
        conn.send(rep.ErrorMessage(rid, target, str(e), _ILLEGAL_ARGUMENT))
        return
    except SegmentStoreError as e:
        _refused(conn, rid, target, e, stored=stored)
        return
    conn.send(rep.SegmentsMerged(rid, target, source, result.offset + result.length))


def _whole(conn: Connection, name: str) -> bytes:
    """Every byte of the (sealed) segment ``name``. O(bytes)."""
    out = bytearray()
    offset = conn.store.get_info(name).start_offset
    while True:
        r = conn.store.read(name, offset, _READ_CHUNK)
        out += r.data
        offset += len(r.data)
        if r.at_tail or r.end_of_segment:
            return bytes(out)


_plain_setup_append = HANDLERS[req.SetupAppend]


def _setup_append(conn: Connection, cmd: req.SetupAppend) -> None:
    """A set-up on a completed transaction's segment: accepted, its appends then ``NoSuchSegment``."""
    if TRANSACTION_SEPARATOR in cmd.segment:
        gone = conn.streams.transactions.completed_segment(cmd.segment)
        if gone is not None:
            if _token_ok(conn, cmd.request_id, cmd.segment, cmd.delegation_token):
                conn.writers[cmd.writer_id] = WriterState(
                    cmd.segment, NULL_EVENT_NUMBER, NULL_EVENT_NUMBER, gone
                )
                conn.send(rep.AppendSetup(cmd.request_id, cmd.segment, cmd.writer_id, NULL_EVENT_NUMBER))
            return
    _plain_setup_append(conn, cmd)


HANDLERS[req.SetupAppend] = _setup_append
HANDLERS[req.ConditionalBlockEnd] = _conditional_block_end
HANDLERS[req.ConditionalAppend] = _conditional_event
HANDLERS[req.CreateTransientSegment] = _create_transient
HANDLERS[req.MergeSegments] = _merge_segments
