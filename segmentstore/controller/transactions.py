"""The controller's transactions: one transaction segment per active segment, committed or aborted together.

``begin_transaction`` creates one transaction segment per active segment.
``commit_transaction`` seals each and merges it into its parent. If the stream scaled
since the transaction began (a parent is sealed), the commit is *rolled* as Pravega
does: the active segments are sealed and succeeded by duplicates of the transaction's
epoch (same key ranges) that receive the transaction's data, and those are then
sealed and succeeded by duplicates of the previously active ranges. Readers thus see
the transaction's events after every event written before the commit, in
per-routing-key order, and the stream keeps its key-range layout. A commit on a
sealed stream raises ``StreamSealedError`` (abort the transaction instead).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

from ..errors import InvalidArgumentError, NotATransactionError, SegmentSealedError, SegmentTruncatedError
from ..limits import MAX_STREAM_SEGMENTS, check_size
from ..stream_metadata import TransactionInfo, TransactionSegment, stream_segment_name
from .model import StreamEntry
from .scaling import StreamScaling, ignore_missing

__all__ = ["StreamTransactions", "COMMITS_REMEMBERED"]

COMMITS_REMEMBERED = 65_536
"""Transaction segments whose commit a resent ``commit_transaction`` is recognised by (the latest)."""

_ROLL_WRITER_ID = -(2**62)
"""Writer id of the transaction-data copies of a rolled commit (dedupes a copy redone after a crash)."""


class StreamTransactions(StreamScaling):
    """The transaction operations of ``StreamController``."""

    _committed: RecentNames

    def begin_transaction(self, stream: str) -> TransactionInfo:
        """See ``StreamClient.begin_transaction``."""
        with self._lock:
            st = self._get_open(stream, "given a transaction")
            made: list[TransactionSegment] = []
            try:
                for s in st.active:
                    made.append(TransactionSegment(s, self._store.create_transaction(s.name)))
            except BaseException:
                for t in made:
                    ignore_missing(self._store.delete, t.name)
                raise
            return TransactionInfo(st.name, st.epoch, tuple(made))

    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """See ``StreamClient.commit_transaction``; a rolled commit is ``_roll`` (module docstring)."""
        with self._mutating():
            names = _names(stream, txn_segments)
            if names and self._committed.holds(names):
                self._get(stream)
                return
            st = self._get_open(stream, "committed to")
            txns = self._check_txns(st, txn_segments)
            parents = [st.segments[p].info for _, p, _ in txns]
            covered = sorted((p.key_low, p.key_high) for p in parents)
            if (
                covered[0][0] != 0.0
                or covered[-1][1] != 1.0
                or any(a[1] != b[0] for a, b in itertools.pairwise(covered))
            ):
                raise InvalidArgumentError(
                    f"stream {stream!r}: the transaction segments' parents {sorted(p.name for p in parents)} "
                    "do not tile [0, 1); pass every segment of the transaction"
                )
            if all(not st.segments[p].sealed for _, p, _ in txns):
                for _, p, _ in txns:
                    if self._store.get_info(p).sealed:
                        raise SegmentSealedError(
                            f"segment {p!r} of stream {stream!r} was sealed outside the controller; "
                            "the transaction cannot be merged into it"
                        )
                self._write({"op": "commit", "stream": stream, "txns": [t for t, _, _ in txns]})
                self._committed.add(t for t, _, _ in txns)
                for t, p, _ in txns:
                    self._merge(t, p)
            else:
                self._roll(st, txns)

    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """See ``StreamClient.abort_transaction``."""
        with self._lock:
            st = self._get(stream)
            live = [n for n in _names(stream, txn_segments) if self._store.exists(n)]
            self._check_txns(st, live, allow_empty=True)
            for n in live:
                ignore_missing(self._store.delete, n)

    # ------------------------------------------------------------------ internals
    def _check_txns(
        self, st: StreamEntry, names: Sequence[str], allow_empty: bool = False
    ) -> list[tuple[str, str, int]]:
        """Validate transaction segments of ``st``: ``[(txn, parent, length)]``, parents distinct."""
        names = _names(st.name, names)
        if not names and not allow_empty:
            raise InvalidArgumentError(f"stream {st.name!r}: no transaction segments given")
        out: list[tuple[str, str, int]] = []
        for n in names:
            info = self._store.get_info(n)
            if info.parent is None:
                raise NotATransactionError(f"segment {n!r} is not a transaction segment")
            if info.parent not in st.segments:
                raise InvalidArgumentError(
                    f"transaction {n!r} belongs to segment {info.parent!r}, not to stream {st.name!r}"
                )
            if info.start_offset != 0:
                raise SegmentTruncatedError(f"transaction {n!r} was truncated; it cannot be committed")
            out.append((n, info.parent, info.length))
        if len({p for _, p, _ in out}) != len(out):
            raise InvalidArgumentError(
                f"stream {st.name!r}: two transaction segments share a parent: {names}"
            )
        return out

    def _roll(self, st: StreamEntry, txns: list[tuple[str, str, int]]) -> None:
        """Commit a transaction of an older epoch: active -> duplicates of its epoch -> active ranges."""
        with_data = [(t, p) for t, p, n in txns if n > 0]
        if not with_data:  # nothing to commit: the transaction was empty
            self._committed.add(t for t, _, _ in txns)
            for t, _, _ in txns:
                ignore_missing(self._store.delete, t)
            return
        parents = sorted((st.segments[p].info for _, p, _ in txns), key=lambda s: s.key_low)
        restore = [[s.key_low, s.key_high] for s in st.active]
        new_numbers = {p.name: st.next_number + i for i, p in enumerate(parents)}
        epoch = st.epoch + 1
        mapping = [[t, stream_segment_name(st.name, new_numbers[p], epoch)] for t, p in with_data]
        self._scale(
            st,
            list(st.active),
            [(p.key_low, p.key_high) for p in parents],
            {"op": "roll", "txns": mapping, "restore": restore, "drop": [t for t, _, _ in txns]},
        )
        self._committed.add(t for t, _, _ in txns)
        self._finish_roll(st, mapping, [t for t, _, _ in txns], restore, epoch)

    def _finish_roll(
        self,
        st: StreamEntry,
        mapping: list[list[str]],
        drop: list[str],
        restore: list[list[float]] | None,
        epoch: int,
    ) -> None:
        """Copy each transaction's data into its duplicate, drop the transactions, restore the layout."""
        for txn, target in mapping:
            if self._store.exists(txn) and not self._store.get_info(target).sealed:
                self._copy(txn, target)
        for t in drop:
            ignore_missing(self._store.delete, t)
        current = [[s.key_low, s.key_high] for s in st.active]
        if restore is not None and not st.sealed and st.epoch == epoch and current != restore:
            self._scale(st, list(st.active), [(lo, hi) for lo, hi in restore])

    def _copy(self, txn: str, target: str) -> None:
        """Append ``txn``'s bytes to ``target`` in chunks deduplicated by chunk number. O(bytes)."""
        if not self._store.get_info(txn).sealed:
            self._store.seal(txn)
        chunk = min(self._store.config.max_append_bytes, 1 << 20)
        offset, number = 0, 0
        while True:
            r = self._store.read(txn, offset, chunk)
            if r.data:
                number += 1
                self._store.append(target, r.data, writer_id=_ROLL_WRITER_ID, event_number=number)
                offset += len(r.data)
            if r.at_tail:
                return

    def _merge(self, txn: str, parent: str) -> None:
        if not self._store.exists(txn):
            return
        if not self._store.get_info(txn).sealed:
            self._store.seal(txn)
        self._store.merge_transaction(txn, parent)


def _names(stream: str, names: Sequence[str]) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidArgumentError(f"stream {stream!r}: transaction segments must be a sequence of names")
    check_size(
        f"stream {stream!r}: the list of transaction segments",
        len(names),
        MAX_STREAM_SEGMENTS,
        "MAX_STREAM_SEGMENTS",
        "items",
    )
    out = list(names)
    for n in out:
        if not isinstance(n, str):
            raise InvalidArgumentError(f"stream {stream!r}: transaction segment name {n!r:.80} is not a str")
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"stream {stream!r}: a transaction segment is named twice: {out}")
    return out


class RecentNames:
    """The last ``cap`` names added, oldest dropped first. O(1) per name; memory O(cap)."""

    __slots__ = ("_cap", "_names")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._names: dict[str, None] = {}

    def add(self, names: Iterable[str]) -> None:
        for n in names:
            self._names.pop(n, None)
            self._names[n] = None
        while len(self._names) > self._cap:
            del self._names[next(iter(self._names))]

    def holds(self, names: Iterable[str]) -> bool:
        return all(n in self._names for n in names)

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        """The names, oldest first (adding them in this order to an empty one gives the same)."""
        return iter(self._names)
