"""How ``RemoteClient`` reaches the server: its connections, and when a call is sent again.

Calls other than appends go over a small pool of connections; a call whose
connection breaks is retried on a new one until its timeout when it is idempotent
(reads, info, attributes, watermarks, truncate) or certainly not executed. Every call
returns or raises within its timeout, measured once from when it started (retries and
reconnects do not restart it; a connection attempt gets the time left). A call that
was never sent fails with a ``NotSentError`` (``UnreachableError`` when the server
stayed unreachable, ``ClientClosedError`` after ``close``): not executed. One that was
sent and not answered fails with ``ReadTimeoutError`` or ``ConnectionLostError``: its
outcome is unknown. Appends go through one ``AppendPipeline`` per client.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from ..clock import monotonic_s
from ..errors import (
    ClientClosedError,
    InvalidArgumentError,
    NotSentError,
    SegmentStoreError,
    UnreachableError,
    retriable,
)
from ..net.commands import COMMANDS, encode_args
from ..net.protocol import pack
from .append_pipeline import AppendPipeline
from .connection import Connection, ConnectionPool

__all__ = ["Settled", "WireCalls", "parse_address"]


class Settled:
    """``_invoke``'s result when a resent command met ``error``, saying its state holds already."""

    __slots__ = ("error",)

    def __init__(self, error: SegmentStoreError) -> None:
        self.error = error


_P = ParamSpec("_P")
_R = TypeVar("_R")


@functools.cache
def _signature(method: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(method)


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"``, ``"[v6]:port"`` or ``(host, port)`` as ``(host, port)``."""
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
    elif isinstance(address, str) and ":" in address:
        host, _, p = address.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            port = int(p)
        except ValueError:
            port = -1
    else:
        raise InvalidArgumentError(f"address must be 'host:port' or (host, port), got {address!r}")
    if not isinstance(host, str) or not host or type(port) is not int or not 0 < port <= 65535:
        raise InvalidArgumentError(f"bad server address {address!r}: need a host and a port in 1..65535")
    return host, port


class WireCalls:
    """The connections of a ``RemoteClient`` and its rule for sending a call again. Not used alone."""

    host: str
    port: int
    timeout_s: float
    pool_size: int
    max_batch_events: int
    max_batch_bytes: int
    window: int
    max_queued_events: int
    _closed: bool
    _connect: Callable[[float, Callable[[Any], None]], Connection]

    def _start(self) -> None:
        """This process's connection pool and append pipeline (again in a forked child)."""
        self._pid = os.getpid()
        self._pool = ConnectionPool(self._connect, self.pool_size)
        self._pipeline = AppendPipeline(
            self._connect,
            self.timeout_s,
            self.max_batch_events,
            self.max_batch_bytes,
            self.window,
            self.max_queued_events,
            f"the segment store at {self.host}:{self.port}",
        )

    def _after_fork(self) -> None:
        """In a forked child (Spark's Python workers): new connections and threads, not the parent's."""
        if self._pid != os.getpid():
            self._start()

    def _invoke(
        self,
        command: str,
        args: dict[str, Any],
        extra_s: float = 0.0,
        copy_payload: bool = False,
        idempotent: bool | None = None,
        settled: type[SegmentStoreError] | None = None,
    ) -> tuple[Any, bytes]:
        """Send ``command``; after a lost connection send it again as the error's retry policy says,
        ``idempotent`` being the command's (or this call's, when given).

        ``settled``: the command asks for a state (sealed, gone), so it is sent again after a
        lost reply too, and if the store then answers with this error, saying the state holds
        already (the lost attempt, or another client, got there), the result is ``Settled``
        holding it: the caller checks the state and returns, or raises the error.
        """
        self._after_fork()
        cmd = COMMANDS[command]
        if idempotent is None:
            idempotent = cmd.idempotent
        try:
            hargs, payload = encode_args(cmd, args)
            packed = pack(hargs)
        except TypeError as e:
            raise InvalidArgumentError(f"{command}: cannot send the arguments: {e}") from None
        deadline = monotonic_s() + self.timeout_s + extra_s
        delay = 0.02
        resent = False
        sent = False  # some attempt may have reached the server
        while True:
            if self._closed:
                raise ClientClosedError(f"{command}: the remote client is closed; not sent")
            try:
                conn = self._pool.get(deadline)
                return conn.call(command, packed, payload, deadline, copy_payload)
            except SegmentStoreError as e:  # the error class says whether to send it again
                if resent and settled is not None and isinstance(e, settled):
                    return Settled(e), b""
                sent = sent or not isinstance(e, NotSentError)
                again = retriable(e, idempotent or settled is not None)
                if not again or self._closed:
                    raise
                if monotonic_s() + delay >= deadline:
                    if isinstance(e, NotSentError) and not sent:
                        raise UnreachableError(
                            f"{command}: not sent within its timeout (timeout_s={self.timeout_s:g} s): {e}"
                        ) from e
                    raise
                resent = True
            time.sleep(delay)
            delay = min(2 * delay, 0.5)

    def _call(self, method: Callable[Concatenate[Any, _P], _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Send the command of interface ``method`` with these arguments, typed as the method. O(args)."""
        bound = _signature(method).bind(self, *args, **kwargs)
        bound.arguments.pop("self")
        return cast(_R, self._invoke(method.__name__, bound.arguments)[0])
