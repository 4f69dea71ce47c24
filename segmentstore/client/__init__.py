"""Clients of a segment store: the one interface, its in-process and its remote implementation."""

from .embedded import EmbeddedClient, SegmentStoreClient
from .remote import RemoteClient

__all__ = ["EmbeddedClient", "RemoteClient", "SegmentStoreClient"]
