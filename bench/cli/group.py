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
times are the wall clock of this process.
"""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["group", "describe_group", "format_description"]

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
    from readergroup.liveness import FENCED
    from readergroup.metrics import collect_metrics
    from readergroup.state import ReaderGroupState
    from segmentstore import WallClock

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
        readers.append(
            {
                "reader": rid,
                "token": token,
                "heartbeat": None if beat is None or beat == FENCED else beat,
                "heartbeat_age_ms": None if beat is None or beat == FENCED else now - beat,
                "fenced": beat == FENCED,
                "segments": sorted(m.segments_of(rid)),
            }
        )
    return {
        "group": name,
        "streams": list(m.streams),
        "epoch": m.epoch,
        "time_domain": m.config.time_domain.value,
        "group_watermark": metrics.group_watermark,
        "watermark_lag_ms": metrics.watermark_lag_ms,
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
        "segments": [
            {
                "segment": s.segment,
                "status": s.status,
                "owner": s.owner,
                "position": s.position,
                "tail": s.length,
                "lag_bytes": s.unread_bytes,
                "watermark": s.watermark,
                "watermark_lag_ms": s.watermark_lag_ms,
            }
            for s in metrics.segments
        ],
        "checkpoints": [
            {"name": cp.name, "waiting_for": sorted(cp.waiting or ()), "reached": sorted(cp.crossed)}
            for cp in m.checkpoints
        ],
        "completed_checkpoints": [cp.name for cp in m.results if cp.epoch == m.epoch][-5:],
    }


def _table(rows: list[list[Any]]) -> list[str]:
    cells = [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def format_description(d: dict[str, Any]) -> list[str]:
    """``describe_group``'s result as text lines."""
    log = d["log"]
    out = [
        f"group {d['group']}  streams {', '.join(d['streams'])}  epoch {d['epoch']}  ({d['time_domain']})",
        f"group watermark {d['group_watermark']}  lag {d['watermark_lag_ms']} ms  "
        f"unread {d['unread_bytes']} bytes",
        f"state log {log['segment']}: {log['bytes']} bytes from offset {log['start_offset']} "
        f"(snapshot at {log['snapshot_offset']}, {log['batches_since_snapshot']} batches since)",
        f"readers ({len(d['readers'])} online, lease {d['reader_timeout_ms']} ms):",
    ]
    if d["readers"]:
        out += _table(
            [["reader", "token", "heartbeat", "age ms", "segments"]]
            + [
                [
                    r["reader"],
                    r["token"],
                    "fenced" if r["fenced"] else r["heartbeat"],
                    r["heartbeat_age_ms"],
                    len(r["segments"]),
                ]
                for r in d["readers"]
            ]
        )
    out.append(f"segments ({len(d['segments'])} incomplete):")
    if d["segments"]:
        out += _table(
            [["segment", "status", "owner", "position", "tail", "lag bytes", "watermark", "wm lag ms"]]
            + [
                [s[k] for k in ("segment", "status", "owner", "position", "tail", "lag_bytes", "watermark")]
                + [s["watermark_lag_ms"]]
                for s in d["segments"]
            ]
        )
    for cp in d["checkpoints"]:
        out.append(f"checkpoint {cp['name']}: waiting for {', '.join(cp['waiting_for']) or '-'}")
    return out


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
    from readergroup.group import list_groups

    try:
        with _client(endpoint, sec) as c:
            for name in list_groups(c):
                click.echo(name)
    except _errors() as e:
        raise click.ClickException(str(e)) from None


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
    from readergroup.group import ReaderGroup
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
    from readergroup.group import ReaderGroupManager
    from segmentstore import WallClock

    try:
        with _client(endpoint, sec) as c:
            ReaderGroupManager(c, WallClock()).delete_reader_group(name)
    except _errors() as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"reader group {name} is deleted")
