"""The Pravega front door's write path beside ingestwm's own, into one durable served store, in one run.

``ingestwm serve --data-dir D --sync always --pravega-port 0`` runs in another process (a
durable store: an acknowledged event is on disk, as Pravega acknowledges). Into it, one after
the other:

- ``pravega_client``: the real Pravega client (``pravega`` 0.3.8) writing 100-byte events with
  ``write_event_async`` (awaited in windows of ``WINDOW``, ``max_inflight_events`` as large),
  routing keys over a stream of 4 segments, then ``flush``: events/s;
- ``EventWriter``: ingestwm's own writer over ``RemoteClient``, the same events and keys into
  another 4-segment stream, then ``flush``: events/s (the ratio's baseline);

and for each, the server process's CPU time over the run divided by the events (µs/event,
Linux ``/proc``). Before any figure is reported every event is checked stored: each stream's
segments are read back through ingestwm and hold exactly the events written, in whole frames.
Then, in this process, a reader's block decode (1 MiB of 100-byte events, the numba kernels)
of Pravega's frames beside ingestwm's, and a reader group reading each framing's stream: the
same speed class is the aim (ratios near 1).
The 1-minute load average is a row after each figure (the machine may be shared).
Run ``python -m bench.perf.bench_pravega [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.events import block_arrays, decode_columns, decode_event_block, encode_event
from readergroup.format.pravega_frames import (
    decode_pravega_block,
    decode_pravega_events,
    encode_pravega_event,
)
from readergroup.reading.group import ReaderGroup
from readergroup.writing.writer import EventWriter
from segmentstore import FRAMING_PRAVEGA, ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.controller.controller import controller_of
from segmentstore.controller.stream_config import StreamConfig

from .errors import BenchmarkError
from .serving import process_cpu_s
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main"]

EVENT_BYTES = 100
SEGMENTS = 4
KEYS = 64
WINDOW = 1_000
"""Events a ``write_event_async`` loop has in flight (awaited together), and the writer's inflight cap."""
_ROOT = Path(__file__).resolve().parents[2]


def _events(n: int, tag: str) -> list[tuple[str, str]]:
    """``n`` (routing key, 100-byte ASCII payload) pairs, each payload distinct."""
    return [(f"key-{i % KEYS}", f"{tag}-{i:012d}-".ljust(EVENT_BYTES, "x")) for i in range(n)]


