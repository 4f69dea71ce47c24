"""``ingestwm group``: inspect and operate the reader groups of a served store.

- ``ingestwm group list``: the groups in the store;
- ``ingestwm group describe NAME``: epoch, group watermark and its lag, the state log
  (bytes, snapshot, revision), each online reader (token, last heartbeat and its age,
  segments held), each incomplete segment (status, owner, acknowledged position, the
  store's tail, lag in bytes, watermark and its lag), checkpoints in progress;
  ``--json`` prints the same as one JSON object;
- ``ingestwm group offline NAME READER``: declare a reader offline (its segments return
  at its last acknowledged positions), for a reader known to be gone.

Every command reads the group's state log through ``--endpoint`` (``ingestwm serve``);
times are the wall clock of this process. ``describe`` shows times as ISO-8601 UTC (the
JSON keeps epoch milliseconds beside them). A lag is never negative: a watermark or a
heartbeat ahead of this machine's clock (the store's or a reader's clock runs ahead, or
an event-time watermark is in the future) is a lag of 0 and says by how much it is ahead.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

__all__ = ["group", "describe_group", "format_description", "utc_text", "lag_fields"]


def utc_text(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC (``2026-11-25T18:20:00.123Z``); ``None`` stays ``None``.

    A value outside what a date holds (years 1-9999) is left as its number of milliseconds.
    """
    if ms is None:
        return None
    try:
        t = dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def lag_fields(now: int, t: int | None, lag_key: str) -> dict[str, Any]:
    """``{lag_key: max(0, now - t), "ahead_ms": max(0, t - now)}``, or ``None`` for both without ``t``."""
    if t is None:
        return {lag_key: None, "ahead_ms": None}
    return {lag_key: max(0, now - t), "ahead_ms": max(0, t - now)}


_ENDPOINT = click.option(
    "--endpoint",
    default="127.0.0.1:12345",
    show_default=True,
    metavar="HOST:PORT",
    help="Address of `ingestwm serve`.",
)


def _security_options(f: Any) -> Any:
    """``--token`` (env INGESTWM_TOKEN), ``--tls``, ``--tls-ca-file``, ``--tls-server-name``."""
    for opt in reversed(
        (
            click.option(
                "--token", envvar="INGESTWM_TOKEN", default=None, help="Shared secret (env INGESTWM_TOKEN)."
            ),
            click.option("--tls", is_flag=True, default=False, help="Connect over TLS."),
            click.option(
                "--tls-ca-file",
                type=click.Path(dir_okay=False),
                default=None,
                help="CA certificate(s) to trust (PEM); implies --tls.",
            ),
            click.option(
                "--tls-server-name", default=None, help="Name in the server's certificate; implies --tls."
            ),
        )
    ):
        f = opt(f)
    return f


def describe_group(client: Any, name: str, now: int) -> dict[str, Any]:
    """Everything ``group describe`` shows, as JSON-ready values. O(segments) store calls."""
    from readergroup.group_state.liveness import FENCED
    from readergroup.group_state.state import ReaderGroupState
    from readergroup.reading.metrics import collect_metrics
    from segmentstore import WallClock
    from segmentstore.limits import INT64_MIN

    st = ReaderGroupState.open(client, name, WallClock())
    m = st.model
    metrics = collect_metrics(st, now, [])
    members = st.members()
    beats = client.get_attributes(st.segment, list(members.values())) if members else {}
    info = client.get_info(st.segment)
    sync = st.synchronizer
    readers = []
    for rid, token in sorted(members.items()):
        beat = beats.get(token)
        at = None if beat is None or beat == FENCED else beat
        age = lag_fields(now, at, "heartbeat_age_ms")
        readers.append(
            {
                "reader": rid,
                "token": token,
                "heartbeat": at,
                "heartbeat_utc": utc_text(at),
                "heartbeat_age_ms": age["heartbeat_age_ms"],
                "heartbeat_ahead_ms": age["ahead_ms"],
                "fenced": beat == FENCED,
                "segments": sorted(m.segments_of(rid)),
            }
        )
    gw = metrics.group_watermark
    glag = lag_fields(now, gw, "watermark_lag_ms")
    return {
        "group": name,
        "streams": list(m.streams),
        "epoch": m.epoch,
        "time_domain": m.config.time_domain.value,
        "now": now,
        "now_utc": utc_text(now),
        "group_watermark": gw,
        "group_watermark_utc": utc_text(gw),
        "watermark_lag_ms": glag["watermark_lag_ms"],
        "watermark_ahead_ms": glag["ahead_ms"],
        "unread_bytes": metrics.unread_bytes,
        "reader_timeout_ms": m.config.reader_timeout_ms,
        "log": {
            "segment": st.segment,
            "start_offset": info.start_offset,
            "length": info.length,
            "bytes": info.length - info.start_offset,
            "snapshot_offset": sync.snapshot_offset,
            "batches_since_snapshot": sync.since_snapshot,
        },
        "readers": readers,
        "segments": [_segment_row(s, now, INT64_MIN) for s in metrics.segments],
        "checkpoints": [
            {"name": cp.name, "waiting_for": sorted(cp.waiting or ()), "reached": sorted(cp.crossed)}
            for cp in m.checkpoints
        ],
        "completed_checkpoints": [cp.name for _, cp in m.results if cp.epoch == m.epoch],
    }


def _segment_row(s: Any, now: int, no_watermark: int) -> dict[str, Any]:
    wm = None if s.watermark == no_watermark else s.watermark
    lag = lag_fields(now, wm, "watermark_lag_ms")
    return {
        "segment": s.segment,
        "status": s.status,
        "owner": s.owner,
        "position": s.position,
        "tail": s.length,
        "lag_bytes": s.unread_bytes,
        "watermark": wm,
        "watermark_utc": utc_text(wm),
        "watermark_lag_ms": lag["watermark_lag_ms"],
        "watermark_ahead_ms": lag["ahead_ms"],
    }


