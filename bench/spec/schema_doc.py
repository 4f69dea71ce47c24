"""The scenario schema as Markdown, generated from the frozen dataclasses of ``bench.spec.scenario``.

``schema_markdown()`` is what ``ingestwm scenario schema`` prints and what
``docs/scenario-schema.md`` holds (a test checks the file is not stale). Each section
is one dataclass (its docstring, then a table of its fields: dotted path, type, unit,
default, allowed values or bound, meaning). The unit comes from the field's name
(``_ms``: milliseconds, ``_per_s``: events per second, ``_bytes``, ``_ppm``).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any

from .scenario import Scenario

__all__ = ["schema_markdown"]

_UNITS = (("_per_s", "events/s"), ("_ms", "ms"), ("_bytes", "bytes"), ("_ppm", "ppm"))


def _unit(name: str) -> str:
    if name == "ms":
        return "ms"
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def _type(tp: Any) -> str:
    if tp is Any:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"  # type: ignore[union-attr]
    origin = typing.get_origin(tp)
    if origin is tuple:
        return f"list of {_type(typing.get_args(tp)[0])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in typing.get_args(tp))
    return {int: "int", float: "number", str: "string", bool: "bool", type(None): "null"}.get(tp, str(tp))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:
        v = f.default_factory()
    else:
        return "**required**"
    if dataclasses.is_dataclass(v):
        changed = {
            g.name: getattr(v, g.name)
            for g in dataclasses.fields(v)
            if g.default is not dataclasses.MISSING and getattr(v, g.name) != g.default
        }
        return "{" + ", ".join(f"{k}: {x}" for k, x in changed.items()) + "}" if changed else "defaults"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{}" if not v else str(v)
    if isinstance(v, tuple):
        return "[]" if not v else str(list(v))
    if isinstance(v, str):
        return f'"{v}"'
    return f"{v:,}".replace(",", "_") if isinstance(v, int) else f"{v:g}"


def _rule(f: dataclasses.Field[Any]) -> str:
    choices = f.metadata.get("choices") or ()
    if choices:
        return ", ".join(f"`{c}`" for c in choices)
    low = f.metadata.get("low")
    return f">= {low:g}" if low is not None else ""


def _classes(root: type) -> list[type]:
    out: list[type] = []

    def walk(tp: Any) -> None:
        origin = typing.get_origin(tp)
        if origin is not None:
            for a in typing.get_args(tp):
                walk(a)
            return
        if dataclasses.is_dataclass(tp) and tp not in out:
            out.append(tp)  # type: ignore[arg-type]
            for name, hint in typing.get_type_hints(tp).items():
                if name in {f.name for f in dataclasses.fields(tp)}:
                    walk(hint)

    walk(root)
    return out


def schema_markdown() -> str:
    """The whole schema, root first, as Markdown."""
    lines = [
        "# Scenario schema",
        "",
        "Generated from `bench/spec/scenario.py` by `ingestwm scenario schema`; do not edit by hand.",
        "A scenario file is a YAML mapping of the fields of `Scenario`; nested sections are",
        "mappings, `writers` and `readers` lists of mappings. Times are integer milliseconds",
        "from the run's start unless the unit says otherwise. Unknown fields, wrong types and",
        "out-of-range values are errors that name the dotted field (`writers.1.workload.rate_per_s`).",
        "`--set KEY=VALUE` overrides any field by its dotted path (list items by index or `name`).",
        "",
    ]
    for cls in _classes(Scenario):
        doc = inspect.cleandoc(cls.__doc__ or "").replace("``", "`")
        lines += [f"## {cls.__name__}", "", doc, ""]
        lines += ["| field | type | unit | default | allowed | meaning |", "|---|---|---|---|---|---|"]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            meaning = str(f.metadata.get("doc", "")).replace("|", "\\|")
            row = [f"`{f.name}`", _type(hints[f.name]), _unit(f.name), _default(f), _rule(f), meaning]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)
