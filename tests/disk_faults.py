"""A file layer that fails on purpose: a full disk (ENOSPC) or a read-only directory (EACCES).

Tests run as root, whom ``chmod`` does not stop, and no small file system can be
mounted, so the errors are injected where the store meets the OS: ``os.open`` of a
file under ``root`` for writing, and ``write``/``writev``/``pwrite``/``fdatasync`` on
any descriptor of a file under ``root``. ``open_error`` fails the opens too (a directory that cannot be
written); otherwise opens succeed and writes fail (a full disk keeps free inodes).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["disk_fault"]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@contextmanager
def disk_fault(
    root: Path,
    err: int = errno.ENOSPC,
    open_error: bool = False,
) -> Iterator[set[str]]:
    """Make writes under ``root`` fail with ``OSError(err)``; yields the paths that failed."""
    failed: set[str] = set()
    fds: dict[int, str] = {}
    real_open, real_close = os.open, os.close
    prefix = str(root)

    def fail(path: str) -> None:
        failed.add(path)
        raise OSError(err, os.strerror(err))

    def fake_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        p = os.fspath(path)
        p = p.decode() if isinstance(p, bytes) else p
        writing = bool(flags & _WRITE_FLAGS)
        if writing and open_error and p.startswith(prefix) and not os.path.isdir(p):
            fail(p)
        fd = real_open(path, flags, *args, **kw)
        if writing and p.startswith(prefix):
            fds[fd] = p
        return fd

    def fake_close(fd: int) -> None:
        fds.pop(fd, None)
        real_close(fd)

    def guard(real: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            path = fds.get(fd)
            if path is None:  # opened before the fault (the current log file)
                try:
                    path = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    path = ""
            if path.startswith(prefix):
                fail(path)
            return real(fd, *args)

        return call

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "open", fake_open)
        mp.setattr(os, "close", fake_close)
        for name in ("write", "writev", "pwrite", "fdatasync", "fsync"):
            mp.setattr(os, name, guard(getattr(os, name)))
        yield failed
