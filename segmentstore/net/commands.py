"""The command registry of the wire protocol: every command, its arguments, and how they travel.

Derived from the client interface (``segmentstore.client.interface``): one command per
method of ``SegmentClient`` and ``StreamClient``, its arguments the method's
parameters, ``idempotent`` from the interface's mark, a ``Sequence[bytes]`` argument
sent raw as the payload; every frozen dataclass or enum the hints mention is registered
as a wire type. Besides those, the connection's own commands (``hello``, ``ping``) and
the pipelined ``append`` (``segmentstore.client.append_pipeline``). Dispatch on both
sides is driven by ``COMMANDS``: the server calls the ``EmbeddedClient`` method of the
command's name (or a special handler), ``RemoteClient`` encodes a call with
``encode_args``. So a new interface method is a command at once; the remote client
adds a one-line typed method. See ``segmentstore.net.protocol`` for the frame format.

``VERSIONS`` is the protocol's history, the one table of which version has which
command: each version lists the commands it added (a command's ``since``). A command
missing from it fails at import, so a new interface method cannot go on the wire
unversioned. A new command (or a changed one, under a new name) goes in the newest row
while that row's release is not out, else in a new row with ``PROTOCOL_VERSION`` raised to
it: a released row is what servers of that version have, for good.
"""

from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Sequence
from dataclasses import dataclass, is_dataclass
from typing import Any

from ..client.interface import SegmentStoreClient, is_idempotent, wire_methods
from ..core.batched_reads import RangeRead
from ..errors import ProtocolError
from ..results import AppendResult, SegmentRead
from .protocol import PROTOCOL_VERSION, decode_error, error_header, register_type, wire_type

__all__ = [
    "Command",
    "COMMANDS",
    "ProtocolVersion",
    "VERSIONS",
    "commands_of",
    "register_command",
    "encode_args",
    "decode_args",
    "encode_append_result",
    "decode_append_item",
    "decode_append_items",
    "encode_read",
    "decode_read",
    "encode_read_ranges",
    "decode_read_ranges",
]


def _register_hinted(hint: Any, seen: set[int] | None = None) -> None:
    """Register every frozen dataclass / enum a type hint mentions, and their fields' types."""
    seen = set() if seen is None else seen
    if id(hint) in seen:
        return
    seen.add(id(hint))
    for arg in typing.get_args(hint):
        _register_hinted(arg, seen)
    if wire_type(hint):
        register_type(hint)
        if is_dataclass(hint):
            for h in typing.get_type_hints(hint).values():
                _register_hinted(h, seen)


@dataclass(frozen=True, slots=True)
class Command:
    """One wire command: its argument names, which are required, and how it travels.

    ``payload`` names a bytes argument sent raw as the payload; ``payload_list`` a
    sequence-of-bytes argument sent raw, split by ``=sizes``. ``idempotent`` commands
    are retried by the remote client after a lost connection. ``since`` is the protocol
    version that introduced the command (``VERSIONS``).
    """

    name: str
    params: tuple[str, ...]
    required: frozenset[str]
    idempotent: bool = False
    payload: str | None = None
    payload_list: str | None = None
    raw_payload: bool = False
    since: int = 1


COMMANDS: dict[str, Command] = {}


@dataclass(frozen=True, slots=True)
class ProtocolVersion:
    """One version of the protocol: the commands it added, the first release speaking it, what changed."""

    number: int
    added: frozenset[str]
    release: str
    """The first ingestwm release whose server says this version (what to upgrade to)."""
    change: str


VERSIONS: tuple[ProtocolVersion, ...] = (
    ProtocolVersion(
        1,
        frozenset(
            [
                "hello",
                "ping",
                "append",
                "append_batch",
                "create_segment",
                "create_transaction",
                "merge_transaction",
                "seal",
                "truncate",
                "delete",
                "get_info",
                "exists",
                "update_attributes",
                "get_attributes",
                "read",
                "wait_any",
                "scan_records",
                "watermark_at",
                "ingestion_time_at",
                "ingestion_runs",
                "watermarks_at",
                "read_many",
                "segment_states",
                "read_ranges",
                "create_stream",
                "get_stream",
                "list_streams",
                "scale_stream",
                "get_segment",
                "get_successors",
                "get_head_cut",
                "get_tail_cut",
                "seal_stream",
                "delete_stream",
                "begin_transaction",
                "commit_transaction",
                "abort_transaction",
            ]
        ),
        "0.6.0",
        "frames, values, errors, the hello and the commands of ingestwm 0.6.0; its server takes only "
        "version 1 (servers before 0.6.0 said 1 too, without read_many, segment_states and read_ranges)",
    ),
    ProtocolVersion(
        2,
        frozenset(),
        "0.7.0",
        "the hello negotiates: a server takes any client version from 1 and answers with its own, "
        "and a client sends only the commands of the server's version",
    ),
)
"""The protocol's history, oldest first: version ``n`` is ``VERSIONS[n - 1]``. Every row but the
newest is released and never changes (``tests/test_protocol_versions.py`` holds a copy)."""

