"""The segment-store endpoint's table commands, answered as Pravega's ``PravegaRequestProcessor`` does.

Registered into ``wire_handlers.HANDLERS`` on import (``wire_server`` imports this
module). A reader group of the 0.3.7 client keeps its state through these
(``src/sync/table.rs``): ``CreateTableSegment`` (``SegmentCreated``, or
``SegmentAlreadyExists``), ``UpdateTableEntries`` (``TableEntriesUpdated`` with the new
versions; ``TableKeyBadVersion``/``TableKeyDoesNotExist`` if a condition fails),
``RemoveTableKeys`` (``TableKeysRemoved``, same refusals), ``ReadTable`` (``TableRead``:
an absent key with an empty value and version -1), ``ReadTableKeys``/
``ReadTableEntries`` (a page and a continuation token; an empty page ends it),
``ReadTableEntriesDelta`` (``TableEntriesDeltaRead``), ``GetTableSegmentInfo``
(``TableSegmentInfo``) and ``DeleteTableSegment`` (``SegmentDeleted``, or
``TableSegmentNotEmpty`` when it must be empty). A table that does not exist is
``NoSuchSegment``; an update conditional on a table length that is not the table's is
``SegmentIsTruncated`` carrying the length, as Pravega's ``BadOffsetException`` is; a key
or value over Pravega's limits, a position or token this server did not give is
``ErrorMessage`` (Pravega's ``IllegalArgumentException``). ``SealTableSegment`` and
``MergeTableSegments`` stay ``OperationUnsupported`` (Pravega's segment store has no
handler for them either; the client never sends them).

Semantics of versions, deltas and iteration: ``table_segment``; storage: ``tables``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import BadOffsetError, SegmentExistsError, SegmentStoreError
from . import wire_replies as rep
from . import wire_requests as req
from .errors import TableKeyBadVersionError, TableKeyNotFoundError, TableNotEmptyError
from .table_segment import Entry
from .tables import tables_of
from .wire import TableKey, TableValue
from .wire_handlers import HANDLERS, MAX_READ_BYTES, Connection, _refused, _token_ok

__all__ = ["TABLE_HANDLERS"]

_log = logging.getLogger(__name__)


def _wire(entries: list[Entry]) -> tuple[tuple[TableKey, TableValue], ...]:
    """Entries as replies carry them (``payload`` as the client computes it)."""
    return tuple(
        (TableKey(4 + len(k) + 8, k, version), TableValue(4 + len(v), v)) for k, v, version in entries
    )


def _answer_error(conn: Connection, rid: int, segment: str, e: SegmentStoreError, offset: int = -1) -> None:
    """Answer a table operation's refusal as Pravega's ``handleException`` does."""
    if isinstance(e, TableKeyBadVersionError):
        conn.send(rep.TableKeyBadVersion(rid, segment, str(e)))
    elif isinstance(e, TableKeyNotFoundError):
        conn.send(rep.TableKeyDoesNotExist(rid, segment, str(e)))
    elif isinstance(e, TableNotEmptyError):
        conn.send(rep.TableSegmentNotEmpty(rid, segment, str(e)))
    elif isinstance(e, SegmentExistsError):
        conn.send(rep.SegmentAlreadyExists(rid, segment, str(e)))
    elif isinstance(e, BadOffsetError) and e.actual is not None and offset != -1:
        conn.send(rep.SegmentIsTruncated(rid, segment, e.actual, str(e), offset))
    else:
        _refused(conn, rid, segment, e, offset)


def _run(
    conn: Connection, rid: int, segment: str, token: str, op: Callable[[], Any], offset: int = -1
) -> Any:
    """Check the token, run ``op``; answer a refusal and return ``None``, else ``op``'s result."""
    if not _token_ok(conn, rid, segment, token):
        return None
    try:
        return op()
    except SegmentStoreError as e:
        _log.debug("table segment %r: refused: %s", segment, e)
        _answer_error(conn, rid, segment, e, offset)
        return None


def _create(conn: Connection, cmd: req.CreateTableSegment) -> None:
    tables = tables_of(conn.store)

    def op() -> int:
        tables.create(cmd.segment)
        return 1

    if _run(conn, cmd.request_id, cmd.segment, cmd.delegation_token, op):
        conn.send(rep.SegmentCreated(cmd.request_id, cmd.segment))


def _delete(conn: Connection, cmd: req.DeleteTableSegment) -> None:
    tables = tables_of(conn.store)

    def op() -> int:
        tables.delete(cmd.segment, cmd.must_be_empty)
        return 1

    if _run(conn, cmd.request_id, cmd.segment, cmd.delegation_token, op):
        conn.send(rep.SegmentDeleted(cmd.request_id, cmd.segment))


