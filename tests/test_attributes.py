"""Segment attributes: core ones owned by the store, user ones with Pravega's four update types."""

from __future__ import annotations

from pathlib import Path

import pytest

from segmentstore import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    InvalidArgumentError,
    ManualClock,
    SegmentStore,
)
from segmentstore.attributes import CORE_KEY_MAX, CORE_KEY_MIN
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX, INT64_MIN

R = AttributeUpdateType.REPLACE
RIG = AttributeUpdateType.REPLACE_IF_GREATER
ACC = AttributeUpdateType.ACCUMULATE
RIE = AttributeUpdateType.REPLACE_IF_EQUALS


def _user(store: SegmentStore, name: str) -> dict[int, int]:
    attrs = store.get_attributes(name)
    return {k: v for k, v in attrs.items() if k not in (CREATION_TIME, LAST_WRITE_TIME)}


def test_new_segment_has_only_core_attributes(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    assert store.get_attributes("s") == {CREATION_TIME: clock.now(), LAST_WRITE_TIME: clock.now()}


def test_replace_sets_whatever_was_there(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(1, 10)])
    store.update_attributes("s", [AttributeUpdate(1, -4, R)])
    assert _user(store, "s") == {1: -4}


def test_replace_if_greater(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(1, 5, RIG)])  # absent: accepted
    store.update_attributes("s", [AttributeUpdate(1, 6, RIG)])
    for not_greater in (6, 2):
        with pytest.raises(BadAttributeUpdateError, match=str(not_greater)):
            store.update_attributes("s", [AttributeUpdate(1, not_greater, RIG)])
    assert _user(store, "s") == {1: 6}


def test_accumulate_adds_and_absent_counts_as_zero(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(3, 7, ACC)])
    store.update_attributes("s", [AttributeUpdate(3, -2, ACC)])
    assert _user(store, "s") == {3: 5}


@pytest.mark.parametrize(("start", "delta"), [(INT64_MAX, 1), (INT64_MIN, -1)])
def test_accumulate_overflow_is_rejected(store: SegmentStore, start: int, delta: int) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(3, start)])
    with pytest.raises(BadAttributeUpdateError, match="64"):
        store.update_attributes("s", [AttributeUpdate(3, delta, ACC)])
    assert _user(store, "s") == {3: start}


def test_replace_if_equals(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(9, 1, RIE, None)])  # expects absent
    with pytest.raises(BadAttributeUpdateError, match="absent"):
        store.update_attributes("s", [AttributeUpdate(9, 2, RIE, None)])
    with pytest.raises(BadAttributeUpdateError, match="7"):
        store.update_attributes("s", [AttributeUpdate(9, 2, RIE, 7)])
    store.update_attributes("s", [AttributeUpdate(9, 2, RIE, 1)])
    assert _user(store, "s") == {9: 2}


def test_updates_in_one_call_apply_in_order(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes(
        "s",
        [
            AttributeUpdate(1, 10),
            AttributeUpdate(1, 5, ACC),
            AttributeUpdate(1, 16, RIG),
            AttributeUpdate(1, 0, RIE, 16),
            AttributeUpdate(2, 3, ACC),
        ],
    )
    assert _user(store, "s") == {1: 0, 2: 3}


def test_a_failed_condition_rejects_the_whole_update(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(1, 1)])
    before = store.get_attributes("s")
    clock.advance(10)
    with pytest.raises(BadAttributeUpdateError):
        store.update_attributes(
            "s", [AttributeUpdate(1, 100), AttributeUpdate(2, 5), AttributeUpdate(1, 3, RIE, 99)]
        )
    assert store.get_attributes("s") == before  # LAST_WRITE_TIME did not move either


@pytest.mark.parametrize("key", [CREATION_TIME, LAST_WRITE_TIME, CORE_KEY_MIN, CORE_KEY_MAX])
def test_users_cannot_update_core_attributes(store: SegmentStore, key: int) -> None:
    store.create_segment("s")
    before = store.get_attributes("s")
    with pytest.raises(BadAttributeUpdateError, match="core"):
        store.update_attributes("s", [AttributeUpdate(key, 5)])
    assert store.get_attributes("s") == before


def test_keys_just_outside_the_core_range_are_user_keys(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(CORE_KEY_MAX + 1, 1), AttributeUpdate(INT64_MAX, 2)])
    assert _user(store, "s") == {CORE_KEY_MAX + 1: 1, INT64_MAX: 2}


def test_update_is_temporal_even_when_empty(store: SegmentStore, clock: ManualClock) -> None:
    info = store.create_segment("s")
    clock.advance(25)
    ts = store.update_attributes("s", [])
    assert ts == clock.now()
    attrs = store.get_attributes("s")
    assert attrs[LAST_WRITE_TIME] == ts
    assert attrs[CREATION_TIME] == info.creation_time
    assert store.watermark_at("s", 0) == ts - 1


