"""The two sentinel watermarks, and how every output writes them: never as numbers.

Inside the store, the reader groups and the operators a watermark is an int64 with two
reserved values (``segmentstore.limits``): ``INT64_MIN`` for "none yet" (nothing emitted)
and ``INT64_MAX`` for ``+inf`` (event time ended: a finished Flink source). Neither is a
time, and a lag computed from one (``now - INT64_MAX``) is not a duration. So every output
(tables, CSV, JSON, figures, manifests; docs/metrics.md, "Watermarks that are not times")
writes them as *no value*:

- CSV: an empty cell; JSON: ``null``; tables: ``-`` (none yet, or a statistic with no
  sample) and ``∞`` (``+inf``, where a table shows a watermark);
- a lag at such a sample has no value either, and means, maxima and percentiles are
  taken over the samples that have one; figures leave those samples out.

``real_time`` is the one conversion; ``lag_ms`` the lag it allows. O(1) each.
"""

from __future__ import annotations

from segmentstore.limits import INT64_MAX, INT64_MIN

__all__ = ["NONE_YET", "END_OF_TIME", "REAL_LIMIT", "real_time", "lag_ms"]

NONE_YET = INT64_MIN
"""The watermark before any was emitted."""

END_OF_TIME = INT64_MAX
"""The watermark ``+inf``: no event time follows."""

REAL_LIMIT = 10**15
"""No time (ms since the epoch: the year 33,658) nor duration an output holds is this large."""


def real_time(watermark: int | None) -> int | None:
    """``watermark`` if it is a time; ``None`` for none yet and ``+inf`` (and for ``None``)."""
    if watermark is None or watermark in (NONE_YET, END_OF_TIME):
        return None
    return watermark


def lag_ms(now: int, watermark: int | None) -> int | None:
    """``now - watermark`` when the watermark is a time, else ``None``."""
    w = real_time(watermark)
    return None if w is None else now - w
