"""The versioned wire protocol: clients and servers of different versions meet in the hello.

Against the real previous release: its code, taken from git at the last commit of protocol
version 1 (``_V1_COMMIT``), runs a client and a server in subprocesses. In process, and fast:
a server of the previous version is this server with version 1's command table
(``handlers(1)``) and version 1's hello, which refuses any other version; an older client is
this client saying version 1, which is what version 1's hello sends.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segmentstore import SegmentStore
from segmentstore.client import RemoteClient
from segmentstore.client import connection as connection_module
from segmentstore.client.connection import Connection
from segmentstore.errors import ProtocolError, UnsupportedCommandError
from segmentstore.net import protocol as protocol_module
from segmentstore.net import server as server_module
from segmentstore.net.commands import COMMANDS, VERSIONS, commands_of, decode_args, register_command
from segmentstore.net.handlers import handlers
from segmentstore.net.protocol import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    REPLY,
    encode_frame,
    unpack,
)
from segmentstore.net.server import SegmentStoreServer

FROZEN = {
    1: frozenset(
        [
            "hello",
            "ping",
            "append",
            "append_batch",
            "create_segment",
            "create_transaction",
            "merge_transaction",
            "seal",
            "truncate",
            "delete",
            "get_info",
            "exists",
            "update_attributes",
            "get_attributes",
            "read",
            "wait_any",
            "scan_records",
            "watermark_at",
            "ingestion_time_at",
            "ingestion_runs",
            "watermarks_at",
            "read_many",
            "segment_states",
            "read_ranges",
            "create_stream",
            "get_stream",
            "list_streams",
            "scale_stream",
            "get_segment",
            "get_successors",
            "get_head_cut",
            "get_tail_cut",
            "seal_stream",
            "delete_stream",
            "begin_transaction",
            "commit_transaction",
            "abort_transaction",
        ]
    ),
}
"""The commands each released version added (every version but the newest, which grows until
its release): a server of that version has exactly these, for good. Add a row here when a
newer version is opened."""


# ---------------------------------------------------------------- the table
def test_the_version_table_covers_every_command_and_released_versions_never_change() -> None:
    assert [v.number for v in VERSIONS] == list(range(1, PROTOCOL_VERSION + 1))
    assert set(FROZEN) == set(range(1, PROTOCOL_VERSION)), "freeze every version but the newest here"
    for number, added in FROZEN.items():
        assert VERSIONS[number - 1].added == added, f"version {number} is released: add to a new version"
    assert {name for v in VERSIONS for name in v.added} == set(COMMANDS)
    for v in VERSIONS:
        for name in v.added:
            assert COMMANDS[name].since == v.number
    assert commands_of(1) == FROZEN[1]
    assert commands_of(PROTOCOL_VERSION) == frozenset(COMMANDS)
    assert set(handlers(1)) == FROZEN[1] - {"hello"}
    assert set(handlers()) == set(COMMANDS) - {"hello"}


def test_the_protocol_docs_version_table_is_the_registrys() -> None:
    """``net.protocol``'s docstring lists every version with its release, as ``VERSIONS`` has them."""
    doc = protocol_module.__doc__ or ""
    rows = re.findall(r"^(\d+) +(\d+\.\d+\.\d+) ", doc, re.MULTILINE)
    assert [(int(n), r) for n, r in rows] == [(v.number, v.release) for v in VERSIONS]
    assert doc.startswith(f"The segment store wire protocol, version {PROTOCOL_VERSION}:")


def test_a_command_in_no_version_is_refused_when_registered() -> None:
    with pytest.raises(ProtocolError, match=r"'frobnicate' is in no protocol version: add it to .*VERSIONS"):
        register_command("frobnicate", params={})
    assert "frobnicate" not in COMMANDS


# ---------------------------------------------------------------- a server of version 1
def _v1_hello(said: list[Any]) -> Any:
    """Version 1's hello: only version 1 is taken, and the reply says 1."""

    def hello(self: Any, rid: int, args: Any, payload: memoryview) -> None:
        kw = decode_args(COMMANDS["hello"], args, payload)
        version = kw["version"]
        said.append(version)
        if version != 1:
            raise ProtocolError(f"unsupported protocol version {version!r:.20}; this server speaks 1")
        mf = kw.get("max_frame_bytes")
        if type(mf) is int and mf >= 65536:
            self.max_reply = min(self.max_reply, mf)
        self.hello = True
        self.client_version = 1
        self.reader.max_frame_bytes = self.server.max_frame_bytes
        s = self.server
        info = {
            "version": 1,
            "server": "ingestwm",
            "max_frame_bytes": s.max_frame_bytes,
            "max_in_flight": s.max_in_flight,
            "idle_timeout_s": s.idle_timeout_s,
        }
        self.reply(rid, info)

    return hello


