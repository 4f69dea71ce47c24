"""Both Pravega endpoints of one store, started and stopped together: the controller and the segment store.

``PravegaEndpoints(store, host, controller_port, segment_port, token)`` serves the
controller (gRPC) on ``controller_port`` and the segment store (wire protocol) on
``segment_port`` (0, the default, picks a free port: the controller's ``getURI`` tells
clients where it is). Both bind where the server binds; with ``token`` they require
credentials (``auth``); a non-loopback address without a token is refused, as ingestwm's
own server refuses it. The store must take an append of a whole Pravega block
(``PRAVEGA_MAX_BLOCK_BYTES``: one 8 MiB event and its 8-byte header).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading

from ..errors import InvalidArgumentError
from ..store import SegmentStore
from .auth import DelegationTokens
from .grpc_controller import ControllerEndpoint, ControllerServicer
from .transactions import SWEEP_S
from .translate import PravegaStreams
from .wire_server import WireEndpoint, WireLimits

__all__ = ["PravegaEndpoints", "PRAVEGA_MAX_BLOCK_BYTES", "announced_host"]

_log = logging.getLogger(__name__)

PRAVEGA_MAX_BLOCK_BYTES = 8 * 1024 * 1024 + 8
"""The largest append block a Pravega writer sends: an 8 MiB event and its header (``MAX_WRITE_SIZE``)."""


def announced_host(host: str) -> str:
    """The address ``getURI`` gives clients: the bound one, or this machine's name for a wildcard."""
    try:
        if ipaddress.ip_address(host).is_unspecified:
            return socket.getfqdn()
    except ValueError:
        pass
    return host or socket.getfqdn()


class PravegaEndpoints:
    """The controller and segment-store endpoints over ``store``; ``start()``, ``stop()``."""

    def __init__(
        self,
        store: SegmentStore,
        host: str,
        controller_port: int,
        segment_port: int = 0,
        token: str | None = None,
        limits: WireLimits | None = None,
    ) -> None:
        for what, p in (("pravega_port", controller_port), ("pravega_segment_port", segment_port)):
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 65535:
                raise InvalidArgumentError(f"server {what} must be an int in [0, 65535], got {p!r}")
        if store.config.max_append_bytes < PRAVEGA_MAX_BLOCK_BYTES:
            raise InvalidArgumentError(
                f"the Pravega endpoints need StoreConfig.max_append_bytes >= {PRAVEGA_MAX_BLOCK_BYTES} "
                f"(a Pravega writer's largest block), got {store.config.max_append_bytes}"
            )
        self.limits = limits if limits is not None else WireLimits()
        tokens = DelegationTokens(token) if token is not None else None
        streams = self.streams = PravegaStreams(store)
        self._stopped = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.wire = WireEndpoint(store, host, segment_port, tokens, self.limits)
        self._announce = announced_host(host)
        servicer = ControllerServicer(
            streams,
            wire_node=lambda: (self._announce, self.wire.port),
            controller_node=lambda: (self._announce, self.controller.port),
            tokens=tokens,
        )
        self.controller = ControllerEndpoint(
            servicer,
            host,
            controller_port,
            token,
            handshake_timeout_s=self.limits.handshake_timeout_s,
            idle_timeout_s=self.limits.idle_timeout_s,
            max_connections=self.limits.max_connections,
        )

    @property
    def controller_port(self) -> int:
        return self.controller.port

    @property
    def segment_port(self) -> int:
        return self.wire.port

    def start(self) -> tuple[int, int]:
        """Start the segment store, then the controller; ``(controller port, segment-store port)``."""
        self.wire.start()
        try:
            self.controller.start()
        except BaseException:
            self.wire.stop()
            raise
        self._stopped.clear()
        self._sweeper = threading.Thread(
            target=self._sweep, name="ingestwm-pravega-txn-timeouts", daemon=True
        )
        self._sweeper.start()
        return self.controller.port, self.wire.port

    def _sweep(self) -> None:
        """Pravega's timeout service: abort transactions whose lease ran out on the ingestion clock."""
        txns = self.streams.transactions
        while not self._stopped.wait(SWEEP_S):
            try:
                txns.expire()
            except Exception:  # a closed store while stopping, a bug: logged, the sweep goes on
                _log.exception("pravega endpoints: the transaction timeout sweep failed")

    def describe(self) -> str:
        """``pravega controller on HOST:PORT, pravega segment store on HOST:PORT`` (``serve`` prints it)."""
        c, w = self.controller, self.wire
        return f"pravega controller on {c.host}:{c.port}, pravega segment store on {w.host}:{w.port}"

    def stop(self) -> None:
        """Stop both and the timeout sweep; every connection is closed. Idempotent."""
        self._stopped.set()
        if self._sweeper is not None:
            self._sweeper.join()
            self._sweeper = None
        self.controller.stop()
        self.wire.stop()
