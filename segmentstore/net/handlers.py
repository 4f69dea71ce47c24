"""Request handlers of the segment store server, one per command name (``handlers()``).

``handler(conn, request_id, args, payload)`` decodes its args, calls the store and
queues exactly one reply or error on ``conn`` (a waiting read replies later). Commands
without a special handler here call the ``EmbeddedClient`` method of the same name.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..attributes import is_core_attribute
from ..client.embedded import EmbeddedClient
from ..core.batched_reads import MAX_STATE_REQUESTS, check_range_requests, check_state_requests, read_ranges
from ..errors import ProtocolError
from ..future_read import FutureRead
from ..limits import INT64_MAX, INT64_MIN
from ..results import SegmentRead
from ..wait_any import ReadyFuture, check_wait_ms
from .commands import COMMANDS, decode_args, encode_append_result, encode_read, encode_read_ranges
from .protocol import PROTOCOL_VERSION

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = ["Conn", "Handler", "handlers"]


class Conn(Protocol):
    """What a handler needs of a server connection."""

    store: SegmentStore
    client: EmbeddedClient
    max_reply: int
    max_append_bytes: int

    def reply(self, rid: int, result: Any, payload: bytes = b"") -> None: ...

    def error(self, rid: int, exc: BaseException) -> None: ...

    def wait_read(
        self,
        rid: int,
        fut: FutureRead | ReadyFuture,
        wait_ms: int,
        encode: Callable[[Any], tuple[Any, bytes]] = ...,
    ) -> None: ...


Handler = Callable[[Conn, int, Any, memoryview], None]


def _generic_for(name: str) -> Handler:
    """A handler calling the ``EmbeddedClient`` method ``name`` and replying with its result."""
    cmd = COMMANDS[name]

    def handle(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
        kw = decode_args(cmd, args, payload)
        try:
            result = getattr(conn.client, name)(**kw)
        except Exception as e:
            conn.error(rid, e)
        else:
            conn.reply(rid, result)

    return handle


def _ping(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    decode_args(COMMANDS["ping"], args, payload)
    conn.reply(rid, True)


def _read(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    kw = decode_args(COMMANDS["read"], args, payload)
    name, offset, max_length = kw["name"], kw["offset"], kw["max_length"]
    wait_ms = kw.get("wait_ms", 0)
    cap = conn.max_reply - 4096
    if type(max_length) is int and max_length > cap:
        max_length = cap
    store = conn.store
    try:
        if check_wait_ms(f"segment {name!r}", wait_ms) == 0:
            r: SegmentRead = store.read(name, offset, max_length)
        else:
            fut = store.read_future(name, offset, max_length)
            if not fut.done():
                conn.wait_read(rid, fut, wait_ms)
                return
            r = fut.result()
    except ProtocolError:
        raise
    except Exception as e:
        conn.error(rid, e)
        return
    conn.reply(rid, *encode_read(r))


def _wait_any(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    kw = decode_args(COMMANDS["wait_any"], args, payload)
    wait_ms = kw.get("wait_ms", 0)
    try:
        check_wait_ms("wait_any", wait_ms)
        fut = conn.store.wait_any(kw["requests"])
        if not fut.done() and wait_ms:
            conn.wait_read(rid, fut, wait_ms, _encode_ready)
            return
        ready = fut.wait(0)
    except ProtocolError:
        raise
    except Exception as e:
        conn.error(rid, e)
        return
    conn.reply(rid, *_encode_ready(ready))


def _segment_states(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    """``segment_states``, bounded: at most ``MAX_STATE_REQUESTS`` requests in one frame."""
    kw = decode_args(COMMANDS["segment_states"], args, payload)
    try:
        reqs = check_state_requests(kw["requests"], MAX_STATE_REQUESTS)
        result = conn.client.segment_states(reqs)
    except Exception as e:
        conn.error(rid, e)
    else:
        conn.reply(rid, result)


def _read_ranges(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    """``read_ranges``, bounded: ``MAX_STATE_REQUESTS`` requests, data of a quarter of a reply frame."""
    kw = decode_args(COMMANDS["read_ranges"], args, payload)
    store = conn.store
    try:
        reqs = check_range_requests(kw["requests"], MAX_STATE_REQUESTS)
        reads = read_ranges(store.read, store.ingestion_runs, reqs, max(0, conn.max_reply - 65536) // 4)
    except Exception as e:
        conn.error(rid, e)
    else:
        conn.reply(rid, *encode_read_ranges(reads))


def _encode_ready(ready: tuple[int, ...]) -> tuple[Any, bytes]:
    return list(ready), b""


def _append(conn: Conn, rid: int, args: Any, payload: memoryview) -> None:
    kw = decode_args(COMMANDS["append"], args, payload)
    sizes = kw["sizes"]
    n = len(sizes) if isinstance(sizes, list) else -1
    if n < 1 or set(map(type, sizes)) != {int} or min(sizes) < 0 or sum(sizes) != len(payload):
        raise ProtocolError(f"append: sizes must be a non-empty list of ints adding up to {len(payload)}")
    cols = []
    for key in ("eo", "wid", "ev"):
        col = kw.get(key)
        if col is not None and (not isinstance(col, list) or len(col) != n):
            raise ProtocolError(f"append: {key} must be nil or a list of {n} items")
        cols.append(col)
    out = _apply_appends(conn.client, conn.max_append_bytes, kw["name"], payload, sizes, *cols)
    conn.reply(rid, out)


def _apply_appends(
    client: EmbeddedClient,
    limit: int,
    name: Any,
    payload: memoryview,
    sizes: list[int],
    eos: list[Any] | None,
    wids: list[Any] | None,
    evs: list[Any] | None,
) -> list[list[Any]]:
    """Apply the items of an ``append`` request in order; reply entries for all of them.

    Runs of plain items (no expected offset; no writer, or one writer with strictly
    increasing event numbers above its last stored one) are stored as one append, as
    Pravega's append processor aggregates a connection's appends into blocks; each item
    still gets its own offset (a run's reply entry is ``[offset, timestamp, count]``).
    Anything else (and any run that fails) goes item by item, so every item gets exactly
    the result or error a single append would. O(bytes).
    """
    out: list[list[Any]] = []
    n = len(sizes)
    starts = [0, *itertools.accumulate(sizes)]

    def single(k: int) -> None:
        w = wids[k] if wids is not None else None
        e = evs[k] if evs is not None else None
        eo = eos[k] if eos is not None else None
        data = bytes(payload[starts[k] : starts[k + 1]])
        try:
            r = client.append(name, data, eo, writer_id=w, event_number=e)
        except Exception as ex:
            out.append(encode_append_result(ex))
        else:
            out.append([r.offset, r.length, r.timestamp, r.duplicate])

    def run(i: int, j: int, w: Any, last_e: Any) -> None:
        """Items ``[i, j)`` as one append (item by item if that fails or is a duplicate)."""
        if j - i == 1:
            single(i)
            return
        try:
            data = bytes(payload[starts[i] : starts[j]])
            r = client.append(name, data, None, writer_id=w, event_number=last_e)
        except Exception:
            r = None
        if r is None or r.duplicate:
            for k in range(i, j):
                single(k)
        else:
            out.append([r.offset, r.timestamp, j - i])  # a run: the items back to back

    def first_new(i: int, w: Any) -> int:
        """Skip (as single, duplicate) items from ``i`` whose event number the writer stored already.

        Only the items from ``i`` of writer ``w`` with strictly increasing event numbers are
        searched: a frame may hold other writers' items (or none's) after them.
        """
        try:
            last = client.get_attributes(name, [w]).get(w)
        except Exception:
            return i
        if last is None or evs is None or wids is None:
            return i
        hi = i + 1
        while hi < n and wids[hi] == w and type(evs[hi]) is int and evs[hi] > evs[hi - 1]:
            hi += 1
        k = bisect.bisect_right(evs, last, i, hi)
        for d in range(i, k):
            single(d)
        return k

    if _uniform(sizes, limit, eos, wids, evs):  # the common case, decided in C-speed passes
        w = wids[0] if wids is not None else None
        i = first_new(0, w) if w is not None else 0
        while i < n:
            j = bisect.bisect_right(starts, starts[i] + limit, i + 1, n + 1) - 1
            run(i, j, w, evs[j - 1] if evs is not None else None)
            i = j
        return out
    i = 0
    while i < n:
        w = wids[i] if wids is not None else None
        e = evs[i] if evs is not None else None
        if not _plain(w, e) or (eos is not None and eos[i] is not None) or not 0 < sizes[i] <= limit:
            single(i)
            i += 1
            continue
        if w is not None:
            k = first_new(i, w)
            if k > i:
                i = k
                continue
        j, total, last_e = i + 1, sizes[i], e
        while j < n and sizes[j] > 0 and total + sizes[j] <= limit and (eos is None or eos[j] is None):
            wj = wids[j] if wids is not None else None
            ej = evs[j] if evs is not None else None
            if wj != w or (w is None and ej is not None):
                break
            if w is not None and (type(ej) is not int or not last_e < ej <= INT64_MAX):  # type: ignore[operator]
                break
            total += sizes[j]
            last_e = ej
            j += 1
        run(i, j, w, last_e)
        i = j
    return out


def _plain(w: Any, e: Any) -> bool:
    """No writer at all, or a valid writer id and event number."""
    return (w is None and e is None) or (
        type(w) is int
        and type(e) is int
        and not is_core_attribute(w)
        and INT64_MIN <= w <= INT64_MAX
        and INT64_MIN <= e <= INT64_MAX
    )


def _uniform(
    sizes: list[int], limit: int, eos: list[Any] | None, wids: list[Any] | None, evs: list[Any] | None
) -> bool:
    """Whether every item is plain: sizes in (0, limit], no expected offsets, one writer (or none)
    with strictly increasing event numbers. O(n) in C-level passes."""
    n = len(sizes)
    if min(sizes) <= 0 or max(sizes) > limit or (eos is not None and eos.count(None) != n):
        return False
    if wids is None or evs is None:
        return wids is None and evs is None
    return (
        wids.count(wids[0]) == n
        and _plain(wids[0], evs[0])
        and set(map(type, evs)) == {int}
        and evs[-1] <= INT64_MAX
        and all(map(operator.lt, evs, itertools.islice(evs, 1, None)))
    )


_SPECIAL: dict[str, Handler] = {
    "ping": _ping,
    "read": _read,
    "wait_any": _wait_any,
    "append": _append,
    "segment_states": _segment_states,
    "read_ranges": _read_ranges,
}


def handlers(version: int = PROTOCOL_VERSION) -> dict[str, Handler]:
    """A handler for every command of protocol ``version`` but ``hello`` (the connection handles it)."""
    return {
        name: _SPECIAL.get(name) or _generic_for(name)
        for name, cmd in COMMANDS.items()
        if name != "hello" and cmd.since <= version
    }
