"""``RemoteClient``: the ``SegmentStoreClient`` interface over the wire protocol to ``ingestwm serve``.

Same frozen results, same ``SegmentStoreError`` subclasses as ``EmbeddedClient``. How
calls reach the server, when one is sent again and how its timeout is measured:
``client.resend``. Appends go through one pipeline: ``append_async`` and
``append_many`` keep many appends in flight (coalesced into few frames, acknowledged
in order); after a lost connection the pipeline resends every unacknowledged append
that carries a writer id and event number, in order (the store drops the
duplicates), and fails the others with ``ConnectionLostError`` (their outcome is
unknown); see ``append_pipeline`` (a server that acknowledged no append for
``timeout_s`` fails every pending one). Sequential reads are fetched ahead
(``client.read_ahead``). ``close()`` is final: no thread of the client outlives it,
nothing is sent after it returns, and every append it leaves is failed.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from ..attributes import AttributeUpdate, AttributeUpdateType, as_updates, check_attribute_keys
from ..clock import monotonic_s
from ..core.batched_reads import (
    MAX_STATE_REQUESTS,
    RangeRead,
    SegmentState,
    check_range_requests,
    check_read_requests,
    check_state_requests,
)
from ..errors import (
    AppendTooLargeError,
    ClientClosedError,
    InvalidArgumentError,
    InvalidScaleError,
    ProtocolError,
    ReadTimeoutError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    StreamExistsError,
    StreamNotFoundError,
)
from ..net.commands import decode_read, decode_read_ranges
from ..net.protocol import DEFAULT_MAX_FRAME_BYTES, pack
from ..results import AppendResult, RecordScan, RecordsRead, SegmentInfo, SegmentRead
from ..stream_metadata import StreamCut, StreamInfo, StreamSegment, SuccessorInfo, TransactionInfo
from ..wait_any import check_wait_ms, check_wait_requests
from .append_pipeline import Chunk
from .connection import Connection
from .interface import SegmentClient, SegmentStoreClient, StreamClient
from .read_ahead import Fetch, ReadAhead
from .resend import Settled, WireCalls, parse_address

__all__ = ["RemoteClient", "parse_address"]

_log = logging.getLogger(__name__)

_BYTES = (bytes, bytearray, memoryview)


class RemoteClient(WireCalls, SegmentStoreClient):
    """A ``SegmentStoreClient`` talking to a ``SegmentStoreServer``. Thread-safe.

    ``timeout_s`` bounds every call (waiting reads: ``wait_ms`` more); ``pool_size``
    connections serve the non-append calls; appends are batched up to
    ``max_batch_events`` / ``max_batch_bytes`` per frame with ``window`` frames in flight.

    ``read_ahead``: after a read that returned ``max_length`` bytes short of the tail,
    the next chunk is fetched in the background (as Pravega's segment input stream
    does), so sequential reads do not wait a round trip each. Bytes below the tail never
    change, so the result is what the read would return, except that a segment truncated
    or deleted by another client meanwhile may still yield the chunk fetched before;
    this client's own truncate/delete/merge/stream calls drop what was read ahead.

    Each operation is documented on the protocol (``segmentstore.client.interface``);
    a method's own docstring here says only what this client adds (when it is sent again
    after a lost reply), and one without shows the protocol's in ``help()``.
    """

    def __init__(
        self,
        address: str | tuple[str, int],
        token: str | None = None,
        ssl_context: Any = None,
        timeout_s: float = 30.0,
        pool_size: int = 2,
        *,
        connect_timeout_s: float = 5.0,
        server_hostname: str | None = None,
        max_batch_events: int = 4096,
        max_batch_bytes: int = 1 << 20,
        window: int = 8,
        max_queued_events: int = 1 << 17,
        read_ahead: bool = True,
    ) -> None:
        self.host, self.port = parse_address(address)
        for what, v in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise InvalidArgumentError(f"RemoteClient {what} must be > 0, got {v!r}")
        for what, n in (
            ("pool_size", pool_size),
            ("max_batch_events", max_batch_events),
            ("max_batch_bytes", max_batch_bytes),
            ("window", window),
            ("max_queued_events", max_queued_events),
        ):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidArgumentError(f"RemoteClient {what} must be an int >= 1, got {n!r}")
        self.timeout_s = float(timeout_s)
        self.max_batch_events = max_batch_events
        self.max_batch_bytes = max_batch_bytes
        self.window = window
        self.max_queued_events = max_queued_events
        self.read_ahead = bool(read_ahead)
        self._max_data = DEFAULT_MAX_FRAME_BYTES - 65536

        def connect(within_s: float, on_socket: Callable[[Any], None]) -> Connection:
            return Connection(
                self.host,
                self.port,
                token=token,
                ssl_context=ssl_context,
                server_hostname=server_hostname,
                connect_timeout_s=min(connect_timeout_s, within_s),
                io_timeout_s=self.timeout_s,
                on_socket=on_socket,
            )

        self._connect = connect
        self.pool_size = pool_size
        self._closed = False
        self._start()

    def _start(self) -> None:
        """``WireCalls._start``, and an empty read-ahead cache."""
        self._ahead = ReadAhead()
        super()._start()

    def ping(self) -> bool:
        """Round trip to the server."""
        return bool(self._invoke("ping", {})[0])

    def server_version(self) -> int:
        """The server's protocol version, from a connection's hello (one is made if none is open).

        A call whose command that version lacks raises ``UnsupportedCommandError`` at once,
        nothing sent; an older server serves every other call as a server of this version does.
        """
        self._after_fork()
        return self._pool.get(monotonic_s() + self.timeout_s).server_version

    # ------------------------------------------------------------------ segments
    def create_segment(self, name: str) -> SegmentInfo:
        """Sent again after a lost reply: a segment found existing then, still as a create leaves
        one (empty, open), is the create done; any other one is ``SegmentExistsError``."""
        result = self._invoke("create_segment", {"name": name}, settled=SegmentExistsError)[0]
        if not isinstance(result, Settled):
            return cast(SegmentInfo, result)
        info = self.get_info(name)
        if info.length or info.start_offset or info.sealed:
            raise SegmentExistsError(
                f"segment {name!r} exists and holds data or is sealed; it was not created by this call "
                "(a create sent again after a lost reply found it)"
            ) from result.error
        return info

    def create_transaction(self, parent: str) -> str:
        return self._call(SegmentClient.create_transaction, parent=parent)

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> AppendResult:
        fut = self.append_async(name, data, expected_offset, writer_id=writer_id, event_number=event_number)
        try:
            return fut.result(2 * self.timeout_s + 1.0)
        except concurrent.futures.TimeoutError:
            raise ReadTimeoutError(f"append to {name!r}: no acknowledgement in time") from None

    def append_async(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> concurrent.futures.Future[AppendResult]:
        """Queued on the pipeline: appends queued by one thread are stored and acknowledged in that order."""
        fut: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
        if self._closed:
            fut.set_exception(ClientClosedError(f"append to {name!r}: the remote client is closed; not sent"))
            return fut

        def done(results: list[Any]) -> None:
            r = results[0]
            if isinstance(r, BaseException):
                fut.set_exception(r)
            else:
                fut.set_result(r)

        try:
            data = self._check_item(name, data, expected_offset, writer_id, event_number)
            retriable = type(writer_id) is int and type(event_number) is int
            eos = None if expected_offset is None else [expected_offset]
            wids = None if writer_id is None else [writer_id]
            evs = None if event_number is None else [event_number]
            self._after_fork()
            self._pipeline.submit(Chunk(name, [data], eos, wids, evs, retriable, done))
        except SegmentStoreError as e:
            fut.set_exception(e)
        return fut

    def append_many(
        self,
        name: str,
        events: Sequence[bytes],
        *,
        writer_id: int | None = None,
        first_event_number: int | None = None,
    ) -> list[AppendResult]:
        """Append each event as its own append, pipelined; results in order.

        With ``writer_id``, event ``i`` carries event number ``first_event_number + i``
        (retries after a lost connection are deduplicated). Raises the first item's
        error after all items completed (the items before it are stored). O(total bytes).
        """
        if (writer_id is None) != (first_event_number is None):
            raise InvalidArgumentError(
                f"segment {name!r}: append_many needs writer_id and first_event_number together"
            )
        if self._closed:
            raise ClientClosedError(f"append_many to {name!r}: the remote client is closed; not sent")
        events = list(events)
        if set(map(type, events)) - {bytes}:
            events = [self._check_item(name, e, None, None, None) for e in events]
        if events and max(map(len, events)) > self._max_data:
            self._check_item(name, max(events, key=len), None, None, None)
        self._check_item(name, b"", None, writer_id, first_event_number)
        n = len(events)
        ends = list(itertools.accumulate(map(len, events)))
        results: list[Any] = [None] * n
        left = [0]
        lock = threading.Lock()
        finished = threading.Event()
        chunks = []
        i = 0
        while i < n:
            base = ends[i - 1] if i else 0  # a chunk: up to max_batch_events and max_batch_bytes
            j = min(i + self.max_batch_events, bisect.bisect_right(ends, base + self.max_batch_bytes, i + 1))
            j = max(j, i + 1)
            evs = None
            if first_event_number is not None:
                evs = list(range(first_event_number + i, first_event_number + j))
            wids = None if writer_id is None else [writer_id] * (j - i)

            def done(res: list[Any], at: int = i) -> None:
                results[at : at + len(res)] = res
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        finished.set()

            chunks.append(Chunk(name, events[i:j], None, wids, evs, writer_id is not None, done))
            i = j
        if not chunks:
            return []
        left[0] = len(chunks)
        self._after_fork()
        for ch in chunks:
            self._pipeline.submit(ch)
        if not finished.wait(self.timeout_s * (2 + len(chunks) / self.window)):
            raise ReadTimeoutError(f"append_many to {name!r}: no acknowledgement in time")
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    def _check_item(self, name: Any, data: Any, eo: Any, w: Any, e: Any) -> bytes:
        if type(data) is bytes:
            out: bytes = data
        elif isinstance(data, _BYTES):
            out = bytes(data)
        else:
            raise InvalidArgumentError(f"segment {name!r}: payload must be bytes, got {type(data).__name__}")
        if len(out) > self._max_data:
            raise AppendTooLargeError(
                f"segment {name!r}: append of {len(out)} bytes exceeds a frame", len(out), self._max_data
            )
        if (
            type(name) is not str
            or (eo is not None and type(eo) is not int)
            or (w is not None and type(w) is not int)
            or (e is not None and type(e) is not int)
        ):
            try:
                pack([name, eo, w, e])
            except TypeError as ex:
                raise InvalidArgumentError(f"segment {name!r}: cannot send the append: {ex}") from None
        return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued append is acknowledged; ``False`` on timeout."""
        return self._pipeline.flush(self.timeout_s if timeout_s is None else timeout_s)

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        if not isinstance(events, (*_BYTES, str, list, tuple)) and isinstance(events, Iterable):
            events = list(events)
        return self._call(SegmentClient.append_batch, name, events, expected_offset)

    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        self._ahead.clear()
        return self._call(SegmentClient.merge_transaction, txn_name=txn_name, parent=parent)

    def seal(self, name: str) -> int:
        """Sent again after a lost reply: a segment found sealed then is the seal done (its length)."""
        result = self._invoke("seal", {"name": name}, settled=SegmentSealedError)[0]
        return self.get_info(name).length if isinstance(result, Settled) else cast(int, result)

    def truncate(self, name: str, offset: int) -> None:
        self._ahead.clear()
        self._call(SegmentClient.truncate, name=name, offset=offset)

    def delete(self, name: str) -> None:
        """Sent again after a lost reply: a segment not found then is the delete done."""
        self._ahead.clear()
        self._invoke("delete", {"name": name}, settled=SegmentNotFoundError)

    def get_info(self, name: str) -> SegmentInfo:
        return self._call(SegmentClient.get_info, name=name)

    def exists(self, name: str) -> bool:
        return self._call(SegmentClient.exists, name=name)

    # ------------------------------------------------------------------ attributes
    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        """Plain replacements leave the same values however often they apply, so a call of only
        those is sent again after a lost reply; conditional or accumulating ones are not."""
        ups = list(as_updates(name, updates))
        again = all(u.update_type is AttributeUpdateType.REPLACE for u in ups)
        result = self._invoke("update_attributes", {"name": name, "updates": ups}, idempotent=again)[0]
        return cast(int, result)

    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        keys = None if keys is None else list(check_attribute_keys(name, keys))
        return self._call(SegmentClient.get_attributes, name=name, keys=keys)

    # ------------------------------------------------------------------ reads and watermarks
    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        self._after_fork()
        if wait_ms:  # checked here too: a reply never waited for would hold a request slot
            check_wait_ms(f"segment {name!r}", wait_ms)
        plain = type(name) is str and type(offset) is int and type(max_length) is int
        start = monotonic_s()
        r = self._ahead.take((name, offset, max_length), self.timeout_s) if plain else None
        if r is None:  # the read's timeout counts from its start, the wait for a fetch ahead included
            extra = wait_ms / 1000.0 if type(wait_ms) is int and wait_ms > 0 else 0.0
            extra -= monotonic_s() - start
            args = {"name": name, "offset": offset, "max_length": max_length, "wait_ms": wait_ms}
            result, data = self._invoke("read", args, extra, copy_payload=True)
            r = decode_read(result, data)
        if self.read_ahead and plain and 0 < max_length == len(r.data) and not r.at_tail:
            self._prefetch(name, r.end_offset, max_length)
        return r

    def prefetch(self, name: str, offset: int, max_length: int) -> None:
        """Ask now for what ``read(name, offset, max_length)`` will ask: that read takes the reply.

        For a caller that knows its next read before it needs it (a decoder cutting reads at
        frame boundaries, which ``read_ahead`` cannot guess): the round trip overlaps its work,
        on the connection's reader thread, with no thread of its own. The read waits for the
        reply if it has not come; a reply at the tail, a failure or a reply not taken before
        ``close`` is dropped (the read asks again). Arguments a read would refuse send nothing.
        """
        if type(name) is str and type(offset) is int and type(max_length) is int and max_length > 0:
            self._after_fork()
            self._prefetch(name, offset, max_length)

    def drop_prefetched(self) -> None:
        """Forget the reads asked for ahead (``read_ahead``, ``prefetch``) and not yet taken: a later read
        asks the store again. For a client kept for later work, whose next reads may come after
        other clients truncated or deleted what was fetched. O(reads kept)."""
        self._ahead.clear()

    def wait_any(self, requests: Sequence[tuple[str, int, int]], wait_ms: int = 0) -> tuple[int, ...]:
        reqs = check_wait_requests(requests)
        check_wait_ms("wait_any", wait_ms)
        extra = wait_ms / 1000.0 if type(wait_ms) is int and wait_ms > 0 else 0.0
        result, _ = self._invoke("wait_any", {"requests": [list(r) for r in reqs], "wait_ms": wait_ms}, extra)
        if not isinstance(result, list) or any(type(i) is not int or not 0 <= i < len(reqs) for i in result):
            raise ProtocolError(f"wait_any: malformed reply {result!r:.80}")
        return tuple(result)

    def _prefetch(self, name: str, offset: int, max_length: int) -> None:
        fetch = Fetch()
        args = {"name": name, "offset": offset, "max_length": max_length, "wait_ms": 0}
        try:
            deadline = monotonic_s() + self.timeout_s
            self._pool.get(deadline).request("read", pack(args), b"", fetch.done, deadline)
        except SegmentStoreError:
            return  # the read itself will try (and report)
        self._ahead.put((name, offset, max_length), fetch)

    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        return self._call(
            SegmentClient.scan_records,
            name=name,
            offset=offset,
            max_length=max_length,
            max_records=max_records,
        )

    def watermark_at(self, name: str, offset: int) -> int:
        return self._call(SegmentClient.watermark_at, name=name, offset=offset)

    def ingestion_time_at(self, name: str, offset: int) -> int:
        return self._call(SegmentClient.ingestion_time_at, name=name, offset=offset)

    def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
        return self._call(SegmentClient.ingestion_runs, name=name, begin=begin, end=end)

    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        if not isinstance(offsets, np.ndarray):
            offsets = np.asarray(offsets)
        if offsets.dtype.kind not in "iu":  # as the store says it, before the wire refuses the array
            raise InvalidArgumentError(
                f"segment {name!r}: offsets must be an integer array, got dtype {offsets.dtype}"
            )
        return self._call(SegmentClient.watermarks_at, name=name, offsets=offsets)

    # -------------------------------------------------- batched reads (segmentstore.core.batched_reads)
    def read_many(self, requests: Sequence[tuple[Any, ...]]) -> tuple[RecordsRead | None, ...]:
        reqs = check_read_requests(requests)  # here too: a bad request is refused before it is sent
        result = self._call(SegmentClient.read_many, requests=reqs)
        if not isinstance(result, tuple) or len(result) != len(reqs):
            raise ProtocolError(f"read_many: malformed reply {result!r:.80}")
        return result

    # ------------------------------------------------------------------ many segments' state (issue 39)
    def segment_states(self, requests: Sequence[tuple[str, int]]) -> tuple[SegmentState, ...]:
        """One round trip per ``MAX_STATE_REQUESTS`` requests, all checked first (none sent if one is bad)."""
        reqs = check_state_requests(requests)
        out: list[SegmentState] = []
        for i in range(0, len(reqs), MAX_STATE_REQUESTS):
            part = [list(r) for r in reqs[i : i + MAX_STATE_REQUESTS]]
            got = self._invoke("segment_states", {"requests": part})[0]
            if not isinstance(got, (tuple, list)) or len(got) != len(part):
                raise ProtocolError(f"segment_states: malformed reply {got!r:.80}")
            out.extend(got)
        return tuple(out)

    def read_ranges(self, requests: Sequence[tuple[str, int, int]]) -> tuple[RangeRead, ...]:
        """One round trip per ``MAX_STATE_REQUESTS`` requests; the data travels as the payload."""
        reqs = check_range_requests(requests)
        out: list[RangeRead] = []
        for i in range(0, len(reqs), MAX_STATE_REQUESTS):
            part = reqs[i : i + MAX_STATE_REQUESTS]
            args = {"requests": [list(r) for r in part]}
            result, payload = self._invoke("read_ranges", args, copy_payload=True)
            out.extend(decode_read_ranges(result, payload, [r[0] for r in part]))
        return tuple(out)

    # ------------------------------------------------------------------ streams (controller)
    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """Sent again after a lost reply: a stream found existing then, still as this create leaves
        one (epoch 0, open, ``initial_segments`` segments), is the create done; any other one is
        ``StreamExistsError``."""
        args = {"stream": stream, "initial_segments": initial_segments}
        result = self._invoke("create_stream", args, settled=StreamExistsError)[0]
        if not isinstance(result, Settled):
            return cast(StreamInfo, result)
        info = self.get_stream(stream)
        if info.epoch or info.sealed or len(info.active_segments) != initial_segments:
            raise StreamExistsError(
                f"stream {stream!r} exists (epoch {info.epoch}, {len(info.active_segments)} segments"
                f"{', sealed' if info.sealed else ''}); it was not created by this call "
                "(a create sent again after a lost reply found it)"
            ) from result.error
        return info

    def get_stream(self, stream: str) -> StreamInfo:
        return self._call(StreamClient.get_stream, stream=stream)

    def list_streams(self, pattern: str | None = None) -> list[str]:
        return self._call(StreamClient.list_streams, pattern=pattern)

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """Sent again after a lost reply: ``seal`` found sealed by one scale into exactly
        ``new_ranges`` is the scale done (its successors); anything else is the store's error."""
        args = {"stream": stream, "seal": seal, "new_ranges": new_ranges}
        result = self._invoke("scale_stream", args, settled=InvalidScaleError)[0]
        if not isinstance(result, Settled):
            return cast(tuple[StreamSegment, ...], result)
        successors: dict[str, SuccessorInfo] = {}
        for name in seal:
            for info in self.get_successors(name):
                successors[info.segment.name] = info
        made = sorted((i.segment for i in successors.values()), key=lambda s: s.key_low)
        if (
            made
            and all(set(i.predecessors) <= set(seal) for i in successors.values())
            and {p for i in successors.values() for p in i.predecessors} == set(seal)
            and [(s.key_low, s.key_high) for s in made] == sorted((float(a), float(b)) for a, b in new_ranges)
        ):
            return tuple(made)
        raise result.error

    def get_segment(self, segment_name: str) -> StreamSegment:
        return self._call(StreamClient.get_segment, segment_name=segment_name)

    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        return self._call(StreamClient.get_successors, segment_name=segment_name)

    def get_head_cut(self, stream: str) -> StreamCut:
        return self._call(StreamClient.get_head_cut, stream=stream)

    def get_tail_cut(self, stream: str) -> StreamCut:
        return self._call(StreamClient.get_tail_cut, stream=stream)

    def seal_stream(self, stream: str) -> None:
        self._call(StreamClient.seal_stream, stream=stream)

    def delete_stream(self, stream: str) -> None:
        """Sent again after a lost reply: a stream not found then is the delete done."""
        self._ahead.clear()
        self._invoke("delete_stream", {"stream": stream}, settled=StreamNotFoundError)

    def begin_transaction(self, stream: str) -> TransactionInfo:
        return self._call(StreamClient.begin_transaction, stream=stream)

    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        self._ahead.clear()
        self._call(StreamClient.commit_transaction, stream=stream, txn_segments=txn_segments)

    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        self._ahead.clear()
        self._call(StreamClient.abort_transaction, stream=stream, txn_segments=txn_segments)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RemoteClient:
        return self

    def close(self) -> None:
        """Wait for the pending appends (up to the timeout), then stop for good. Idempotent.

        Appends still pending then fail: sent ones with ``ConnectionLostError`` (may or may not
        be stored), the others with ``ClientClosedError`` (not stored). Every connection is
        closed and every thread of the client has ended when it returns; calls made after
        it raise ``ClientClosedError``, and nothing is sent any more.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._pipeline.close(self.timeout_s)
        finally:
            self._pool.close()
