"""The int64 range every time, offset and attribute value lives in (Pravega's ``long``): defined here only.

``INT64_MIN`` doubles as "no watermark yet" and ``INT64_MAX`` as "end of time"
wherever a layer names them so (``readergroup.frontier``, ``flink_compat.watermark``).
"""

from __future__ import annotations

__all__ = ["INT64_MIN", "INT64_MAX", "is_int64"]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def is_int64(value: object) -> bool:
    """Whether ``value`` is an ``int`` (not a ``bool``) in ``[INT64_MIN, INT64_MAX]``. O(1)."""
    return type(value) is int and INT64_MIN <= value <= INT64_MAX
