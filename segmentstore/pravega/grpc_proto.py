"""The controller's message and service classes, compiled from ``controller.proto`` at run time.

``load()`` compiles the shipped ``controller.proto`` once per process with
``grpc.protos_and_services`` (grpcio-tools' bundled protoc; no generated module is kept
in the repository) and returns ``(messages, services)``: the ``_pb2`` and ``_pb2_grpc``
modules' equivalents. Both are untyped (``Any``): the field names are Pravega's.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["PROTO", "load"]

PROTO = "segmentstore/pravega/controller.proto"
"""The proto's path relative to the directory holding the ``segmentstore`` package."""

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


def load() -> tuple[Any, Any]:
    """``(messages, services)`` of ``controller.proto``, compiled on the first call. Thread-safe."""
    global _loaded
    with _lock:
        if _loaded is None:
            import grpc

            root = str(
                Path(__file__).resolve().parents[2]
            )  # holds segmentstore/ (site-packages or a checkout)
            added = root not in sys.path
            if added:
                sys.path.append(root)
            try:
                _loaded = grpc.protos_and_services(PROTO)
            finally:
                if added:
                    sys.path.remove(root)
        return _loaded
