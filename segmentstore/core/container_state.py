"""The container's state API: where durability and eviction plug in, never through its attributes.

``set_data_factory`` / ``attach_log`` (where bytes and operations go), ``snapshot_state``
/ ``restore_state`` / ``discard`` / ``close_data`` (snapshots and recovery),
``set_cold`` / ``evict`` / ``reinstate`` (the evictor's cold store). Replaying the
log is ``SegmentContainer.replay``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import SegmentStoreError
from .container_table import ColdSegments, ContainerTable
from .processor import OperationSink
from .segment import Segment, is_system_segment
from .storage import SegmentData

__all__ = ["ContainerState", "ContainerStateAPI"]


@dataclass(frozen=True, slots=True)
class ContainerState:
    """The container's state: the processor's position and the active segments (live objects).

    Taken and given with the container's lock held: the segments are the container's own.
    """

    last_seq: int
    last_timestamp: int
    segments: tuple[Segment, ...]


class ContainerStateAPI(ContainerTable):
    """The state API of ``SegmentContainer`` (durability, snapshots, eviction)."""

    def set_data_factory(self, factory: Callable[[str, int], SegmentData] | None) -> None:
        """Where new segments keep their bytes: ``factory(name, seq)`` (``None``: in memory)."""
        self._data_factory = factory

    def attach_log(self, log: OperationSink | None) -> None:
        """Send every operation from now on to ``log`` before it applies (``None``: stop logging)."""
        with self._lock:
            self._processor.log = log

    def set_cold(self, cold: ColdSegments | None) -> None:
        """The evictor asked on a miss (reactivation) and on replay."""
        self._evictor = cold

    def snapshot_state(self) -> ContainerState:
        """The processor's position and the active segments. Lock held. O(segments)."""
        p = self._processor
        return ContainerState(p.last_seq, p.last_timestamp, tuple(self._segments.values()))

    def restore_state(self, state: ContainerState) -> None:
        """Install recovered segments and continue after the state's sequence number and timestamp.

        The container must hold no segment yet. O(segments).
        """
        with self._lock:
            if self._segments:
                raise SegmentStoreError(
                    f"restore_state into a container that holds {len(self._segments)} segments already"
                )
            for seg in state.segments:
                self._segments[seg.name] = seg
            self._processor.restore_state(state.last_seq, state.last_timestamp)

    def discard(self) -> None:
        """Close every active segment's data and forget them (a failed recovery). O(segments)."""
        with self._lock:
            for seg in self._segments.values():
                seg.data.close()
            self._segments.clear()

    def close_data(self) -> None:
        """Close every active segment's data (the durable store's close). Lock held."""
        for seg in self._segments.values():
            seg.data.close()

    def evict(self, name: str) -> Segment:
        """Take ``name`` out of the active set and hand it to the caller (the evictor). Lock held. O(1)."""
        return self._segments.pop(name)

    def reinstate(self, seg: Segment, advance: bool) -> bool:
        """Put an evicted segment back; with ``advance``, give it the advancer's update if it has
        been idle past ``max_watermark_lag_ms`` (not counted as use). Returns whether it did. Lock held.
        """
        self._segments[seg.name] = seg
        if (
            advance
            and self._processor.read_only is None
            and not seg.sealed
            and seg.parent is None
            and not is_system_segment(seg.name)
            and seg.last_write_time <= self._processor.now() - self._config.max_watermark_lag_ms
        ):
            self._update_attributes_locked(seg, {})  # no waiting reads on a segment just loaded
            return True
        return False
