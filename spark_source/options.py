"""Options of the ``ingestwm`` Spark source and sink: parsed once, validated, frozen.

Spark hands a data source its options as strings with case-insensitive names. The
parsers here turn them into frozen dataclasses at query start, so a bad option fails
before anything runs, with an ``InvalidOptionError`` naming the option (in Spark's
camelCase spelling) and the value. Positions (``startingPosition``/``endingPosition``)
are ``earliest``, ``latest`` or JSON: a stream cut ``{"stream": .., "positions":
[[segment, offset], ..]}``, a list of them, a map ``{stream: {segment: offset}}``, or a
source offset copied from a query's progress.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from segmentstore.client.security import ClientSecurity, client_security
from segmentstore.errors import InvalidArgumentError

from .errors import InvalidOptionError

__all__ = [
    "Position",
    "SourceOptions",
    "SinkOptions",
    "parse_source_options",
    "parse_sink_options",
    "parse_duration_ms",
    "DEFAULT_TIMEOUT_MS",
    "DEFAULT_MAX_PARTITION_BYTES",
    "INGESTION",
    "EVENT",
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
]

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_PARTITION_BYTES = 8 << 20
"""8 MiB: about 140,000 events of 57 bytes, read in ~0.3 s here, six times a task's fixed cost."""
INGESTION = "ingestion"
"""``timeDomain`` (default): the store's ingestion watermark, minus ``maxEventTimeLag`` for event time."""
EVENT = "event"
"""``timeDomain``: the writers' asserted watermarks (``EventWriter.note_time``), already event time."""
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"

_SOURCE_OPTIONS = (
    "endpoint",
    "stream",
    "startingPosition",
    "endingPosition",
    "maxEventTimeLag",
    "timeDomain",
    "maxEventsPerTrigger",
    "maxBytesPerTrigger",
    "maxPartitionBytes",
    "minPartitions",
    "emitWatermarkRows",
    "failOnDataLoss",
    "timeoutMs",
    "consumerName",
    "token",
    "tls",
    "tlsCaFile",
    "tlsServerName",
)
_SINK_OPTIONS = (
    "endpoint",
    "stream",
    "deliveryGuarantee",
    "sinkId",
    "timeoutMs",
    "checkpointLocation",
    "token",
    "tls",
    "tlsCaFile",
    "tlsServerName",
)
_GLOB = re.compile(r"[*?\[]")
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_UNITS = {
    "": 1,
    "ms": 1,
    "milli": 1,
    "millis": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1_000,
    "sec": 1_000,
    "secs": 1_000,
    "second": 1_000,
    "seconds": 1_000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
}


