"""What ``ingestwm validate`` keeps in the user's cache, bounded, listed and cleared (``ingestwm cache``).

The cache is ``$XDG_CACHE_HOME/ingestwm`` (``~/.cache/ingestwm`` by default). It holds:

- ``flink-java-<hash>/``: the driven Java Flink job compiled for one source and one Flink
  (``flink_java.compiled_job``); ``flink-java-<hash>.tmp-*``: a compile in progress, or
  one that was killed;
- ``flink-<version>-py<NN>/``: a venv with PyFlink, for ``--flink-python`` (the test suite
  builds it: ``tests/flink_venv.py``), and its install log ``<venv>.log``;
- ``<entry>.lock`` beside each entry: whoever uses the entry holds it shared for as long
  as they use it (a validate run, from start to end); its time is the entry's last use.

Bounded: after each compile, the compiled jobs beyond the ``KEEP_JOBS`` most recently
used are removed (an edited job source or another Flink compiles a new one; the old
ones are never used again). A venv is removed only when asked (``clear(venvs=True)``):
it takes minutes to build, and there is one per Python version.

Nothing in use is removed: removing takes an entry's lock exclusively without waiting,
so an entry a running validate holds is kept (and said so), and a validate that starts
while an entry is being removed waits for it and then finds it gone (a compiled job is
compiled again; a venv's Python is reported missing). Nothing here reads the clock:
"recently used" is the order of the entries' lock times.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import ValidateError

__all__ = [
    "KEEP_JOBS",
    "CacheEntry",
    "ClearReport",
    "cache_root",
    "entries",
    "using",
    "using_python",
    "prune_jobs",
    "clear",
]

KEEP_JOBS = 3
"""Compiled jobs kept after a compile: the most recently used ones."""

JOB, VENV, PARTIAL, LEFTOVER, OTHER = (
    "compiled Java job",
    "Flink venv",
    "unfinished compile",
    "leftover lock or log",
    "not ingestwm's",
)
_JOB = re.compile(r"flink-java-[0-9a-f]{16}")
_PARTIAL = re.compile(r"(flink-java-[0-9a-f]{16})\.tmp-.+")
_VENV = re.compile(r"flink-[0-9][0-9.]*-py[0-9]+")
_SIDE = (".lock", ".log")
_IN_USE = "in use (a running validate or a build holds it)"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/ingestwm``, else ``~/.cache/ingestwm``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ingestwm"


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One thing in the cache: what it is, where, its size on disk, its last use and whether it is in use."""

    name: str
    kind: str
    path: Path
    size_bytes: int
    last_used_s: float | None
    """Seconds since the epoch of its last use (its creation if never used since), None if unknown."""
    in_use: bool


@dataclass(frozen=True, slots=True)
class ClearReport:
    """What ``clear`` or ``prune_jobs`` removed, what it kept and why, and what it could not remove."""

    removed: tuple[CacheEntry, ...]
    kept: tuple[tuple[CacheEntry, str], ...]
    failed: tuple[tuple[CacheEntry, str], ...] = ()

    @property
    def freed_bytes(self) -> int:
        return sum(e.size_bytes for e in self.removed)


# ---------------------------------------------------------------- locks
def _lock_path(entry: Path) -> Path:
    return entry.with_name(entry.name + ".lock")


