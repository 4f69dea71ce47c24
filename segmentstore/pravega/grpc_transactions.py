"""The controller's transaction RPCs (``createTransaction`` ... ``checkTransactionState``).

Answered as Pravega's controller answers them, with the status values of the 0.3.7
client's proto, except where Pravega's answer would make that client retry for a
minute (its ``FAILURE`` of a commit of an aborted transaction, an ``INTERNAL`` error):
there the call is a gRPC ``INVALID_ARGUMENT`` whose message names the transaction and
why (``TransactionStateError``), and the client fails at once and shows it. An id this
store never gave out is ``TRANSACTION_NOT_FOUND`` for a commit or abort and ``UNKNOWN``
for a ping or a state check, as Pravega's. ``ControllerServicer`` inherits these.
"""

from __future__ import annotations

from typing import Any

from ..errors import StreamNotFoundError
from ..stream_metadata import StreamSegment, TransactionInfo
from .transactions import PravegaTransactions, TransactionNotFoundError

__all__ = ["TransactionRpcs", "txn_id_of", "txn_id_message"]

_U64 = (1 << 64) - 1


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def txn_id_message(pb: Any, txn_id: int) -> Any:
    """The proto's ``TxnId{highBits, lowBits}`` (two's-complement ``int64`` halves) of a 128-bit id."""
    return pb.TxnId(highBits=_signed(txn_id >> 64), lowBits=_signed(txn_id & _U64))


def txn_id_of(msg: Any) -> int:
    """The 128-bit id of a ``TxnId`` message."""
    return (int(msg.highBits) & _U64) << 64 | (int(msg.lowBits) & _U64)


class TransactionRpcs:
    """The five transaction RPCs; ``ControllerServicer`` wraps each with its error handling."""

    pb: Any
    streams: Any
    txns: PravegaTransactions

    def _token(self, stream: str) -> str:
        raise NotImplementedError

    def _name(self, info: Any) -> str:
        raise NotImplementedError

    def _range(self, seg: StreamSegment) -> Any:
        raise NotImplementedError

    def _txn_stream(self, request: Any) -> str:
        name = self._name(request.streamInfo)
        self.streams.stream(name)  # a Pravega-framed stream
        return name

    def _txn_ranges(self, info: TransactionInfo) -> list[Any]:
        """The transaction's segments as Pravega hands them out: each number with the transaction's epoch."""
        out = []
        for t in sorted(info.segments, key=lambda t: t.parent.key_low):
            r = self._range(t.parent)
            r.segmentId.segmentId = (info.epoch << 32) | t.parent.number
            out.append(r)
        return out

    def createTransaction(self, request: Any, context: Any) -> Any:
        stream = self._txn_stream(request)
        txn, info = self.txns.create(stream, request.lease)
        return self.pb.CreateTxnResponse(
            txnId=txn_id_message(self.pb, txn.txn_id),
            activeSegments=self._txn_ranges(info),
            delegationToken=self._token(stream),
        )

    def pingTransaction(self, request: Any, context: Any) -> Any:
        st = self.pb.PingTxnStatus
        try:
            stream = self._txn_stream(request)
        except StreamNotFoundError:
            return st(status=st.UNKNOWN)
        status = self.txns.ping(stream, txn_id_of(request.txnId), request.lease)
        return st(status=getattr(st, status))

    def _complete(self, request: Any, commit: bool) -> Any:
        st = self.pb.TxnStatus
        try:
            stream = self._txn_stream(request)
        except StreamNotFoundError:
            return st(status=st.STREAM_NOT_FOUND)
        txn_id = txn_id_of(request.txnId)
        try:
            if commit:
                self.txns.commit(stream, txn_id)
            else:
                self.txns.abort(stream, txn_id)
        except TransactionNotFoundError:
            return st(status=st.TRANSACTION_NOT_FOUND)
        return st(status=st.SUCCESS)

    def commitTransaction(self, request: Any, context: Any) -> Any:
        return self._complete(request, commit=True)

    def abortTransaction(self, request: Any, context: Any) -> Any:
        return self._complete(request, commit=False)

    def checkTransactionState(self, request: Any, context: Any) -> Any:
        st = self.pb.TxnState
        stream = self._txn_stream(request)
        return st(state=getattr(st, self.txns.state(stream, txn_id_of(request.txnId))))
