"""The container's transactions: creating one, merging it into its parent, aborting it when its lease ends.

A transaction segment belongs to a parent segment and is named after it
(``segment.TRANSACTION_SEPARATOR``). A merge appends its bytes to the parent
atomically at the merge's own timestamp (PDP-26: a merge is one large append); a
transaction not written for ``transaction_lease_ms`` is aborted by
``expire_transactions``, and a later call on it names why it is gone.
"""

from __future__ import annotations

from ..errors import (
    InvalidArgumentError,
    NotATransactionError,
    SegmentNotSealedError,
    SegmentSealedError,
    SegmentTruncatedError,
    WrongParentError,
)
from ..limits import INT64_MAX
from ..results import MergeResult
from .container_table import ContainerTable
from .operations import Delete, MergeTransaction
from .read_index import Wakeup, complete, take_wakeups
from .segment import TRANSACTION_SEPARATOR, Segment
from .validation import quote

__all__ = ["ContainerTransactions"]

_EXPIRED_KEPT = 4096
"""Transactions whose expiry a later call's error names (the most recent ones)."""


class ContainerTransactions(ContainerTable):
    """The transaction operations of ``SegmentContainer``."""

    def create_transaction(self, parent: str) -> str:
        """See ``SegmentClient.create_transaction``: its name is the parent's and a sequence number."""
        with self._lock:
            p = self._writable(parent)
            if p.parent is not None:
                raise NotATransactionError(f"segment {parent!r} is a transaction; transactions cannot nest")
            seq, ts = self._processor.stamp()
            name = f"{parent}{TRANSACTION_SEPARATOR}{seq:016x}"
            self._create_locked(name, parent, seq, ts)
            return name

    def merge_transaction(self, txn: str, parent: str | None = None) -> MergeResult:
        """See ``SegmentClient.merge_transaction``; returns the offset, length and timestamp.

        The transaction's bytes are read before the log record: a failed read changes nothing.
        """
        wakeups: list[Wakeup] = []
        with self._lock:
            t = self.segment(txn)
            if t.parent is None:
                raise NotATransactionError(f"segment {txn!r} is not a transaction segment")
            if parent is not None and parent != t.parent:
                raise WrongParentError(f"transaction {txn!r} belongs to {t.parent!r}, not to {quote(parent)}")
            if not t.sealed:
                raise SegmentNotSealedError(f"transaction {txn!r} must be sealed before it is merged")
            if t.start_offset != 0:
                raise SegmentTruncatedError(
                    f"transaction {txn!r} was truncated (start offset {t.start_offset}); it cannot be merged"
                )
            p = self.segment(t.parent)
            if p.sealed:
                raise SegmentSealedError(
                    f"segment {t.parent!r} is sealed; transaction {txn!r} cannot be merged into it"
                )
            n = t.length
            if p.length + n > INT64_MAX:
                raise InvalidArgumentError(f"segment {t.parent!r} would exceed 2^63 bytes")
            data = t.data.read(0, n) if n else b""  # before the log: a failed read changes nothing
            seq, ts = self._processor.stamp()
            offset = p.length
            self._log(MergeTransaction(seq, ts, txn, t.parent, offset, n))
            self._apply_merge(t, p, ts, wakeups, data)
            if p.futures:
                wakeups.extend(take_wakeups(p))
        complete(wakeups)
        return MergeResult(offset, n, ts)

    def _apply_merge(
        self, t: Segment, p: Segment, ts: int, wakeups: list[Wakeup], data: bytes | None = None
    ) -> None:
        n = t.length
        if n:
            p.data.append(t.data.read(0, n) if data is None else data)
            p.length += n
            p.windex.record_write(p.length, ts)
        else:
            p.windex.record_time(ts)
        p.last_write_time = ts
        p.last_used = ts
        self._remove(t, wakeups, f"transaction {t.name!r} was merged into {p.name!r}")

    def _transactions_of(self, parent: str) -> list[Segment]:
        prefix = parent + TRANSACTION_SEPARATOR
        names = [n for n in self._segments if n.startswith(prefix)]
        if self._evictor is not None:
            names += [n for n in self._evictor.cold_names() if n.startswith(prefix)]
        return [self.segment(n, use=False) for n in names]

    def expire_transactions(self) -> list[str]:
        """Abort open transactions unwritten for ``transaction_lease_ms``; return their names.

        A transaction's lease runs from its last temporal operation (creation, append,
        attribute update: ``ping`` is an empty one), on the ingestion clock. Sealed
        transactions are being committed and stay. Waiting reads of an aborted one fail.
        O(segments).
        """
        wakeups: list[Wakeup] = []
        with self._lock:
            self.check_open()
            if self._processor.read_only is not None:
                return []  # an abort cannot be logged: the transactions wait for a writable restart
            threshold = self._processor.now() - self._config.transaction_lease_ms
            due = [
                seg
                for seg in self._segments.values()
                if seg.parent is not None and not seg.sealed and seg.last_write_time <= threshold
            ]
            if due:
                seq, ts = self._processor.stamp_many(len(due))
                lease = self._config.transaction_lease_ms
                for seg in due:
                    self._log(Delete(seq, ts, seg.name))
                    why = (
                        f"transaction {seg.name!r} expired: no write for transaction_lease_ms ({lease} ms), "
                        "so the store aborted it"
                    )
                    self._remove(seg, wakeups, why)
                    self._expired[seg.name] = why
                    seq += 1
                while len(self._expired) > _EXPIRED_KEPT:  # the oldest first (dicts keep insertion order)
                    del self._expired[next(iter(self._expired))]
        complete(wakeups)
        return [seg.name for seg in due]
