"""How a study runs and reports, apart from what it runs: one ``RunOptions`` for every driver.

``simulate``, ``simulate_replications``, ``compare_scenario``, ``tune_scenario``,
``run_replications``, ``tune``, ``run_experiment`` and ``execute`` take the scenario (or
sweep), its overrides, seed and output directory as arguments, and everything about *how*
they run — where the runs execute (local processes or Spark tasks, how many, which
master), whether a progress bar shows, where the printed lines go, the provenance the
manifest records and the figures' format — as one frozen ``RunOptions``. The CLI builds
it once per command (``bench.cli``); a notebook builds its own or takes the defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..spec.errors import OutputError, ScenarioError
from . import figures
from .manifest import Provenance

__all__ = ["RunOptions", "EXECUTORS"]

EXECUTORS = ("local", "spark")
"""Where runs execute: local worker processes, or one Spark task each."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Where runs execute, what is shown and how outputs are written. Checked when made."""

    executor: str = "local"
    """``local`` (a pool of worker processes) or ``spark`` (one task per run)."""
    jobs: int | None = None
    """Local worker processes (``None``: one per core)."""
    master: str = "local[*]"
    """The Spark master URL (``executor="spark"``)."""
    progress: bool | None = None
    """Show a progress bar (``None``: when standard error is a terminal)."""
    echo: Callable[[str], None] = field(default=print, compare=False)
    """Where the printed lines (tables, summaries, paths written) go."""
    provenance: Provenance | None = field(default=None, compare=False)
    """The manifest's provenance (``None``: a fresh one, without a command line)."""
    fmt: str = "png"
    """The figures' format: png, svg or pdf."""

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ScenarioError(f"unknown executor {self.executor!r}: {' or '.join(EXECUTORS)}")
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int)):
            raise ScenarioError(f"jobs must be an int >= 1 or None, got {self.jobs!r}")
        if self.jobs is not None and self.jobs < 1:
            raise ScenarioError(f"jobs must be >= 1, got {self.jobs}")
        if not isinstance(self.master, str) or not self.master:
            raise ScenarioError(f"the Spark master must be a non-empty str, got {self.master!r}")
        figures.check(self.fmt, OutputError)

    def manifest(self) -> Provenance:
        """The provenance the manifest records: the one given, or a fresh one."""
        return self.provenance if self.provenance is not None else Provenance()

    def where(self) -> str:
        """Where the runs execute, for a line the user reads."""
        return f"on Spark ({self.master})" if self.executor == "spark" else "in local processes"

    def replace(self, **changes: object) -> RunOptions:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