def test_update_timestamp_never_goes_back(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    clock.advance(100)
    t1 = store.update_attributes("s", [AttributeUpdate(1, 1)])
    clock.set(clock.now() - 60)
    t2 = store.update_attributes("s", [AttributeUpdate(1, 2)])
    assert t2 == t1
    assert store.get_attributes("s")[LAST_WRITE_TIME] == t1


def test_get_attributes_with_keys_returns_only_present_ones(store: SegmentStore) -> None:
    store.create_segment("s")
    store.update_attributes("s", [AttributeUpdate(1, 11), AttributeUpdate(2, 22)])
    got = store.get_attributes("s", [2, 3, CREATION_TIME])
    assert got == {2: 22, CREATION_TIME: store.get_info("s").creation_time}


def test_attributes_are_per_segment(store: SegmentStore) -> None:
    store.create_segment("a")
    store.create_segment("b")
    store.update_attributes("a", [AttributeUpdate(1, 1)])
    assert _user(store, "b") == {}


def test_returned_attributes_are_a_copy(store: SegmentStore) -> None:
    store.create_segment("s")
    got = store.get_attributes("s")
    got[1] = 5
    assert 1 not in store.get_attributes("s")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"key": 1.0, "value": 1},
        {"key": 1, "value": "1"},
        {"key": True, "value": 1},
        {"key": 2**63, "value": 1},
        {"key": 1, "value": -(2**63) - 1},
        {"key": 1, "value": 1, "update_type": "replace"},
        {"key": 1, "value": 1, "comparison": 3},
        {"key": 1, "value": 1, "update_type": RIE, "comparison": 2.5},
    ],
)
def test_attribute_update_validates_itself(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        AttributeUpdate(**kwargs)  # type: ignore[arg-type]


def test_non_update_items_are_rejected(store: SegmentStore) -> None:
    store.create_segment("s")
    with pytest.raises(InvalidArgumentError, match="AttributeUpdate"):
        store.update_attributes("s", [(1, 2)])  # type: ignore[list-item]
    assert _user(store, "s") == {}


def test_a_value_of_none_removes_the_attribute(client: SegmentStoreClient) -> None:
    """Pravega's null attribute value: REPLACE removes; REPLACE_IF_EQUALS removes only if it matches;
    a mapping {key: None} removes too; removing an absent key is no error. Embedded and remote."""
    client.create_segment("s")
    client.update_attributes("s", [AttributeUpdate(1, 10), AttributeUpdate(2, 20), AttributeUpdate(3, 30)])
    client.update_attributes("s", [AttributeUpdate(1, None)])
    assert client.get_attributes("s", [1, 2, 3]) == {2: 20, 3: 30}
    with pytest.raises(BadAttributeUpdateError, match="expected 99, found 20"):
        client.update_attributes("s", [AttributeUpdate(2, None, RIE, 99)])
    client.update_attributes("s", [AttributeUpdate(2, None, RIE, 20)])  # a compare-and-remove
    client.update_attributes("s", {3: None, 4: 40})
    client.update_attributes("s", [AttributeUpdate(77, None)])  # absent: nothing to remove
    assert client.get_attributes("s", [1, 2, 3, 4, 77]) == {4: 40}
    client.update_attributes("s", [AttributeUpdate(4, None), AttributeUpdate(4, 41, RIE, None)])
    assert client.get_attributes("s", [4]) == {4: 41}  # in order: removed, then set where absent


@pytest.mark.parametrize("kind", [AttributeUpdateType.ACCUMULATE, AttributeUpdateType.REPLACE_IF_GREATER])
def test_none_goes_only_with_replace_updates(kind: AttributeUpdateType) -> None:
    with pytest.raises(InvalidArgumentError, match=f"value None.*not {kind.name}"):
        AttributeUpdate(1, None, kind)


def test_removals_survive_a_restart(tmp_path: Path) -> None:
    """Removed attributes stay removed when the log is replayed, and after a snapshot."""
    clock = ManualClock(1_000)
    for snapshot in (False, True):
        d = tmp_path / f"d{snapshot}"
        with SegmentStore(clock=clock, data_dir=d) as s:
            s.create_segment("s")
            s.update_attributes("s", {1: 1, 2: 2, 3: 3})
            s.update_attributes("s", [AttributeUpdate(2, None), AttributeUpdate(3, 33)])
            if snapshot:
                s.snapshot()
                s.update_attributes("s", [AttributeUpdate(1, None, RIE, 1)])
        with SegmentStore(clock=clock, data_dir=d) as s:
            want = {3: 33} if snapshot else {1: 1, 3: 33}
            assert s.get_attributes("s", [1, 2, 3]) == want
            s._check()
