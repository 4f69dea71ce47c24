"""Provenance: the ``manifest.json`` that simulate, compare, experiment and validate write.

It records what is needed to rerun and trust a result: the ingestwm version and, when
run from a git checkout, its commit (and whether the tree had uncommitted changes);
the versions of Python, numpy, numba, pyspark, simpy and pyarrow; the platform; the
seed(s); the fully resolved scenario(s) (every default filled in); the command line;
the start time (UTC) and the wall time. It is the one output file that differs from one
run to the next (times); every other file is a function of the scenario and the seed.

The clock is injected (``now``, seconds since the epoch), so callers and tests control it.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from ..spec.errors import OutputError

__all__ = ["Provenance", "library_versions", "git_commit", "MANIFEST"]

MANIFEST = "manifest.json"

_LIBRARIES = ("numpy", "numba", "pyspark", "simpy", "pyarrow", "matplotlib")


def library_versions() -> dict[str, str | None]:
    """Installed versions of ingestwm, Python and the libraries results depend on (``None``: absent)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("ingestwm", *_LIBRARIES):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(where: Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout holding this code, or ``None`` outside a checkout."""
    root = where if where is not None else Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0:
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


class Provenance:
    """Started when a command starts; ``write(out_dir, ...)`` writes the manifest when it is done."""

    __slots__ = ("_now", "argv", "started")

    def __init__(self, argv: Sequence[str] | None = None, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self.started = now()
        self.argv = list(sys.argv if argv is None else argv)

    def manifest(
        self,
        tool: str,
        seeds: Sequence[int],
        scenarios: Sequence[dict[str, Any]],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The manifest as data: what ran, with which seeds, code and libraries, when, for how long."""
        end = self._now()
        return {
            "tool": tool,
            "versions": library_versions(),
            "git": git_commit(),
            "platform": platform.platform(),
            "command": self.argv,
            "seeds": list(seeds),
            "started_utc": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "wall_s": round(end - self.started, 3),
            "scenarios": list(scenarios),
            **(extra or {}),
        }

    def write(
        self,
        out_dir: Path,
        tool: str,
        seeds: Sequence[int],
        scenarios: Sequence[dict[str, Any]],
        extra: dict[str, Any] | None = None,
    ) -> Path:
        """Write ``out_dir/manifest.json``; returns its path."""
        path = out_dir / MANIFEST
        doc = self.manifest(tool, seeds, scenarios, extra)
        try:
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        except OSError as e:
            raise OutputError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
        return path