def _lag_text(lag: int | None, ahead: int | None, what: str = "lag") -> str:
    """``lag 1200 ms``; ``lag 0 ms (300 ms ahead of this clock)``; ``lag -`` without a time."""
    if lag is None:
        return f"{what} -"
    if ahead:
        return f"{what} 0 ms ({ahead} ms ahead of this machine's clock)"
    return f"{what} {lag} ms"


def _table(rows: list[list[Any]]) -> list[str]:
    cells = [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def format_description(d: dict[str, Any]) -> list[str]:
    """``describe_group``'s result as text lines."""
    log = d["log"]
    out = [
        f"group {d['group']}  streams {', '.join(d['streams'])}  epoch {d['epoch']}  ({d['time_domain']})  "
        f"at {d['now_utc']}",
        f"group watermark {d['group_watermark_utc'] or '-'}  "
        f"{_lag_text(d['watermark_lag_ms'], d['watermark_ahead_ms'])}  unread {d['unread_bytes']} bytes",
        f"state log {log['segment']}: {log['bytes']} bytes from offset {log['start_offset']} "
        f"(snapshot at {log['snapshot_offset']}, {log['batches_since_snapshot']} batches since)",
        f"readers ({len(d['readers'])} online, lease {d['reader_timeout_ms']} ms):",
    ]
    if d["readers"]:
        out += _table(
            [["reader", "token", "heartbeat (UTC)", "age ms", "segments"]]
            + [
                [
                    r["reader"],
                    r["token"],
                    "fenced" if r["fenced"] else r["heartbeat_utc"],
                    _ahead_cell(r["heartbeat_age_ms"], r["heartbeat_ahead_ms"]),
                    len(r["segments"]),
                ]
                for r in d["readers"]
            ]
        )
    out.append(f"segments ({len(d['segments'])} incomplete):")
    if d["segments"]:
        out += _table(
            [["segment", "status", "owner", "position", "tail", "lag bytes", "watermark (UTC)", "wm lag ms"]]
            + [
                [s[k] for k in _SEGMENT_CELLS] + [_ahead_cell(s["watermark_lag_ms"], s["watermark_ahead_ms"])]
                for s in d["segments"]
            ]
        )
    for cp in d["checkpoints"]:
        out.append(f"checkpoint {cp['name']}: waiting for {', '.join(cp['waiting_for']) or '-'}")
    return out


_SEGMENT_CELLS = ("segment", "status", "owner", "position", "tail", "lag_bytes", "watermark_utc")


def _ahead_cell(lag: int | None, ahead: int | None) -> str | None:
    """A table cell: the lag, or ``0 (+300 ahead)`` when the time is ahead of this clock."""
    if lag is None:
        return None
    return f"0 (+{ahead} ahead)" if ahead else str(lag)


def _client(endpoint: str, sec: dict[str, Any]) -> Any:
    """A client of ``endpoint`` with the token and TLS options (a server that is down fails at once)."""
    from segmentstore.client.security import client_security

    security = client_security(sec["token"], sec["tls"] or None, sec["tls_ca_file"], sec["tls_server_name"])
    security.probe(endpoint)
    return security.remote_client(endpoint, timeout_s=10)


def _errors() -> tuple[type[Exception], ...]:
    from readergroup.errors import ReaderGroupError
    from segmentstore.errors import SegmentStoreError

    return (ReaderGroupError, SegmentStoreError, OSError)


@click.group("group")
def group() -> None:
    """Inspect and operate the reader groups of a served store (shared by processes)."""


@group.command("list")
@_ENDPOINT
@_security_options
def list_cmd(endpoint: str, **sec: Any) -> None:
    """List the reader groups in the store."""
    from readergroup.reading.group import list_groups

    try:
        with _client(endpoint, sec) as c:
            names = list_groups(c)
    except _errors() as e:
        raise click.ClickException(str(e)) from None
    if not names:  # on stderr: stdout stays one name per line for scripts
        click.echo(f"no reader groups in the store at {endpoint}", err=True)
    for name in names:
        click.echo(name)


@group.command("describe")
@click.argument("name")
@_ENDPOINT
@_security_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def describe_cmd(name: str, endpoint: str, as_json: bool, **sec: Any) -> None:
    """Members, assignment, per-segment positions, watermarks and lag of group NAME."""
    from segmentstore import WallClock

    try:
        with _client(endpoint, sec) as c:
            d = describe_group(c, name, WallClock().now())
    except _errors() as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(d, indent=2))
    else:
        for line in format_description(d):
            click.echo(line)


@group.command("offline")
@click.argument("name")
@click.argument("reader")
@_ENDPOINT
@_security_options
def offline_cmd(name: str, reader: str, endpoint: str, **sec: Any) -> None:
    """Declare READER of group NAME offline: its segments return at its acknowledged positions."""
    from readergroup.reading.group import ReaderGroup
    from segmentstore import WallClock

    try:
        with _client(endpoint, sec) as c:
            ReaderGroup.open(name, c, WallClock()).reader_offline(reader)
    except _errors() as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"reader {reader} of group {name} is offline")


@group.command("delete")
@click.argument("name")
@_ENDPOINT
@_security_options
def delete_cmd(name: str, endpoint: str, **sec: Any) -> None:
    """Delete group NAME (also one whose state log is corrupt): its readers stop at their next sync."""
    from readergroup.reading.group import ReaderGroupManager
    from segmentstore import WallClock

    try:
        with _client(endpoint, sec) as c:
            ReaderGroupManager(c, WallClock()).delete_reader_group(name)
    except _errors() as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"reader group {name} is deleted")
