"""The main job: a small store scenario on a simulated clock that prints watermarks.

Two segments are written, one of them gets a transaction merged, then both go idle
while the watermark advancer keeps their tail watermarks moving (PDP-26's diagram).
"""

from __future__ import annotations

from collections.abc import Callable

from segmentstore import ManualClock, SegmentStore, StoreConfig

__all__ = ["run_demo"]


def _hms(ms: int) -> str:
    s = ms // 1000
    return f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{ms % 1000:03d}"


def run_demo(echo: Callable[[str], None] = print) -> None:
    """Run the scenario and print what a reader of each segment sees."""
    start = 12 * 3600 * 1000  # 12:00:00.000 on the simulated clock
    clock = ManualClock(start)
    config = StoreConfig(max_watermark_lag_ms=2_000, polling_period_ms=500)
    with SegmentStore(clock=clock, config=config) as store:
        for s in ("demo/s1", "demo/s2"):
            store.create_segment(s)
        echo("ingestwm demo: two segments written, one transaction merged, then idle")
        echo(f"{'time':>12}  {'operation':<32} {'watermark s1':>14} {'watermark s2':>14}")

        def show(what: str) -> None:
            w1 = store.watermark_at("demo/s1", store.get_info("demo/s1").length)
            w2 = store.watermark_at("demo/s2", store.get_info("demo/s2").length)
            echo(f"{_hms(clock.now()):>12}  {what:<32} {_hms(w1 + 1):>14} {_hms(w2 + 1):>14}")

        for i in range(3):
            clock.advance(250)
            store.append("demo/s1", f"1{'ABC'[i]}".encode())
            store.append("demo/s2", f"2{'ABC'[i]}".encode())
            show(f"append 1{'ABC'[i]}, 2{'ABC'[i]}")
        txn = store.create_transaction("demo/s1")
        store.append(txn, b"1D")
        clock.advance(400)
        store.seal(txn)
        offset = store.merge_transaction(txn)
        show(f"merge txn into s1 at {offset}")
        for _ in range(12):
            clock.advance(500)
            advanced = store.advance_idle_watermarks()
            show("advancer: " + (", ".join(n.split("/")[1] for n in advanced) or "nothing idle"))
        echo("")
        echo("Watermarks are exclusive: every later byte has ingestion time after the one shown")
        echo("minus 1 ms. Idle segments keep advancing, lagging at most max_watermark_lag +")
        echo(f"polling_period = {config.max_watermark_lag_ms + config.polling_period_ms} ms.")
        for s in ("demo/s1", "demo/s2"):
            r = store.read(s, 0, 1 << 20)
            echo(f"read {s}: {r.data!r} -> watermark {_hms(r.watermark)} (at_tail={r.at_tail})")
        stats = store.advancer_stats
        echo(f"advancer: {stats.passes} passes, {stats.segments_advanced} segment advances")
