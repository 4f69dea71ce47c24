"""Readers of a shared reader group in separate processes: the worker and a small supervisor.

``run_reader(spec, stop)`` is a process's whole life: connect to a served store
(``RemoteClient``), join the group (``ReaderGroup.open``), create a reader (declaring a
previous incarnation of its id offline first with ``takeover``) and read until
``stop`` is set, then close. Everything it delivers goes to a JSON-lines log, written
and flushed line by line *before* the next read (which acknowledges it), so a process
killed with SIGKILL leaves every event it returned — the last few perhaps not yet
acknowledged, hence delivered again by the reader that takes its segments over:

- ``{"k": "start", "reader", "token", "epoch", "pid"}``
- ``{"k": "e", "ep", "s", "o", "key", "p", "it", "t"}``: an event (epoch, segment,
  offset, routing key, payload as text, ingestion time, the wall time it was logged in ns)
- ``{"k": "w", "ep", "w"}``: a watermark; ``{"k": "c", "ep", "n"}``: a checkpoint marker
- ``{"k": "b", "ep", "w", "segs", "si", "o", "it", "et", "key", "p", "t"}``: a batch
  (``batch`` mode): its segments, and per event the segment's index, offset, ingestion
  and event time, routing key and payload (hex); the wall time it was logged in ns
- ``{"k": "end"}``: closed cleanly; ``{"k": "error", "msg"}``: the reader was dropped

``ReaderProcesses`` starts (spawn context: no fork after threads), kills (SIGKILL),
stops and reaps them. Used by the simulator's ``group.processes`` option and the
multi-process tests. Real time and real processes: runs
are not deterministic.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.synchronize
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ReaderSpec", "run_reader", "ReaderProcesses", "read_log"]


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """What one reader process does."""

    endpoint: tuple[str, int]
    group: str
    reader_id: str
    log_path: str
    takeover: bool = False
    batch: bool = False
    max_events: int = 65_536
    read_timeout_ms: int = 50
    client_timeout_s: float = 30.0
    work_ms: float = 0.0
    """Time spent "processing" each event (a sleep), so a reader can fall behind its writers."""


def run_reader(spec: ReaderSpec, stop: multiprocessing.synchronize.Event) -> None:
    """A reader process: join, read and log until ``stop``, close. The target of ``ReaderProcesses``."""
    from readergroup.errors import ReaderGroupError, ReaderNotInGroupError
    from readergroup.reading.group import ReaderGroup
    from segmentstore import WallClock
    from segmentstore.client import RemoteClient

    with (
        open(spec.log_path, "a", encoding="utf-8") as log,
        RemoteClient(spec.endpoint, timeout_s=spec.client_timeout_s) as client,
    ):

        def put(rec: dict[str, Any]) -> None:
            log.write(json.dumps(rec, separators=(",", ":")) + "\n")
            log.flush()

        group = ReaderGroup.open(spec.group, client, WallClock())
        if spec.takeover:
            with contextlib.suppress(ReaderNotInGroupError):
                group.reader_offline(spec.reader_id)
        reader = group.create_reader(spec.reader_id)
        put(
            {
                "k": "start",
                "reader": spec.reader_id,
                "token": reader.token,
                "epoch": reader.epoch,
                "pid": os.getpid(),
            }
        )
        try:
            while not stop.is_set():
                if spec.batch:
                    _batch(reader, spec, put)
                else:
                    _event(reader, spec, put)
            reader.close()
            put({"k": "end"})
        except ReaderGroupError as e:
            put({"k": "error", "msg": str(e)})


def _event(reader: Any, spec: ReaderSpec, put: Any) -> None:
    import time

    r = reader.read_next_event(timeout_ms=spec.read_timeout_ms)
    if r.is_event:
        if spec.work_ms:
            time.sleep(spec.work_ms / 1000.0)
        put(
            {
                "k": "e",
                "ep": r.epoch,
                "s": r.segment,
                "o": r.position,
                "key": r.routing_key,
                "p": r.payload.decode("utf-8", "replace"),
                "it": r.ingestion_time,
                "t": time.time_ns(),
            }
        )
    elif r.is_watermark:
        put({"k": "w", "ep": r.epoch, "w": r.watermark})
    elif r.is_checkpoint:
        put({"k": "c", "ep": r.epoch, "n": r.checkpoint_name})


def _batch(reader: Any, spec: ReaderSpec, put: Any) -> None:
    import time

    b = reader.read_batch(spec.max_events, timeout_ms=spec.read_timeout_ms)
    if b.checkpoint_name is not None:
        put({"k": "c", "ep": b.epoch, "n": b.checkpoint_name})
    elif len(b) or b.watermark is not None:
        put(
            {
                "k": "b",
                "ep": b.epoch,
                "w": b.watermark,
                "segs": list(b.segments),
                "si": b.segment_index.tolist(),
                "o": b.offset.tolist(),
                "it": b.ingestion_time.tolist(),
                "et": b.event_time.tolist(),
                "key": b.routing_key.to_pylist(),
                "p": [p.hex() for p in b.payload.to_pylist()],
                "t": time.time_ns(),
            }
        )
        if spec.work_ms and len(b):
            time.sleep(len(b) * spec.work_ms / 1000.0)


def read_log(path: str | Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The whole lines of a reader log from byte ``offset``; returns them and the offset after. O(size)."""
    p = Path(path)
    if not p.exists():
        return [], offset
    with open(p, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    recs = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return recs, offset + end


class ReaderProcesses:
    """Reader processes of one group, each with its own stop event and log."""

    def __init__(self, endpoint: tuple[str, int], group: str, log_dir: str | Path, **options: Any) -> None:
        self.endpoint = endpoint
        self.group = group
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.options = options
        self._ctx = multiprocessing.get_context("spawn")
        self.procs: dict[str, tuple[Any, multiprocessing.synchronize.Event, ReaderSpec]] = {}
        self.killed: list[str] = []  # incarnations killed with SIGKILL
        self._n = 0

    def start(self, reader_id: str, takeover: bool = False, **options: Any) -> str:
        """Start a reader process; returns its incarnation name (its log is ``<incarnation>.jsonl``).

        ``options`` (``ReaderSpec`` fields) override those given to the supervisor.
        """
        name = f"{reader_id}@{self._n}"
        self._n += 1
        spec = ReaderSpec(
            self.endpoint,
            self.group,
            reader_id,
            str(self.log_dir / f"{name}.jsonl"),
            takeover=takeover,
            **{**self.options, **options},
        )
        stop = self._ctx.Event()
        proc = self._ctx.Process(target=run_reader, args=(spec, stop), name=name, daemon=True)
        proc.start()
        self.procs[name] = (proc, stop, spec)
        return name

    def kill(self, name: str) -> None:
        """SIGKILL the process of incarnation ``name`` (it leaves no goodbye)."""
        proc, _, _ = self.procs[name]
        proc.kill()
        proc.join(10)
        self.killed.append(name)

    def stop(self, name: str, timeout_s: float = 30.0) -> int | None:
        """Ask incarnation ``name`` to close its reader and exit; returns its exit code."""
        proc, stop, _ = self.procs[name]
        stop.set()
        proc.join(timeout_s)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        return proc.exitcode  # type: ignore[no-any-return]

    def pause(self, name: str, paused: bool) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) incarnation ``name``: alive, but doing nothing."""
        import signal

        proc, _, _ = self.procs[name]
        if proc.pid is not None and proc.is_alive():
            os.kill(proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def log_path(self, name: str) -> str:
        return self.procs[name][2].log_path

    def alive(self) -> list[str]:
        return [n for n, (p, _, _) in self.procs.items() if p.is_alive()]

    def logs(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """``(incarnation, records)`` of every process started, in start order."""
        for name, (_, _, spec) in self.procs.items():
            yield name, read_log(spec.log_path)[0]

    def close(self) -> None:
        """Stop every live process (kill what does not stop)."""
        for name in self.alive():
            self.pause(name, False)
            self.stop(name, 10.0)
