"""kill -9 at random moments: acknowledged appends survive, no time goes backwards (docs/design.md §4.4).

A writer subprocess with ``sync="always"`` appends (and merges transactions, updates
attributes, runs advancer passes that evict segments, takes snapshots every few dozen
operations) and prints each acknowledged operation. The parent SIGKILLs it at a random
moment, recovers the data directory, and checks every acknowledgement ever printed.
The writer's clock restarts at the same value every cycle, so after the first cycle it
is always behind the recovered timestamps.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from segmentstore import LAST_WRITE_TIME, ManualClock, SegmentStore, StoreConfig
from segmentstore.clock import monotonic_s

T0 = 1_000_000
CFG = dict(
    sync="always",
    advancer_thread=False,
    snapshot_every_ops=40,
    cache_bytes=20_000,
    max_active_segments=3,
    eviction_age_ms=50,
    max_watermark_lag_ms=30,
    polling_period_ms=10,
)

WRITER = r"""
import hashlib, json, random, sys
from segmentstore import AttributeUpdate, ManualClock, SegmentStore, StoreConfig
d, seed, start, cfg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
clock = ManualClock(start)
s = SegmentStore(clock, StoreConfig(**cfg), data_dir=d)
names = [f"seg{i}" for i in range(5)]
for n in names:
    if not s.exists(n):
        s.create_segment(n)
rnd = random.Random(seed)
out = sys.stdout
out.write("ready\n"); out.flush()
counter = seed * 1_000_000
while True:
    clock.advance(rnd.randint(0, 3))
    n = rnd.choice(names)
    r = rnd.random()
    if r < 0.8:
        data = rnd.randbytes(rnd.randint(1, 3000))
        a = s.append(n, data)
        out.write(f"A {n} {a.offset} {a.length} {hashlib.sha256(data).hexdigest()} {a.timestamp}\n")
    elif r < 0.86:
        t = s.create_transaction(n)
        data = rnd.randbytes(rnd.randint(1, 500))
        s.append(t, data)
        s.seal(t)
        m = s.merge_transaction_result(t)
        out.write(f"A {n} {m.offset} {m.length} {hashlib.sha256(data).hexdigest()} {m.timestamp}\n")
    elif r < 0.94:
        s.advance_idle_watermarks()
        continue
    else:
        counter += 1
        ts = s.update_attributes(n, [AttributeUpdate(1, counter)])
        out.write(f"U {n} {counter} 0 - {ts}\n")
    out.flush()
"""


@dataclass(frozen=True)
class _Ack:
    kind: str
    name: str
    offset: int
    length: int
    sha: str
    ts: int


def _run_writer(d: Path, seed: int, kill_after_s: float) -> list[_Ack]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(d), str(seed), str(T0), json.dumps(CFG)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if first != b"ready\n":
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"writer did not start: {first!r} {err.decode()[-3000:]}")
    timer = threading.Timer(kill_after_s, lambda: proc.send_signal(signal.SIGKILL))
    timer.start()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        timer.cancel()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-3000:]
    acks = []
    for line in out.split(b"\n"):
        parts = line.decode().split(" ")
        if len(parts) != 6:
            continue  # an unfinished last line was not acknowledged to anyone
        k, n, off, ln, sha, ts = parts
        acks.append(_Ack(k, n, int(off), int(ln), sha, int(ts)))
    return acks


@pytest.mark.slow
def test_acknowledged_appends_survive_kill_minus_9(tmp_path: Path) -> None:
    rnd = random.Random(20_260_101)
    d = tmp_path / "store"
    acked: list[_Ack] = []
    last_attr: dict[str, int] = {}
    seen_tail: dict[str, tuple[int, int]] = {}  # name -> (LAST_WRITE_TIME, tail watermark)
    started = monotonic_s()
    cycles = 0
    while cycles < 8 or (monotonic_s() - started < 30 and cycles < 25):
        cycles += 1
        new = _run_writer(d, cycles, rnd.uniform(0.05, 0.5))
        if acked and new:
            assert new[0].ts >= acked[-1].ts, "timestamps went backwards across a restart"
        for a, b in itertools.pairwise(new):
            assert b.ts >= a.ts
        acked += new
        for a in new:
            if a.kind == "U":
                last_attr[a.name] = a.offset
        with SegmentStore(ManualClock(T0), StoreConfig(**CFG), data_dir=d) as s:  # type: ignore[arg-type]
            s._check()
            assert s.last_timestamp >= (acked[-1].ts if acked else 0)
            for a in acked:
                if a.kind != "A":
                    continue
                got = s.read(a.name, a.offset, a.length).data
                assert len(got) == a.length, (cycles, a)
                assert hashlib.sha256(got).hexdigest() == a.sha, (cycles, a)
                assert s.ingestion_time_at(a.name, a.offset) == a.ts
                assert s.watermark_at(a.name, a.offset) == a.ts - 1
            for name, value in last_attr.items():
                assert s.get_attributes(name)[1] >= value
            for name in (f"seg{i}" for i in range(5)):
                info = s.get_info(name)
                lwt = s.get_attributes(name)[LAST_WRITE_TIME]
                tail = s.read(name, info.length, 1).watermark
                old = seen_tail.get(name, (lwt, tail))
                assert lwt >= old[0] and tail >= old[1], f"{name} went back in time"
                acked_here = [a.ts for a in acked if a.name == name]
                assert lwt >= max(acked_here, default=lwt)
                seen_tail[name] = (lwt, tail)
            s._check()
    assert sum(a.kind == "A" for a in acked) > 100
    print(f"{cycles} kill -9 cycles, {len(acked)} acknowledged operations checked")
