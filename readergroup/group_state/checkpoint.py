"""Checkpoints and positions: per-segment offsets *and* watermarks, serialisable to JSON.

A ``Checkpoint`` is what ``ReaderGroup.initiate_checkpoint`` completes with: for every
readable segment of the group (assigned or unassigned) the acknowledged offset and
the watermark there (PDP-26: "checkpoint the watermarks"). Successors not yet readable
are left out: they are found again when their predecessors complete, so a checkpoint
is always a consistent cut (pairwise disjoint key ranges per stream).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from segmentstore import StreamCut
from segmentstore.clock import monotonic_s

from ..errors import InvalidCheckpointError

__all__ = ["SegmentPosition", "Checkpoint", "ReaderPosition", "CheckpointFuture"]


@dataclass(frozen=True, slots=True)
class SegmentPosition:
    """A segment of a stream, an acknowledged offset in it, and ``watermark_at`` that offset."""

    stream: str
    segment: str
    offset: int
    watermark: int

    def __post_init__(self) -> None:
        for what, v in (("stream", self.stream), ("segment", self.segment)):
            if not isinstance(v, str) or not v:
                raise InvalidCheckpointError(f"SegmentPosition.{what} must be a non-empty str, got {v!r}")
        for field, n in (("offset", self.offset), ("watermark", self.watermark)):
            if isinstance(n, bool) or not isinstance(n, int):
                raise InvalidCheckpointError(
                    f"SegmentPosition of {self.segment!r}: {field} must be an int, got {n!r}"
                )
        if self.offset < 0:
            raise InvalidCheckpointError(f"SegmentPosition of {self.segment!r}: offset {self.offset} < 0")


def _positions(items: Iterable[SegmentPosition], what: str) -> tuple[SegmentPosition, ...]:
    out = tuple(sorted(items, key=lambda p: p.segment))
    for p in out:
        if not isinstance(p, SegmentPosition):
            raise InvalidCheckpointError(f"{what}: positions must be SegmentPosition values, got {p!r}")
    names = [p.segment for p in out]
    if len(set(names)) != len(names):
        raise InvalidCheckpointError(f"{what}: a segment appears twice: {names}")
    return out


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A completed reader-group checkpoint: positions and watermarks of every readable segment.

    ``streams`` lists every stream of the group (a fully read, sealed stream has no
    positions left). ``epoch`` is the group epoch it was taken in. ``watermark`` is the
    group watermark the positions imply (the minimum), or ``None`` without positions.
    """

    name: str
    group: str
    epoch: int
    streams: tuple[str, ...]
    positions: tuple[SegmentPosition, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidCheckpointError(f"Checkpoint.name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.group, str):
            raise InvalidCheckpointError(f"checkpoint {self.name!r}: group must be a str, got {self.group!r}")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 0:
            raise InvalidCheckpointError(f"checkpoint {self.name!r}: epoch must be an int >= 0")
        streams = tuple(self.streams)
        if not all(isinstance(s, str) for s in streams) or len(set(streams)) != len(streams):
            raise InvalidCheckpointError(f"checkpoint {self.name!r}: bad streams {streams!r}")
        object.__setattr__(self, "streams", streams)
        pos = _positions(self.positions, f"checkpoint {self.name!r}")
        for p in pos:
            if p.stream not in streams:
                raise InvalidCheckpointError(
                    f"checkpoint {self.name!r}: segment {p.segment!r} belongs to stream {p.stream!r}, "
                    f"which is not one of {streams}"
                )
        object.__setattr__(self, "positions", pos)

    @property
    def watermark(self) -> int | None:
        """The minimum watermark over the positions (the group watermark they imply). O(n)."""
        return min((p.watermark for p in self.positions), default=None)

    def as_dict(self) -> dict[str, int]:
        """``{segment: offset}``. O(n)."""
        return {p.segment: p.offset for p in self.positions}

    def stream_cuts(self) -> tuple[StreamCut, ...]:
        """One ``StreamCut`` per stream (empty for a fully read stream). O(n)."""
        return tuple(
            StreamCut(s, tuple((p.segment, p.offset) for p in self.positions if p.stream == s))
            for s in self.streams
        )

    def to_json(self) -> str:
        """JSON: name, group, epoch, streams and ``[stream, segment, offset, watermark]`` rows."""
        return json.dumps(
            {
                "name": self.name,
                "group": self.group,
                "epoch": self.epoch,
                "streams": list(self.streams),
                "positions": [[p.stream, p.segment, p.offset, p.watermark] for p in self.positions],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """The inverse of ``to_json``; raises ``InvalidCheckpointError`` on malformed input."""
        obj = _load(text, "checkpoint")
        try:
            return cls(
                obj["name"],
                obj["group"],
                obj["epoch"],
                tuple(obj["streams"]),
                tuple(SegmentPosition(*_row(r)) for r in obj["positions"]),
            )
        except InvalidCheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidCheckpointError(f"not a checkpoint in JSON: {e!r} in {text!r:.80}") from None


@dataclass(frozen=True, slots=True)
class ReaderPosition:
    """A reader's acknowledged positions (and watermarks there) in the segments it holds."""

    reader_id: str
    epoch: int
    positions: tuple[SegmentPosition, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", _positions(self.positions, f"reader {self.reader_id!r}"))

    def as_dict(self) -> dict[str, int]:
        """``{segment: offset}``. O(n)."""
        return {p.segment: p.offset for p in self.positions}

    def to_json(self) -> str:
        """A JSON object with reader id, epoch and ``[stream, segment, offset, watermark]`` rows."""
        return json.dumps(
            {
                "reader_id": self.reader_id,
                "epoch": self.epoch,
                "positions": [[p.stream, p.segment, p.offset, p.watermark] for p in self.positions],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ReaderPosition:
        """The inverse of ``to_json``; raises ``InvalidCheckpointError`` on malformed input."""
        obj = _load(text, "reader position")
        try:
            return cls(
                str(obj["reader_id"]),
                int(obj["epoch"]),
                tuple(SegmentPosition(*_row(r)) for r in obj["positions"]),
            )
        except InvalidCheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidCheckpointError(f"not a reader position in JSON: {e!r} in {text!r:.80}") from None


class CheckpointFuture(Future[Checkpoint]):
    """A checkpoint's future that polls while it is waited on (``ReaderGroup.initiate_checkpoint``).

    The checkpoint may complete in other processes' readers: while it is not done,
    ``done()`` and ``result()`` call ``poll`` (the group catches up with its state log,
    which completes or aborts the future), ``result`` every 50 ms until its timeout.
    """

    def __init__(self, poll: Callable[[], None]) -> None:
        super().__init__()
        self._poll = poll

    def done(self) -> bool:
        if not super().done():
            self._poll()
        return super().done()

    def result(self, timeout: float | None = None) -> Checkpoint:
        deadline = None if timeout is None else monotonic_s() + timeout
        while not super().done():
            self._poll()
            if super().done():
                break
            left = 0.05 if deadline is None else min(0.05, deadline - monotonic_s())
            if left <= 0:
                break
            threading.Event().wait(left)
        return super().result(0 if timeout is not None else None)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with contextlib.suppress(BaseException):
            self.result(timeout)
        return super().exception(0)


def _load(text: str | bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except (ValueError, TypeError) as e:
        raise InvalidCheckpointError(f"not a {what} in JSON: {e}") from None
    if not isinstance(obj, dict):
        raise InvalidCheckpointError(f"not a {what} in JSON: expected an object, got {obj!r:.80}")
    return obj


def _row(r: Any) -> tuple[str, str, int, int]:
    if not isinstance(r, list) or len(r) != 4:
        raise InvalidCheckpointError(f"a position must be [stream, segment, offset, watermark]: {r!r:.80}")
    return r[0], r[1], r[2], r[3]
