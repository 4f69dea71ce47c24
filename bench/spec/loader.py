"""YAML spec files: the one loader of the scenarios (simulator and lab alike) and the sweeps.

- Shipped files: ``bench/scenarios/<folder>/<name>.yaml`` (``shipped``), or any file by
  path (``find``).
- ``read_yaml`` / ``read_mapping``: ``yaml.safe_load`` of a file, with one-line errors
  (which file, which line).
- ``build_dataclass``: a frozen dataclass from parsed YAML, each field converted to its
  annotated type (``int``, ``float``, ``str``, ``bool``, ``X | None``, ``tuple[X, ...]``,
  nested dataclasses; ``Any`` is taken as parsed); unknown, missing and mistyped fields
  raise with their dotted path (``writers.1.workload.rate_per_s``), and so do the
  dataclasses' own ``__post_init__`` checks when they raise a ``SpecError``.
- ``parse_override`` / ``apply_overrides``: ``key=value`` overrides of a raw mapping;
  the key is a dotted path checked against the root dataclass (list items by index or
  by ``name``), the value is parsed as a YAML scalar or flow collection.

Every function raises the ``SpecError`` subclass its caller passes as ``error``, so
each tool keeps its own error class and messages.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError

__all__ = [
    "shipped",
    "find",
    "read_yaml",
    "read_mapping",
    "build_dataclass",
    "parse_override",
    "apply_overrides",
]


# ---------------------------------------------------------------------- files


def shipped(folder: str = "") -> dict[str, Path]:
    """The shipped ``bench/scenarios/<folder>/*.yaml`` by name (file name without ``.yaml``), sorted."""
    root = resources.files("bench.scenarios")
    if folder:
        root = root / folder
    out = {p.name[: -len(".yaml")]: Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml")}
    return dict(sorted(out.items()))


def find(name_or_path: str | Path, folder: str = "") -> Path | None:
    """``name_or_path`` if it is a file, else the shipped file of that name in ``folder``, else ``None``."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    return shipped(folder).get(str(name_or_path))


def read_yaml(path: Path, what: str, error: type[SpecError] = SpecError) -> Any:
    """The parsed YAML of ``path`` (``yaml.safe_load``); ``what`` names the file in errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{what} {str(path)!r} is not valid YAML{where}") from None


def read_mapping(path: Path, what: str, error: type[SpecError] = SpecError) -> dict[str, Any]:
    """``read_yaml`` of a file that must hold a mapping (of fields)."""
    data = read_yaml(path, what, error)
    if not isinstance(data, Mapping):
        raise error(f"{what} {str(path)!r} must hold a mapping of fields")
    return dict(data)


# ---------------------------------------------------------------------- dataclasses


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    origin = typing.get_origin(tp)
    if origin is tuple:
        return "a list"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return {int: "an int", float: "a number", str: "a string", bool: "true/false", type(None): "null"}.get(
        tp, str(tp)
    )


def _convert(tp: Any, value: Any, path: str, error: type[SpecError]) -> Any:
    """``value`` (parsed YAML) as type ``tp``; raises ``error`` naming ``path``."""
    if tp is Any:  # free-form (e.g. a plugin's params): the parsed YAML as it is
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, error)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise error(f"must be a mapping, got {value!r}", path)
        return build_dataclass(tp, value, path, error)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise error(f"must be a list, got {value!r}", path)
        (item,) = typing.get_args(tp)[:1]
        return tuple(_convert(item, v, f"{path}.{i}", error) for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise error(f"must be true or false, got {value!r}", path)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise error(f"must be an int, got {value!r}", path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise error(f"must be a number, got {value!r}", path)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise error(f"must be a string, got {value!r}", path)
        return value
    raise error(f"unsupported field type {tp!r}", path)  # pragma: no cover - schema bug


def build_dataclass(
    cls: type, data: Mapping[str, Any], path: str = "", error: type[SpecError] = SpecError
) -> Any:
    """Build frozen dataclass ``cls`` from parsed YAML, checking every field's type; errors name the field."""
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        p = f"{path}.{key}" if path else str(key)
        if key not in known:
            raise error(f"unknown field; known fields: {', '.join(sorted(known))}", p)
        kwargs[key] = _convert(hints[key], value, p, error)
    for name, f in known.items():
        if (
            name not in kwargs
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ):
            raise error("is required", f"{path}.{name}" if path else name)
    try:
        return cls(**kwargs)
    except SpecError as e:
        raise e.under(path) if path else e from None


# ---------------------------------------------------------------------- overrides


def parse_override(text: str, error: type[SpecError] = SpecError) -> tuple[str, Any]:
    """``"a.b=value"`` -> (``"a.b"``, the value parsed as YAML)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise error(f"override {text!r} is not key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise error(f"cannot parse the value {raw!r}", key) from None
    return key, value


def apply_overrides(
    root: type, data: Mapping[str, Any], overrides: Sequence[str], error: type[SpecError] = SpecError
) -> dict[str, Any]:
    """A copy of the raw mapping with each ``key=value`` applied; keys checked against dataclass ``root``."""
    out: dict[str, Any] = _copy(data)
    for text in overrides:
        key, value = parse_override(text, error)
        _set_path(root, out, key, value, error)
    return out


def _copy(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_copy(x) for x in v]
    return v


def _set_path(root_cls: type, root: dict[str, Any], key: str, value: Any, error: type[SpecError]) -> None:
    parts = key.split(".")
    tp: Any = root_cls
    node: Any = root
    done: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join([*done, part])
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
            origin = typing.get_origin(tp)
        if dataclasses.is_dataclass(tp):
            hints = _hints(tp)  # type: ignore[arg-type]
            if part not in hints:
                raise error(f"unknown field; known fields: {', '.join(sorted(hints))}", here)
            if last:
                node[part] = value
                return
            tp = hints[part]
            child = node.get(part)
            if child is None:
                child = [] if typing.get_origin(tp) is tuple else {}
                node[part] = child
            node = child
        elif origin is tuple:
            if not isinstance(node, list):
                raise error("is not a list", ".".join(done))
            idx = _index(node, part, here, error)
            if last:
                node[idx] = value
                return
            tp = typing.get_args(tp)[0]
            node = node[idx]
            if not isinstance(node, dict):
                raise error("is not a mapping", here)
        elif tp is Any:  # free-form (a plugin's params): nested mappings, keys as given
            if not isinstance(node, dict):
                raise error("is not a mapping", ".".join(done))
            if last:
                node[part] = value
                return
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            node = child
        else:
            raise error(f"{'.'.join(done)} is {_type_name(tp)}, it has no field {part!r}", here)
        done.append(part)


def _index(items: list[Any], part: str, here: str, error: type[SpecError]) -> int:
    if part.lstrip("-").isdigit():
        idx = int(part)
        if not -len(items) <= idx < len(items):
            raise error(f"index out of range: the list has {len(items)} items", here)
        return idx % len(items)
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == part:
            return i
    names = [str(it.get("name")) for it in items if isinstance(it, Mapping)]
    raise error(f"no item named {part!r} (items: {', '.join(names) or 'none'})", here)
