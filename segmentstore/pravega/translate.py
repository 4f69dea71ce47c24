"""How Pravega's names and positions map onto ingestwm's streams, and what a Pravega client may touch.

- A Pravega segment id is ``(epoch << 32) | number``: the segment ``number`` created in
  ``epoch``, stored as ``scope/stream/<number>.#epoch.<epoch>`` (ingestwm's names are
  Pravega's already). Routing-key ranges are ingestwm's ``[key_low, key_high)`` as they
  are (Pravega's ``minKey``/``maxKey``).
- A Pravega client reads and writes only streams framed as Pravega's
  (``FRAMING_PRAVEGA``: created through the Pravega controller). Asking for the segments
  or a segment of an ingestwm-framed stream is a ``FramingError`` that says so, before
  any byte moves: a Pravega reader would misread ingestwm's frames, and a Pravega
  writer's events would garble the stream for ingestwm's readers.
- Listings page by name: the continuation token is the last name returned (Pravega's
  tokens are opaque strings too); an empty page ends the listing, as the client expects.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..controller.controller import controller_of
from ..errors import InvalidArgumentError, SegmentNotFoundError
from ..stream_metadata import FRAMING_PRAVEGA, StreamInfo, StreamSegment, stream_segment_name
from .errors import FramingError

if TYPE_CHECKING:
    from ..store import SegmentStore
    from .transactions import PravegaTransactions

TRANSACTION_SEPARATOR = "#transaction."

__all__ = ["segment_id", "segment_name", "page", "PravegaStreams"]

_U32 = 0xFFFF_FFFF


def segment_id(seg: StreamSegment) -> int:
    """Pravega's id of a stream segment: ``(epoch << 32) | number``."""
    return (seg.epoch << 32) | seg.number


def segment_name(stream: str, sid: int) -> str:
    """The store name of segment ``sid`` of ``stream``; ``InvalidArgumentError`` for an impossible id."""
    number, epoch = sid & _U32, sid >> 32
    if sid < 0 or number > 0x7FFF_FFFF or epoch > 0x7FFF_FFFF:
        raise InvalidArgumentError(f"stream {stream!r}: {sid} is not a segment id ((epoch << 32) | number)")
    return stream_segment_name(stream, number, epoch)


def page(names: Sequence[str], token: str, limit: int) -> tuple[list[str], str]:
    """The sorted ``names`` after ``token`` (at most ``limit``) and the token of the next page."""
    start = bisect.bisect_right(names, token) if token else 0
    out = list(names[start : start + limit])
    return out, out[-1] if out else token


class PravegaStreams:
    """ingestwm's streams as a Pravega client may use them: the store's controller, framing checked."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self.controller = controller_of(store)
        self._transactions: PravegaTransactions | None = None

    @property
    def transactions(self) -> PravegaTransactions:
        """The store's Pravega transactions (``transactions_of``), opened on first use."""
        if self._transactions is None:
            from .transactions import transactions_of

            self._transactions = transactions_of(self.store)
        return self._transactions

    def store_segment(self, name: str) -> str:
        """The store's name for a segment a Pravega client names: a stream segment of a Pravega-framed
        stream as it is; a Pravega transaction's segment as ``transactions`` maps it; a store
        transaction segment (a large event's transient segment) of such a segment as it is. Refusals
        as ``segment``'s; ``SegmentNotFoundError`` saying why for a transaction segment not open."""
        if TRANSACTION_SEPARATOR not in name:
            self.segment(name)
            return name
        if len(name) - name.rindex(TRANSACTION_SEPARATOR) - len(TRANSACTION_SEPARATOR) == 32:
            stored = self.transactions.store_segment(name)
            self.segment(self.store.get_info(stored).parent or "")
            return stored
        parent = self.store.get_info(name).parent
        if parent is None:
            raise SegmentNotFoundError(f"segment {name!r:.300} is not a transaction segment")
        self.segment(parent)
        return name

    def stream(self, stream: str) -> StreamInfo:
        """The stream, if a Pravega client may read and write it (else ``FramingError``)."""
        info = self.controller.get_stream(stream)
        if info.framing != FRAMING_PRAVEGA:
            raise FramingError(_refusal(stream, info.framing))
        return info

    def segment(self, name: str) -> StreamSegment:
        """The stream segment ``name``, if a Pravega client may use it: ``SegmentNotFoundError`` for a
        name of no stream (ingestwm's own segments, system segments), ``FramingError`` for one of an
        ingestwm-framed stream."""
        seg = self.controller.get_segment(name)
        self.stream(seg.stream)
        return seg

    def stream_of_segment(self, name: str) -> str:
        """``scope/stream`` of a segment name (its first two parts), for token checks."""
        parts = name.split("/", 2)
        if len(parts) < 3:
            raise SegmentNotFoundError(f"segment {name!r:.300} is not a stream segment (scope/stream/...)")
        return f"{parts[0]}/{parts[1]}"


def _refusal(stream: str, framing: str) -> str:
    return (
        f"stream {stream!r} holds {framing}-framed events (it was created through ingestwm's API): "
        "a Pravega client reads and writes only streams created through the Pravega controller; "
        "read this one with ingestwm's readers or Spark source"
    )