def _open_locked(entry: Path, exclusive: bool, wait: bool) -> int | None:
    """A descriptor holding ``entry``'s lock (None if ``wait`` is False and someone holds it).

    The lock file is created if missing; one removed while this waited for it (a ``clear``
    removing the entry) is opened again, so the lock held is always the file at the path."""
    path = _lock_path(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextlib.contextmanager
def using(entry: Path, exclusive: bool = False) -> Iterator[Path]:
    """Hold ``entry``'s lock while the block uses it (shared; ``exclusive`` to build or replace it),
    waiting for a removal or a build in progress; marks it used now. Yields ``entry``."""
    fd = _open_locked(entry, exclusive, wait=True)
    assert fd is not None
    try:
        with contextlib.suppress(OSError):
            os.utime(fd)  # the entry's last use
        yield entry
    finally:
        os.close(fd)


def _entry_of(path: Path, root: Path) -> Path | None:
    """The cache entry (a top-level directory of ``root``) that ``path`` lies in, else None."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        return None
    return root / rel.parts[0] if rel.parts else None


@contextlib.contextmanager
def using_python(python: str | None) -> Iterator[None]:
    """Hold the cache entry ``python`` lives in (a venv here), if any, while the block runs."""
    root = cache_root()
    entry = _entry_of(Path(python), root) if python else None
    if entry is None:
        yield
        return
    with using(entry):
        yield


# ---------------------------------------------------------------- listing
def _disk_bytes(path: Path) -> int:
    """Bytes on disk of ``path`` and everything under it (symbolic links not followed)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    total = st.st_blocks * 512
    if not path.is_dir() or path.is_symlink():
        return total
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_blocks * 512
    return total


def _kind(name: str, is_dir: bool) -> str:
    if is_dir and _JOB.fullmatch(name):
        return JOB
    if is_dir and _PARTIAL.fullmatch(name):
        return PARTIAL
    if is_dir and _VENV.fullmatch(name):
        return VENV
    return OTHER


def _in_use(entry: Path) -> bool:
    """Whether someone holds ``entry``'s lock (never creates one)."""
    path = _lock_path(entry)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _last_used(entry: Path) -> float | None:
    for p in (_lock_path(entry), entry / "ok", entry):
        with contextlib.suppress(OSError):
            return p.stat().st_mtime
    return None


def _describe(path: Path) -> CacheEntry:
    is_dir = path.is_dir() and not path.is_symlink()
    kind = _kind(path.name, is_dir)
    size = _disk_bytes(path)
    if kind == VENV:
        size += _disk_bytes(path.with_name(path.name + ".log"))
    if kind == OTHER and path.name.endswith(_SIDE):
        kind = LEFTOVER
        owner = path.with_name(path.name.removesuffix(".lock").removesuffix(".log"))
        return CacheEntry(path.name, kind, path, size, _last_used(owner), _in_use(owner))
    if kind == PARTIAL:
        m = _PARTIAL.fullmatch(path.name)
        assert m is not None
        owner = path.with_name(m.group(1))
        return CacheEntry(path.name, kind, path, size, _last_used(path), _in_use(owner))
    return CacheEntry(path.name, kind, path, size, _last_used(path), _in_use(path))


def entries(root: Path | None = None) -> list[CacheEntry]:
    """Everything in the cache, most recently used first; a lock or log beside its entry is part of
    it (listed alone only when its entry is gone). O(files under the cache)."""
    root = cache_root() if root is None else root
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ValidateError(f"cannot read the cache directory {root}: {e.strerror or e}") from None
    present = set(names)
    building = {m.group(1) for m in map(_PARTIAL.fullmatch, names) if m}
    out = []
    for name in names:
        if name.endswith(_SIDE):
            owner = name.removesuffix(".lock").removesuffix(".log")
            if owner in present or owner in building:  # part of its entry, or of its compile
                continue
        out.append(_describe(root / name))
    return sorted(out, key=lambda e: (-(e.last_used_s or 0.0), e.name))


# ---------------------------------------------------------------- removing
def _remove(entry: CacheEntry, root: Path) -> str | None:
    """Remove ``entry`` if nobody uses it: None when removed, else why it was kept (or not removed)."""
    if entry.kind in (JOB, VENV):
        owner = entry.path
    elif entry.kind == PARTIAL:
        m = _PARTIAL.fullmatch(entry.name)
        assert m is not None
        owner = root / m.group(1)
    elif entry.kind == LEFTOVER:
        owner = entry.path.with_name(entry.name.removesuffix(".lock").removesuffix(".log"))
    else:
        return "not ingestwm's: left alone"
    fd = _open_locked(owner, exclusive=True, wait=False)
    if fd is None:
        return "being compiled" if entry.kind == PARTIAL else _IN_USE
    try:
        if entry.kind == PARTIAL:
            _delete(entry.path)
        else:
            _delete(owner)
            _delete(owner.with_name(owner.name + ".log"))
        if not owner.exists():  # under the lock: a user waiting for it opens the path again
            _delete(_lock_path(owner))
        return None
    except OSError as e:
        return f"could not remove {e.filename or entry.path}: {e.strerror or e}"
    finally:
        os.close(fd)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_Reasons = list[tuple[CacheEntry, str]]


def _apply(targets: list[CacheEntry], root: Path) -> tuple[list[CacheEntry], _Reasons, _Reasons]:
    """Remove each of ``targets`` that nobody uses: (removed, kept with why, failed with why)."""
    removed: list[CacheEntry] = []
    kept: _Reasons = []
    failed: _Reasons = []
    for e in targets:
        why = _remove(e, root)
        if why is None:
            removed.append(e)
        elif why.startswith("could not"):
            failed.append((e, why))
        else:
            kept.append((e, why))
    return removed, kept, failed


def prune_jobs(root: Path | None = None, keep: int = KEEP_JOBS) -> ClearReport:
    """Remove the compiled jobs beyond the ``keep`` most recently used, unfinished compiles and
    leftover locks, none of them in use. O(files under the cache)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValidateError(f"keep must be an int >= 0, got {keep!r}")
    root = cache_root() if root is None else root
    found = entries(root)
    jobs = [e for e in found if e.kind == JOB]
    targets = jobs[keep:] + [e for e in found if e.kind == PARTIAL]
    targets += [e for e in found if e.kind == LEFTOVER and not _VENV.match(e.name)]
    removed, kept, failed = _apply(targets, root)
    return ClearReport(tuple(removed), tuple(kept), tuple(failed))


def clear(root: Path | None = None, venvs: bool = False) -> ClearReport:
    """Remove every compiled job, unfinished compile and leftover lock or log that nobody uses; with
    ``venvs``, the Flink venvs that nobody uses too (else they are kept, said so). O(files)."""
    root = cache_root() if root is None else root
    found = entries(root)
    targets = [e for e in found if e.kind in (JOB, PARTIAL, LEFTOVER) or (venvs and e.kind == VENV)]
    removed, kept, failed = _apply(targets, root)
    for e in found:
        if e.kind == VENV and not venvs:
            kept.append((e, "a Flink venv: removed only with --venv"))
        elif e.kind == OTHER:
            kept.append((e, "not ingestwm's: left alone"))
    return ClearReport(tuple(removed), tuple(kept), tuple(failed))
