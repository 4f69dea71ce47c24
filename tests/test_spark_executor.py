"""A Spark task's Python worker: the heap frozen once under PySpark's daemon, so that the full
collection the daemon runs after every task walks only what the tasks made, the client of a
task kept for the next one, and the memory a read frees kept for the next (``spark_source.executor``).

Each case runs in a fresh interpreter (freezing is for the whole process, not for the test's):
one that stands where PySpark's daemon forks its workers (``__main__`` is ``pyspark.daemon``)
reads two tasks' partitions from a served store, importing pandas between them, then one task
after the server restarted on the same port and one that Spark stops after its first batch,
then frees and makes again a few reads' worth of buffers; one that does not does the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import gc, importlib.util, json, sys
import pyarrow as pa
if sys.argv[1] == "daemon":  # where PySpark's daemon forks a worker: python -m pyspark.daemon
    sys.modules["__main__"].__spec__ = importlib.util.find_spec("pyspark.daemon")
from readergroup.format.events import decode_frames
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient
from segmentstore.net.server import SegmentStoreServer
from spark_source.executor import kept_clients, worker_prepared
from spark_source.options import parse_source_options
from spark_source.planner import SegmentRange
from spark_source.reading import BatchMeta
from spark_source.source import IngestPartition, _read_partition

store = SegmentStore(ManualClock(1_000_000), StoreConfig(advancer_thread=False))
server = SegmentStoreServer(store)
server.start()
client = EmbeddedClient(store)
client.create_stream("s/t", 1)
(seg,) = [x.name for x in client.get_stream("s/t").active_segments]
with EventWriter(client, "s/t") as w:
    for i in range(20_000):
        w.write_event(f"k{i % 7}", bytes(i % 50), i)
length = client.get_info(seg).length
frames = [f for f in decode_frames(client.read(seg, 0, length).data, 0)[0] if f.is_event]
options = parse_source_options({"endpoint": f"127.0.0.1:{server.port}", "stream": "s/t"}, streaming=True)
meta = BatchMeta(2_000_000, 0)
half = frames[10_000].offset
out = {"tasks": []}
got = []
for begin, end in ((0, half), (half, length)):
    if begin:
        import pandas  # a module of ~30,000 objects imported between tasks (pyarrow imports it so)
    part = IngestPartition([SegmentRange("s/t", seg, begin, end)], meta)
    got.append(pa.Table.from_batches(list(_read_partition(options, part))))
    gc.collect()  # what the daemon does after each task
    out["tasks"].append({
        "frozen": gc.get_freeze_count(), "young": len(gc.get_objects()),
        "accepted": server.accepted, "kept": kept_clients(),
    })
table = pa.concat_tables(got)
port = server.port
server.stop()  # restarted on the same port: a kept client's connections are gone
server = SegmentStoreServer(store, port=port)
server.start()
part = IngestPartition([SegmentRange("s/t", seg, 0, half)], meta)
again = pa.Table.from_batches(list(_read_partition(options, part)))
out["restarted"] = {"same": again.equals(got[0]), "accepted": server.accepted, "kept": kept_clients()}
stopped = _read_partition(options, IngestPartition([SegmentRange("s/t", seg, 0, length)], meta))
first = next(stopped)
stopped.close()  # Spark stopped reading the task (a limit reached, the task killed)
out["stopped"] = {"rows": first.num_rows, "kept": kept_clients()}
out["delivered"] = table.select(["offset", "routing_key", "payload"]).equals(
    pa.table({
        "offset": pa.array([f.offset for f in frames], pa.int64()),
        "routing_key": pa.array([f.routing_key for f in frames], pa.string()),
        "payload": pa.array([f.payload for f in frames], pa.binary()),
    })
)
out["prepared"] = worker_prepared()
server.stop()
import resource
def churn(rounds):  # buffers as a few reads free them and make them again: 3 x 8 MiB, touched
    for _ in range(rounds):
        held = [bytearray(8 << 20) for _ in range(3)]
        del held
churn(2)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn(8)
out["faults_per_round"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 8
print(json.dumps(out))
"""


def _run(where: str) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, where],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out: dict[str, Any] = json.loads(p.stdout.splitlines()[-1])
    assert out["delivered"]  # every event once, in order, as written
    return out


def _huge_pages_always() -> bool:
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return thp.exists() and "[always]" in thp.read_text()


def _glibc() -> bool:
    return sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")


def test_a_worker_of_the_daemon_keeps_its_client_for_the_next_task() -> None:
    out = _run("daemon")
    first, second = out["tasks"]
    assert first["kept"] == second["kept"] == 1
    assert first["accepted"] >= 1
    assert second["accepted"] == first["accepted"]  # the second task made no connection
    restarted = out["restarted"]
    assert restarted["same"]  # the kept client reconnected to the new server and read the same events
    assert restarted["accepted"] >= 1 and restarted["kept"] == 1
    assert out["stopped"]["rows"] > 0
    assert out["stopped"]["kept"] == 0  # a task not read to its end closes its client


def test_anywhere_else_each_task_connects_and_closes() -> None:
    out = _run("plain")
    first, second = out["tasks"]
    assert first["kept"] == second["kept"] == 0
    assert second["accepted"] > first["accepted"]
    assert out["restarted"]["same"] and out["stopped"]["kept"] == 0


def test_a_worker_of_the_daemon_freezes_its_heap_once_and_keeps_what_a_read_frees() -> None:
    """Collections after a task walk little; memory a read frees is not given back to the kernel to be
    faulted in again page by page at the next read (under glibc: 24 MiB a round, 6,144 pages)."""
    out = _run("daemon")
    if _glibc():
        assert out["faults_per_round"] < 100, out
    first, second = out["tasks"]
    assert out["prepared"]
    assert first["frozen"] > 50_000, first  # pyarrow's, numba's kernels', the client's objects
    assert first["young"] < 5_000, first  # what a collection after the task walks
    assert second["frozen"] > first["frozen"] + 10_000, second  # frozen again: pandas came in
    assert second["young"] < 5_000, second


def test_anywhere_else_nothing_is_frozen_and_malloc_is_left_alone() -> None:
    """(glibc's own thresholds give the churned memory back: the measure above can fail)"""
    out = _run("plain")
    if _glibc() and not _huge_pages_always():  # (with huge pages a round faults a dozen 2 MiB pages)
        assert out["faults_per_round"] > 1_000, out
    first, second = out["tasks"]
    assert not out["prepared"]
    assert first["frozen"] == second["frozen"] == 0
    assert second["young"] > 50_000, second  # the heap a collection walks without it
