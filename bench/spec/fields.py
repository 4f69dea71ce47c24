"""The scenario schema's fields: bounds, choices and the meaning of each, checked in one place.

``spec_field`` declares a dataclass field with a lower bound or a set of choices and its
``doc`` (the schema reference is generated from it: ``bench.spec.schema_doc``);
``check_fields`` checks them in a spec's ``__post_init__`` and raises ``ScenarioError``
naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from .errors import ScenarioError

__all__ = ["spec_field", "check_fields"]


def spec_field(
    default: Any = dataclasses.MISSING,
    *,
    low: float | None = None,
    choices: tuple[str, ...] = (),
    doc: str = "",
) -> Any:
    """A field with a lower bound or choices (checked by ``check_fields``) and its meaning (``doc``)."""
    meta = {"low": low, "choices": choices, "doc": doc}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a frozen dataclass default")
    if dataclasses.is_dataclass(default):
        return field(default_factory=_constant(default), metadata=meta)
    return field(default=default, metadata=meta)


def _constant(value: Any) -> Any:
    """A default factory returning ``value`` (a frozen dataclass, safe to share)."""

    def make() -> Any:
        return value

    return make


def check_fields(obj: Any) -> None:
    """Check the bounds and choices of ``spec_field`` fields (``ScenarioError`` naming the field)."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        low = f.metadata.get("low")
        if low is not None and v is not None and not isinstance(v, tuple) and v < low:
            raise ScenarioError(f"must be >= {low:g}, got {v!r}", f.name)
        if low is not None and isinstance(v, tuple) and any(x < low for x in v):
            raise ScenarioError(f"every value must be >= {low:g}, got {list(v)}", f.name)
        choices = f.metadata.get("choices")
        if choices and v not in choices:
            raise ScenarioError(f"must be one of {', '.join(choices)}; got {v!r}", f.name)
