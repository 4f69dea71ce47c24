"""A served store never loads or compiles a numba kernel under a request (issue 23, item 6).

Run in a fresh process (no kernel imported yet, as on a user's first start): the server
makes every kernel ready in ``start()``; afterwards the first requests of every kind that
uses one (batch watermark lookups, record scans of memory and of files, ingestion runs,
bulk appends) import no module and give no kernel a new compiled signature.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from segmentstore.core.warmup import KernelWarmup, kernel_dispatchers, warm_kernels

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import numpy as np
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import RemoteClient
from segmentstore.net.server import SegmentStoreServer

assert not any(m.endswith("_kernels") for m in sys.modules), "a kernel module is imported already"
clock = ManualClock(1_000_000)
store = SegmentStore(clock, StoreConfig(advancer_thread=False), data_dir=sys.argv[1])
server = SegmentStoreServer(store)
port = server.start()
modules = set(sys.modules)


def overloads():  # of the kernels imported so far (imports nothing)
    out = {}
    for mod in ("segmentstore.core._kernels", "segmentstore.core._record_kernels"):
        for name, obj in vars(sys.modules.get(mod, json)).items():
            if hasattr(obj, "overloads") and not name.startswith("_"):
                out[f"{mod}.{name}"] = len(obj.overloads)
    return out


before = overloads()
rec = (60).to_bytes(4, "little") + bytes(60)
with RemoteClient(("127.0.0.1", port), timeout_s=60) as c:
    for name in ("mem", "file"):
        c.create_segment(name)
        for _ in range(100):
            c.append_batch(name, [rec] * 100)  # 6.4 KB per timestamp: 640 KB, 100 index entries
            clock.advance(1)
    store.snapshot()  # the tails go to the files: scans of "file" read bytes back from it
    store._container.segment("file").data.flush()
    out = {}
    for name in ("mem", "file"):
        length = c.get_info(name).length
        offsets = np.arange(0, length, 7, dtype=np.int64)
        out[name] = [
            int(c.watermarks_at(name, offsets)[-1]),
            c.scan_records(name, 0, length).records,
            int(c.ingestion_runs(name, 0, length).shape[1]),
            c.watermark_at(name, 0),
        ]
after = overloads()
print(json.dumps({
    "results": out,
    "new_modules": sorted(m for m in set(sys.modules) - modules if "numba" in m or "kernel" in m),
    "grown": {n: k - before.get(n, 0) for n, k in after.items() if k != before.get(n, 0)},
    "kernels": server.kernels.describe(),
}))
server.stop()
store.close()
"""


def test_the_first_requests_of_a_served_store_compile_and_load_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["new_modules"] == [], "a request imported a kernel module on the event loop"
    assert got["grown"] == {}, "a request compiled (or loaded) a kernel signature on the event loop"
    assert got["kernels"].startswith("kernels ready in ")
    for name in ("mem", "file"):
        wm, records, runs, first = got["results"][name]
        assert records == 10_000 and runs == 100 and wm > first, got


def test_every_kernel_a_request_calls_has_explicit_signatures_only() -> None:
    """A dispatcher that could compile on a call would compile under a request; none can."""
    report = warm_kernels()
    assert isinstance(report, KernelWarmup) and report.signatures >= 8
    assert warm_kernels() is report  # idempotent: the first report
    kernels = kernel_dispatchers()
    assert "segmentstore.core._record_kernels.walk_records" in kernels
    for name, d in kernels.items():
        assert d.signatures and not d._can_compile, name
    with pytest.raises(TypeError):  # a new type is refused, not compiled
        kernels["segmentstore.core._record_kernels.walk_records"](bytearray(8), 1)


def test_ingestwm_serve_prints_how_long_the_kernels_took() -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "serve", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert p.stdout is not None
        first, second = p.stdout.readline(), p.stdout.readline()
        assert first.startswith("listening on "), first
        assert second.startswith("kernels ready in ") and "kernel signatures" in second, second
    finally:
        p.terminate()
        p.wait(30)
