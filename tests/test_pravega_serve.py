"""Serving the Pravega endpoints with ingestwm's server: settings ([server] keys, flags), start and stop
together, and the refusals at start (TLS, a store that cannot take a Pravega block, a busy port)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from pravega_helpers import WireClient

from bench.cli import cli
from segmentstore import InvalidArgumentError, ManualClock, SegmentStore, StoreConfig
from segmentstore.net.serve_config import load_serve_config
from segmentstore.net.server import SegmentStoreServer
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.grpc_proto import load

pb, services = load()


def test_server_keys_and_flags(tmp_path: Path) -> None:
    assert load_serve_config(None).server.pravega_port is None
    toml = tmp_path / "serve.toml"
    toml.write_text("[server]\npravega_port = 9090\npravega_segment_port = 0\n")
    lim = load_serve_config(toml).server
    assert (lim.pravega_port, lim.pravega_segment_port) == (9090, 0)
    assert load_serve_config(toml, {"pravega_port": 0}).server.pravega_port == 0
    toml.write_text('[server]\npravega_port = "9090"\n')
    with pytest.raises(InvalidArgumentError, match="pravega_port must be a int"):
        load_serve_config(toml)
    out = CliRunner().invoke(cli, ["serve", "--help"]).output
    assert "--pravega-port" in out and "--pravega-segment-port" in out


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_both_endpoints_start_and_stop_with_the_server(clock: ManualClock) -> None:
    with SegmentStore(clock=clock) as store:
        server = SegmentStoreServer(store, pravega_port=0)
        server.start()
        assert server.pravega is not None
        p = server.pravega
        with grpc.insecure_channel(f"127.0.0.1:{p.controller_port}") as ch:
            stub = services.ControllerServiceStub(ch)
            assert stub.createScope(pb.ScopeInfo(scope="sc"), timeout=10).status == 0
            uri = stub.getURI(pb.SegmentId(streamInfo=pb.StreamInfo(scope="sc", stream="s")), timeout=10)
        assert uri.port == p.segment_port
        client = WireClient(p.segment_port)
        server.stop()
        assert client.closed_by_server()
        client.close()
        assert _refused(p.controller_port) and _refused(p.segment_port) and _refused(server.port)


def test_refusals_at_start(clock: ManualClock, tmp_path: Path) -> None:
    with SegmentStore(clock=clock) as store:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with pytest.raises(InvalidArgumentError, match="do not serve TLS"):
            SegmentStoreServer(store, ssl_context=ctx, pravega_port=0)
        with pytest.raises(InvalidArgumentError, match="requires a token"):
            SegmentStoreServer(store, host="0.0.0.0", pravega_port=0)
        with pytest.raises(InvalidArgumentError, match="pravega_segment_port must be an int"):
            SegmentStoreServer(store, pravega_port=0, pravega_segment_port=70_000)
    small = StoreConfig(max_append_bytes=1 << 20)
    with (
        SegmentStore(clock=clock, config=small) as store,
        pytest.raises(InvalidArgumentError, match="max_append_bytes >= 8388616"),
    ):
        SegmentStoreServer(store, pravega_port=0)
    with SegmentStore(clock=clock) as store, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = SegmentStoreServer(store, pravega_port=busy.getsockname()[1])
        with pytest.raises(OSError, match="cannot bind"):
            server.start()
        assert _refused(server.port) and server.pravega is not None and _refused(server.pravega.segment_port)


def test_keep_alive_is_echoed(clock: ManualClock) -> None:
    with SegmentStore(clock=clock) as store:
        server = SegmentStoreServer(store, pravega_port=0)
        server.start()
        try:
            assert server.pravega is not None
            with WireClient(server.pravega.segment_port) as c:
                assert c.call(req.KeepAlive()) == req.KeepAlive()
        finally:
            server.stop()
