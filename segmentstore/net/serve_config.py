"""``ingestwm serve``'s settings: the store's (PDP-26 container settings) and the server's limits.

Each setting comes from a command-line flag, else from a TOML file (``--config``), else
its default, so an operator keeps them in one file::

    [store]
    max_watermark_lag_ms = 10000
    polling_period_ms = 1000
    eviction_age_ms = 600000
    snapshot_every_ops = 100000
    transaction_lease_ms = 600000
    sync = "interval"

    [server]
    host = "127.0.0.1"
    port = 12345
    max_connections = 1024
    max_frame_bytes = 16842752
    handshake_timeout_s = 5.0
    idle_timeout_s = 600.0
    pravega_port = 9090          # Pravega's controller (gRPC); absent: not served
    pravega_segment_port = 0     # Pravega's segment store (wire protocol); 0: a free port

An unknown table or key, or a value of the wrong type, is an ``InvalidArgumentError``
naming the file, the key and the value (values are checked again by ``StoreConfig`` and
``SegmentStoreServer``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..config import StoreConfig
from ..errors import InvalidArgumentError

__all__ = ["ServeConfig", "ServerLimits", "STORE_KEYS", "SERVER_KEYS", "load_serve_config"]

STORE_KEYS = (
    "max_watermark_lag_ms",
    "polling_period_ms",
    "eviction_age_ms",
    "max_active_segments",
    "snapshot_every_ops",
    "transaction_lease_ms",
    "cache_bytes",
    "max_append_bytes",
    "sync",
    "sync_interval_ms",
)
"""The ``StoreConfig`` fields an operator sets ([store] table)."""


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """``SegmentStoreServer``'s network settings and limits ([server] table)."""

    host: str = "127.0.0.1"
    port: int = 12345
    max_connections: int = 1024
    max_frame_bytes: int = 16 * 1024 * 1024 + 64 * 1024
    max_in_flight: int = 1024
    handshake_timeout_s: float = 5.0
    idle_timeout_s: float = 600.0
    pravega_port: int | None = None
    """Serve Pravega's controller on this port too (0: a free one); ``None``: no Pravega endpoints."""
    pravega_segment_port: int = 0
    """Pravega's segment store (wire protocol): 0 picks a free port (the controller announces it)."""

    def pravega_ports(self) -> dict[str, Any]:
        """``SegmentStoreServer``'s keyword arguments of the Pravega endpoints."""
        return {"pravega_port": self.pravega_port, "pravega_segment_port": self.pravega_segment_port}


SERVER_KEYS = tuple(f.name for f in fields(ServerLimits))


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``ingestwm serve`` runs with."""

    store: StoreConfig = field(default_factory=StoreConfig)
    server: ServerLimits = field(default_factory=ServerLimits)


def load_serve_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> ServeConfig:
    """The file's settings (none: the defaults) with ``overrides`` (flag name -> value, None = unset)."""
    store: dict[str, Any] = {}
    server: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as e:
            raise InvalidArgumentError(f"cannot read the config file {str(path)!r}: {e}") from None
        except tomllib.TOMLDecodeError as e:
            raise InvalidArgumentError(f"config file {str(path)!r} is not valid TOML: {e}") from None
        for table, value in doc.items():
            if table not in ("store", "server") or not isinstance(value, dict):
                raise InvalidArgumentError(
                    f"config file {str(path)!r}: unknown table [{table}] (expected [store] and [server])"
                )
            keys = STORE_KEYS if table == "store" else SERVER_KEYS
            for k, v in value.items():
                if k not in keys:
                    raise InvalidArgumentError(
                        f"config file {str(path)!r}: unknown key {k!r} in [{table}] "
                        f"(known: {', '.join(keys)})"
                    )
                (store if table == "store" else server)[k] = v
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k in STORE_KEYS:
            store[k] = v
        elif k in SERVER_KEYS:
            server[k] = v
        else:
            raise InvalidArgumentError(f"unknown serve setting {k!r}")
    where = f" (from {str(path)!r} or the command line)" if path is not None else ""
    for k, v in server.items():
        want = int if k == "pravega_port" else type(getattr(ServerLimits(), k))
        ok = isinstance(v, want) or (want is float and isinstance(v, int))
        if isinstance(v, bool) or not ok:
            raise InvalidArgumentError(f"server setting {k} must be a {want.__name__}, got {v!r}{where}")
    try:
        return ServeConfig(StoreConfig(**store), ServerLimits(**server))
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e}{where}") from None
