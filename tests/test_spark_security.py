"""The Spark source and sink (and ``ingestwm group``) against a store served with a token and TLS.

The certificate is self-signed, made at test time with the ``openssl`` command. The
token must reach the server and nowhere else: not the options' ``repr``, not an
error message, not a query's progress.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from spark_fixtures import Served, run_available_now, serve, spark_fixture  # noqa: F401 (fixtures)

from segmentstore import ManualClock, StoreConfig
from segmentstore.client.security import UnreachableStoreError, client_security
from spark_source.errors import InvalidOptionError
from spark_source.options import parse_sink_options, parse_source_options

TOKEN = "s3cret-T0ken-xyzzy"


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return crt, key


@pytest.fixture(name="secure")
def secure_fixture(cert: tuple[Path, Path]) -> Iterator[Served]:
    """A store served with TOKEN over TLS."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    s = serve(ManualClock(1_000_000), StoreConfig(), token=TOKEN, ssl_context=ctx)
    yield s
    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_token_and_tls_options_never_show_the_token(
    cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"endpoint": "127.0.0.1:1", "stream": "s/a"}
    o = parse_source_options({**base, "token": TOKEN, "tlsCaFile": str(cert[0])}, streaming=True)
    assert o.security.token == TOKEN and o.security.tls and o.security.ca_pem
    assert TOKEN not in repr(o) and TOKEN not in str(o)
    monkeypatch.setenv("INGESTWM_TOKEN", TOKEN)
    sink = parse_sink_options({**base, "tls": "true"})
    assert sink.security.token == TOKEN and sink.security.tls and TOKEN not in repr(sink)
    assert parse_source_options({**base, "token": "other"}, streaming=True).security.token == "other"
    with pytest.raises(InvalidOptionError, match="tlsCaFile") as e:
        parse_source_options({**base, "token": TOKEN, "tlsCaFile": str(cert[0]) + ".missing"}, streaming=True)
    assert TOKEN not in str(e.value)
    with pytest.raises(InvalidOptionError, match="option tlsCaFile needs TLS"):
        parse_sink_options({**base, "tls": "false", "tlsCaFile": str(cert[0])})
    with pytest.raises(InvalidOptionError, match="option token is empty"):
        parse_sink_options({**base, "token": " "})


def test_a_store_that_is_down_or_refuses_the_token_fails_at_once(
    secure: Served, cert: tuple[Path, Path]
) -> None:
    port = _free_port()
    with pytest.raises(UnreachableStoreError, match=f"no ingestwm server answers at 127.0.0.1:{port}"):
        client_security().probe(f"127.0.0.1:{port}")
    with pytest.raises(UnreachableStoreError, match="refused this client's token") as e:
        client_security("wrong-" + TOKEN, ca_file=str(cert[0])).probe(secure.endpoint)
    assert TOKEN not in str(e.value)
    with pytest.raises(UnreachableStoreError, match="turn on the client's TLS"):
        client_security(TOKEN).probe(secure.endpoint)
    with pytest.raises(UnreachableStoreError):  # the system's CAs do not trust a self-signed certificate
        client_security(TOKEN, tls=True).probe(secure.endpoint)
    client_security(TOKEN, ca_file=str(cert[0])).probe(secure.endpoint)
    client_security(TOKEN, ca_file=str(cert[0]), server_name="localhost").probe(secure.endpoint)


