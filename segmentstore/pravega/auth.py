"""Credentials of the Pravega endpoints: the controller's ``authorization`` header and delegation tokens.

With a server token configured (``SegmentStoreServer(token=...)``), a controller call must
carry gRPC metadata ``authorization`` as the Rust client sends it with ``auth_enabled``
(``pravega_client_auth_method=Basic`` and ``pravega_client_auth_token=<token>``, or
``..._username``/``..._password`` with the token as the password):
``Basic <token>`` or ``Basic base64(<user>:<token>)``. Anything else is refused
(``UNAUTHENTICATED``, as Pravega answers wrong credentials).

``getDelegationToken`` then hands out a token for one stream, which wire commands carry:
a JWT as Pravega's controller makes them (the client reads its ``exp`` to refresh it in
time), signed with HMAC-SHA256 under a key derived from the server token, so tokens
stay valid across a restart with the same token. Its claims: ``stream`` (``scope/name``),
``iat`` and ``exp`` (seconds since the epoch, on the wall clock the client compares
with). ``verify`` refuses a token that is malformed, forged, for another stream, or
expired (``AuthTokenError.expired``, answered ``AuthTokenCheckFailed`` code 1, after
which the client asks for a new one). Without a server token no credential is checked
and delegation tokens are empty, as Pravega's with auth off.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from ..clock import Clock, WallClock
from .errors import AuthTokenError

__all__ = ["check_authorization", "DelegationTokens", "DEFAULT_TOKEN_TTL_S"]

DEFAULT_TOKEN_TTL_S = 600
"""Lifetime of a delegation token (Pravega's default)."""
_HEADER = base64.b64encode(b'{"alg":"HS256","typ":"JWT"}').decode()
_KEY_CONTEXT = b"ingestwm pravega delegation token key\x00"


def check_authorization(header: str | None, token: str) -> None:
    """Accept ``Basic <token>`` or ``Basic base64(<user>:<token>)``; else ``AuthTokenError``."""
    if not header:
        raise AuthTokenError("no 'authorization' metadata: this server needs credentials (auth_enabled)")
    method, _, value = header.partition(" ")
    if method != "Basic" or not value:
        raise AuthTokenError(f"'authorization' must be 'Basic <credentials>', got method {method[:20]!r}")
    if hmac.compare_digest(value.encode(), token.encode()):
        return
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        decoded = ""
    _, colon, password = decoded.partition(":")
    if not colon or not hmac.compare_digest(password.encode(), token.encode()):
        raise AuthTokenError("wrong credentials in 'authorization'")


class DelegationTokens:
    """Issues and checks the delegation tokens of one server token. Thread-safe (no state)."""

    def __init__(
        self, server_token: str, clock: Clock | None = None, ttl_s: int = DEFAULT_TOKEN_TTL_S
    ) -> None:
        self._key = hashlib.sha256(_KEY_CONTEXT + server_token.encode()).digest()
        self._clock = clock if clock is not None else WallClock()
        self.ttl_s = ttl_s

    def issue(self, stream: str) -> str:
        """A token for the stream ``scope/name``, valid ``ttl_s`` from now."""
        now = self._clock.now() // 1000
        body = json.dumps({"stream": stream, "iat": now, "exp": now + self.ttl_s}, separators=(",", ":"))
        signed = f"{_HEADER}.{base64.b64encode(body.encode()).decode()}"
        return f"{signed}.{self._sign(signed)}"

    def verify(self, token: str, stream: str) -> None:
        """Accept a token this server issued for ``stream`` that has not expired; else ``AuthTokenError``."""
        parts = token.split(".") if token else []
        if len(parts) != 3:
            raise AuthTokenError("no delegation token (get one from the controller's getDelegationToken)")
        signed = f"{parts[0]}.{parts[1]}"
        if not hmac.compare_digest(parts[2], self._sign(signed)):
            raise AuthTokenError("the delegation token's signature is wrong (not issued by this server)")
        try:
            claims = json.loads(base64.b64decode(parts[1], validate=True))
            granted, exp = claims["stream"], claims["exp"]
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise AuthTokenError("the delegation token's claims cannot be read") from None
        if granted != stream:
            raise AuthTokenError(f"the delegation token is for stream {granted!r:.300}, not {stream!r:.300}")
        if not isinstance(exp, int) or exp <= self._clock.now() // 1000:
            raise AuthTokenError("the delegation token has expired", expired=True)

    def _sign(self, signed: str) -> str:
        mac = hmac.new(self._key, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