@contextmanager
def _served(data_dir: Path) -> Iterator[tuple[int, int, int]]:
    """``ingestwm serve`` with the Pravega endpoints on a durable store: (pid, port, controller port)."""
    args = [sys.executable, "-m", "bench.cli", "serve", "--port", "0", "--data-dir", str(data_dir)]
    args += ["--sync", "always", "--pravega-port", "0", "--pravega-segment-port", "0"]
    p = subprocess.Popen(args, cwd=_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        first, second = p.stdout.readline(), p.stdout.readline()
        port = re.search(r":(\d+)$", first.strip())
        ctl = re.search(r"pravega controller on .*:(\d+), pravega segment store", second)
        if not (port and ctl):
            raise BenchmarkError(f"ingestwm serve --pravega-port did not start: {first!r} {second!r}")
        yield p.pid, int(port.group(1)), int(ctl.group(1))
    finally:
        p.terminate()
        p.wait(60)


def _load() -> float:
    return os.getloadavg()[0]


def _write_pravega(controller_port: int, scope: str, events: list[tuple[str, str]]) -> None:
    """The events through ``pravega_client``'s ``write_event_async`` (``WINDOW`` in flight), then flush."""
    import pravega_client

    m = pravega_client.StreamManager(f"tcp://127.0.0.1:{controller_port}", False, False)
    m.create_scope(scope)
    m.create_stream(scope, "s", SEGMENTS)
    w = m.create_writer(scope, "s", WINDOW)

    async def write() -> None:
        for i in range(0, len(events), WINDOW):
            await asyncio.gather(*(w.write_event_async(p, k) for k, p in events[i : i + WINDOW]))

    asyncio.run(write())
    w.flush()


def _write_ingestwm(c: SegmentStoreClient, stream: str, events: list[tuple[str, str]]) -> None:
    with EventWriter(c, stream) as w:
        for k, p in events:
            w.write_event(k, p.encode())
        w.flush()


def _stored(c: RemoteClient, stream: str, pravega: bool) -> Counter[bytes]:
    """Every event stored in ``stream``'s segments, read back through ingestwm (whole frames checked)."""
    out: Counter[bytes] = Counter()
    for seg in c.get_stream(stream).active_segments:
        length = c.get_info(seg.name).length
        data = bytearray()
        while len(data) < length:
            data += c.read(seg.name, len(data), min(1 << 20, length - len(data))).data
        if pravega:
            cols, consumed = decode_pravega_events(bytes(data))
            payloads = cols.payloads
        else:
            dec, consumed = decode_columns(bytes(data), events_only=True)
            payloads = dec["payload"]
        if consumed != length:
            raise BenchmarkError(
                f"segment {seg.name}: {length - consumed} bytes at its end are not whole frames"
            )
        out.update(payloads.to_pylist())
    return out


def _measure(pid: int, port: int, controller_port: int, size: Size) -> list[Row]:
    n = sized(size, 2_000, 50_000, 200_000)
    rows: list[Row] = []
    with RemoteClient(("127.0.0.1", port), timeout_s=120) as c:
        # warm up both paths (connections, segment containers, kernels), checked like the timed runs
        for tag, pravega in (("wp", True), ("wi", False)):
            warm = _events(500, tag)
            if pravega:
                _write_pravega(controller_port, "warm", warm)
                stream = "warm/s"
            else:
                c.create_stream("warmi/s", SEGMENTS)
                _write_ingestwm(c, "warmi/s", warm)
                stream = "warmi/s"
            if _stored(c, stream, pravega) != Counter(p.encode() for _, p in warm):
                raise BenchmarkError(f"warm-up: {stream} does not hold the events written")
        results = {}
        for label, pravega in (("pravega_client write_event_async", True), ("ingestwm EventWriter", False)):
            events = _events(n, "p" if pravega else "i")
            stream = "bp/s" if pravega else "bi/s"
            if not pravega:
                c.create_stream(stream, SEGMENTS)
            srv0, load0, t0 = process_cpu_s(pid), _load(), monotonic_s()
            if pravega:
                _write_pravega(controller_port, "bp", events)
            else:
                _write_ingestwm(c, stream, events)
            elapsed = monotonic_s() - t0
            server_us = (process_cpu_s(pid) - srv0) / n * 1e6
            load = max(load0, _load())
            if _stored(c, stream, pravega) != Counter(p.encode() for _, p in events):
                raise BenchmarkError(f"{label}: {stream} does not hold exactly the {n} events written")
            if len(c.get_stream(stream).active_segments) != SEGMENTS:
                raise BenchmarkError(f"{label}: {stream} does not have {SEGMENTS} segments")
            results[label] = (n / elapsed, server_us, load)
        base_rate, base_cpu, _ = results["ingestwm EventWriter"]
        for label, (rate, cpu, load) in results.items():
            rows.append(
                row(f"{label} 100 B, {SEGMENTS} segments", rate, "events/s", "EventWriter", rate / base_rate)
            )
            rows.append(
                row(
                    "  its server CPU per event",
                    cpu,
                    "us/event",
                    "EventWriter's",
                    cpu / base_cpu if base_cpu else None,
                )
            )
            rows.append(row("  load average (1 min) meanwhile", load, "load"))
    return rows


def _decode_rows(size: Size) -> list[Row]:
    """Blocks of 100-byte events decoded as a reader decodes them, Pravega's framing beside ingestwm's
    (a 7-byte routing key and an event time each): events/s, each checked first."""
    n = sized(size, 2_000, 10_000, 10_000)  # a 1 MiB block: a reader's default read
    rounds = sized(size, 3, 100, 400)
    payloads = [p.encode() for _, p in _events(n, "d")]
    pravega = b"".join(encode_pravega_event(p) for p in payloads)
    ingestwm = b"".join(encode_event(k, p.encode(), 1_000 + i) for i, (k, p) in enumerate(_events(n, "d")))
    rates = {}
    for label, buf, decode in (
        ("Pravega", pravega, decode_pravega_block),
        ("ingestwm", ingestwm, decode_event_block),
    ):
        decode(buf, 0)  # (warm: the kernels' first call)
        block, consumed = decode(buf, 0)
        if consumed != len(buf) or block_arrays(block)[1].to_pylist() != payloads:
            raise BenchmarkError(f"{label} framing: the decoded block is not the events encoded")
        t0 = monotonic_s()
        for _ in range(rounds):
            decode(buf, 0)
        rates[label] = n * rounds / (monotonic_s() - t0)
    load = _load()
    return [
        row("decode a block of Pravega frames (100 B)", rates["Pravega"], "events/s", "ingestwm frames",
            rates["Pravega"] / rates["ingestwm"]),
        row("decode a block of ingestwm frames (100 B)", rates["ingestwm"], "events/s", "itself", 1.0),
        row("  load average (1 min) meanwhile", load, "load"),
    ]  # fmt: skip


def _group_rows(size: Size) -> list[Row]:
    """A reader group (one reader, ``read_batch``) reading a 4-segment stream of 100-byte events in a
    store in this process, Pravega-framed beside ingestwm-framed (the same events appended in 1 MiB
    blocks either way; ingestwm's with a 6-7 byte key): events/s, every event counted."""
    n = sized(size, 4_000, 200_000, 1_000_000)
    rates = {}
    for label in ("Pravega", "ingestwm"):
        store = SegmentStore(clock=ManualClock(1_000_000))
        try:
            c = EmbeddedClient(store)
            if label == "Pravega":
                ctl = controller_of(store)
                ctl.create_scope("g")
                info = ctl.create_stream_in_scope("g/s", StreamConfig(min_segments=SEGMENTS), FRAMING_PRAVEGA)
            else:
                info = c.create_stream("g/s", SEGMENTS)
            per = [bytearray() for _ in range(SEGMENTS)]  # the same events, round robin, framed each way
            for i, (k, p) in enumerate(_events(n, "g")):
                frame = (
                    encode_pravega_event(p.encode()) if label == "Pravega" else encode_event(k, p.encode())
                )
                per[i % SEGMENTS] += frame
            for seg, data in zip(info.active_segments, per, strict=True):
                for at in range(0, len(data), 1 << 20):  # appends of 1 MiB, the reader's block
                    store.append(seg.name, bytes(data[at : at + (1 << 20)]))
            config = ReaderGroupConfig(("g/s",), time_domain=TimeDomain.INGESTION_TIME)
            for name in ("warm", "timed"):  # (the first read loads and warms the kernels)
                group = ReaderGroup(name, config, c)
                reader = group.create_reader("r")
                got = 0
                t0 = monotonic_s()
                while got < n:
                    b = reader.read_batch()
                    if not len(b) and b.watermark is None:
                        break
                    got += len(b)
            rates[label] = n / (monotonic_s() - t0)
            if got != n:
                raise BenchmarkError(f"{label} reader group: read {got} of the {n} events")
        finally:
            store.close()
    load = _load()
    return [
        row("reader group read_batch, Pravega-framed", rates["Pravega"], "events/s", "ingestwm-framed",
            rates["Pravega"] / rates["ingestwm"]),
        row("reader group read_batch, ingestwm-framed", rates["ingestwm"], "events/s", "itself", 1.0),
        row("  load average (1 min) meanwhile", load, "load"),
    ]  # fmt: skip


def run(size: Size = "full") -> list[Row]:
    """The served durable store's write paths (started and stopped here), then the decoders: the rows."""
    with (
        tempfile.TemporaryDirectory(prefix="ingestwm-bench-pravega-") as d,
        _served(Path(d)) as (pid, port, ctl),
    ):
        rows = _measure(pid, port, ctl, size)
    return rows + _decode_rows(size) + _group_rows(size)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_pravega [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