@pytest.mark.slow
def test_spark_reads_and_writes_a_store_served_with_a_token_and_tls(
    spark: Any, secure: Served, cert: tuple[Path, Path], tmp_path: Path
) -> None:
    secure.client.create_stream("sec/in", 2)
    secure.client.create_stream("sec/out", 1)
    written = [(f"k{i % 5}", f"e{i}".encode(), 1_000 + i) for i in range(40)]
    secure.write("sec/in", written)
    tls = {"tlsCaFile": str(cert[0])}
    df = secure.reader(spark, "sec/in", startingPosition="earliest", token=TOKEN, **tls)
    rows, progress = run_available_now(df, str(tmp_path / "ckpt"))
    assert Counter(r.payload for r in rows if r.kind == "event") == Counter(p for _, p, _ in written)
    assert TOKEN not in repr(progress)
    # (INGESTWM_TOKEN would have to be set before the JVM starts: test_token_and_tls_options_* reads it)
    batch = spark.createDataFrame([(k, p) for k, p, _ in written], "routing_key string, payload binary")
    batch.write.format("ingestwm").option("endpoint", secure.endpoint).option("stream", "sec/out").option(
        "tlsCaFile", str(cert[0])
    ).option("token", TOKEN).mode("append").save()
    out = (
        spark.read.format("ingestwm")
        .option("endpoint", secure.endpoint)
        .option("stream", "sec/out")
        .options(token=TOKEN, **tls)
        .load()
    )
    assert Counter(r.payload for r in out.collect() if r.kind == "event") == Counter(p for _, p, _ in written)
    bad = secure.reader(spark, "sec/in", startingPosition="earliest", **tls)
    with pytest.raises(Exception, match="refused this client's token") as e:
        run_available_now(bad, str(tmp_path / "ckpt2"))
    assert TOKEN not in str(e.value)


def test_group_commands_reach_a_store_served_with_a_token_and_tls(
    secure: Served, cert: tuple[Path, Path]
) -> None:
    from bench.cli.group import group

    runner = CliRunner()
    ok = runner.invoke(group, ["list", "--endpoint", secure.endpoint, "--tls-ca-file", str(cert[0])],
                       env={"INGESTWM_TOKEN": TOKEN})  # fmt: skip
    assert ok.exit_code == 0, ok.output
    no_tls = runner.invoke(group, ["list", "--endpoint", secure.endpoint, "--token", TOKEN])
    assert no_tls.exit_code != 0 and "TLS" in no_tls.output and TOKEN not in no_tls.output


@pytest.mark.slow
def test_a_query_on_a_store_that_is_not_running_fails_at_once(spark: Any, tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", "s/a")
        .option("timeoutMs", "600000")
        .load()
    )  # without the probe the query would retry for timeoutMs (10 minutes) first
    with pytest.raises(Exception, match=f"no ingestwm server answers at {endpoint}"):
        run_available_now(df, str(tmp_path / "ck"))
    with pytest.raises(Exception, match=r"unknown option 'tokn' .*lower case.*did you mean token"):
        spark.readStream.format("ingestwm").option("endpoint", endpoint).option("stream", "s/a").option(
            "tokn", TOKEN
        ).load()


def test_a_flink_job_reads_a_store_served_with_a_token_and_tls(
    secure: Served, cert: tuple[Path, Path]
) -> None:
    from flink_compat import PravegaSource, connect_store
    from readergroup.config import ReaderGroupConfig, TimeDomain
    from readergroup.reading.group import ReaderGroupManager
    from segmentstore import ManualClock

    secure.client.create_stream("sec/flink", 1)
    secure.write("sec/flink", [("k", b"e%d" % i, 5 + i) for i in range(5)])
    with pytest.raises(UnreachableStoreError, match="refused this client's token"):
        connect_store(secure.endpoint, tls_ca_file=str(cert[0]))
    with connect_store(secure.endpoint, token=TOKEN, tls_ca_file=str(cert[0])) as client:
        group = ReaderGroupManager(client, ManualClock(0)).create_reader_group(
            "g", ReaderGroupConfig(("sec/flink",), time_domain=TimeDomain.INGESTION_TIME)
        )
        (subtask,) = PravegaSource(group, parallelism=1).create_subtasks()
        got = [e.value for _ in range(20) for e in subtask.poll().elements if hasattr(e, "value")]
    assert got == [b"e%d" % i for i in range(5)]
