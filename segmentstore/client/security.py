"""How an engine-facing client reaches a served store: its token and TLS, and a fast first contact.

``ingestwm serve`` requires ``--token`` on any non-loopback address and turns on TLS with
``--certfile``/``--keyfile``. Every client an engine opens (the Spark source and sink, the
``ingestwm group`` commands, a Flink job's reader group) takes the same three settings:

- ``token``: the server's shared secret, given explicitly or read from ``INGESTWM_TOKEN``;
  it is never part of a ``repr``, an error message or a log line;
- ``tls``: connect over TLS, trusting the CA certificates of ``ca_pem`` (PEM text, read
  from a file once: ``load_ca_file``), or the system's when there are none;
- ``server_name``: the name the server's certificate must carry (default: the host of
  the endpoint).

``ClientSecurity`` is frozen and picklable (a Spark driver hands it to its executors, so
the CA file need not exist there); the ``ssl.SSLContext`` is built where it is used.
``probe`` makes one connection with no retries, so a server that is not running, a wrong
token or a TLS mismatch is reported at once instead of after the client's timeout.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from segmentstore.errors import AuthenticationError, InvalidArgumentError, SegmentStoreError

from .connection import Connection
from .remote import RemoteClient, parse_address

__all__ = ["TOKEN_ENV", "ClientSecurity", "client_security", "load_ca_file", "UnreachableStoreError"]

TOKEN_ENV = "INGESTWM_TOKEN"
"""The environment variable a client's token is read from when none is given."""


class UnreachableStoreError(SegmentStoreError, ConnectionError):
    """No server answered at the endpoint, or it refused this client's token or TLS (names the endpoint)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A client's credentials for one server (see the module docstring). The token is never shown."""

    token: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_pem: str | None = field(default=None, repr=False)
    server_name: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise InvalidArgumentError("the token must be a non-empty str or None")
        if (self.ca_pem is not None or self.server_name is not None) and not self.tls:
            raise InvalidArgumentError("a TLS CA or server name is given but TLS is off")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client-side TLS context (cached per CA), or None without TLS."""
        return _context(self.ca_pem) if self.tls else None

    def remote_client(self, endpoint: str | tuple[str, int], **kwargs: Any) -> RemoteClient:
        """A ``RemoteClient`` of ``endpoint`` with these credentials (``kwargs`` as RemoteClient's)."""
        return RemoteClient(
            endpoint,
            token=self.token,
            ssl_context=self.ssl_context(),
            server_hostname=self.server_name,
            **kwargs,
        )

    def probe(self, endpoint: str | tuple[str, int], connect_timeout_s: float = 5.0) -> None:
        """One connection and hello, no retries; raises ``UnreachableStoreError`` naming ``endpoint``.

        O(1 round trip): a server that is down (connection refused) fails at once.
        """
        host, port = parse_address(endpoint)
        where = f"{host}:{port}"
        try:
            conn = Connection(
                host,
                port,
                token=self.token,
                ssl_context=self.ssl_context(),
                server_hostname=self.server_name,
                connect_timeout_s=connect_timeout_s,
            )
        except AuthenticationError:
            given = "a token was given" if self.token is not None else f"no token was given (nor {TOKEN_ENV})"
            raise UnreachableStoreError(
                f"the ingestwm server at {where} refused this client's token: {given}"
            ) from None
        except (SegmentStoreError, OSError) as e:
            hint = "" if self.tls else " (if the server uses TLS, turn on the client's TLS)"
            raise UnreachableStoreError(
                f"no ingestwm server answers at {where}: {_scrub(str(e), self.token)}; is `ingestwm serve` "
                f"running there?{hint}"
            ) from None
        conn.close()
        conn.join(connect_timeout_s)  # its reader thread gone: over TLS, a lingering one corrupts the
        # handshake of the next connection that gets the same file descriptor


def client_security(
    token: str | None = None,
    tls: bool | None = None,
    ca_file: str | None = None,
    server_name: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ClientSecurity:
    """Credentials from explicit settings, the token from ``INGESTWM_TOKEN`` when not given.

    ``tls=None`` turns TLS on when ``ca_file`` or ``server_name`` is given. Raises
    ``InvalidArgumentError`` for an unreadable CA file (naming the path, never the token).
    """
    env = os.environ if env is None else env
    if token is None or token == "":
        token = env.get(TOKEN_ENV) or None
    if tls is None:
        tls = ca_file is not None or server_name is not None
    if not tls and (ca_file is not None or server_name is not None):
        raise InvalidArgumentError("a TLS CA file or server name is given but TLS is turned off")
    pem = load_ca_file(ca_file) if ca_file is not None else None
    return ClientSecurity(token, tls, pem, server_name or None)


def load_ca_file(path: str) -> str:
    """The PEM certificates of ``path``, checked to load as CA certificates. O(file)."""
    try:
        with open(path, encoding="ascii") as f:
            pem = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"cannot read the TLS CA file {path!r}: {e}") from None
    try:
        _context(pem)
    except (ssl.SSLError, ValueError) as e:
        raise InvalidArgumentError(f"the TLS CA file {path!r} holds no PEM certificate: {e}") from None
    return pem


@functools.lru_cache(maxsize=8)
def _context(ca_pem: str | None) -> ssl.SSLContext:
    if ca_pem is None:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem)


def _scrub(text: str, token: str | None) -> str:
    """``text`` with the token masked (belt and braces: connection errors do not quote it)."""
    return text.replace(token, "***") if token and len(token) >= 6 else text
