"""Pravega's controller over gRPC (``ControllerService``), answered from ingestwm's ``StreamController``.

Every RPC the 0.3.7 client calls is answered as Pravega's controller answers it (status
codes of the response messages; ``NOT_FOUND`` for a stream or scope that does not
exist), translated by ``translate``. Where Pravega's answer would make the 0.3.7 client
misread it (a status value it does not know decodes as ``SUCCESS``) or retry for a
minute (``FAILURE``, ``INTERNAL``), a bad request is a gRPC ``INVALID_ARGUMENT`` whose
message names what was wrong: the client fails at once and shows it. That covers a
bad configuration, a stream cut that is not one, updating or truncating a sealed
stream, and asking for the segments of an ingestwm-framed stream.

Transactions are ``grpc_transactions``' (over ``transactions``, the store's registry).
``ControllerEndpoint`` runs the servicer on a gRPC server (a thread pool) with the
credential check of ``auth`` when the server has a token.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    InvalidScaleError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    SegmentStoreError,
    StoreClosedError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from ..stream_metadata import FRAMING_PRAVEGA, StreamSegment, check_stream_name
from .auth import DelegationTokens, check_authorization
from .errors import AuthTokenError, FramingError
from .grpc_proto import load
from .grpc_transactions import TransactionRpcs
from .translate import PravegaStreams, page, segment_id, segment_name

__all__ = ["ControllerServicer", "ControllerEndpoint"]

_log = logging.getLogger(__name__)
_SCALING = ("fixed", "by_rate_kbytes", "by_rate_events")  # by the proto's ScalingPolicyType value
_RETENTION = ("none", "time", "size")  # by RetentionPolicyType: UNKNOWN (no retention), TIME, SIZE
_Node = Callable[[], tuple[str, int]]


def _code(e: BaseException) -> Any:
    if isinstance(e, AuthTokenError):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(e, (StreamNotFoundError, ScopeNotFoundError, SegmentNotFoundError)):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(
        e, (InvalidArgumentError, FramingError, StreamSealedError, InvalidScaleError, BadOffsetError)
    ):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(e, StoreClosedError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


def _rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run an RPC body; an error becomes a gRPC status with its message (never a crashed worker)."""

    def call(self: ControllerServicer, request: Any, context: Any) -> Any:
        try:
            return fn(self, request, context)
        except SegmentStoreError as e:
            _log.info("pravega controller: %s refused: %s", fn.__name__, e)
            error: BaseException = e
        except Exception as e:  # a bug must answer, not hang the client
            _log.exception("pravega controller: %s failed", fn.__name__)
            error = e
        context.abort(_code(error), f"{fn.__name__}: {error}")

    call.__name__ = fn.__name__
    return call


