"""The Pravega endpoints beside ingestwm's own server (``segmentstore.net.server``): built from its
settings, started after it, stopped before it. Importing this module imports no gRPC; asking for the
endpoints does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from .endpoints import PravegaEndpoints

__all__ = ["for_server", "start_beside", "stop_beside", "announce"]


def for_server(server: Any, controller_port: int | None, segment_port: int) -> PravegaEndpoints | None:
    """A ``SegmentStoreServer``'s endpoints (its store, host, token and limits); ``None`` without a port."""
    if controller_port is None:
        return None
    if server.ssl_context is not None:
        raise InvalidArgumentError("the Pravega endpoints do not serve TLS: use them without --certfile")
    from .endpoints import PravegaEndpoints
    from .wire_server import WireLimits

    limits = WireLimits(
        max_connections=server.max_connections,
        handshake_timeout_s=server.handshake_timeout_s,
        idle_timeout_s=server.idle_timeout_s,
        frame_timeout_s=server.frame_timeout_s,
        max_buffered_bytes=max(server.max_buffered_bytes, WireLimits().max_buffered_bytes),
    )
    return PravegaEndpoints(server.store, server.host, controller_port, segment_port, server.token, limits)


def start_beside(endpoints: PravegaEndpoints | None, stop_server: Callable[[], None]) -> None:
    """Start ``endpoints`` (if any); if they cannot, stop the server they go with and raise."""
    if endpoints is None:
        return
    try:
        endpoints.start()
    except BaseException:
        stop_server()
        raise


def stop_beside(endpoints: PravegaEndpoints | None) -> None:
    """Stop ``endpoints`` (if any)."""
    if endpoints is not None:
        endpoints.stop()


def announce(endpoints: PravegaEndpoints | None, echo: Callable[[str], None]) -> None:
    """Say where the endpoints (if any) listen (``ingestwm serve`` prints it after ``listening on``)."""
    if endpoints is not None:
        echo(endpoints.describe())
