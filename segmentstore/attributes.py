"""Segment attributes: the core ones the store keeps, and user attributes with Pravega's update types.

Attribute keys are signed 64-bit ints. Keys in ``[CORE_KEY_MIN, CORE_KEY_MAX]`` are
core attributes, owned by the store (``CREATION_TIME``, ``LAST_WRITE_TIME``, ...);
a user may read them but never update them. Values are signed 64-bit ints.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import BadAttributeUpdateError, InvalidArgumentError
from .limits import INT64_MAX, INT64_MIN, MAX_ATTRIBUTE_KEYS, MAX_ATTRIBUTE_UPDATES, check_size, shorten

__all__ = [
    "CORE_KEY_MIN",
    "CORE_KEY_MAX",
    "CREATION_TIME",
    "LAST_WRITE_TIME",
    "CORE_ATTRIBUTE_NAMES",
    "AttributeUpdateType",
    "AttributeUpdate",
    "is_core_attribute",
    "plan_attribute_updates",
    "check_attribute_keys",
    "replace_all",
    "as_updates",
]


CORE_KEY_MIN = INT64_MIN
CORE_KEY_MAX = INT64_MIN + 0xFFFF

CREATION_TIME = CORE_KEY_MIN + 1
"""Ingestion time of the segment's creation (PDP-26 ``CREATION_TIME``)."""

LAST_WRITE_TIME = CORE_KEY_MIN + 2
"""Ingestion time of the segment's last temporal operation (PDP-26 ``LAST_WRITE_TIME``)."""

CORE_ATTRIBUTE_NAMES: Mapping[int, str] = {
    CREATION_TIME: "CREATION_TIME",
    LAST_WRITE_TIME: "LAST_WRITE_TIME",
}


def is_core_attribute(key: int) -> bool:
    """Whether ``key`` is in the core (store-owned) key range. O(1)."""
    return CORE_KEY_MIN <= key <= CORE_KEY_MAX


class AttributeUpdateType(enum.Enum):
    """How an update combines with the current value (Pravega's AttributeUpdateType)."""

    REPLACE = "replace"
    """Set the value, whatever it was."""
    REPLACE_IF_GREATER = "replace_if_greater"
    """Set the value if the key is absent or the new value is greater; otherwise reject."""
    ACCUMULATE = "accumulate"
    """Add the value to the current one (an absent key counts as 0)."""
    REPLACE_IF_EQUALS = "replace_if_equals"
    """Set the value if the current value equals ``comparison`` (``None``: key absent); otherwise reject."""


@dataclass(frozen=True, slots=True)
class AttributeUpdate:
    """One attribute update: ``key``, ``value``, how to apply it, and the compare value.

    ``value=None`` removes the attribute (Pravega's null attribute value): with REPLACE
    always, with REPLACE_IF_EQUALS if the current value equals ``comparison``.
    """

    key: int
    value: int | None
    update_type: AttributeUpdateType = AttributeUpdateType.REPLACE
    comparison: int | None = None

    def __post_init__(self) -> None:
        _check_int64("attribute key", self.key)
        if not isinstance(self.update_type, AttributeUpdateType):
            raise InvalidArgumentError(
                f"attribute {self.key}: update_type must be an AttributeUpdateType, got {self.update_type!r}"
            )
        if self.value is None:
            if self.update_type not in _REMOVABLE_BY:
                raise InvalidArgumentError(
                    f"attribute {self.key}: value None (remove) goes only with REPLACE or "
                    f"REPLACE_IF_EQUALS, not {self.update_type.name}"
                )
        else:
            _check_int64(f"value of attribute {self.key}", self.value)
        if self.comparison is not None:
            _check_int64(f"comparison value of attribute {self.key}", self.comparison)
            if self.update_type is not AttributeUpdateType.REPLACE_IF_EQUALS:
                raise InvalidArgumentError(
                    f"attribute {self.key}: a comparison value goes only with REPLACE_IF_EQUALS"
                )