class ControllerServicer(TransactionRpcs):
    """The ``ControllerService`` RPCs over one store (method names are the proto's)."""

    createTransaction = _rpc(TransactionRpcs.createTransaction)
    pingTransaction = _rpc(TransactionRpcs.pingTransaction)
    commitTransaction = _rpc(TransactionRpcs.commitTransaction)
    abortTransaction = _rpc(TransactionRpcs.abortTransaction)
    checkTransactionState = _rpc(TransactionRpcs.checkTransactionState)

    def __init__(
        self,
        streams: PravegaStreams,
        wire_node: _Node,
        controller_node: _Node,
        tokens: DelegationTokens | None,
        page_limit: int = 1000,
    ) -> None:
        self.pb, _ = load()
        self.streams = streams
        self.ctl = streams.controller
        self._wire_node = wire_node
        self._controller_node = controller_node
        self._tokens = tokens
        self.page_limit = page_limit
        self.txns = streams.transactions

    # ------------------------------------------------------------------ helpers
    def _token(self, stream: str) -> str:
        return self._tokens.issue(stream) if self._tokens is not None else ""

    def _name(self, info: Any) -> str:
        return check_stream_name(f"{info.scope}/{info.stream}")

    def _range(self, seg: StreamSegment) -> Any:
        pb = self.pb
        scope, stream = seg.stream.split("/", 1)
        sid = pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=segment_id(seg))
        return pb.SegmentRange(segmentId=sid, minKey=seg.key_low, maxKey=seg.key_high)

    def _ranges(self, stream: str, segs: tuple[StreamSegment, ...]) -> Any:
        return self.pb.SegmentRanges(
            segmentRanges=[self._range(s) for s in segs], delegationToken=self._token(stream)
        )

    # ------------------------------------------------------------------ scopes
    @_rpc
    def createScope(self, request: Any, context: Any) -> Any:
        st = self.pb.CreateScopeStatus
        try:
            created = self.ctl.create_scope(request.scope)
        except InvalidArgumentError:
            return st(status=st.INVALID_SCOPE_NAME)
        return st(status=st.SUCCESS if created else st.SCOPE_EXISTS)

    @_rpc
    def checkScopeExists(self, request: Any, context: Any) -> Any:
        return self.pb.ExistsResponse(exists=self.ctl.scope_exists(request.scope))

    @_rpc
    def listScopes(self, request: Any, context: Any) -> Any:
        names, token = page(self.ctl.list_scopes(), request.continuationToken.token, self.page_limit)
        return self.pb.ScopesResponse(scopes=names, continuationToken=self.pb.ContinuationToken(token=token))

    @_rpc
    def deleteScope(self, request: Any, context: Any) -> Any:
        st = self.pb.DeleteScopeStatus
        try:
            self.ctl.delete_scope(request.scope)
        except ScopeNotFoundError:
            return st(status=st.SCOPE_NOT_FOUND)
        except ScopeNotEmptyError:
            return st(status=st.SCOPE_NOT_EMPTY)
        return st(status=st.SUCCESS)

    # ------------------------------------------------------------------ streams
    def _config(self, request: Any) -> Any:
        from ..controller.stream_config import StreamConfig

        if not request.HasField("scalingPolicy"):
            raise InvalidArgumentError("a StreamConfig needs a scalingPolicy")
        sp, rp = request.scalingPolicy, request.retentionPolicy
        if not 0 <= sp.scaleType < len(_SCALING) or not 0 <= rp.retentionType < len(_RETENTION):
            raise InvalidArgumentError(
                f"unknown scaling or retention type {sp.scaleType}, {rp.retentionType}"
            )
        return StreamConfig(
            _SCALING[sp.scaleType],
            sp.targetRate,
            sp.scaleFactor,
            sp.minNumSegments,
            _RETENTION[rp.retentionType],
            rp.retentionParam,
            rp.retentionMax,
            tuple(request.tags.tag),
            request.timestampAggregationTimeout,
            request.rolloverSizeBytes,
        )

    @_rpc
    def createStream(self, request: Any, context: Any) -> Any:
        st = self.pb.CreateStreamStatus
        info = request.streamInfo
        try:
            name = self._name(info)
        except InvalidArgumentError:
            return st(status=st.INVALID_STREAM_NAME)
        try:
            self.ctl.create_stream_in_scope(name, self._config(request), FRAMING_PRAVEGA)
        except ScopeNotFoundError:
            return st(status=st.SCOPE_NOT_FOUND)
        except StreamExistsError:
            return st(status=st.STREAM_EXISTS)
        return st(status=st.SUCCESS)

    @_rpc
    def checkStreamExists(self, request: Any, context: Any) -> Any:
        try:
            self.ctl.get_stream(f"{request.scope}/{request.stream}")
        except StreamNotFoundError:
            return self.pb.ExistsResponse(exists=False)
        return self.pb.ExistsResponse(exists=True)

    def _status_of_missing(self, status: Any, name: str) -> Any:
        scope = name.split("/", 1)[0]
        return status.SCOPE_NOT_FOUND if not self.ctl.scope_exists(scope) else status.STREAM_NOT_FOUND

    @_rpc
    def updateStream(self, request: Any, context: Any) -> Any:
        st = self.pb.UpdateStreamStatus
        name = self._name(request.streamInfo)
        config = self._config(request)
        try:
            self.ctl.update_stream(name, config)
        except StreamNotFoundError:
            return st(status=self._status_of_missing(st, name))
        return st(status=st.SUCCESS)

    @_rpc
    def getStreamConfiguration(self, request: Any, context: Any) -> Any:
        pb = self.pb
        c = self.ctl.get_stream_config(self._name(request))
        return pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope=request.scope, stream=request.stream),
            scalingPolicy=pb.ScalingPolicy(
                scaleType=_SCALING.index(c.scaling_kind),
                targetRate=c.target_rate,
                scaleFactor=c.scale_factor,
                minNumSegments=c.min_segments,
            ),
            retentionPolicy=pb.RetentionPolicy(
                retentionType=_RETENTION.index(c.retention_kind),
                retentionParam=c.retention_param,
                retentionMax=c.retention_max,
            ),
            tags=pb.Tags(tag=list(c.tags)),
            timestampAggregationTimeout=c.timestamp_aggregation_timeout_ms,
            rolloverSizeBytes=c.rollover_size_bytes,
        )

    @_rpc
    def truncateStream(self, request: Any, context: Any) -> Any:
        st = self.pb.UpdateStreamStatus
        name = self._name(request.streamInfo)
        try:
            cut = {segment_name(name, sid): offset for sid, offset in request.cut.items()}
            self.ctl.truncate_stream(name, cut)
        except StreamNotFoundError:
            return st(status=self._status_of_missing(st, name))
        return st(status=st.SUCCESS)

    @_rpc
    def sealStream(self, request: Any, context: Any) -> Any:
        st = self.pb.UpdateStreamStatus
        name = self._name(request)
        try:
            self.ctl.get_stream(name)
            # as Pravega's controller: the stream's open transactions are aborted before it is sealed
            self.txns.abort_open(name, "its stream was sealed")
            self.ctl.seal_stream(name)
        except StreamNotFoundError:
            return st(status=self._status_of_missing(st, name))
        return st(status=st.SUCCESS)

    @_rpc
    def deleteStream(self, request: Any, context: Any) -> Any:
        st = self.pb.DeleteStreamStatus
        try:
            self.ctl.delete_stream(self._name(request))
        except StreamNotFoundError:
            return st(status=st.STREAM_NOT_FOUND)
        except StreamNotSealedError:
            return st(status=st.STREAM_NOT_SEALED)
        return st(status=st.SUCCESS)

    def _listing(self, request: Any, keep: Callable[[str], bool]) -> Any:
        pb = self.pb
        scope = request.scope.scope
        status = pb.StreamsInScopeResponse
        if not self.ctl.scope_exists(scope):
            return status(status=status.SCOPE_NOT_FOUND)
        names = [n for n in self.ctl.streams_in_scope(scope) if keep(n)]
        chosen, token = page(names, request.continuationToken.token, self.page_limit)
        return status(
            streams=[pb.StreamInfo(scope=scope, stream=n.split("/", 1)[1]) for n in chosen],
            continuationToken=pb.ContinuationToken(token=token),
            status=status.SUCCESS,
        )

    @_rpc
    def listStreamsInScope(self, request: Any, context: Any) -> Any:
        return self._listing(request, lambda n: True)

    @_rpc
    def listStreamsInScopeForTag(self, request: Any, context: Any) -> Any:
        tag = request.tag
        return self._listing(request, lambda n: tag in self.ctl.get_stream_config(n).tags)

    # ------------------------------------------------------------------ segments
    @_rpc
    def getCurrentSegments(self, request: Any, context: Any) -> Any:
        name = self._name(request)
        return self._ranges(name, self.streams.stream(name).active_segments)

    @_rpc
    def getEpochSegments(self, request: Any, context: Any) -> Any:
        name = self._name(request.streamInfo)
        info = self.streams.stream(name)
        if not 0 <= request.epoch <= info.epoch:
            raise StreamNotFoundError(f"stream {name!r} has epochs 0 to {info.epoch}, not {request.epoch}")
        return self._ranges(name, self.ctl.epoch_segments(name, request.epoch))

    @_rpc
    def getSegments(self, request: Any, context: Any) -> Any:
        """The stream's head (its first segments, or its last truncation cut), whatever the timestamp:
        Pravega's controller answers the head for every timestamp too."""
        pb = self.pb
        name = self._name(request.streamInfo)
        self.streams.stream(name)
        locations = [
            pb.SegmentsAtTime.SegmentLocation(
                segmentId=self._range(self.ctl.get_segment(n)).segmentId, offset=o
            )
            for n, o in self.ctl.get_head_cut(name).positions
        ]
        return pb.SegmentsAtTime(segments=locations, delegationToken=self._token(name))

    def _segment(self, request: Any) -> tuple[str, StreamSegment]:
        name = self._name(request.streamInfo)
        self.streams.stream(name)
        return name, self.ctl.get_segment(segment_name(name, request.segmentId))

    @_rpc
    def getSegmentsImmediatelyFollowing(self, request: Any, context: Any) -> Any:
        pb = self.pb
        name, seg = self._segment(request)
        entries = [
            pb.SuccessorResponse.SegmentEntry(
                segment=self._range(s.segment),
                value=[segment_id(self.ctl.get_segment(p)) for p in s.predecessors],
            )
            for s in self.ctl.get_successors(seg.name)
        ]
        return pb.SuccessorResponse(segments=entries, delegationToken=self._token(name))

    getSegmentsImmediatlyFollowing = getSegmentsImmediatelyFollowing  # Pravega's old misspelt name

    @_rpc
    def getURI(self, request: Any, context: Any) -> Any:
        name = self._name(request.streamInfo)
        with contextlib.suppress(StreamNotFoundError):  # a segment of no stream: the segment store refuses it
            self.streams.stream(name)
        host, port = self._wire_node()
        return self.pb.NodeUri(endpoint=host, port=port)

    @_rpc
    def getControllerServerList(self, request: Any, context: Any) -> Any:
        host, port = self._controller_node()
        return self.pb.ServerResponse(nodeURI=[self.pb.NodeUri(endpoint=host, port=port)])

    @_rpc
    def getDelegationToken(self, request: Any, context: Any) -> Any:
        return self.pb.DelegationToken(delegationToken=self._token(self._name(request)))

    # ------------------------------------------------------------------ scaling
    @_rpc
    def scale(self, request: Any, context: Any) -> Any:
        pb = self.pb
        st = pb.ScaleResponse
        name = self._name(request.streamInfo)
        try:
            epoch = self.ctl.get_stream(name).epoch
            sealed = [segment_name(name, sid) for sid in request.sealedSegments]
            ranges = [(r.start, r.end) for r in request.newKeyRanges]
            if not all(math.isfinite(x) for r in ranges for x in r):
                raise InvalidScaleError(f"stream {name!r}: a new key range is not finite: {ranges}")
            new = self.ctl.scale_stream(name, sealed, ranges)
        except StreamNotFoundError:
            return st(status=st.FAILURE)
        except (StreamSealedError, InvalidScaleError, InvalidArgumentError) as e:
            _log.info("pravega controller: scale of %r refused: %s", name, e)
            return st(status=st.PRECONDITION_FAILED)
        # the epoch the scale started from: checkScale(epoch) answers SUCCESS once it is done (at once)
        return st(status=st.STARTED, segments=[self._range(s) for s in new], epoch=epoch)

    @_rpc
    def checkScale(self, request: Any, context: Any) -> Any:
        st = self.pb.ScaleStatusResponse
        try:
            active = self.ctl.get_stream(self._name(request.streamInfo)).epoch
        except StreamNotFoundError:
            return st(status=st.INVALID_INPUT)
        if not 0 <= request.epoch <= active:
            return st(status=st.INVALID_INPUT)
        return st(status=st.IN_PROGRESS if request.epoch == active else st.SUCCESS)


