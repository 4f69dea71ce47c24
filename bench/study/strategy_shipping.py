"""Custom strategies' modules shipped to Spark's executors: from the driver's path to theirs.

A custom strategy's ``class_path`` (``module:Class``) names a module the driver imports
from its own ``sys.path`` (``PYTHONPATH``, or an installed package). Spark's executors
run other Python processes — on other machines, in a cluster — that see what is
installed there and what the job ships, not the driver's path. Before a Spark job,
``ship_plan`` finds, for every custom strategy of every task, the *top-level* module or
package holding its class on the driver:

- installed (the standard library, a module of an installed distribution, anything in
  the interpreter's library directories, or ingestwm's own packages such as
  ``bench.lab.strategies_contrib``, which every executor imports to run a task at all):
  not shipped; the executors are expected to run the same installation as the driver;
- a ``.py`` file, or a package of them, on the driver's path only: shipped. ``ship``
  zips it (a package whole, without ``__pycache__``) into ``<name>-<digest>.zip`` and
  adds it with ``SparkContext.addPyFile``, which puts it first on every executor's
  path before the tasks run; the tasks then import the same code as the driver;
- anything else (a compiled extension, a package holding one, a module without
  source): a ``ScenarioError`` naming the strategy and its ``class_path``, raised on the
  driver before any task runs.

Cost: one ``find_spec`` per distinct top-level name; zipping reads the package once.
The zips live in one temporary directory per driver process, removed at exit (Spark
serves them to executors from there for as long as the SparkContext lives).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec.errors import ScenarioError

__all__ = ["Shipment", "custom_strategies", "ship_plan", "write_archive", "ship"]

_EXTENSIONS = (*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".pyd", ".dylib")
_OURS = frozenset({"bench", "segmentstore", "readergroup", "flink_compat", "spark_source"})
"""ingestwm's own packages: an executor imports them to run any task, so they are never shipped."""


@dataclass(frozen=True, slots=True)
class Shipment:
    """One top-level module or package to ship: its name, where it lives on the driver, who needs it."""

    module: str
    sources: tuple[Path, ...]
    """The ``.py`` file, or the package's directories (several for a namespace package)."""
    package: bool
    strategies: tuple[str, ...]
    """The strategies that need it, as ``'name' (module:Class)``."""


@dataclass(frozen=True, slots=True)
class _Custom:
    field: str
    name: str
    class_path: str

    @property
    def label(self) -> str:
        return f"custom strategy {self.name!r} ({self.class_path})"


