"""Watermark transcripts: engine-neutral YAML scripts of what a reader group delivers, and what must come out.

A transcript is shared by the engines (``flink_compat`` and the Spark source, both on
this layer): it says what the readers of one reader group deliver, in order, and what
an engine with ``max_event_time_lag`` must make of it. The shipped cases are
``readergroup/transcript_cases/*.yaml`` (``transcript_files()``). Format (YAML, all
times int ms)::

    name: pdp26-prototype-output        # required, unique
    description: free text               # optional
    max_event_time_lag: 10000            # required, >= 0: the source's maxEventTimeLag
    readers: 1                           # optional (default 1): readers of the group
                                         #   (Flink source subtasks / Spark partitions)
    steps:                               # required: the deliveries, in global order
      - event: {key: A, event_time: 1000, ingestion_time: 1500, payload: "text"}
        reader: 0                        # optional on every step (default 0)
      - watermark: 1499                  # the group's ingestion watermark, as a reader returns it
      - status: idle                     # the reader holds no segments from here ...
        reader: 1
      - {status: active, reader: 1}      # ... and holds segments again from here
    expected:
      watermarks: [-8501]                # event-time watermarks of the combined stream, strictly
                                         #   ascending (end of input excluded)
      subtask_watermarks: [[-8501]]      # optional: event-time watermarks per reader
      on_time: [{key: A, event_time: 1000}]   # released by those watermarks: event-time order,
                                              #   ties in delivery order
      late: []                           # delivered at or below the combined event-time
                                         #   watermark, in delivery order
      pending: []                        # neither: still held when the steps end, event-time order

Meaning (docs/design.md §1): a reader's event-time watermark is its ingestion watermark minus
``max_event_time_lag``; each reader's event-time watermarks are emitted only when they
increase; the combined watermark is the minimum over readers that are not idle, emitted
when it increases (a reader back from idleness counts again once its watermark reaches
the combined one); an event whose event time is ``<=`` the combined watermark when it is
delivered is late. Every event is in exactly one of ``on_time``, ``late``, ``pending``.

``load_transcript`` validates a file, including the store's guarantees that make a
transcript realistic: each reader's ingestion watermarks strictly ascend, and no event
is delivered with an ingestion time ``<=`` a watermark delivered before it (docs/design.md §4.1).
An engine plays a transcript and returns a ``TranscriptResult``;
``TranscriptResult.mismatches`` lists what differs from ``expected``
(``flink_compat.transcript_runner.run_transcript`` is the Flink layer's player).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import TranscriptError

__all__ = [
    "TranscriptEvent",
    "TranscriptStep",
    "Expected",
    "Transcript",
    "TranscriptResult",
    "load_transcript",
    "parse_transcript",
    "transcript_files",
    "transcripts_dir",
]

_Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """An event as a reader delivers it."""

    key: str
    event_time: int
    ingestion_time: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class TranscriptStep:
    """One delivery: ``kind`` is ``"event"``, ``"watermark"`` or ``"status"``, to ``reader``."""

    kind: str
    reader: int
    event: TranscriptEvent | None = None
    watermark: int | None = None
    idle: bool | None = None


@dataclass(frozen=True, slots=True)
class Expected:
    """What must come out; events as ``(key, event_time)``."""

    watermarks: tuple[int, ...]
    on_time: tuple[_Key, ...]
    late: tuple[_Key, ...]
    pending: tuple[_Key, ...]
    subtask_watermarks: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Transcript:
    """A validated transcript (see the module docstring)."""

    name: str
    description: str
    max_event_time_lag: int
    readers: int
    steps: tuple[TranscriptStep, ...]
    expected: Expected

    def events(self) -> list[tuple[int, TranscriptEvent]]:
        """``(reader, event)`` in delivery order (e.g. to write them into a store)."""
        return [(s.reader, s.event) for s in self.steps if s.event is not None]


@dataclass(frozen=True, slots=True)
class TranscriptResult:
    """What this layer made of a transcript."""

    watermarks: tuple[int, ...]
    subtask_watermarks: tuple[tuple[int, ...], ...]
    on_time: tuple[_Key, ...]
    late: tuple[_Key, ...]
    pending: tuple[_Key, ...]

    def mismatches(self, expected: Expected) -> list[str]:
        """One line per field that differs from ``expected`` (empty: the transcript passed)."""
        out = []
        for field in ("watermarks", "on_time", "late", "pending"):
            got, want = getattr(self, field), getattr(expected, field)
            if got != want:
                out.append(f"{field}: expected {list(want)}, got {list(got)}")
        if expected.subtask_watermarks is not None and self.subtask_watermarks != expected.subtask_watermarks:
            out.append(
                f"subtask_watermarks: expected {[list(w) for w in expected.subtask_watermarks]}, "
                f"got {[list(w) for w in self.subtask_watermarks]}"
            )
        return out


def transcripts_dir() -> Path:
    """The folder of the shipped transcripts, ``readergroup/transcript_cases``."""
    return Path(str(resources.files("readergroup") / "transcript_cases"))


def transcript_files(directory: str | Path | None = None) -> list[Path]:
    """The ``*.yaml`` transcripts of a directory (default: the shipped ones), sorted by name."""
    return sorted(Path(directory if directory is not None else transcripts_dir()).glob("*.yaml"))


def load_transcript(path: str | Path) -> Transcript:
    """Read and validate one YAML transcript (``yaml.safe_load``); raises ``TranscriptError``."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise TranscriptError(f"transcript {p}: cannot read it ({e})") from None
    return parse_transcript(doc, str(p))