@pytest.fixture
def v1_said(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Servers started in the test answer as version 1; the versions their hellos were said."""
    said: list[Any] = []
    monkeypatch.setattr(server_module._Connection, "_hello", _v1_hello(said))
    return said


def _counted(server: SegmentStoreServer) -> dict[str, int]:
    """Count the requests the server's handlers get, per command."""
    seen: dict[str, int] = {}

    def wrap(name: str, h: Any) -> Any:
        def handle(conn: Any, rid: int, args: Any, payload: memoryview) -> None:
            seen[name] = seen.get(name, 0) + 1
            h(conn, rid, args, payload)

        return handle

    server.handlers = {n: wrap(n, h) for n, h in server.handlers.items()}
    return seen


@pytest.fixture
def v1_server(store: SegmentStore, v1_said: list[Any]) -> Iterator[SegmentStoreServer]:
    s = SegmentStoreServer(store, idle_timeout_s=60)
    s.handlers = handlers(1)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _exercise(c: RemoteClient) -> None:
    """Writes and reads of every kind (pipelined appends, reads, batched reads, streams) round trip."""
    c.create_segment("s")
    assert [r.offset for r in c.append_many("s", [b"ab", b"cde"])] == [0, 2]
    assert c.append("s", b"f", 5).offset == 5
    assert c.read("s", 0, 100).data == b"abcdef"
    (rm,) = c.read_many([("s", 1, 100)])
    assert rm is not None and rm.read is not None and rm.read.data == b"bcdef"
    (rr,) = c.read_ranges([("s", 2, 10)])
    assert rr.read is not None and rr.read.data == b"cdef"
    (st,) = c.segment_states([("s", 0)])
    assert st.info is not None and st.info.length == 6
    assert c.watermarks_at("s", np.array([0, 6])).shape == (2,)
    info = c.create_stream("scope/st", 2)
    assert len(info.active_segments) == 2 and c.list_streams() == ["scope/st"]


def test_a_client_against_a_server_of_the_previous_version_works_with_that_versions_commands(
    v1_server: SegmentStoreServer, v1_said: list[Any]
) -> None:
    with RemoteClient(("127.0.0.1", v1_server.port), timeout_s=20) as c:
        assert c.server_version() == 1
        _exercise(c)
    # every connection said this version first, was refused, and was made again saying 1
    assert set(v1_said) == {PROTOCOL_VERSION, 1} and v1_said[:2] == [PROTOCOL_VERSION, 1]
    assert v1_said.count(PROTOCOL_VERSION) == v1_said.count(1)


def test_a_command_the_servers_version_lacks_fails_at_once_naming_it_and_both_versions(
    store: SegmentStore, v1_said: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No command is newer than version 1 yet (version 2 changed only the hello), so this one
    makes ``read_ranges`` a version-2 command: the version-1 server is built without it."""
    monkeypatch.setitem(COMMANDS, "read_ranges", dataclasses.replace(COMMANDS["read_ranges"], since=2))
    server = SegmentStoreServer(store, idle_timeout_s=60)
    server.handlers = handlers(1)
    assert "read_ranges" not in server.handlers
    seen = _counted(server)
    server.start()
    try:
        with RemoteClient(("127.0.0.1", server.port), timeout_s=20) as c:
            c.create_segment("s")
            c.append("s", b"abc")
            with pytest.raises(UnsupportedCommandError) as e:
                c.read_ranges([("s", 0, 10)])
            err = e.value
            assert (err.command, err.server_version, err.needed_version) == ("read_ranges", 1, 2)
            text = str(err)
            assert text == (
                f"read_ranges: the segment store at 127.0.0.1:{server.port} speaks protocol version 1, "
                "read_ranges needs version 2 (ingestwm 0.7.0 or later): upgrade the server; not sent"
            )
            assert "read_ranges" not in seen  # never sent
            assert c.read("s", 0, 10).data == b"abc"  # the connection is not closed, unlike "unknown command"
            assert server.connection_count >= 1
    finally:
        server.stop()


def test_a_newer_client_refused_by_a_version_1_server_for_version_1_too_gets_the_servers_error(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconnect saying an older version happens once: a server refusing that too is an error."""
    said: list[Any] = []

    def refuse(self: Any, rid: int, args: Any, payload: memoryview) -> None:
        said.append(args.get("version"))
        raise ProtocolError("unsupported protocol version 1; this server speaks 1")

    monkeypatch.setattr(server_module._Connection, "_hello", refuse)
    with SegmentStoreServer(store) as server, pytest.raises(ProtocolError, match="this server speaks 1"):
        Connection("127.0.0.1", server.port, connect_timeout_s=5)
    assert said == [PROTOCOL_VERSION, 1]


# ---------------------------------------------------------------- older and newer clients
def test_an_older_client_keeps_working_against_this_server(
    server_and_store: tuple[SegmentStoreServer, SegmentStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = server_and_store
    monkeypatch.setattr(connection_module, "PROTOCOL_VERSION", 1)  # the first release's hello
    with RemoteClient(("127.0.0.1", server.port), timeout_s=20) as c:
        _exercise(c)
        assert c.server_version() == PROTOCOL_VERSION
        assert {conn.client_version for conn in server._connections} == {1}


def test_the_first_releases_hello_gets_a_reply_it_reads(
    server_and_store: tuple[SegmentStoreServer, SegmentStore],
) -> None:
    """Byte for byte the hello version 1 sends; its reply holds what version 1 reads of it."""
    server, _ = server_and_store
    hello = {"version": 1, "token": None, "client": "ingestwm", "max_frame_bytes": 16 * 1024 * 1024 + 65536}
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"".join(bytes(p) for p in encode_frame([0, 1, "hello", hello])))
        header = _recv_header(s)
        assert header[:2] == [REPLY, 1]
        info = header[2]
        assert info["version"] == PROTOCOL_VERSION
        assert type(info["max_in_flight"]) is int and type(info["idle_timeout_s"]) is float
        s.sendall(b"".join(bytes(p) for p in encode_frame([0, 2, "ping", {}])))
        assert _recv_header(s) == [REPLY, 2, True]


def test_a_newer_client_gets_this_servers_version_and_speaks_it(
    server_and_store: tuple[SegmentStoreServer, SegmentStore],
) -> None:
    server, _ = server_and_store
    conn = Connection("127.0.0.1", server.port, version=PROTOCOL_VERSION + 5)
    try:
        assert (conn.server_version, conn.version) == (PROTOCOL_VERSION, PROTOCOL_VERSION)
        assert all(conn.supports(name) for name in COMMANDS)
        assert {c.client_version for c in server._connections} == {PROTOCOL_VERSION + 5}
    finally:
        conn.close()


@pytest.mark.parametrize("version", [0, -1, True, "2", None, 2.0])
def test_a_hello_whose_version_is_not_an_int_from_1_is_refused_naming_it(
    server_and_store: tuple[SegmentStoreServer, SegmentStore], version: Any
) -> None:
    server, _ = server_and_store
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"".join(bytes(p) for p in encode_frame([0, 1, "hello", {"version": version}])))
        header = _recv_header(s)
        assert header[0] == 2 and header[2] == "ProtocolError" and header[5] is True, header
        assert f"int >= {MIN_PROTOCOL_VERSION}, got {version!r}" in header[3]
        assert header[4]["server_version"] == PROTOCOL_VERSION
        assert s.recv(1) == b""  # closed


def test_an_unknown_command_names_the_servers_and_the_clients_versions(
    server_and_store: tuple[SegmentStoreServer, SegmentStore],
) -> None:
    server, _ = server_and_store
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"".join(bytes(p) for p in encode_frame([0, 1, "hello", {"version": 7}])))
        assert _recv_header(s)[:2] == [REPLY, 1]
        s.sendall(b"".join(bytes(p) for p in encode_frame([0, 2, "format_disk", {}])))
        header = _recv_header(s)
        assert header[2] == "ProtocolError" and header[5] is True
        assert f"this server speaks protocol version {PROTOCOL_VERSION}, the client said 7" in header[3]


@pytest.mark.parametrize("reply", [{"server": "x"}, {"version": "2"}, {"version": 0}])
def test_a_hello_reply_without_a_good_version_is_refused_by_the_client(reply: dict[str, Any]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1 << 16)
                conn.sendall(b"".join(bytes(p) for p in encode_frame([REPLY, 1, reply])))
                conn.recv(1)

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        with pytest.raises(ProtocolError, match="hello reply's protocol version must be an int >= 1"):
            Connection("127.0.0.1", port, connect_timeout_s=5)
        t.join(5)


# ---------------------------------------------------------------- the previous release itself
_V1_COMMIT = "44d3e5178b7a9d3ec3cb88be33b784222ec491d5"
"""The last commit of protocol version 1: ingestwm 0.6.0 on main, just before version 2."""
_ROOT = Path(__file__).resolve().parents[1]

_V1_CLIENT = """
import json, sys
import segmentstore
from segmentstore.client import RemoteClient

with RemoteClient(("127.0.0.1", int(sys.argv[1])), timeout_s=20) as c:
    c.create_segment("s")
    offsets = [r.offset for r in c.append_many("s", [b"ab", b"cde"])]
    offsets.append(c.append("s", b"f", 5).offset)
    (rm,) = c.read_many([("s", 1, 100)])
    (rr,) = c.read_ranges([("s", 2, 10)])
    (st,) = c.segment_states([("s", 0)])
    c.create_stream("scope/st", 2)
    out = {
        "module": segmentstore.__file__,
        "offsets": offsets,
        "read": c.read("s", 0, 100).data.decode(),
        "read_many": rm.read.data.decode(),
        "read_ranges": rr.read.data.decode(),
        "length": st.info.length,
        "streams": c.list_streams(),
        "ping": c.ping(),
    }
print(json.dumps(out))
"""

_V1_SERVER = """
import sys
from segmentstore import SegmentStore
from segmentstore.net.server import SegmentStoreServer

store = SegmentStore()
server = SegmentStoreServer(store, idle_timeout_s=60)
print(server.start(), flush=True)
sys.stdin.read()  # until the test closes it
server.stop()
store.close()
"""


@pytest.fixture(scope="module")
def v1_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``segmentstore`` package, taken from git (skipped without the history)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the previous release is taken from the repository's history")
    probe = subprocess.run([git, "-C", str(_ROOT), "cat-file", "-e", f"{_V1_COMMIT}^{{commit}}"], check=False)
    if probe.returncode != 0:
        pytest.skip(f"commit {_V1_COMMIT[:12]} (protocol version 1) is not in this checkout's history")
    tar = subprocess.run(
        [git, "-C", str(_ROOT), "archive", "--format=tar", _V1_COMMIT, "segmentstore"],
        check=True,
        capture_output=True,
    ).stdout
    out = tmp_path_factory.mktemp("protocol-v1")
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(out, filter="data")
    assert "PROTOCOL_VERSION = 1\n" in (out / "segmentstore/net/protocol.py").read_text()
    return out


def _v1_env(v1_code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(v1_code), "NUMBA_CACHE_DIR": str(v1_code / "numba-cache")}


def test_the_previous_releases_client_works_against_this_server(
    server_and_store: tuple[SegmentStoreServer, SegmentStore],
    v1_code: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _ = server_and_store
    said: list[Any] = []
    hello = server_module._Connection._hello

    def recording(self: Any, rid: int, args: Any, payload: memoryview) -> None:
        said.append(args.get("version") if isinstance(args, dict) else None)
        hello(self, rid, args, payload)

    monkeypatch.setattr(server_module._Connection, "_hello", recording)
    run = subprocess.run(
        [sys.executable, "-c", _V1_CLIENT, str(server.port)],
        cwd=v1_code,
        env=_v1_env(v1_code),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["module"].startswith(str(v1_code)), out["module"]  # the old code ran, not this one
    assert out == {
        "module": out["module"],
        "offsets": [0, 2, 5],
        "read": "abcdef",
        "read_many": "bcdef",
        "read_ranges": "cdef",
        "length": 6,
        "streams": ["scope/st"],
        "ping": True,
    }
    assert said and set(said) == {1}


@pytest.fixture(scope="module")
def v1_server_process(v1_code: Path) -> Iterator[int]:
    """The previous release's server in a subprocess (its numba kernels compile first: 10-40 s); its port."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _V1_SERVER],
        cwd=v1_code,
        env=_v1_env(v1_code),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready, _, _ = select.select([proc.stdout], [], [], 300)
        line = proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            proc.kill()
            pytest.fail(f"the version-1 server did not start: {line!r} {proc.communicate()[1][-3000:]}")
        yield int(line)
        proc.stdin.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_this_client_against_the_previous_releases_server(
    v1_server_process: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RemoteClient(("127.0.0.1", v1_server_process), timeout_s=20) as c:
        assert c.server_version() == 1  # its hello refused version 2; the client said 1 again
        _exercise(c)
    # a command of a later version than the server's is refused here, not sent
    monkeypatch.setitem(COMMANDS, "read_ranges", dataclasses.replace(COMMANDS["read_ranges"], since=2))
    with RemoteClient(("127.0.0.1", v1_server_process), timeout_s=20) as c:
        with pytest.raises(UnsupportedCommandError, match="speaks protocol version 1, read_ranges needs"):
            c.read_ranges([("s", 0, 10)])
        assert c.read("s", 0, 100).data == b"abcdef"


# ---------------------------------------------------------------- helpers
@pytest.fixture
def server_and_store(store: SegmentStore) -> Iterator[tuple[SegmentStoreServer, SegmentStore]]:
    with SegmentStoreServer(store, idle_timeout_s=60) as s:
        yield s, store


def _recv_header(s: socket.socket) -> Any:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            assert chunk, "closed"
            buf += chunk
        return buf

    prefix = exact(8)
    n, h = int.from_bytes(prefix[:4], "big"), int.from_bytes(prefix[4:], "big")
    return unpack(exact(n - 4)[:h])
