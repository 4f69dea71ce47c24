"""``ingestwm cache info|clear``: what ingestwm keeps in its cache directory, and removing it.

The cache (``$XDG_CACHE_HOME/ingestwm``, by default ``~/.cache/ingestwm``) holds what
``ingestwm validate`` builds once and reuses: compiled Java Flink jobs and Flink venvs
(``bench.validate.user_cache`` says what each is and how it stays bounded).

- ``ingestwm cache info``: each entry, what it is, its size on disk, its last use (UTC) and
  whether a running validate holds it; ``--json`` prints the same as one JSON object;
- ``ingestwm cache clear``: removes the compiled jobs (compiled again on the next run) and
  any leftovers; ``--venv`` the Flink venvs too. An entry in use is kept, and said so: a
  running validate is never broken by a clear.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

__all__ = ["cache", "human_bytes"]


def human_bytes(n: int) -> str:
    """``n`` bytes as B, KiB, MiB or GiB with one decimal."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _utc(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@click.group("cache")
def cache() -> None:
    """What ingestwm keeps in its cache directory (~/.cache/ingestwm): show it, clear it."""


@cache.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def info(as_json: bool) -> None:
    """Each entry of the cache: what it is, where, its size on disk, its last use, whether it is in use."""
    from ..validate import ValidateError
    from ..validate.user_cache import KEEP_JOBS, cache_root, entries

    root = cache_root()
    try:
        found = entries(root)
    except ValidateError as err:
        raise click.ClickException(str(err)) from None
    total = sum(e.size_bytes for e in found)
    if as_json:
        doc: dict[str, Any] = {
            "root": str(root),
            "total_bytes": total,
            "keep_jobs": KEEP_JOBS,
            "entries": [
                {
                    "name": e.name,
                    "kind": e.kind,
                    "path": str(e.path),
                    "size_bytes": e.size_bytes,
                    "last_used": _utc(e.last_used_s),
                    "in_use": e.in_use,
                }
                for e in found
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    if not found:
        click.echo(f"cache: {root} (empty)")
        return
    count = f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}"
    click.echo(f"cache: {root} ({human_bytes(total)} in {count})")
    rows = [("WHAT", "SIZE", "LAST USED (UTC)", "IN USE", "PATH")]
    for e in found:
        used = _utc(e.last_used_s) or "-"
        rows.append((e.kind, human_bytes(e.size_bytes), used, "yes" if e.in_use else "", str(e.path)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[4])
    click.echo(
        f"Compiled jobs beyond the {KEEP_JOBS} most recently used are removed after each compile. "
        "`ingestwm cache clear` removes the compiled jobs (--venv: the Flink venvs too); "
        "nothing in use is removed."
    )


@cache.command("clear")
@click.option(
    "--venv",
    "venvs",
    is_flag=True,
    help="Remove the Flink venvs too (rebuilt on demand: minutes; one in use is kept).",
)
def clear(venvs: bool) -> None:
    """Remove the compiled Java jobs and leftovers (--venv: the Flink venvs too); keep what is in use."""
    from ..validate import ValidateError
    from ..validate.user_cache import cache_root
    from ..validate.user_cache import clear as clear_cache

    root = cache_root()
    try:
        report = clear_cache(root, venvs=venvs)
    except ValidateError as err:
        raise click.ClickException(str(err)) from None
    for gone in report.removed:
        click.echo(f"removed {gone.kind} {gone.path} ({human_bytes(gone.size_bytes)})")
    for kept, why in report.kept:
        click.echo(f"kept {kept.kind} {kept.path} ({human_bytes(kept.size_bytes)}): {why}")
    for bad, why in report.failed:
        click.echo(f"failed {bad.kind} {bad.path}: {why}", err=True)
    if not (report.removed or report.kept or report.failed):
        click.echo(f"cache: {root} holds nothing to remove")
    else:
        click.echo(f"freed {human_bytes(report.freed_bytes)} in {root}")
    if report.failed:
        n = len(report.failed)
        raise click.ClickException(f"{n} cache entr{'y' if n == 1 else 'ies'} could not be removed (above)")
