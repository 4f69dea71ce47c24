"""The controller's administration, as Pravega's controller offers it: scopes, configs, truncation, epochs.

Scopes: a scope exists once created (``create_scope``) or once a stream names it
(streams created through ingestwm's API need no scope first); ``delete_scope`` needs it
empty. Streams created here (``create_stream_in_scope``) need their scope, and carry a
framing and a ``StreamConfig``; ``update_stream`` replaces the config and rescales a
stream whose segment count no longer meets it. ``truncate_stream`` makes a stream cut
the stream's head: segments wholly before it are deleted, those in it truncated at its
offsets; the truncate record is written first, so a crash in between is finished on
opening (``finish_truncation``). Each change is one record, as every controller change.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamExistsError,
)
from ..stream_metadata import (
    FRAMING_INGESTWM,
    FRAMINGS,
    StreamInfo,
    StreamSegment,
    check_scope_name,
    check_stream_name,
)
from .model import StreamEntry
from .scaling import StreamScaling
from .stream_config import StreamConfig

__all__ = ["StreamAdmin"]


class StreamAdmin(StreamScaling):
    """Scopes, stream configs, truncation and epochs of ``StreamController``."""

    # ------------------------------------------------------------------ scopes
    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it exists already (nothing changes). O(1)."""
        check_scope_name(scope)
        with self._mutating():
            if scope in self._meta.scopes:
                return False
            rec = {"op": "scope", "scope": scope}
            self._write(rec)
            self._meta.apply(rec)
            return True

    def scope_exists(self, scope: str) -> bool:
        """Whether ``scope`` exists. O(1)."""
        with self._lock:
            return scope in self._meta.scopes

    def list_scopes(self) -> list[str]:
        """Every scope, sorted. O(scopes log scopes)."""
        with self._lock:
            return sorted(self._meta.scopes)

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope; else ``ScopeNotFoundError``, or ``ScopeNotEmptyError`` naming a stream."""
        with self._mutating():
            if scope not in self._meta.scopes:
                raise ScopeNotFoundError(f"scope {scope!r:.300} does not exist")
            inside = self.streams_in_scope(scope)
            if inside:
                raise ScopeNotEmptyError(
                    f"scope {scope!r} holds {len(inside)} stream(s), {inside[0]!r} first: delete them first"
                )
            rec = {"op": "unscope", "scope": scope}
            self._write(rec)
            self._meta.apply(rec)

    def streams_in_scope(self, scope: str) -> list[str]:
        """The names (``scope/name``) of the streams in ``scope``, sorted. O(streams)."""
        prefix = scope + "/"
        with self._lock:
            return sorted(n for n in self._meta.streams if n.startswith(prefix))

    # ------------------------------------------------------------------ streams with a config
    def create_stream_in_scope(
        self, stream: str, config: StreamConfig, framing: str = FRAMING_INGESTWM
    ) -> StreamInfo:
        """Create ``stream`` with ``config.min_segments`` segments in its existing scope (else
        ``ScopeNotFoundError``), framed as ``framing``; ``StreamExistsError`` if it exists."""
        check_stream_name(stream)
        if not isinstance(config, StreamConfig):
            raise InvalidArgumentError(
                f"stream {stream!r}: config must be a StreamConfig, got {config!r:.80}"
            )
        if framing not in FRAMINGS:
            raise InvalidArgumentError(
                f"stream {stream!r}: framing must be one of {FRAMINGS}, got {framing!r}"
            )
        scope = stream.split("/", 1)[0]
        with self._mutating():
            if scope not in self._meta.scopes:
                raise ScopeNotFoundError(f"scope {scope!r} does not exist; create it first")
            if stream in self._meta.streams:
                raise StreamExistsError(f"stream {stream!r} exists already")
            return self._create(stream, config.min_segments, framing, config)

    def get_stream_config(self, stream: str) -> StreamConfig:
        """The stream's configuration (``default_config`` for one created through ingestwm's API). O(1)."""
        with self._lock:
            return self._get(stream).config

    def update_stream(self, stream: str, config: StreamConfig) -> None:
        """Replace the stream's config; first rescale it to ``config.min_segments`` equal ranges if a
        fixed count differs from the active one, or more segments are asked for than are active.
        ``StreamSealedError`` for a sealed stream."""
        if not isinstance(config, StreamConfig):
            raise InvalidArgumentError(
                f"stream {stream!r}: config must be a StreamConfig, got {config!r:.80}"
            )
        with self._mutating():
            st = self._get_open(stream, "updated")
            n, active = config.min_segments, len(st.active)
            if (config.scaling_kind == "fixed" and active != n) or active < n:
                ranges = [(i / n, (i + 1) / n if i + 1 < n else 1.0) for i in range(n)]
                self._scale(st, list(st.active), ranges)
            if config != st.config:
                rec = {"op": "update", "stream": stream, "config": config.to_record()}
                self._write(rec)
                self._meta.apply(rec)

    # ------------------------------------------------------------------ truncation
    def truncate_stream(self, stream: str, cut: Mapping[str, int]) -> None:
        """Make ``cut`` (segment name -> offset, segments tiling [0, 1)) the stream's head. O(segments).

        Segments wholly before the cut are deleted and those in it truncated at its
        offsets. The cut may not reach before the head (a deleted segment, or an offset
        below a segment's start) nor past a segment's length: ``InvalidArgumentError``
        or ``BadOffsetError`` naming the segment, and nothing changes. ``StreamSealedError``
        for a sealed stream (as Pravega's).
        """
        if not isinstance(cut, Mapping) or not cut:
            raise InvalidArgumentError(
                f"stream {stream!r}: a stream cut must be a non-empty mapping, got {cut!r:.80}"
            )
        with self._mutating():
            st = self._get_open(stream, "truncated")
            segs = self._check_cut(st, cut)
            drop: set[str] = set()
            todo = [p for s in segs for p in st.segments[s.name].predecessors]
            while todo:
                p = todo.pop()
                if p not in drop and not st.segments[p].deleted:
                    drop.add(p)
                    todo.extend(st.segments[p].predecessors)
            rec = {
                "op": "truncate",
                "stream": stream,
                "cut": [[s.name, int(cut[s.name])] for s in segs],
                "drop": sorted(drop),
            }
            self._write(rec)
            self._meta.apply(rec)
            self._finish_truncation(st)

    def _check_cut(self, st: StreamEntry, cut: Mapping[str, int]) -> list[StreamSegment]:
        segs: list[StreamSegment] = []
        for name, offset in cut.items():
            seg = st.segments.get(name) if isinstance(name, str) else None
            if seg is None:
                raise InvalidArgumentError(
                    f"stream {st.name!r}: the cut names {name!r:.300}, not a segment of it"
                )
            if seg.deleted:
                raise InvalidArgumentError(
                    f"stream {st.name!r}: the cut names {name!r}, which lies before the stream's head "
                    "(truncated already)"
                )
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InvalidArgumentError(
                    f"stream {st.name!r}: cut offset {offset!r:.40} of {name!r} is no int >= 0"
                )
            info = self._store.get_info(name)
            if not info.start_offset <= offset <= info.length:
                raise BadOffsetError(
                    f"stream {st.name!r}: cut offset {offset} of {name!r} lies outside its readable range "
                    f"[{info.start_offset}, {info.length}]",
                    expected=info.start_offset if offset < info.start_offset else info.length,
                    actual=offset,
                )
            segs.append(seg.info)
        segs.sort(key=lambda s: s.key_low)
        if (
            segs[0].key_low != 0.0
            or segs[-1].key_high != 1.0
            or any(a.key_high != b.key_low for a, b in itertools.pairwise(segs))
        ):
            raise InvalidArgumentError(
                f"stream {st.name!r}: the cut's segments {[s.name for s in segs]} do not cover the "
                "routing keys [0, 1) once each; a stream cut holds one position for every key"
            )
        return segs

    def _finish_truncation(self, st: StreamEntry) -> None:
        """Make the store match the last cut: delete what lies before, truncate what is in it (idempotent)."""
        self._delete_segments({n for n, seg in st.segments.items() if seg.deleted and self._store.exists(n)})
        for name, offset in st.cut.items():
            if self._store.get_info(name).start_offset < offset:
                self._store.truncate(name, offset)

    # ------------------------------------------------------------------ epochs
    def epoch_segments(self, stream: str, epoch: int) -> tuple[StreamSegment, ...]:
        """The segments active in ``epoch`` of ``stream``, sorted by ``key_low`` (truncated ones included).

        ``InvalidArgumentError`` for an epoch the stream never had. O(segments).
        """
        with self._lock:
            st = self._get(stream)
            if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= st.epoch:
                raise InvalidArgumentError(
                    f"stream {stream!r} has epochs 0 to {st.epoch}; there is no epoch {epoch!r:.40}"
                )
            out = [
                e.info
                for e in st.segments.values()
                if e.info.epoch <= epoch and all(st.segments[s].info.epoch > epoch for s in e.successors)
            ]
            return tuple(sorted(out, key=lambda s: s.key_low))