@dataclass(frozen=True, slots=True)
class Position:
    """Where reading starts or ends: ``earliest``, ``latest``, or explicit cuts per stream.

    ``cuts`` maps streams to ``((segment, offset), ...)`` sorted by segment name; a
    stream absent from ``cuts`` uses ``default`` (``earliest`` or ``latest``).
    """

    kind: str  # "earliest" | "latest" | "cut"
    cuts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def cut_of(self, stream: str) -> dict[str, int] | None:
        """The explicit cut of ``stream`` as ``{segment: offset}``, or None. O(streams)."""
        for name, positions in self.cuts:
            if name == stream:
                return dict(positions)
        return None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's validated options (docs/design.md §1 units: milliseconds)."""

    endpoint: str
    streams: tuple[str, ...]
    patterns: tuple[str, ...]
    starting: Position
    ending: Position
    max_event_time_lag_ms: int
    max_events_per_trigger: int | None
    max_bytes_per_trigger: int | None
    emit_watermark_rows: bool
    fail_on_data_loss: bool
    timeout_ms: int
    consumer_name: str = "spark"
    time_domain: str = INGESTION
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """Token and TLS (options token / INGESTWM_TOKEN, tls, tlsCaFile, tlsServerName); never shown."""
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    """Bytes of segment ranges one Spark task reads at most (a larger range alone): ``partitioning``."""
    min_partitions: int | None = None
    """At least this many tasks per micro-batch when the data allows (ranges split at frames)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's validated options."""

    endpoint: str
    stream: str
    delivery_guarantee: str
    sink_id: str
    timeout_ms: int
    security: ClientSecurity = field(default_factory=ClientSecurity)


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate the source's options (names case-insensitive); raises ``InvalidOptionError``.

    ``streaming=None`` (query kind not known yet) skips the checks that depend on it.
    """
    opts = _normalise(options, _SOURCE_OPTIONS, "source")
    endpoint = _endpoint(opts)
    streams, patterns = _stream_spec(_required(opts, "stream"))
    starting = _position(
        opts.get("startingPosition", "latest" if streaming else "earliest"), "startingPosition"
    )
    if "endingPosition" in opts and streaming:
        raise InvalidOptionError(
            "option endingPosition applies to batch reads only (spark.read); a streaming query runs "
            "until it is stopped, or use trigger(availableNow=True)"
        )
    ending = _position(opts.get("endingPosition", "latest"), "endingPosition")
    if ending.kind == "earliest":
        raise InvalidOptionError(
            "option endingPosition: 'earliest' would read nothing; use 'latest' or a cut"
        )
    if starting.kind == "latest" and streaming is False:
        raise InvalidOptionError("option startingPosition: 'latest' would read nothing in a batch read")
    for pos, name in ((starting, "startingPosition"), (ending, "endingPosition")):
        for stream, _ in pos.cuts:
            if patterns == () and stream not in streams:
                raise InvalidOptionError(
                    f"option {name}: the cut names stream {stream!r}, which option stream "
                    f"({', '.join(streams)}) does not read"
                )
    domain = opts.get("timeDomain", INGESTION).strip().lower()
    if domain not in (INGESTION, EVENT):
        got = opts["timeDomain"]
        raise InvalidOptionError(f"option timeDomain must be 'ingestion' or 'event', got {got!r}")
    if domain == EVENT and "maxEventTimeLag" in opts:
        raise InvalidOptionError(
            "option maxEventTimeLag applies to timeDomain 'ingestion'; with 'event' the watermark is "
            "the writers' own assertion (EventWriter.note_time) and takes no lag"
        )
    return SourceOptions(
        endpoint=endpoint,
        streams=streams,
        patterns=patterns,
        starting=starting,
        ending=ending,
        max_event_time_lag_ms=parse_duration_ms(opts.get("maxEventTimeLag", "0"), "maxEventTimeLag"),
        max_events_per_trigger=_positive_int(opts, "maxEventsPerTrigger"),
        max_bytes_per_trigger=_positive_int(opts, "maxBytesPerTrigger"),
        emit_watermark_rows=_bool(opts, "emitWatermarkRows", True),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        timeout_ms=_positive_int(opts, "timeoutMs") or DEFAULT_TIMEOUT_MS,
        consumer_name=_name(opts, "consumerName", "spark"),
        time_domain=domain,
        security=_security(opts),
        max_partition_bytes=_positive_int(opts, "maxPartitionBytes") or DEFAULT_MAX_PARTITION_BYTES,
        min_partitions=_positive_int(opts, "minPartitions"),
    )


def parse_sink_options(options: Mapping[str, str], streaming: bool = True) -> SinkOptions:
    """Validate the sink's options (names case-insensitive); raises ``InvalidOptionError``.

    ``sinkId`` names a streaming query's exactly-once bookkeeping; a batch write
    (``streaming=False``) commits its transactions at the end of its job and needs none.
    """
    opts = _normalise(options, _SINK_OPTIONS, "sink")
    endpoint = _endpoint(opts)
    streams, patterns = _stream_spec(_required(opts, "stream"))
    if patterns or len(streams) != 1:
        raise InvalidOptionError(
            f"option stream: the sink writes to exactly one stream 'scope/name', got {opts['stream']!r}"
        )
    guarantee = opts.get("deliveryGuarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise InvalidOptionError(
            f"option deliveryGuarantee must be {AT_LEAST_ONCE!r} or {EXACTLY_ONCE!r}, "
            f"got {opts['deliveryGuarantee']!r}"
        )
    sink_id = _name(opts, "sinkId", "")
    if not sink_id and "checkpointLocation" in opts:
        sink_id = "ckpt-" + hashlib.sha256(opts["checkpointLocation"].encode()).hexdigest()[:16]
    if guarantee == EXACTLY_ONCE and not sink_id and streaming:
        raise InvalidOptionError(
            "option sinkId is required with deliveryGuarantee=exactly-once (a name unique to the query "
            "and kept across restarts; it defaults to a hash of option checkpointLocation when that is set)"
        )
    return SinkOptions(
        endpoint=endpoint,
        stream=streams[0],
        delivery_guarantee=guarantee,
        sink_id=sink_id or "default",
        timeout_ms=_positive_int(opts, "timeoutMs") or DEFAULT_TIMEOUT_MS,
        security=_security(opts),
    )


def parse_duration_ms(value: object, option: str) -> int:
    """``"10 seconds"``, ``"500ms"``, ``"2 min"`` or an int of milliseconds, as ms >= 0."""
    if isinstance(value, bool):
        raise InvalidOptionError(f"option {option} must be a duration, got {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.lower()
    else:
        raise InvalidOptionError(f"option {option} must be a duration, got {value!r}")
    m = _DURATION.match(text)
    if m is None or m.group(2) not in _UNITS:
        raise InvalidOptionError(
            f"option {option} must be a duration >= 0 such as '10 seconds', '500 ms' or an int of "
            f"milliseconds, got {value!r}"
        )
    return int(m.group(1)) * _UNITS[m.group(2)]


def _normalise(options: Mapping[str, str], known: tuple[str, ...], what: str) -> dict[str, str]:
    by_lower = {k.lower(): k for k in known}
    out: dict[str, str] = {}
    for key, value in options.items():
        canonical = by_lower.get(str(key).lower())
        if canonical is None:
            close = difflib.get_close_matches(str(key).lower(), list(by_lower), n=1)
            hint = f" (did you mean {by_lower[close[0]]}?)" if close else ""
            raise InvalidOptionError(
                f"unknown option {key!r} for the ingestwm {what} (Spark hands option names over in lower "
                f"case){hint}; known options: {', '.join(known)}"
            )
        if value is None:
            continue
        out[canonical] = str(value)
    return out


def _security(opts: dict[str, str]) -> ClientSecurity:
    """Options token (else ``INGESTWM_TOKEN``), tls, tlsCaFile, tlsServerName; the token is never echoed."""
    token = opts.get("token")
    if token is not None and not token.strip():
        raise InvalidOptionError("option token is empty (leave it out to use INGESTWM_TOKEN)")
    tls = _bool(opts, "tls", False) if "tls" in opts else None
    ca_file = opts.get("tlsCaFile", "").strip() or None
    server_name = opts.get("tlsServerName", "").strip() or None
    if tls is False and (ca_file or server_name):
        given = "tlsCaFile" if ca_file else "tlsServerName"
        raise InvalidOptionError(f"option {given} needs TLS, but option tls is false")
    try:
        return client_security(token, tls, ca_file, server_name)
    except InvalidArgumentError as e:
        raise InvalidOptionError(f"option tlsCaFile: {e}") from None


def _required(opts: dict[str, str], name: str) -> str:
    value = opts.get(name, "").strip()
    if not value:
        raise InvalidOptionError(f"option {name} is required")
    return value


def _endpoint(opts: dict[str, str]) -> str:
    value = _required(opts, "endpoint")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidOptionError(f"option endpoint must be 'host:port' of an ingestwm server, got {value!r}")
    return value


def _stream_spec(value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    streams: list[str] = []
    patterns: list[str] = []
    for item in (s.strip() for s in value.split(",")):
        if not item:
            raise InvalidOptionError(f"option stream has an empty entry: {value!r}")
        if _GLOB.search(item):
            patterns.append(item)
            continue
        parts = item.split("/")
        if len(parts) != 2 or not all(parts):
            raise InvalidOptionError(
                f"option stream: {item!r} is not 'scope/name' nor a pattern such as 'scope/*'"
            )
        if item not in streams:
            streams.append(item)
    return tuple(streams), tuple(patterns)


def _name(opts: dict[str, str], name: str, default: str) -> str:
    value = opts.get(name, default).strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", value):
        raise InvalidOptionError(f"option {name} must be 1-128 letters, digits, '_', '.', '-', got {value!r}")
    return value


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    if name not in opts:
        return None
    text = opts[name].strip()
    if not text.isdigit() or int(text) <= 0:
        raise InvalidOptionError(f"option {name} must be an int > 0, got {opts[name]!r}")
    return int(text)


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    text = opts[name].strip().lower()
    if text not in ("true", "false"):
        raise InvalidOptionError(f"option {name} must be true or false, got {opts[name]!r}")
    return text == "true"


def _position(value: str, option: str) -> Position:
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return Position(text.lower())
    try:
        obj = json.loads(text)
    except ValueError:
        raise InvalidOptionError(
            f"option {option} must be 'earliest', 'latest' or a JSON stream cut, got {value!r:.120}"
        ) from None
    cuts: dict[str, dict[str, int]] = {}
    if isinstance(obj, dict) and "streams" in obj and isinstance(obj["streams"], dict):
        obj = {s: (v.get("positions", {}) if isinstance(v, dict) else v) for s, v in obj["streams"].items()}
    items: list[Any] = obj if isinstance(obj, list) else [obj]
    for item in items:
        if isinstance(item, dict) and "positions" in item and "stream" in item:
            cuts.setdefault(str(item["stream"]), {}).update(_cut_positions(item["positions"], option))
        elif isinstance(item, dict) and not isinstance(obj, list):
            for stream, positions in item.items():
                cuts.setdefault(str(stream), {}).update(_cut_positions(positions, option))
        else:
            raise InvalidOptionError(f"option {option}: not a stream cut: {item!r:.120}")
    for stream in cuts:
        if len(stream.split("/")) != 2:
            raise InvalidOptionError(f"option {option}: {stream!r} is not a stream 'scope/name'")
    return Position("cut", tuple((s, tuple(sorted(p.items()))) for s, p in sorted(cuts.items())))


def _cut_positions(positions: object, option: str) -> dict[str, int]:
    pairs: list[Any]
    if isinstance(positions, dict):
        pairs = list(positions.items())
    elif isinstance(positions, list):
        pairs = positions
    else:
        raise InvalidOptionError(f"option {option}: positions must be a map or a list, got {positions!r:.80}")
    out: dict[str, int] = {}
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InvalidOptionError(f"option {option}: position {pair!r} must be [segment, offset]")
        segment, offset = pair
        if (
            not isinstance(segment, str)
            or isinstance(offset, bool)
            or not isinstance(offset, int)
            or offset < 0
        ):
            raise InvalidOptionError(
                f"option {option}: position of segment {segment!r} must be an int >= 0, got {offset!r}"
            )
        out[segment] = offset
    return out