def custom_strategies(tasks: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """Every distinct ``(field, name, class_path)`` of the tasks' ``strategies.custom``, in task order."""
    seen: dict[tuple[str, str, str], None] = {}
    for t in tasks:
        strategies = (t.get("scenario") or {}).get("strategies") or {}
        for i, c in enumerate(strategies.get("custom") or ()):
            if isinstance(c, Mapping) and isinstance(c.get("class_path"), str):
                key = (f"strategies.custom.{i}.class_path", str(c.get("name", "")), c["class_path"])
                seen.setdefault(key, None)
    return list(seen)


def ship_plan(tasks: Sequence[Mapping[str, Any]]) -> tuple[Shipment, ...]:
    """What must reach the executors for the tasks' custom strategies; ``ScenarioError`` if one cannot.

    Installed modules are left out (the executors have them); the error names the first
    strategy whose module is neither installed nor plain Python source on the driver's path.
    """
    by_top: dict[str, list[_Custom]] = {}
    for field, name, class_path in custom_strategies(tasks):
        module = class_path.partition(":")[0]
        by_top.setdefault(module.partition(".")[0], []).append(_Custom(field, name, class_path))
    out = []
    for top, users in by_top.items():
        shipment = _resolve(top, users)
        if shipment is not None:
            out.append(shipment)
    return tuple(out)


def _refuse(user: _Custom, why: str) -> ScenarioError:
    return ScenarioError(
        f"{user.label} cannot reach the Spark executors: {why}; install it on every worker "
        "(docs/strategies.md)",
        user.field,
    )


def _resolve(top: str, users: list[_Custom]) -> Shipment | None:
    """The shipment of top-level module ``top`` (``None``: installed, the executors have it)."""
    if top in _OURS or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return None
    module = sys.modules.get(top)
    try:
        spec = getattr(module, "__spec__", None) or importlib.util.find_spec(top)
    except (ImportError, ValueError) as e:
        raise _refuse(users[0], f"module {top!r} cannot be found on the driver: {e}") from None
    if spec is None:
        raise _refuse(users[0], f"module {top!r} is not on the driver's path")
    locations = [Path(p) for p in (spec.submodule_search_locations or ())]
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    where = [*locations, *([origin] if origin is not None else [])]
    if top in _distributed() or (where and all(_installed(p) for p in where)):
        return None
    labels = tuple(u.label.removeprefix("custom strategy ") for u in users)
    if locations:  # a package (regular or namespace): ship its directories whole
        for d in locations:
            for f in _files(d):
                if f.name.endswith(_EXTENSIONS):
                    raise _refuse(users[0], f"package {top!r} holds a compiled extension ({f})")
        return Shipment(top, tuple(locations), True, labels)
    if origin is not None and origin.name.endswith(_EXTENSIONS):
        raise _refuse(users[0], f"module {top!r} is a compiled extension ({origin}), not Python source")
    if origin is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        raise _refuse(users[0], f"module {top!r} has no Python source to ship ({origin or spec.origin})")
    return Shipment(top, (origin,), False, labels)


def _distributed() -> Mapping[str, list[str]]:
    """Top-level names provided by installed distributions (editable installs included)."""
    return importlib.metadata.packages_distributions()


def _installed(path: Path) -> bool:
    """Whether ``path`` lies in the interpreter's own library directories (stdlib, site-packages)."""
    paths = sysconfig.get_paths()
    roots = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    here = path.resolve()
    return any(here == r or r in here.parents for r in roots)


def _files(directory: Path) -> Iterator[Path]:
    """The package's files, sorted, without ``__pycache__`` and hidden entries."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for f in sorted(files):
            if not f.startswith(".") and not f.endswith((".pyc", ".pyo")):
                yield Path(root) / f


def write_archive(shipment: Shipment, directory: Path) -> Path:
    """``<module>-<digest>.zip`` in ``directory``: the module (``<module>.py``) or package (``<module>/...``).

    The name carries a digest of the contents, so a changed module is a new file for Spark
    (which ignores a path added twice) and the same module is written once.
    """
    entries: list[tuple[str, Path]] = []
    if shipment.package:
        for d in shipment.sources:
            entries.extend((f"{shipment.module}/{f.relative_to(d).as_posix()}", f) for f in _files(d))
    else:
        entries.append((f"{shipment.module}.py", shipment.sources[0]))
    digest = hashlib.sha256()
    for arc, f in entries:
        digest.update(arc.encode() + b"\0" + f.read_bytes() + b"\0")
    path = directory / f"{shipment.module}-{digest.hexdigest()[:16]}.zip"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, f in entries:
                z.write(f, arc)
        tmp.replace(path)
    return path


_STAGING: list[Path] = []
"""This process's directory of zips served to the executors (made on first use, removed at exit)."""


def _staging() -> Path:
    if not _STAGING:
        d = Path(tempfile.mkdtemp(prefix="ingestwm-ship-"))
        atexit.register(shutil.rmtree, d, True)
        _STAGING.append(d)
    return _STAGING[0]


def ship(sc: Any, tasks: Sequence[Mapping[str, Any]]) -> list[str]:
    """Add what the tasks' custom strategies need to ``sc`` (``addPyFile``); the module names shipped.

    ``ScenarioError`` (before anything is added) if a strategy's module cannot be shipped.
    """
    plan = ship_plan(tasks)
    added = {Path(str(f)).name for f in sc.listFiles}
    for s in plan:
        archive = write_archive(s, _staging())
        if archive.name not in added:
            sc.addPyFile(str(archive))
    return [s.module for s in plan]
