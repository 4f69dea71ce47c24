"""Pravega's transactions over ingestwm's: ids, leases, states, durable in ``_system/_pravega_txns``.

A Pravega transaction (``createTransaction``) is one of ingestwm's controller
transactions (``StreamController.begin_transaction``: one store transaction segment
per active segment) plus what Pravega's controller keeps of it:

- its id, a 128-bit number whose top 32 bits are the stream's epoch at creation and
  whose low 96 bits count the transactions this store gave out (Pravega's
  ``epoch << 96 | counter``);
- the names the client writes to, as Pravega's ``NameUtils`` makes them:
  ``scope/stream/<number>.#epoch.<txn epoch>#transaction.<16 hex high><16 hex low>``,
  one per active segment (the segment's number with the *transaction's* epoch, as
  Pravega's controller generalises it), mapped onto the store's own transaction
  segments (``store_segment``);
- its lease, judged on the ingestion clock (``store.clock``): open transactions whose
  lease ran out, or which outlived their longest execution time (1000 leases, at most
  a day, Pravega's bound), are aborted by ``expire`` (the endpoints call it every
  ``SWEEP_S`` seconds, as Pravega's timeout service fires) and before any call that
  judges the transaction, so an answer never shows an expired transaction as open;
- its state: ``OPEN`` -> ``COMMITTING`` -> ``COMMITTED``, or ``OPEN`` -> ``ABORTING``
  -> ``ABORTED``; ``UNKNOWN`` for an id this store never gave out or has forgotten
  (the latest ``COMPLETED_KEPT`` completed transactions are remembered).

A commit merges every transaction segment into its parent by ingestwm's merge (a
temporal operation stamped by the ingestion clock), with the controller's commit: a
scale in between is handled as Pravega does (the controller rolls the transaction
over). Every change of state is a record (``u32`` length + JSON, the controller's
format) appended to ``_system/_pravega_txns`` before the change takes effect in the
store, so after a crash ``open`` finishes what was under way (a ``COMMITTING``
transaction is committed, an ``ABORTING`` one aborted) and open transactions stay
open, their leases re-armed from the restart with the longest lease, as Pravega's
controller does for the transactions of a controller that failed. Pings are not
records. A refused commit or abort changes nothing and names the transaction.

The log compacts itself (``controller.log_snapshots``): once the bytes written since its
last snapshot exceed twice that snapshot's (and ``COMPACT_MIN_BYTES``), a snapshot of every
remembered transaction is appended (``snapshot`` records of at most ``SNAPSHOT_PART_BYTES``
each, under the registry's lock) and the log is truncated where it begins, so the log and a
restart's replay stay proportional to what is remembered, not to every transaction ever
made. A snapshot a crash cut short is ignored by the replay.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..checks import checked
from ..controller.controller import controller_of
from ..controller.log_snapshots import SNAPSHOT_OP, LogGrowth, SnapshotParts, sized, write_snapshot
from ..controller.model import encode_record, parse_records
from ..errors import (
    BadOffsetError,
    DataCorruptionError,
    InvalidArgumentError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStoreError,
    StreamNotFoundError,
)
from ..store import per_store, read_to_tail
from ..stream_metadata import TransactionInfo
from .errors import PravegaEndpointError

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = [
    "TXNS_SEGMENT",
    "MIN_LEASE_MS",
    "MAX_LEASE_MS",
    "MAX_EXECUTION_MS",
    "COMPLETED_KEPT",
    "COMPACT_MIN_BYTES",
    "SNAPSHOT_PART_BYTES",
    "SWEEP_S",
    "OPEN",
    "COMMITTING",
    "COMMITTED",
    "ABORTING",
    "ABORTED",
    "UNKNOWN",
    "TransactionStateError",
    "TransactionNotFoundError",
    "PravegaTxn",
    "PravegaTransactions",
    "transactions_of",
    "txn_segment_name",
]

_log = logging.getLogger(__name__)

TXNS_SEGMENT = "_system/_pravega_txns"
MIN_LEASE_MS = 10_000
"""Shortest lease Pravega's controller accepts (``transaction.lease.count.min``)."""
MAX_LEASE_MS = 600_000
"""Longest lease (``transaction.lease.count.max``); also the lease open transactions get after a restart."""
MAX_EXECUTION_MS = 86_400_000
"""Longest a transaction may stay open: ``min(1000 leases, a day)`` (Pravega's bound)."""
COMPLETED_KEPT = 65_536
"""Completed transactions whose state ``state`` still answers (the latest)."""
COMPACT_MIN_BYTES = 1 << 20
"""The fewest bytes written since the last snapshot that make the log compact itself."""
SNAPSHOT_PART_BYTES = 1 << 20
"""The most JSON bytes of one ``snapshot`` record (a snapshot of many transactions is several)."""
SWEEP_S = 0.25
"""How often (wall seconds) the endpoints run ``expire``: the timeout service's tick."""
OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED, UNKNOWN = (
    "OPEN",
    "COMMITTING",
    "COMMITTED",
    "ABORTING",
    "ABORTED",
    "UNKNOWN",
)
_STATES = (OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED)
_NEXT = {OPEN: (COMMITTING, ABORTING), COMMITTING: (COMMITTED, OPEN), ABORTING: (ABORTED,)}
_U64 = (1 << 64) - 1
_U96 = (1 << 96) - 1
_SEPARATOR = "#transaction."


