"""The Pravega controller endpoint (segmentstore.pravega.grpc_controller) over a raw gRPC stub: every RPC
the 0.3.7 client calls, answered as Pravega's controller answers it, on ingestwm's StreamController."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from segmentstore import FRAMING_INGESTWM, FRAMING_PRAVEGA, ManualClock, SegmentStore
from segmentstore.controller.controller import controller_of
from segmentstore.pravega.auth import DelegationTokens
from segmentstore.pravega.endpoints import PravegaEndpoints
from segmentstore.pravega.grpc_proto import load

pb, services = load()


@pytest.fixture
def store(clock: ManualClock) -> Iterator[SegmentStore]:
    s = SegmentStore(clock=clock)
    try:
        yield s
    finally:
        s.close()


class _Served:
    def __init__(self, store: SegmentStore, token: str | None = None, page_limit: int = 1000) -> None:
        self.ep = PravegaEndpoints(store, "127.0.0.1", 0, 0, token)
        self.ep.controller.servicer.page_limit = page_limit
        self.ep.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.ep.controller_port}")
        self.stub = services.ControllerServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.ep.stop()


@pytest.fixture
def served(store: SegmentStore) -> Iterator[_Served]:
    s = _Served(store, page_limit=2)
    try:
        yield s
    finally:
        s.close()


def info(scope: str, stream: str) -> Any:
    return pb.StreamInfo(scope=scope, stream=stream)


def config(scope: str, stream: str, n: int = 1, kind: int = 0, tags: tuple[str, ...] = (), **kw: Any) -> Any:
    return pb.StreamConfig(
        streamInfo=info(scope, stream),
        scalingPolicy=pb.ScalingPolicy(
            scaleType=kind, targetRate=kw.get("rate", 0), scaleFactor=2, minNumSegments=n
        ),
        retentionPolicy=pb.RetentionPolicy(
            retentionType=kw.get("rtype", 0), retentionParam=kw.get("rparam", 0)
        ),
        tags=pb.Tags(tag=list(tags)),
    )


def sid(scope: str, stream: str, segment: int, epoch: int = 0) -> Any:
    return pb.SegmentId(streamInfo=info(scope, stream), segmentId=(epoch << 32) | segment)


def code_of(call: Any, request: Any) -> tuple[Any, str]:
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=10)
    return e.value.code(), e.value.details()


def test_scopes(served: _Served, store: SegmentStore) -> None:
    s = served.stub
    cs, ds = pb.CreateScopeStatus, pb.DeleteScopeStatus
    assert s.createScope(pb.ScopeInfo(scope="a")).status == cs.SUCCESS
    assert s.createScope(pb.ScopeInfo(scope="a")).status == cs.SCOPE_EXISTS
    assert s.createScope(pb.ScopeInfo(scope="bad/name")).status == cs.INVALID_SCOPE_NAME
    for name in ("b", "c"):
        s.createScope(pb.ScopeInfo(scope=name))
    controller_of(store).create_stream("legacy/s")  # ingestwm's own API names a scope too
    assert s.checkScopeExists(pb.ScopeInfo(scope="legacy")).exists
    assert not s.checkScopeExists(pb.ScopeInfo(scope="zzz")).exists
    # pages of 2 with continuation tokens, ended by an empty page (as the client reads them)
    seen, token = [], ""
    while True:
        r = s.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=token)))
        if not r.scopes:
            break
        assert len(r.scopes) <= 2
        seen += r.scopes
        token = r.continuationToken.token
    assert seen == ["a", "b", "c", "legacy"]
    s.createStream(config("a", "s"))
    assert s.deleteScope(pb.ScopeInfo(scope="a")).status == ds.SCOPE_NOT_EMPTY
    assert s.deleteScope(pb.ScopeInfo(scope="b")).status == ds.SUCCESS
    assert s.deleteScope(pb.ScopeInfo(scope="b")).status == ds.SCOPE_NOT_FOUND


def test_streams_with_policies_tags_update_seal_delete(served: _Served, store: SegmentStore) -> None:
    s = served.stub
    st = pb.CreateStreamStatus
    assert s.createStream(config("nope", "s")).status == st.SCOPE_NOT_FOUND
    s.createScope(pb.ScopeInfo(scope="sc"))
    assert s.createStream(config("sc", "bad name!")).status == st.INVALID_STREAM_NAME
    rate = config("sc", "s", n=3, kind=2, tags=("t1", "t2"), rate=100, rtype=1, rparam=86_400_000)
    assert s.createStream(rate).status == st.SUCCESS
    assert s.createStream(rate).status == st.STREAM_EXISTS
    assert s.checkStreamExists(info("sc", "s")).exists and not s.checkStreamExists(info("sc", "x")).exists
    got = s.getStreamConfiguration(info("sc", "s"))
    assert got.scalingPolicy.scaleType == 2 and got.scalingPolicy.minNumSegments == 3
    assert got.scalingPolicy.targetRate == 100 and got.scalingPolicy.scaleFactor == 2
    assert (got.retentionPolicy.retentionType, got.retentionPolicy.retentionParam) == (1, 86_400_000)
    assert list(got.tags.tag) == ["t1", "t2"]
    ctl = controller_of(store)
    assert (
        ctl.get_stream("sc/s").framing == FRAMING_PRAVEGA and len(ctl.get_stream("sc/s").active_segments) == 3
    )
    us = pb.UpdateStreamStatus
    assert s.updateStream(config("sc", "s", n=1, tags=("t3",))).status == us.SUCCESS
    assert len(ctl.get_stream("sc/s").active_segments) == 1  # a fixed count of 1: rescaled
    assert list(s.getStreamConfiguration(info("sc", "s")).tags.tag) == ["t3"]
    assert s.updateStream(config("sc", "missing")).status == us.STREAM_NOT_FOUND
    assert s.updateStream(config("gone", "missing")).status == us.SCOPE_NOT_FOUND
    code, details = code_of(s.updateStream, config("sc", "s", n=0))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "min_segments" in details
    code, _ = code_of(s.getStreamConfiguration, info("sc", "missing"))
    assert code == grpc.StatusCode.NOT_FOUND
    ds = pb.DeleteStreamStatus
    assert s.deleteStream(info("sc", "s")).status == ds.STREAM_NOT_SEALED
    assert s.sealStream(info("sc", "s")).status == us.SUCCESS
    assert s.sealStream(info("sc", "s")).status == us.SUCCESS
    assert s.sealStream(info("sc", "missing")).status == us.STREAM_NOT_FOUND
    code, details = code_of(
        s.updateStream, config("sc", "s", tags=("late",))
    )  # not STREAM_SEALED: see module
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sealed" in details
    assert s.deleteStream(info("sc", "s")).status == ds.SUCCESS
    assert s.deleteStream(info("sc", "s")).status == ds.STREAM_NOT_FOUND
    ctl._check()


def test_listings_page_with_continuation_tokens_and_filter_by_tag(served: _Served) -> None:
    s = served.stub
    s.createScope(pb.ScopeInfo(scope="sc"))
    for i in range(5):
        s.createStream(config("sc", f"s{i}", tags=("even",) if i % 2 == 0 else ()))

    def listing(call: Any, make: Any) -> list[str]:
        out, token = [], ""
        while True:
            r = call(make(pb.ContinuationToken(token=token)))
            assert r.status == pb.StreamsInScopeResponse.SUCCESS
            if not r.streams:
                return out
            out += [f"{x.scope}/{x.stream}" for x in r.streams]
            token = r.continuationToken.token

    assert listing(
        s.listStreamsInScope,
        lambda t: pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="sc"), continuationToken=t),
    ) == [f"sc/s{i}" for i in range(5)]
    tagged = listing(
        s.listStreamsInScopeForTag,
        lambda t: pb.StreamsInScopeWithTagRequest(
            scope=pb.ScopeInfo(scope="sc"), tag="even", continuationToken=t
        ),
    )
    assert tagged == ["sc/s0", "sc/s2", "sc/s4"]
    missing = s.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="none")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND and not missing.streams


def test_segments_successors_scaling_and_the_head(served: _Served, store: SegmentStore) -> None:
    s = served.stub
    s.createScope(pb.ScopeInfo(scope="sc"))
    s.createStream(config("sc", "s", n=2))
    store.append("sc/s/0.#epoch.0", b"\0\0\0\0\0\0\0\x01x")
    cur = s.getCurrentSegments(info("sc", "s"))
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in cur.segmentRanges] == [
        (0, 0.0, 0.5),
        (1, 0.5, 1.0),
    ]
    assert cur.delegationToken == ""  # no server token: empty, as Pravega's with auth off
    req = pb.ScaleRequest(
        streamInfo=info("sc", "s"),
        sealedSegments=[0],
        newKeyRanges=[
            pb.ScaleRequest.KeyRangeEntry(start=0.0, end=0.25),
            pb.ScaleRequest.KeyRangeEntry(start=0.25, end=0.5),
        ],
    )
    r = s.scale(req)
    assert r.status == pb.ScaleResponse.STARTED and r.epoch == 0
    new_ids = [x.segmentId.segmentId for x in r.segments]
    assert new_ids == [(1 << 32) | 2, (1 << 32) | 3]  # (epoch << 32) | number
    ss = pb.ScaleStatusResponse
    assert s.checkScale(pb.ScaleStatusRequest(streamInfo=info("sc", "s"), epoch=0)).status == ss.SUCCESS
    assert s.checkScale(pb.ScaleStatusRequest(streamInfo=info("sc", "s"), epoch=1)).status == ss.IN_PROGRESS
    assert s.checkScale(pb.ScaleStatusRequest(streamInfo=info("sc", "s"), epoch=2)).status == ss.INVALID_INPUT
    assert s.scale(req).status == pb.ScaleResponse.PRECONDITION_FAILED  # segment 0 is sealed now
    assert s.scale(pb.ScaleRequest(streamInfo=info("sc", "gone"))).status == pb.ScaleResponse.FAILURE
    succ = s.getSegmentsImmediatelyFollowing(sid("sc", "s", 0))
    assert sorted((e.segment.segmentId.segmentId, list(e.value)) for e in succ.segments) == [
        (new_ids[0], [0]),
        (new_ids[1], [0]),
    ]
    assert not s.getSegmentsImmediatlyFollowing(sid("sc", "s", 1)).segments  # active: none yet
    epoch0 = s.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info("sc", "s"), epoch=0))
    assert [x.segmentId.segmentId for x in epoch0.segmentRanges] == [0, 1]
    code, _ = code_of(s.getEpochSegments, pb.GetEpochSegmentsRequest(streamInfo=info("sc", "s"), epoch=5))
    assert code == grpc.StatusCode.NOT_FOUND
    # the head: first the initial segments, then the truncation cut, with offsets
    seg0 = "sc/s/0.#epoch.0"
    head = s.getSegments(pb.GetSegmentsRequest(streamInfo=info("sc", "s"), timestamp=0))
    assert [(x.segmentId.segmentId, x.offset) for x in head.segments] == [(0, 0), (1, 0)]
    for n in ("sc/s/2.#epoch.1", "sc/s/3.#epoch.1", "sc/s/1.#epoch.0"):
        store.append(n, b"\0\0\0\0\0\0\0\x01y")
    cut = pb.StreamCut(streamInfo=info("sc", "s"), cut={new_ids[0]: 9, new_ids[1]: 0, 1: 9})
    assert s.truncateStream(cut).status == pb.UpdateStreamStatus.SUCCESS
    assert not store.exists(seg0)
    head = s.getSegments(pb.GetSegmentsRequest(streamInfo=info("sc", "s"), timestamp=0))
    assert sorted((x.segmentId.segmentId, x.offset) for x in head.segments) == [
        (1, 9),
        (new_ids[0], 9),
        (new_ids[1], 0),
    ]
    code, details = code_of(s.truncateStream, pb.StreamCut(streamInfo=info("sc", "s"), cut={1: 9}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "routing keys" in details
    code, details = code_of(s.truncateStream, pb.StreamCut(streamInfo=info("sc", "s"), cut={1: 0}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "readable range [9, 9]" in details
    node = s.getURI(sid("sc", "s", 1))
    assert (node.endpoint, node.port) == ("127.0.0.1", served.ep.segment_port)
    ctl_node = s.getControllerServerList(pb.ServerRequest()).nodeURI[0]
    assert ctl_node.port == served.ep.controller_port


def test_an_ingestwm_framed_stream_is_refused_before_any_byte_moves(
    served: _Served, store: SegmentStore
) -> None:
    ctl = controller_of(store)
    ctl.create_stream("own/s", 2)
    assert ctl.get_stream("own/s").framing == FRAMING_INGESTWM
    s = served.stub
    for call, request in (
        (s.getCurrentSegments, info("own", "s")),
        (s.getSegments, pb.GetSegmentsRequest(streamInfo=info("own", "s"))),
        (s.getEpochSegments, pb.GetEpochSegmentsRequest(streamInfo=info("own", "s"), epoch=0)),
        (s.getSegmentsImmediatelyFollowing, sid("own", "s", 0)),
        (s.getURI, sid("own", "s", 0)),
    ):
        code, details = code_of(call, request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT  # the 0.3.7 client fails at once on it
        assert "ingestwm-framed events" in details and "Pravega controller" in details
    # its metadata stays open to a Pravega administrator
    assert s.checkStreamExists(info("own", "s")).exists
    assert s.getStreamConfiguration(info("own", "s")).scalingPolicy.minNumSegments == 2


def test_with_a_token_calls_need_credentials_and_get_delegation_tokens(store: SegmentStore) -> None:
    served = _Served(store, token="s3cret")
    try:
        s = served.stub
        for metadata in ((), (("authorization", "Basic wrong"),), (("authorization", "Bearer s3cret"),)):
            with pytest.raises(grpc.RpcError) as e:
                s.createScope(pb.ScopeInfo(scope="sc"), metadata=metadata, timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not controller_of(store).scope_exists("sc")
        as_token = (("authorization", "Basic s3cret"),)  # pravega_client_auth_token=s3cret
        user_pass = (("authorization", "Basic " + base64.b64encode(b"admin:s3cret").decode()),)
        assert s.createScope(pb.ScopeInfo(scope="sc"), metadata=as_token).status == 0
        s.createStream(config("sc", "s"), metadata=user_pass)
        token = s.getDelegationToken(info("sc", "s"), metadata=as_token).delegationToken
        DelegationTokens("s3cret").verify(token, "sc/s")
        assert s.getCurrentSegments(info("sc", "s"), metadata=as_token).delegationToken.count(".") == 2
    finally:
        served.close()


def test_stop_closes_the_controller(store: SegmentStore) -> None:
    served = _Served(store)
    served.stub.createScope(pb.ScopeInfo(scope="sc"), timeout=5)
    served.ep.stop()
    with pytest.raises(grpc.RpcError) as e:
        served.stub.createScope(pb.ScopeInfo(scope="sc2"), timeout=2)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    served.channel.close()
