"""Count the public calls made on a ``SegmentStoreClient``, by method name (and stop counting).

What a reader costs in store calls: ``bench_waiting`` and the reader tests count with it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from segmentstore.client import EmbeddedClient, SegmentStoreClient

__all__ = ["count_calls", "uncount"]


def count_calls(client: SegmentStoreClient) -> Counter[str]:
    """Count every public call made on ``client`` from now on (by method name): the interface's, and an
    embedded client's bulk read (``read_packed``)."""
    calls: Counter[str] = Counter()
    extra = ("read_packed",) if isinstance(client, EmbeddedClient) else ()
    for name in (*dir(SegmentStoreClient), *extra):
        if name.startswith("_") or name in ("close",):
            continue
        method = getattr(client, name)

        def counted(*a: Any, _m: Callable[..., Any] = method, _n: str = name, **kw: Any) -> Any:
            calls[_n] += 1
            return _m(*a, **kw)

        setattr(client, name, counted)
    return calls


def uncount(client: SegmentStoreClient) -> None:
    """The counting wrappers of ``count_calls`` off again."""
    for name in list(vars(client)):
        if not name.startswith("_") and callable(getattr(client, name)):
            delattr(client, name)