class TransactionStateError(PravegaEndpointError, InvalidArgumentError):
    """A commit or abort the transaction's state does not allow (names the transaction and its state)."""


class TransactionNotFoundError(PravegaEndpointError, KeyError):
    """A transaction id this store never gave out for that stream, or has forgotten."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def txn_segment_name(stream: str, number: int, epoch: int, txn_id: int) -> str:
    """Pravega's name of transaction ``txn_id``'s segment for segment ``number`` (``NameUtils``)."""
    return f"{stream}/{number}.#epoch.{epoch}{_SEPARATOR}{txn_id >> 64:016x}{txn_id & _U64:016x}"


def _hex(txn_id: int) -> str:
    return f"{txn_id:032x}"


@dataclass(slots=True)
class PravegaTxn:
    """One Pravega transaction: its stream, epoch, segments (Pravega name -> store name), lease, state."""

    txn_id: int
    stream: str
    epoch: int
    segments: dict[str, str]
    lease_ms: int
    expiry: int
    max_expiry: int
    state: str = OPEN
    why: str = ""

    def describe(self) -> str:
        return f"transaction {_hex(self.txn_id)} of stream {self.stream!r}"


class PravegaTransactions:
    """Every Pravega transaction of one store (``transactions_of(store)``). Thread-safe.

    Opening replays ``_system/_pravega_txns`` (O(records)) and finishes what a crash
    interrupted. Calls are O(segments of the transaction); ``expire`` is O(open ones).
    """

    def __init__(self, store: SegmentStore) -> None:
        self._store = store
        self._ctl = controller_of(store)
        self._lock = threading.RLock()
        self._open: dict[int, PravegaTxn] = {}  # OPEN, COMMITTING, ABORTING
        self._done: dict[int, PravegaTxn] = {}  # COMMITTED, ABORTED: the latest COMPLETED_KEPT
        self._by_name: dict[str, PravegaTxn] = {}  # Pravega segment name -> its open transaction
        self._counter = 0
        self._log_length = 0
        self._growth = LogGrowth()
        with self._lock:
            self._replay()

    # ------------------------------------------------------------------ the calls
    def create(self, stream: str, lease_ms: int) -> tuple[PravegaTxn, TransactionInfo]:
        """Begin a transaction on ``stream`` (``createTransaction``): its segments are made in the store."""
        _check_lease(stream, lease_ms)
        with self._lock:
            info = self._ctl.begin_transaction(stream)  # one store transaction segment per active segment
            try:
                self._counter += 1
                txn_id = (info.epoch << 96) | (self._counter & _U96)
                segments = {
                    txn_segment_name(stream, t.parent.number, info.epoch, txn_id): t.name
                    for t in info.segments
                }
                now = self._now()
                txn = PravegaTxn(
                    txn_id,
                    stream,
                    info.epoch,
                    segments,
                    lease_ms,
                    now + lease_ms,
                    now + min(1000 * lease_ms, MAX_EXECUTION_MS),
                )
                self._write(
                    {
                        "op": "txn",
                        "stream": stream,
                        "id": _hex(txn_id),
                        "epoch": info.epoch,
                        "lease": lease_ms,
                        "max": txn.max_expiry,
                        "segs": [[p, s] for p, s in segments.items()],
                    }
                )
            except BaseException:
                self._counter -= 1
                self._ctl.abort_transaction(stream, list(info.segment_names))
                raise
            self._open[txn_id] = txn
            self._by_name.update(dict.fromkeys(segments, txn))
            self._maybe_compact()
            return txn, info

    def ping(self, stream: str, txn_id: int, lease_ms: int) -> str:
        """Extend an open transaction's lease (``pingTransaction``): Pravega's ``PingTxnStatus`` name."""
        with self._lock:
            txn = self._judge(stream, txn_id)
            if txn is None:
                return UNKNOWN
            if txn.state != OPEN:
                return COMMITTED if txn.state in (COMMITTED, COMMITTING) else ABORTED
            if lease_ms > MAX_LEASE_MS:
                return "LEASE_TOO_LARGE"
            now = self._now()
            if now + lease_ms > txn.max_expiry:
                return "MAX_EXECUTION_TIME_EXCEEDED"
            for name in txn.segments.values():  # keeps the store's own lease on them from ending too
                self._store.update_attributes(name, [])
            txn.lease_ms, txn.expiry = lease_ms, now + lease_ms
            return "OK"

    def state(self, stream: str, txn_id: int) -> str:
        """``checkTransactionState``: the state's name, ``UNKNOWN`` for an id not known here."""
        with self._lock:
            txn = self._judge(stream, txn_id)
            return UNKNOWN if txn is None else txn.state

    def commit(self, stream: str, txn_id: int) -> None:
        """Commit (``commitTransaction``): every event appears at once, merged at one ingestion time.

        Committing a committed transaction again is a success (Pravega's answer too);
        ``TransactionStateError`` for an aborted one, ``TransactionNotFoundError`` for an
        unknown id; any refusal of the merge leaves the transaction open and the store as it was.
        """
        with self._lock:
            txn = self._known(stream, txn_id)
            if txn.state in (COMMITTED, COMMITTING):
                return
            if txn.state != OPEN:
                raise TransactionStateError(
                    f"{txn.describe()} cannot be committed: it is {txn.state}{txn.why}"
                )
            self._ctl.get_stream(stream)
            self._set(txn, COMMITTING)
            try:
                self._ctl.commit_transaction(stream, list(txn.segments.values()))
            except SegmentStoreError as e:
                self._set(txn, OPEN)
                raise TransactionStateError(f"{txn.describe()} was not committed: {e}") from e
            self._set(txn, COMMITTED)

    def abort(self, stream: str, txn_id: int, why: str = "") -> None:
        """Abort (``abortTransaction``): nothing of it ever appears. Again on an aborted one: a success."""
        with self._lock:
            txn = self._known(stream, txn_id)
            if txn.state in (ABORTED, ABORTING):
                return
            if txn.state != OPEN:
                raise TransactionStateError(f"{txn.describe()} cannot be aborted: it is {txn.state}")
            self._abort(txn, why)

    def abort_open(self, stream: str, why: str) -> list[int]:
        """Abort every open transaction of ``stream`` (and finish any left aborting), as Pravega does
        before it seals a stream; their ids. O(open transactions)."""
        with self._lock:
            mine = [t for t in self._open.values() if t.stream == stream and t.state in (OPEN, ABORTING)]
            for t in mine:
                self._abort(t, why)
            return [t.txn_id for t in mine]

    def store_segment(self, name: str) -> str:
        """The store's segment behind a Pravega transaction segment name; ``SegmentNotFoundError`` saying
        why if that transaction is not open (committed, aborted, expired, unknown). O(1)."""
        with self._lock:
            txn = self._by_name.get(name)
            if txn is not None and txn.state == OPEN and self._expired(txn):
                self._abort(txn, _lease_why(txn))
            if txn is None or txn.state != OPEN:
                why = f" ({txn.describe()} is {txn.state}{txn.why})" if txn is not None else ""
                raise SegmentNotFoundError(f"transaction segment {name!r:.300} is not open{why}")
            return txn.segments[name]

    def completed_segment(self, name: str) -> str | None:
        """The store name a completed (or aborting) transaction's segment ``name`` had; None if ``name`` is
        no segment of such a transaction known here. O(1)."""
        try:
            txn_id = int(name[name.rindex(_SEPARATOR) + len(_SEPARATOR) :], 16)
        except ValueError:
            return None
        with self._lock:
            txn = self._done.get(txn_id) or self._open.get(txn_id)
            if txn is None or txn.state == OPEN or name not in txn.segments:
                return None
            return txn.segments[name]

    def expire(self) -> list[int]:
        """Abort every open transaction whose lease or longest execution time ran out on the ingestion
        clock (Pravega's timeout service); their ids. O(open transactions)."""
        with self._lock:
            due = [t for t in self._open.values() if t.state == OPEN and self._expired(t)]
            for t in due:
                try:
                    self._abort(t, _lease_why(t))
                except SegmentStoreError as e:  # the store refuses writes now: the next sweep tries again
                    _log.warning("pravega transactions: %s could not be aborted: %s", t.describe(), e)
            return [t.txn_id for t in due if t.state == ABORTED]

    def open_ids(self, stream: str | None = None) -> list[int]:
        """The ids of the transactions not completed (of ``stream``, or all)."""
        with self._lock:
            return [i for i, t in self._open.items() if stream is None or t.stream == stream]

    # ------------------------------------------------------------------ internals
    def _now(self) -> int:
        return max(self._store.clock.now(), self._store.last_timestamp)

    def _expired(self, txn: PravegaTxn) -> bool:
        now = self._now()
        return now >= txn.expiry or now >= txn.max_expiry

    def _known(self, stream: str, txn_id: int) -> PravegaTxn:
        txn = self._judge(stream, txn_id)
        if txn is None:
            self._ctl.get_stream(stream)
            raise TransactionNotFoundError(f"stream {stream!r} has no transaction {_hex(txn_id)}")
        return txn

    def _judge(self, stream: str, txn_id: int) -> PravegaTxn | None:
        """The transaction, an expired open one aborted first; None if not known for ``stream``."""
        txn = self._open.get(txn_id) or self._done.get(txn_id)
        if txn is None or txn.stream != stream:
            return None
        if txn.state == OPEN and self._expired(txn):
            self._abort(txn, _lease_why(txn))
        return txn

    def _abort(self, txn: PravegaTxn, why: str) -> None:
        if txn.state != ABORTING:
            self._set(txn, ABORTING, why)
        with contextlib.suppress(StreamNotFoundError):  # a deleted stream's segments went with it
            self._ctl.abort_transaction(txn.stream, list(txn.segments.values()))
        self._set(txn, ABORTED)

    def _set(self, txn: PravegaTxn, state: str, why: str = "") -> None:
        """Log the transition, then make it (a failed log write changes nothing)."""
        assert state in _NEXT.get(txn.state, ()), (txn.state, state)
        rec: dict[str, Any] = {
            "op": "txn_state",
            "stream": txn.stream,
            "id": _hex(txn.txn_id),
            "state": state,
        }
        if why:
            rec["why"] = why
        self._write(rec)
        self._apply_state(txn, state, why)
        self._maybe_compact()

    def _apply_state(self, txn: PravegaTxn, state: str, why: str) -> None:
        txn.state = state
        if why:
            txn.why = f" ({why})"
        if state in (COMMITTED, ABORTED):
            self._open.pop(txn.txn_id, None)
            for name in txn.segments:
                self._by_name.pop(name, None)
            self._done[txn.txn_id] = txn
            while len(self._done) > COMPLETED_KEPT:
                del self._done[next(iter(self._done))]

    def _write(self, rec: dict[str, Any]) -> None:
        try:
            r = self._store.append(TXNS_SEGMENT, encode_record(rec), self._log_length)
        except BadOffsetError:
            raise SegmentStoreError(
                f"{TXNS_SEGMENT!r} was changed by another Pravega transaction registry of this store; "
                "this one is stale (share one via transactions_of(store))"
            ) from None
        self._log_length = r.offset + r.length
        self._growth.wrote(r.length)

    # ------------------------------------------------------------------ compaction
    def _maybe_compact(self) -> None:
        """Compact when due (``log_snapshots``): amortised O(1) per record."""
        if self._growth.due(COMPACT_MIN_BYTES):
            self.compact()

    def compact(self) -> int:
        """Append a snapshot of every remembered transaction and truncate the log where it begins; the
        bytes the log dropped. A refused write leaves the log as it was (the next record tries again)."""
        with self._lock:
            items = [{"counter": self._counter}] + [
                _txn_item(t) for t in [*self._done.values(), *self._open.values()]
            ]
            length = lambda: self._log_length  # noqa: E731
            return write_snapshot(
                self._store, TXNS_SEGMENT, items, SNAPSHOT_PART_BYTES, self._write, length, self._growth
            )

    def _replay(self) -> None:
        store = self._store
        with contextlib.suppress(SegmentExistsError):
            store.create_segment(TXNS_SEGMENT)
        data, self._log_length = read_to_tail(store, TXNS_SEGMENT)
        snap = SnapshotParts()
        for pos, size, rec in sized(parse_records(data, TXNS_SEGMENT), len(data)):
            try:
                if rec["op"] == SNAPSHOT_OP:
                    items = snap.add(rec, size)
                    if items is not None:
                        self._apply_snapshot(items)
                        self._growth.snapshotted(snap.bytes)
                    continue
                snap.drop()
                self._growth.wrote(size)
                self._apply_record(rec)
            except (KeyError, TypeError, ValueError, AssertionError) as e:
                raise DataCorruptionError(f"{TXNS_SEGMENT!r}: bad record at offset {pos}: {e!r}") from None
        self._recover()

    def _apply_snapshot(self, items: list[dict[str, Any]]) -> None:
        """The registry as a complete snapshot holds it (what came before is superseded)."""
        self._open.clear()
        self._done.clear()
        self._by_name.clear()
        self._counter = int(items[0]["counter"])
        for t in items[1:]:
            txn_id = int(t["id"], 16)
            segments = {str(p): str(s) for p, s in t["segs"]}
            state = str(t["state"])
            if state not in _STATES:
                raise ValueError(f"transaction {t['id']} in unknown state {state!r}")
            txn = PravegaTxn(
                txn_id, str(t["stream"]), int(t["epoch"]), segments, int(t["lease"]), 0, int(t["max"]),
                state, str(t.get("why", "")),
            )  # fmt: skip
            if state in (COMMITTED, ABORTED):
                self._done[txn_id] = txn
            else:
                self._open[txn_id] = txn
                self._by_name.update(dict.fromkeys(segments, txn))

    def _apply_record(self, rec: dict[str, Any]) -> None:
        txn_id = int(rec["id"], 16)
        if rec["op"] == "txn":
            segments = {str(p): str(s) for p, s in rec["segs"]}
            lease = int(rec["lease"])
            txn = PravegaTxn(txn_id, rec["stream"], int(rec["epoch"]), segments, lease, 0, int(rec["max"]))
            self._open[txn_id] = txn
            self._by_name.update(dict.fromkeys(segments, txn))
            self._counter = max(self._counter, txn_id & _U96)
        elif rec["op"] == "txn_state":
            txn = self._open[txn_id]
            if rec["state"] not in _NEXT.get(txn.state, ()):
                raise ValueError(f"transaction {rec['id']} cannot go from {txn.state} to {rec['state']}")
            self._apply_state(txn, rec["state"], rec.get("why", ""))
        else:
            raise ValueError(f"unknown op {rec['op']!r}")

    def _recover(self) -> None:
        """Finish commits and aborts a crash interrupted; re-arm open leases with ``MAX_LEASE_MS``."""
        now = self._now()
        for txn in list(self._open.values()):
            if txn.state == OPEN:
                txn.expiry = now + MAX_LEASE_MS
                txn.max_expiry = max(txn.max_expiry, txn.expiry)
            elif txn.state == ABORTING:
                self._abort(txn, "")
            elif txn.state == COMMITTING:
                try:
                    self._ctl.commit_transaction(txn.stream, list(txn.segments.values()))
                except SegmentStoreError as e:  # did not happen: it stays open
                    _log.warning("pravega transactions: %s could not be committed: %s", txn.describe(), e)
                    self._set(txn, OPEN)
                    txn.expiry = now + MAX_LEASE_MS
                else:
                    self._set(txn, COMMITTED)

    @checked
    def _check(self) -> None:
        """Assert states, indexes, leases and that every open transaction's store segments exist."""
        with self._lock:
            assert not set(self._open) & set(self._done), "a transaction both open and done"
            assert len(self._done) <= COMPLETED_KEPT
            for i, t in self._open.items():
                assert t.txn_id == i and t.state in (OPEN, COMMITTING, ABORTING), (i, t.state)
                assert t.txn_id >> 96 == t.epoch and (t.txn_id & _U96) <= self._counter
                assert t.expiry <= t.max_expiry or t.state != OPEN, "lease beyond the execution bound"
                for p, s in t.segments.items():
                    assert self._by_name.get(p) is t, f"{p} not indexed"
                    assert p.startswith(t.stream + "/") and p.endswith(f"{_SEPARATOR}{_hex(t.txn_id)}"), p
                    if t.state == OPEN:
                        assert self._store.exists(s), f"{p}: its store segment {s} is gone yet it is open"
            for i, t in self._done.items():
                assert t.txn_id == i and t.state in (COMMITTED, ABORTED), (i, t.state)
                assert not any(self._by_name.get(p) is t for p in t.segments), "a done transaction indexed"
            assert len(self._by_name) == sum(len(t.segments) for t in self._open.values())
            assert self._log_length == self._store.get_info(TXNS_SEGMENT).length