def _update(conn: Connection, cmd: req.UpdateTableEntries) -> None:
    tables = tables_of(conn.store)
    entries = [(k.data, v.data, k.key_version) for k, v in cmd.table_entries]
    versions = _run(
        conn,
        cmd.request_id,
        cmd.segment,
        cmd.delegation_token,
        lambda: tables.put(cmd.segment, entries, cmd.table_segment_offset),
        cmd.table_segment_offset,
    )
    if versions is not None:
        conn.send(rep.TableEntriesUpdated(cmd.request_id, tuple(versions)))


def _remove(conn: Connection, cmd: req.RemoveTableKeys) -> None:
    tables = tables_of(conn.store)
    keys = [(k.data, k.key_version) for k in cmd.keys]

    def op() -> int:
        tables.remove(cmd.segment, keys, cmd.table_segment_offset)
        return 1

    if _run(conn, cmd.request_id, cmd.segment, cmd.delegation_token, op, cmd.table_segment_offset):
        conn.send(rep.TableKeysRemoved(cmd.request_id, cmd.segment))


def _read(conn: Connection, cmd: req.ReadTable) -> None:
    tables = tables_of(conn.store)
    keys = [k.data for k in cmd.keys]
    rid, segment = cmd.request_id, cmd.segment
    found = _run(conn, rid, segment, cmd.delegation_token, lambda: tables.get(segment, keys))
    if found is not None:
        conn.send(rep.TableRead(cmd.request_id, cmd.segment, _wire(found)))


def _read_keys(conn: Connection, cmd: req.ReadTableKeys) -> None:
    tables = tables_of(conn.store)
    count, token = cmd.suggested_key_count, cmd.continuation_token
    page = _run(
        conn,
        cmd.request_id,
        cmd.segment,
        cmd.delegation_token,
        lambda: tables.page(cmd.segment, token, count, MAX_READ_BYTES),
    )
    if page is not None:
        keys = tuple(TableKey(4 + len(k) + 8, k, version) for k, _, version in page[0])
        conn.send(rep.TableKeysRead(cmd.request_id, cmd.segment, keys, page[1]))


def _read_entries(conn: Connection, cmd: req.ReadTableEntries) -> None:
    tables = tables_of(conn.store)
    count, token = cmd.suggested_entry_count, cmd.continuation_token
    page = _run(
        conn,
        cmd.request_id,
        cmd.segment,
        cmd.delegation_token,
        lambda: tables.page(cmd.segment, token, count, MAX_READ_BYTES),
    )
    if page is not None:
        conn.send(rep.TableEntriesRead(cmd.request_id, cmd.segment, _wire(page[0]), page[1]))


def _read_delta(conn: Connection, cmd: req.ReadTableEntriesDelta) -> None:
    tables = tables_of(conn.store)
    got = _run(
        conn,
        cmd.request_id,
        cmd.segment,
        cmd.delegation_token,
        lambda: tables.delta(cmd.segment, cmd.from_position, cmd.suggested_entry_count, MAX_READ_BYTES),
    )
    if got is not None:
        entries, should_clear, reached_end, last = got
        conn.send(
            rep.TableEntriesDeltaRead(
                cmd.request_id, cmd.segment, _wire(entries), should_clear, reached_end, last
            )
        )


def _info(conn: Connection, cmd: req.GetTableSegmentInfo) -> None:
    tables = tables_of(conn.store)
    name = cmd.segment_name
    got = _run(conn, cmd.request_id, name, cmd.delegation_token, lambda: tables.info(name))
    if got is not None:
        start, length, count = got
        conn.send(rep.TableSegmentInfo(cmd.request_id, cmd.segment_name, start, length, count, 0))


TABLE_HANDLERS: dict[type, Callable[[Connection, Any], None]] = {
    req.CreateTableSegment: _create,
    req.DeleteTableSegment: _delete,
    req.UpdateTableEntries: _update,
    req.RemoveTableKeys: _remove,
    req.ReadTable: _read,
    req.ReadTableKeys: _read_keys,
    req.ReadTableEntries: _read_entries,
    req.ReadTableEntriesDelta: _read_delta,
    req.GetTableSegmentInfo: _info,
}
"""The table commands served; they replace ``wire_handlers``' ``OperationUnsupported`` for them."""
HANDLERS.update(TABLE_HANDLERS)