def parse_transcript(doc: Any, origin: str = "<transcript>") -> Transcript:
    """Validate a transcript already parsed into dicts and lists; raises ``TranscriptError``."""
    where = f"transcript {origin}"
    if not isinstance(doc, dict):
        raise TranscriptError(f"{where}: expected a mapping at the top")
    unknown = set(doc) - {"name", "description", "max_event_time_lag", "readers", "steps", "expected"}
    if unknown:
        raise TranscriptError(f"{where}: unknown fields {sorted(unknown)}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise TranscriptError(f"{where}: 'name' must be a non-empty string")
    where = f"transcript {name!r} ({origin})"
    lag = _int(doc.get("max_event_time_lag"), f"{where}: max_event_time_lag", low=0)
    readers = _int(doc.get("readers", 1), f"{where}: readers", low=1)
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise TranscriptError(f"{where}: 'steps' must be a non-empty list")
    steps = tuple(_step(s, readers, f"{where}: step {i}") for i, s in enumerate(raw_steps))
    _check_realistic(steps, readers, where)
    expected = _expected(doc.get("expected"), readers, where)
    delivered = Counter((s.event.key, s.event.event_time) for s in steps if s.event is not None)
    listed = Counter(expected.on_time) + Counter(expected.late) + Counter(expected.pending)
    if delivered != listed:
        raise TranscriptError(
            f"{where}: expected on_time + late + pending must list every event exactly once; "
            f"missing {sorted((delivered - listed).elements())}, "
            f"extra {sorted((listed - delivered).elements())}"
        )
    description = doc.get("description", "")
    return Transcript(name, str(description).strip(), lag, readers, steps, expected)


def _step(raw: Any, readers: int, where: str) -> TranscriptStep:
    if not isinstance(raw, dict):
        raise TranscriptError(f"{where}: expected a mapping, got {raw!r}")
    kinds = [k for k in ("event", "watermark", "status") if k in raw]
    unknown = set(raw) - {"event", "watermark", "status", "reader"}
    if len(kinds) != 1 or unknown:
        raise TranscriptError(f"{where}: needs exactly one of event/watermark/status (+ reader): {raw!r}")
    reader = _int(raw.get("reader", 0), f"{where}: reader", low=0)
    if reader >= readers:
        raise TranscriptError(f"{where}: reader {reader} out of range (the transcript has {readers} readers)")
    kind = kinds[0]
    if kind == "watermark":
        return TranscriptStep("watermark", reader, watermark=_int(raw["watermark"], f"{where}: watermark"))
    if kind == "status":
        status = raw["status"]
        if status not in ("idle", "active"):
            raise TranscriptError(f"{where}: status must be 'idle' or 'active', got {status!r}")
        return TranscriptStep("status", reader, idle=status == "idle")
    ev = raw["event"]
    if not isinstance(ev, dict) or set(ev) - {"key", "event_time", "ingestion_time", "payload"}:
        raise TranscriptError(f"{where}: event must map key, event_time, ingestion_time[, payload]: {ev!r}")
    key = ev.get("key")
    if not isinstance(key, str) or not key:
        raise TranscriptError(f"{where}: event key must be a non-empty string, got {key!r}")
    payload = ev.get("payload", "")
    if not isinstance(payload, str):
        raise TranscriptError(f"{where}: event payload must be a string, got {payload!r}")
    event = TranscriptEvent(
        key,
        _int(ev.get("event_time"), f"{where}: event_time"),
        _int(ev.get("ingestion_time"), f"{where}: ingestion_time"),
        payload.encode("utf-8"),
    )
    return TranscriptStep("event", reader, event=event)


def _check_realistic(steps: Iterable[TranscriptStep], readers: int, where: str) -> None:
    last = [None] * readers
    highest: int | None = None
    for i, s in enumerate(steps):
        if s.watermark is not None:
            prev = last[s.reader]
            if prev is not None and s.watermark <= prev:
                raise TranscriptError(
                    f"{where}: step {i}: reader {s.reader}'s ingestion watermark {s.watermark} does not "
                    f"ascend (previous {prev})"
                )
            last[s.reader] = s.watermark  # type: ignore[call-overload]
            highest = s.watermark if highest is None else max(highest, s.watermark)
        elif s.event is not None and highest is not None and s.event.ingestion_time <= highest:
            raise TranscriptError(
                f"{where}: step {i}: event {s.event.key!r} has ingestion time {s.event.ingestion_time} "
                f"<= watermark {highest} delivered before it (a store never does that)"
            )


def _expected(raw: Any, readers: int, where: str) -> Expected:
    if not isinstance(raw, dict):
        raise TranscriptError(f"{where}: 'expected' must be a mapping")
    unknown = set(raw) - {"watermarks", "subtask_watermarks", "on_time", "late", "pending"}
    if unknown:
        raise TranscriptError(f"{where}: expected has unknown fields {sorted(unknown)}")
    wms = _ints(raw.get("watermarks"), f"{where}: expected.watermarks")
    per: tuple[tuple[int, ...], ...] | None = None
    if "subtask_watermarks" in raw:
        sub = raw["subtask_watermarks"]
        if not isinstance(sub, list) or len(sub) != readers:
            raise TranscriptError(f"{where}: expected.subtask_watermarks must list {readers} lists")
        per = tuple(_ints(w, f"{where}: expected.subtask_watermarks[{i}]") for i, w in enumerate(sub))
    return Expected(
        wms,
        _keys(raw.get("on_time"), f"{where}: expected.on_time"),
        _keys(raw.get("late"), f"{where}: expected.late"),
        _keys(raw.get("pending", []), f"{where}: expected.pending"),
        per,
    )


def _ints(raw: Any, where: str) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise TranscriptError(f"{where}: must be a list of ints")
    out = tuple(_int(v, where) for v in raw)
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise TranscriptError(f"{where}: watermarks must strictly ascend, got {list(out)}")
    return out


def _keys(raw: Any, where: str) -> tuple[_Key, ...]:
    if not isinstance(raw, list):
        raise TranscriptError(f"{where}: must be a list of {{key, event_time}}")
    out = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"key", "event_time"}:
            raise TranscriptError(f"{where}: each entry must be {{key, event_time}}, got {item!r}")
        out.append((str(item["key"]), _int(item["event_time"], where)))
    return tuple(out)


def _int(value: Any, where: str, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TranscriptError(f"{where}: must be an int, got {value!r}")
    if low is not None and value < low:
        raise TranscriptError(f"{where}: must be >= {low}, got {value}")
    return value
