"""Clients of a segment store: the one interface, its in-process and its remote implementation.

``interface`` (the protocols, no server code), ``embedded`` (``EmbeddedClient``) and
``remote`` (``RemoteClient`` with its connections and append pipeline). The two
implementations load on first use, so the wire registry can import the interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .interface import SegmentClient, SegmentStoreClient, StreamClient

if TYPE_CHECKING:
    from .embedded import EmbeddedClient
    from .remote import RemoteClient

__all__ = ["EmbeddedClient", "RemoteClient", "SegmentClient", "SegmentStoreClient", "StreamClient"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedClient":
        from .embedded import EmbeddedClient

        return EmbeddedClient
    if name == "RemoteClient":
        from .remote import RemoteClient

        return RemoteClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