class _Auth(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call without the server's credentials (``auth.check_authorization``)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        metadata = dict(details.invocation_metadata or ())
        try:
            check_authorization(metadata.get("authorization"), self._token)
        except AuthTokenError as e:
            _log.info("pravega controller: %s refused: %s", details.method, e)
            message = f"authentication failed: {e}"

            def deny(request: Any, context: Any) -> Any:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

            return grpc.unary_unary_rpc_method_handler(deny)
        return continuation(details)


class ControllerEndpoint:
    """The gRPC server of ``ControllerServicer`` on ``host:port`` (0: a free one). ``stop()`` closes every
    connection; it does not close the store."""

    def __init__(
        self,
        servicer: ControllerServicer,
        host: str,
        port: int,
        token: str | None,
        max_workers: int = 8,
        handshake_timeout_s: float = 5.0,
        idle_timeout_s: float = 600.0,
        max_connections: int = 1024,
    ) -> None:
        self.servicer = servicer
        self.host = host
        self._port = port
        self._token = token
        self._max_workers = max_workers
        self._options = [
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
            ("grpc.max_receive_message_length", 1 << 20),  # the largest request (a cut, tags) is far below
            ("grpc.max_concurrent_streams", 64),
            ("grpc.server_handshake_timeout_ms", int(handshake_timeout_s * 1000)),
            ("grpc.max_connection_idle_ms", int(idle_timeout_s * 1000)),
            ("grpc.max_allowed_incoming_connections", max_connections),
        ]
        self._server: Any = None

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> int:
        """Bind and serve; returns the port. ``OSError`` naming the address if it cannot bind."""
        _, services = load()
        interceptors = [_Auth(self._token)] if self._token is not None else []
        server = grpc.server(
            futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="ingestwm-pravega-controller"),
            interceptors=interceptors,
            options=self._options,
            maximum_concurrent_rpcs=self._max_workers * 32,
        )
        services.add_ControllerServiceServicer_to_server(self.servicer, server)
        host = f"[{self.host}]" if ":" in self.host else self.host
        why = "the address is in use"
        try:
            bound = int(server.add_insecure_port(f"{host}:{self._port}"))
        except RuntimeError as e:
            bound, why = 0, str(e)
        if not bound:
            server.stop(None)
            raise OSError(f"the Pravega controller cannot bind {host}:{self._port}: {why}")
        server.start()
        self._server, self._port = server, bound
        return bound

    def stop(self, grace_s: float | None = None) -> None:
        """Stop serving and close every connection (waits for it). Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace_s).wait()