_SINCE = {name: v.number for v in VERSIONS for name in v.added}


def commands_of(version: int) -> frozenset[str]:
    """The commands a server of protocol ``version`` has: those added up to it. O(commands)."""
    return frozenset(name for name, cmd in COMMANDS.items() if cmd.since <= version)


def register_command(
    name: str,
    *,
    idempotent: bool = False,
    payload: str | None = None,
    payload_list: str | None = None,
    raw_payload: bool = False,
    params: dict[str, bool] | None = None,
) -> Command:
    """Add a command; by default its args are the ``SegmentStoreClient`` method's parameters.

    Its ``since`` comes from ``VERSIONS``; a name no version lists is refused."""
    since = _SINCE.get(name)
    if since is None:
        raise ProtocolError(
            f"command {name!r} is in no protocol version: add it to segmentstore.net.commands.VERSIONS, "
            f"in the newest row ({PROTOCOL_VERSION}) if its release is not out yet, else in a new row "
            f"{PROTOCOL_VERSION + 1} with PROTOCOL_VERSION raised to it"
        )
    if params is None:
        method = getattr(SegmentStoreClient, name)
        hints = typing.get_type_hints(method)
        for hint in hints.values():
            _register_hinted(hint)
        sig = inspect.signature(method)
        ps = [p for p in sig.parameters.values() if p.name != "self"]
        params = {p.name: p.default is inspect.Parameter.empty for p in ps}
        idempotent = idempotent or is_idempotent(method)
        if payload_list is None:
            payload_list = next((p for p in params if hints.get(p) == Sequence[bytes]), None)
    cmd = Command(
        name,
        tuple(params),
        frozenset(k for k, req in params.items() if req),
        idempotent,
        payload,
        payload_list,
        raw_payload,
        since,
    )
    COMMANDS[name] = cmd
    return cmd


def encode_args(cmd: Command, args: dict[str, Any]) -> tuple[dict[str, Any], bytes | memoryview]:
    """Split ``args`` into the header map and the raw payload (for bytes-like payload args)."""
    payload: bytes | memoryview = b""
    if cmd.payload is not None:
        v = args.get(cmd.payload)
        if isinstance(v, (bytes, bytearray, memoryview)):
            args = dict(args)
            payload = v if type(v) is bytes else bytes(v)
            del args[cmd.payload]
            args["=payload"] = True
    if cmd.payload_list is not None:
        v = args.get(cmd.payload_list)
        if isinstance(v, (list, tuple)) and all(isinstance(e, (bytes, bytearray, memoryview)) for e in v):
            args = dict(args)
            payload = b"".join(v)
            args["=sizes"] = [len(e) if not isinstance(e, memoryview) else e.nbytes for e in v]
            del args[cmd.payload_list]
    return args, payload


def decode_args(cmd: Command, args: Any, payload: memoryview) -> dict[str, Any]:
    """Check the argument names of a request and put its payload back; ``ProtocolError`` if malformed."""
    if not isinstance(args, dict):
        raise ProtocolError(f"{cmd.name}: args must be a map, got {type(args).__name__}")
    out: dict[str, Any] = {}
    used_payload = False
    for k, v in args.items():
        if k in cmd.params:
            out[k] = v
        elif k == "=payload" and cmd.payload is not None and v is True:
            out[cmd.payload] = bytes(payload)
            used_payload = True
        elif k == "=sizes" and cmd.payload_list is not None:
            out[cmd.payload_list] = _split(cmd.name, payload, v)
            used_payload = True
        else:
            raise ProtocolError(f"{cmd.name}: unknown argument {k!r:.60}")
    if len(payload) and not used_payload and not cmd.raw_payload:
        raise ProtocolError(f"{cmd.name}: unexpected payload of {len(payload)} bytes")
    missing = cmd.required.difference(out)
    if missing:
        raise ProtocolError(f"{cmd.name}: missing argument(s) {sorted(missing)}")
    return out


def _split(command: str, payload: memoryview, sizes: Any) -> list[bytes]:
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes):
        raise ProtocolError(f"{command}: sizes must be a list of ints >= 0")
    if sum(sizes) != len(payload):
        raise ProtocolError(f"{command}: sizes add up to {sum(sizes)}, payload has {len(payload)}")
    out, pos = [], 0
    for n in sizes:
        out.append(bytes(payload[pos : pos + n]))
        pos += n
    return out


def encode_append_result(r: AppendResult | BaseException) -> list[Any]:
    """One item of an ``append`` reply."""
    if isinstance(r, BaseException):
        return [None, *error_header(0, r)[2:5]]
    return [r.offset, r.length, r.timestamp, r.duplicate]


def decode_append_item(item: Any) -> AppendResult | BaseException:
    """The ``AppendResult`` (or exception) of one item of an ``append`` reply."""
    if isinstance(item, list) and len(item) == 4:
        if item[0] is None:
            return decode_error(item[1], item[2], item[3])
        return AppendResult(item[0], item[1], item[2], item[3])
    return ProtocolError(f"malformed append result {item!r:.80}")