def plan_attribute_updates(
    segment: str,
    current: Mapping[int, int],
    updates: Iterable[AttributeUpdate],
    *,
    allow_core: bool = False,
) -> dict[int, int | None]:
    """Validate ``updates`` against ``current`` and return the new values, changing nothing.

    Updates apply in order, so a later update of the same key sees the earlier one.
    Any failed condition rejects the whole list (``BadAttributeUpdateError``). A new
    value of ``None`` removes the key. O(k).
    """
    planned: dict[int, int | None] = {}
    for u in updates:
        if not isinstance(u, AttributeUpdate):
            raise InvalidArgumentError(
                f"segment {segment!r}: attribute updates must be AttributeUpdate, got {u!r}"
            )
        if not allow_core and is_core_attribute(u.key):
            name = CORE_ATTRIBUTE_NAMES.get(u.key, str(u.key))
            raise BadAttributeUpdateError(
                f"segment {segment!r}: attribute {name} is a core attribute and cannot be updated by a user"
            )
        old = planned.get(u.key, current.get(u.key))
        t = u.update_type
        if t is AttributeUpdateType.REPLACE:
            new = u.value
        elif t is AttributeUpdateType.REPLACE_IF_GREATER:
            assert u.value is not None  # (AttributeUpdate refuses None here)
            if old is not None and u.value <= old:
                raise BadAttributeUpdateError(
                    f"segment {segment!r}: attribute {u.key}: replace-if-greater with {u.value} "
                    f"is not greater than the current value {old}"
                )
            new = u.value
        elif t is AttributeUpdateType.ACCUMULATE:
            assert u.value is not None  # (AttributeUpdate refuses None here)
            new = (old or 0) + u.value
            if not INT64_MIN <= new <= INT64_MAX:
                raise BadAttributeUpdateError(
                    f"segment {segment!r}: attribute {u.key}: accumulating {u.value} onto {old} "
                    "overflows 64 bits"
                )
        else:  # REPLACE_IF_EQUALS
            if old != u.comparison:
                expected = "absent" if u.comparison is None else u.comparison
                actual = "absent" if old is None else old
                raise BadAttributeUpdateError(
                    f"segment {segment!r}: attribute {u.key}: replace-if-equals expected "
                    f"{expected}, found {actual}"
                )
            new = u.value
        planned[u.key] = new
    return planned


def check_attribute_keys(segment: str, keys: object) -> tuple[int, ...]:
    """``keys`` of ``get_attributes`` as a tuple of int64 keys; ``InvalidArgumentError`` naming them. O(k)."""
    if isinstance(keys, (str, bytes, bytearray, Mapping)) or not isinstance(keys, Iterable):
        raise InvalidArgumentError(
            f"segment {segment!r}: attribute keys must be an iterable of ints, "
            f"got {type(keys).__name__} {keys!r:.60}"
        )
    out = tuple(keys)
    _check_count(segment, "attribute keys", len(out), MAX_ATTRIBUTE_KEYS, "MAX_ATTRIBUTE_KEYS")
    for k in out:
        _check_int64(f"segment {segment!r}: attribute key", k)
    return out


def _check_count(segment: str, what: str, n: int, limit: int, limit_name: str) -> None:
    check_size(f"segment {shorten(segment)}: the list of {what}", n, limit, limit_name, "items")


def replace_all(segment: str, values: Mapping[object, object]) -> list[AttributeUpdate]:
    """``{key: value}`` as REPLACE updates (what a user passes for "set these"; None: remove). O(k)."""
    out = []
    for k, v in values.items():
        _check_int64(f"segment {segment!r}: attribute key", k)
        if v is not None:
            _check_int64(f"segment {segment!r}: value of attribute {k}", v)
        out.append(AttributeUpdate(k, v))  # type: ignore[arg-type]
    return out


def as_updates(segment: str, updates: object) -> tuple[AttributeUpdate, ...]:
    """What ``update_attributes`` was given, as a tuple of updates; a mapping means REPLACE each. O(k).

    Raises ``InvalidArgumentError`` naming the segment and the value for anything
    else, identically in the embedded store and the remote client.
    """
    if isinstance(updates, Mapping):
        _check_count(
            segment, "attribute updates", len(updates), MAX_ATTRIBUTE_UPDATES, "MAX_ATTRIBUTE_UPDATES"
        )
        return tuple(replace_all(segment, updates))
    if isinstance(updates, (str, bytes, bytearray)) or not isinstance(updates, Iterable):
        raise InvalidArgumentError(
            f"segment {segment!r}: attribute updates must be an iterable of AttributeUpdate or a "
            f"mapping {{key: value}}, got {type(updates).__name__} {updates!r:.60}"
        )
    out = tuple(updates)
    _check_count(segment, "attribute updates", len(out), MAX_ATTRIBUTE_UPDATES, "MAX_ATTRIBUTE_UPDATES")
    for u in out:
        if not isinstance(u, AttributeUpdate):
            raise InvalidArgumentError(
                f"segment {segment!r}: attribute updates must be AttributeUpdate, got "
                f"{type(u).__name__} {u!r:.60}"
            )
    return out


_REMOVABLE_BY = (AttributeUpdateType.REPLACE, AttributeUpdateType.REPLACE_IF_EQUALS)


def _check_int64(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidArgumentError(f"{what} must fit in 64 bits, got {value}")
