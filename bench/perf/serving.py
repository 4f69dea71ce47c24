"""A segment store served by another process, for the benchmarks that measure over the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

__all__ = ["serve_in_process", "process_cpu_s", "process_times", "ProcessTimes"]

_ROOT = Path(__file__).resolve().parents[2]


def serve_in_process(
    data_dir: Path | None = None, sync: str | None = None
) -> tuple[subprocess.Popen[str], int]:
    """Start ``ingestwm serve --port 0`` in a new process; the process and the port it listens on.

    ``data_dir``/``sync``: a durable store (``--data-dir``, ``--sync``), as users run it. The
    caller stops it (``terminate()``, ``wait()``). Raises ``RuntimeError`` if it did not start.
    """
    args = [sys.executable, "-m", "bench.cli", "serve", "--port", "0"]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    if sync is not None:
        args += ["--sync", sync]
    p = subprocess.Popen(args, cwd=_ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if not line:
        p.kill()
        raise RuntimeError("ingestwm serve did not start")
    return p, int(line.rsplit(":", 1)[-1])


class ProcessTimes(NamedTuple):
    """What a process has used so far (``process_times``)."""

    user_s: float
    """CPU seconds in user space."""
    system_s: float
    """CPU seconds in the kernel on its behalf (system calls, page faults)."""
    minor_faults: int
    """Pages it touched that the kernel had to map in (without reading a disk)."""


def process_times(pid: int) -> ProcessTimes:
    """User and system CPU seconds and minor page faults of process ``pid`` so far, all its threads
    (Linux ``/proc``; zeros elsewhere or once it is gone). O(1)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return ProcessTimes(int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]))
    except (OSError, ValueError, IndexError):
        return ProcessTimes(0.0, 0.0, 0)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``process_times``). O(1)."""
    t = process_times(pid)
    return t.user_s + t.system_s