def _txn_item(t: PravegaTxn) -> dict[str, Any]:
    """A transaction as a snapshot holds it (its state and why with it)."""
    d: dict[str, Any] = {
        "id": _hex(t.txn_id),
        "stream": t.stream,
        "epoch": t.epoch,
        "segs": [[p, s] for p, s in t.segments.items()],
        "lease": t.lease_ms,
        "max": t.max_expiry,
        "state": t.state,
    }
    if t.why:
        d["why"] = t.why
    return d


def _check_lease(stream: str, lease_ms: int) -> None:
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
        raise InvalidArgumentError(
            f"stream {stream!r}: a transaction lease must be an int of ms, got {lease_ms!r}"
        )
    if not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
        raise InvalidArgumentError(
            f"stream {stream!r}: a transaction lease of {lease_ms} ms is outside [{MIN_LEASE_MS}, "
            f"{MAX_LEASE_MS}] ms (Pravega's controller's bounds)"
        )


def _lease_why(txn: PravegaTxn) -> str:
    return (
        f"its lease of {txn.lease_ms} ms ran out at {txn.expiry} ms on the ingestion clock"
        if txn.expiry <= txn.max_expiry
        else f"it outlived its longest execution time, until {txn.max_expiry} ms"
    )


transactions_of = per_store(PravegaTransactions)
"""The store's one Pravega transaction registry, opened (replayed) on first use. O(1) after."""