def decode_append_items(entries: Any, sizes: list[int]) -> list[AppendResult | BaseException]:
    """The results of an ``append`` reply whose items had ``sizes``; runs expand in C-level passes."""
    if not isinstance(entries, list):
        return [ProtocolError(f"malformed append reply {entries!r:.80}")] * len(sizes)
    out: list[AppendResult | BaseException] = []
    for e in entries:
        if type(e) is list and len(e) == 3:  # a run: [offset, timestamp, count]
            offset, ts, count = e
            if type(offset) is not int or type(count) is not int or not 0 < count <= len(sizes) - len(out):
                return [ProtocolError(f"malformed append run {e!r:.80}")] * len(sizes)
            run = sizes[len(out) : len(out) + count]
            offsets = itertools.accumulate(run, initial=offset)
            out.extend(map(AppendResult, offsets, run, itertools.repeat(ts)))
        else:
            out.append(decode_append_item(e))
    if len(out) != len(sizes):
        return [ProtocolError(f"append reply covers {len(out)} items, sent {len(sizes)}")] * len(sizes)
    return out


def encode_read(r: SegmentRead) -> tuple[list[Any], bytes]:
    """A ``read`` reply: the metadata for the header, the data for the payload."""
    return [r.offset, r.watermark, r.end_of_segment, r.at_tail], r.data


def decode_read(result: Any, payload: bytes) -> SegmentRead:
    """Rebuild a ``SegmentRead`` from a ``read`` reply."""
    if not isinstance(result, list) or len(result) != 4:
        raise ProtocolError(f"malformed read result {result!r:.80}")
    return SegmentRead(result[0], payload, result[1], result[2], result[3])


def encode_read_ranges(reads: Sequence[RangeRead]) -> tuple[list[Any], bytes]:
    """A ``read_ranges`` reply: per read ``[offset, size, watermark, end_of_segment, at_tail, runs,
    error]`` (``offset`` nil for an error), the data back to back as the payload."""
    items: list[Any] = []
    for x in reads:
        r = x.read
        if r is None:
            items.append([None, 0, None, False, False, None, x.error])
        else:
            items.append([r.offset, len(r.data), r.watermark, r.end_of_segment, r.at_tail, x.runs, None])
    return items, b"".join(x.read.data for x in reads if x.read is not None)


def decode_read_ranges(result: Any, payload: bytes, names: Sequence[str]) -> list[RangeRead]:
    """Rebuild the ``RangeRead`` of each of ``names``' requests from a ``read_ranges`` reply."""
    if not isinstance(result, list) or len(result) != len(names):
        raise ProtocolError(f"read_ranges: malformed reply {result!r:.80}")
    out: list[RangeRead] = []
    pos = 0
    view = memoryview(payload)
    for item in result:
        if not isinstance(item, list) or len(item) != 7 or type(item[1]) is not int or item[1] < 0:
            raise ProtocolError(f"read_ranges: malformed read {item!r:.80}")
        offset, size, watermark, eos, at_tail, runs, error = item
        if offset is None:
            out.append(RangeRead(None, None, error if isinstance(error, str) else "SegmentStoreError"))
            continue
        if pos + size > len(payload):
            raise ProtocolError(f"read_ranges: reads of {pos + size} bytes, payload of {len(payload)}")
        data = bytes(view[pos : pos + size])
        pos += size
        out.append(RangeRead(SegmentRead(offset, data, watermark, eos, at_tail), runs))
    if pos != len(payload):
        raise ProtocolError(f"read_ranges: reads of {pos} bytes, payload of {len(payload)}")
    return out


register_command("hello", params={"version": True, "token": False, "client": False, "max_frame_bytes": False})
register_command("ping", idempotent=True, params={})
register_command(  # the append pipeline's frames: many appends of one segment, sizes split the payload
    "append",
    raw_payload=True,
    params={"name": True, "sizes": True, "eo": False, "wid": False, "ev": False},
)
for _name, _ in wire_methods():
    if _name != "append":  # travels as the pipeline's ``append`` above
        register_command(_name)


def _check_versions() -> None:
    """The table and the registry agree: versions 1..PROTOCOL_VERSION in order, each listed command
    registered, each command in one version only."""
    numbers = [v.number for v in VERSIONS]
    if numbers != list(range(1, PROTOCOL_VERSION + 1)):
        raise ProtocolError(f"VERSIONS holds versions {numbers}, PROTOCOL_VERSION is {PROTOCOL_VERSION}")
    listed = [name for v in VERSIONS for name in v.added]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    if twice:
        raise ProtocolError(f"commands listed in two versions of VERSIONS: {twice}")
    stale = set(listed) - set(COMMANDS)
    if stale:
        raise ProtocolError(f"VERSIONS lists commands that are not registered: {sorted(stale)}")


_check_versions()
