"""Exactly-once restart: the query process is killed (SIGKILL) mid-batch and restarted from its checkpoint.

The query runs in a child process (its own driver JVM) against a store served by this
process. Its ``foreachBatch`` writes each micro-batch's events to ``batch-<id>.json``
(replacing the file, so a replayed batch id rewrites its own file); in batch 2 of the
first run it signals and hangs, and the test kills the whole process group. More events
are written, a second run resumes from the checkpoint; all files together must hold
every event exactly once, and the replayed batch the same events as before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from spark_fixtures import Served, served_fixture  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

CHILD = r"""
import json, os, sys, time
from pathlib import Path
from spark_source.session import local_session

endpoint, stream, ckpt, out, hang_batch = sys.argv[1:6]
out = Path(out)
spark = local_session("ingestwm-restart", master="local[1]", shuffle_partitions=1, fast_start=True)
df = (spark.readStream.format("ingestwm").option("endpoint", endpoint).option("stream", stream)
      .option("startingPosition", "earliest").option("maxEventsPerTrigger", "25").load())

def on_batch(batch, batch_id):
    rows = [[r.segment, r.offset, r.payload.decode()] for r in batch.filter("kind = 'event'").collect()]
    tmp = out / f".batch-{batch_id}.tmp"
    tmp.write_text(json.dumps(rows))
    tmp.replace(out / f"batch-{batch_id}.json")
    if batch_id == int(hang_batch):
        (out / "hanging").write_text(str(batch_id))
        time.sleep(600)  # killed here, after the output, before Spark commits the batch

q = (df.writeStream.foreachBatch(on_batch).option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start())
q.awaitTermination()
(out / "finished").write_text("ok")
"""


def _start(script: Path, served: Served, ckpt: Path, out: Path, hang_batch: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, str(script), served.endpoint, "r/kill", str(ckpt), str(out), str(hang_batch)],
        stdout=subprocess.DEVNULL,
        stderr=open(out / "stderr.log", "ab"),
        env=env,
        start_new_session=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            log = (path.parent / "stderr.log").read_text()[-3000:]
            pytest.fail(f"the query process exited ({proc.returncode}) before {path.name}:\n{log}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out waiting for {path.name}")
        time.sleep(0.1)


def test_a_killed_query_restarts_exactly_once(served: Served, tmp_path: Path) -> None:
    served.client.create_stream("r/kill", 3)
    written = [f"first-{i}" for i in range(120)]
    served.write("r/kill", [(f"k{i % 17}", p.encode(), None) for i, p in enumerate(written)])
    script = tmp_path / "query.py"
    script.write_text(CHILD)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()

    first = _start(script, served, ckpt, out, hang_batch=2)
    try:
        _wait_for(out / "hanging", first, 240)
        replayed_before = json.loads((out / "batch-2.json").read_text())
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        first.wait(30)
    more = [f"second-{i}" for i in range(40)]
    served.write("r/kill", [(f"k{i % 5}", p.encode(), None) for i, p in enumerate(more)])

    second = _start(script, served, ckpt, out, hang_batch=-1)
    try:
        _wait_for(out / "finished", second, 240)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
        second.wait(30)

    batches = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("batch-*.json")}
    assert sorted(batches) == list(range(len(batches)))  # no batch id skipped
    assert sorted(map(tuple, batches[2])) == sorted(map(tuple, replayed_before))  # the replay read the same
    delivered = [row[2] for rows in batches.values() for row in rows]
    assert Counter(delivered) == Counter(written + more)  # every event, exactly once
    positions = [(row[0], row[1]) for rows in batches.values() for row in rows]
    assert len(positions) == len(set(positions))
