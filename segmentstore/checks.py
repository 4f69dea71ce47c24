"""``_check()`` failures that show the structure: ``@checked`` adds a bounded repr of its state.

Every stateful structure has a ``_check()`` that asserts its invariants (docs/design.md §4);
stress and property tests call it after every step. As sortedcontainers' ``_check()``
does, a failure should show the state that broke the invariant, not only the assert::

    @checked
    def _check(self) -> None:
        assert self._low <= self._high, "low above high"

A failing assert then raises ``AssertionError("low above high\\nRange state: Range(_low=5,
_high=3)")`` chained to the original. The state is every slot and instance attribute,
each through ``reprlib`` (at most ``_MAX_REPR`` characters in all), so it is cheap to
read and never floods a log. Nested checks annotate once: the innermost structure's
state is the one shown. Upper layers import this module too (layers import downward).
"""

from __future__ import annotations

import functools
import reprlib
import traceback
from collections.abc import Callable
from typing import TypeVar

__all__ = ["checked", "state_repr"]

_T = TypeVar("_T")

_MAX_REPR = 2_000
"""Characters of state shown at most."""

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 8
_repr.maxdict = 8
_repr.maxstring = 80
_repr.maxlong = 40
_repr.maxother = 120


class _CheckFailed(AssertionError):
    """An invariant failed; the message already carries the structure's state."""


def state_repr(obj: object, limit: int = _MAX_REPR) -> str:
    """``Type(field=value, ...)`` over ``obj``'s slots and instance attributes, at most ``limit`` chars."""
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    names.extend(n for n in getattr(obj, "__dict__", {}) if n not in names)
    parts = []
    for name in names:
        try:
            value = getattr(obj, name)
        except AttributeError:  # a slot not set (yet)
            continue
        parts.append(f"{name}={_repr.repr(value)}")
    text = f"{type(obj).__name__}({', '.join(parts)})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failed_line(e: AssertionError) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "invariant failed"
    f = frames[-1]
    return f"invariant failed: {f.line} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})"


def checked(method: Callable[[_T], None]) -> Callable[[_T], None]:
    """Wrap a ``_check`` so a failed assert also shows the structure's state (``state_repr``)."""

    @functools.wraps(method)
    def check(self: _T) -> None:
        try:
            method(self)
        except _CheckFailed:
            raise
        except AssertionError as e:
            what = str(e) or _failed_line(e)
            raise _CheckFailed(f"{what}\n{type(self).__name__} state: {state_repr(self)}") from e

    return check
