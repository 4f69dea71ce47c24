"""Every bad input of issue 2: an error from SegmentStoreError naming segment and value; store unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from segmentstore import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AttributeUpdate,
    AttributeUpdateType,
    ManualClock,
    SegmentStore,
    SegmentStoreError,
)
from segmentstore.attributes import CORE_KEY_MIN
from segmentstore.errors import InvalidClockError
from segmentstore.limits import INT64_MAX

RIE = AttributeUpdateType.REPLACE_IF_EQUALS
RIG = AttributeUpdateType.REPLACE_IF_GREATER
ACC = AttributeUpdateType.ACCUMULATE

MAIN, SEALED, TRUNC, OTHER, SP, GONE, DP, MISSING = (
    "seg-main",
    "seg-sealed",
    "seg-trunc",
    "seg-other",
    "seg-sp",
    "seg-gone",
    "seg-deleted-parent",
    "nope-missing",
)
MAIN_LEN = 9  # b"abc" + b"defg" + b"hi"


def _populate(st: SegmentStore, clock: ManualClock) -> dict[str, str]:
    """Data, attributes, sealed, truncated, empty and deleted segments, and transactions."""
    st.create_segment(MAIN)
    for chunk in (b"abc", b"defg", b"hi"):
        clock.advance(10)
        st.append(MAIN, chunk)
    st.update_attributes(MAIN, [AttributeUpdate(1, 10), AttributeUpdate(2, INT64_MAX)])
    st.create_segment(SEALED)
    st.append(SEALED, b"sealed-data")
    clock.advance(5)
    st.seal(SEALED)
    st.create_segment(TRUNC)
    st.append(TRUNC, b"0123456789")
    st.truncate(TRUNC, 5)
    st.create_segment(OTHER)
    txn_open = st.create_transaction(MAIN)
    st.append(txn_open, b"open")
    txn_sealed = st.create_transaction(MAIN)
    st.append(txn_sealed, b"done")
    st.seal(txn_sealed)
    st.create_segment(SP)
    txn_sp = st.create_transaction(SP)
    st.seal(txn_sp)
    st.seal(SP)
    st.create_segment(GONE)
    st.delete(GONE)
    st.create_segment(DP)  # a deleted parent, whose sealed transaction ends with it ...
    txn_orphan = st.create_transaction(DP)
    st.seal(txn_orphan)
    st.delete(DP)
    st.create_segment(DP)  # ... and a new segment under the same name, which it must not reach
    txn_gone = st.create_transaction(MAIN)  # a deleted transaction
    st.seal(txn_gone)
    st.delete(txn_gone)
    clock.advance(1_000)  # an operation that wrongly stamps would now show a new time
    return {
        "txn_open": txn_open,
        "txn_sealed": txn_sealed,
        "txn_sp": txn_sp,
        "txn_orphan": txn_orphan,
        "txn_gone": txn_gone,
    }


def _snapshot(st: SegmentStore) -> dict[str, Any]:
    """Everything observable: infos, attributes, data, watermarks and ingestion times."""
    snap: dict[str, Any] = {"last_ts": st.last_timestamp, "names": sorted(st.list_segments())}
    for name in snap["names"]:
        info = st.get_info(name)
        start, length = info.start_offset, info.length
        read = st.read(name, start, length - start + 1)
        snap[name] = (
            info,
            st.get_attributes(name),
            read,
            [st.watermark_at(name, p) for p in range(start, length + 1)],
            [st.ingestion_time_at(name, o) for o in range(start, length)],
            st.watermarks_at(name, np.arange(start, length + 1)).tolist(),
        )
    return snap


_Call = Callable[[Any, dict[str, str]], object]  # Any: the cases pass ill-typed arguments
A = AttributeUpdate

# (id, call, segment named in the message ("@key": a transaction), values named in the message)
CASES: list[tuple[str, _Call, str, tuple[str, ...]]] = [
    # unknown segment
    ("append-unknown", lambda s, n: s.append(MISSING, b"x"), MISSING, ()),
    ("append-batch-unknown", lambda s, n: s.append_batch(MISSING, [b"x"]), MISSING, ()),
    ("read-unknown", lambda s, n: s.read(MISSING, 0, 1), MISSING, ()),
    ("read-future-unknown", lambda s, n: s.read_future(MISSING, 0, 1), MISSING, ()),
    ("info-unknown", lambda s, n: s.get_info(MISSING), MISSING, ()),
    ("seal-unknown", lambda s, n: s.seal(MISSING), MISSING, ()),
    ("truncate-unknown", lambda s, n: s.truncate(MISSING, 0), MISSING, ()),
    ("delete-unknown", lambda s, n: s.delete(MISSING), MISSING, ()),
    ("attrs-unknown", lambda s, n: s.update_attributes(MISSING, []), MISSING, ()),
    ("get-attrs-unknown", lambda s, n: s.get_attributes(MISSING), MISSING, ()),
    ("watermark-unknown", lambda s, n: s.watermark_at(MISSING, 0), MISSING, ()),
    ("ingestion-unknown", lambda s, n: s.ingestion_time_at(MISSING, 0), MISSING, ()),
    ("watermarks-unknown", lambda s, n: s.watermarks_at(MISSING, np.arange(1)), MISSING, ()),
    ("scan-unknown", lambda s, n: s.scan_records(MISSING, 0, 10), MISSING, ()),
    ("runs-unknown", lambda s, n: s.ingestion_runs(MISSING, 0, 1), MISSING, ()),
    ("txn-of-unknown", lambda s, n: s.create_transaction(MISSING), MISSING, ()),
    ("merge-unknown", lambda s, n: s.merge_transaction(MISSING), MISSING, ()),
    ("info-unhashable-name", lambda s, n: s.get_info(["x"]), "['x']", ()),
    # deleted segment
    ("append-deleted", lambda s, n: s.append(GONE, b"x"), GONE, ()),
    ("attrs-deleted", lambda s, n: s.update_attributes(GONE, [A(1, 1)]), GONE, ()),
    ("read-deleted", lambda s, n: s.read(GONE, 0, 1), GONE, ()),
    ("seal-deleted", lambda s, n: s.seal(GONE), GONE, ()),
    ("delete-deleted", lambda s, n: s.delete(GONE), GONE, ()),
    # create of an existing segment, bad names
    ("create-existing", lambda s, n: s.create_segment(MAIN), MAIN, ()),
    ("create-existing-sealed", lambda s, n: s.create_segment(SEALED), SEALED, ()),
    ("create-empty-name", lambda s, n: s.create_segment(""), "''", ()),
    ("create-spaced-name", lambda s, n: s.create_segment(" x "), "' x '", ()),
    ("create-txn-name", lambda s, n: s.create_segment("a#transaction.b"), "a#transaction.b", ()),
    ("create-int-name", lambda s, n: s.create_segment(5), "5", ("int",)),
    # sealed segment
    ("append-sealed", lambda s, n: s.append(SEALED, b"x"), SEALED, ("sealed",)),
    ("append-batch-sealed", lambda s, n: s.append_batch(SEALED, [b"x"]), SEALED, ("sealed",)),
    ("attrs-sealed", lambda s, n: s.update_attributes(SEALED, [A(1, 1)]), SEALED, ("sealed",)),
    ("empty-attrs-sealed", lambda s, n: s.update_attributes(SEALED, []), SEALED, ("sealed",)),
    ("seal-sealed", lambda s, n: s.seal(SEALED), SEALED, ("sealed",)),
    ("txn-of-sealed", lambda s, n: s.create_transaction(SEALED), SEALED, ("sealed",)),
    ("merge-into-sealed", lambda s, n: s.merge_transaction(n["txn_sp"]), SP, ("sealed",)),
    ("append-sealed-txn", lambda s, n: s.append(n["txn_sealed"], b"x"), "@txn_sealed", ()),
    # merges
    ("merge-non-txn", lambda s, n: s.merge_transaction(MAIN), MAIN, ("not a transaction",)),
    ("merge-unsealed", lambda s, n: s.merge_transaction(n["txn_open"]), "@txn_open", ("sealed",)),
    ("merge-wrong-parent", lambda s, n: s.merge_transaction(n["txn_sealed"], OTHER), "@txn_sealed", (OTHER,)),
    (
        "merge-missing-parent",
        lambda s, n: s.merge_transaction(n["txn_sealed"], MISSING),
        "@txn_sealed",
        (MISSING,),
    ),
    ("merge-txn-of-deleted", lambda s, n: s.merge_transaction(n["txn_orphan"]), "@txn_orphan", ()),
    ("merge-txn-of-namesake", lambda s, n: s.merge_transaction(n["txn_orphan"], DP), "@txn_orphan", ()),
    ("merge-deleted-txn", lambda s, n: s.merge_transaction(n["txn_gone"]), "@txn_gone", ()),
    ("append-deleted-txn", lambda s, n: s.append(n["txn_gone"], b"x"), "@txn_gone", ()),
    ("txn-of-txn", lambda s, n: s.create_transaction(n["txn_open"]), "@txn_open", ()),
    # conditional appends
    ("cond-append-low", lambda s, n: s.append(MAIN, b"x", 3), MAIN, ("3", str(MAIN_LEN))),
    ("cond-append-high", lambda s, n: s.append(MAIN, b"x", 99), MAIN, ("99", str(MAIN_LEN))),
    ("cond-batch", lambda s, n: s.append_batch(MAIN, [b"x"], 0), MAIN, ("0", str(MAIN_LEN))),
    ("cond-append-negative", lambda s, n: s.append(MAIN, b"x", -1), MAIN, ("-1",)),
    ("cond-append-float", lambda s, n: s.append(OTHER, b"x", 0.0), OTHER, ("0.0",)),
    ("cond-append-bool", lambda s, n: s.append(OTHER, b"x", False), OTHER, ("False",)),
    ("cond-append-str", lambda s, n: s.append(OTHER, b"x", "0"), OTHER, ("'0'",)),
    # negative or non-int offsets and lengths
    ("read-negative-offset", lambda s, n: s.read(MAIN, -1, 1), MAIN, ("-1",)),
    ("read-float-offset", lambda s, n: s.read(MAIN, 1.5, 1), MAIN, ("1.5",)),
    ("read-str-offset", lambda s, n: s.read(MAIN, "0", 1), MAIN, ("'0'",)),
    ("read-bool-offset", lambda s, n: s.read(MAIN, True, 1), MAIN, ("True",)),
    ("read-negative-length", lambda s, n: s.read(MAIN, 0, -2), MAIN, ("-2",)),
    ("read-float-length", lambda s, n: s.read(MAIN, 0, 2.5), MAIN, ("2.5",)),
    ("read-none-length", lambda s, n: s.read(MAIN, 0, None), MAIN, ("None",)),
    ("future-negative-offset", lambda s, n: s.read_future(MAIN, -3, 1), MAIN, ("-3",)),
    ("future-negative-length", lambda s, n: s.read_future(MAIN, 0, -4), MAIN, ("-4",)),
    ("future-float-offset", lambda s, n: s.read_future(MAIN, 9.0, 1), MAIN, ("9.0",)),
    ("future-negative-timeout", lambda s, n: s.read_future(MAIN, 9, 1, -5), MAIN, ("-5",)),
    ("future-float-timeout", lambda s, n: s.read_future(MAIN, 9, 1, 1.5), MAIN, ("1.5",)),
    ("truncate-negative", lambda s, n: s.truncate(MAIN, -1), MAIN, ("-1",)),
    ("truncate-float", lambda s, n: s.truncate(MAIN, 2.0), MAIN, ("2.0",)),
    ("truncate-none", lambda s, n: s.truncate(MAIN, None), MAIN, ("None",)),
    ("watermark-negative", lambda s, n: s.watermark_at(MAIN, -1), MAIN, ("-1",)),
    ("watermark-float", lambda s, n: s.watermark_at(MAIN, 1.5), MAIN, ("1.5",)),
    ("ingestion-negative", lambda s, n: s.ingestion_time_at(MAIN, -7), MAIN, ("-7",)),
    ("ingestion-str", lambda s, n: s.ingestion_time_at(MAIN, "1"), MAIN, ("'1'",)),
    ("watermarks-negative", lambda s, n: s.watermarks_at(MAIN, np.array([0, -1])), MAIN, ("-1",)),
    ("watermarks-float", lambda s, n: s.watermarks_at(MAIN, np.array([0.5])), MAIN, ("float",)),
    (
        "watermarks-beyond",
        lambda s, n: s.watermarks_at(MAIN, np.array([MAIN_LEN + 1])),
        MAIN,
        (str(MAIN_LEN + 1),),
    ),
    # truncate beyond the length, reads beyond the length
    ("truncate-beyond", lambda s, n: s.truncate(MAIN, MAIN_LEN + 1), MAIN, (str(MAIN_LEN + 1),)),
    ("read-beyond", lambda s, n: s.read(MAIN, MAIN_LEN + 1, 1), MAIN, (str(MAIN_LEN + 1),)),
    ("watermark-beyond", lambda s, n: s.watermark_at(MAIN, MAIN_LEN + 1), MAIN, (str(MAIN_LEN + 1),)),
    ("ingestion-at-tail", lambda s, n: s.ingestion_time_at(MAIN, MAIN_LEN), MAIN, (str(MAIN_LEN),)),
    ("truncate-below-start", lambda s, n: s.truncate(TRUNC, 3), TRUNC, ("3", "5")),
    ("future-beyond-sealed", lambda s, n: s.read_future(SEALED, 12, 1), SEALED, ("12", "11")),
    ("future-beyond-sealed-wait", lambda s, n: s.read_future(SEALED, 12, 1, 50), SEALED, ("12", "11")),
    # reads below the start offset
    ("read-truncated", lambda s, n: s.read(TRUNC, 4, 1), TRUNC, ("4", "5")),
    ("future-truncated", lambda s, n: s.read_future(TRUNC, 0, 1), TRUNC, ("0", "5")),
    ("watermark-truncated", lambda s, n: s.watermark_at(TRUNC, 4), TRUNC, ("4", "5")),
    ("ingestion-truncated", lambda s, n: s.ingestion_time_at(TRUNC, 1), TRUNC, ("1", "5")),
    ("watermarks-truncated", lambda s, n: s.watermarks_at(TRUNC, np.array([6, 3])), TRUNC, ("3", "5")),
    ("scan-truncated", lambda s, n: s.scan_records(TRUNC, 2, 10), TRUNC, ("2", "5")),
    ("runs-truncated", lambda s, n: s.ingestion_runs(TRUNC, 3, 6), TRUNC, ("3", "5")),
    ("runs-beyond", lambda s, n: s.ingestion_runs(MAIN, 0, MAIN_LEN + 2), MAIN, (str(MAIN_LEN + 2),)),
    ("runs-reversed", lambda s, n: s.ingestion_runs(MAIN, 5, 2), MAIN, ("5", "2")),
    ("runs-float", lambda s, n: s.ingestion_runs(MAIN, 0.0, 2), MAIN, ("0.0",)),
    ("runs-none", lambda s, n: s.ingestion_runs(MAIN, 0, None), MAIN, ("None",)),
    ("scan-beyond", lambda s, n: s.scan_records(MAIN, MAIN_LEN + 1, 10), MAIN, (str(MAIN_LEN + 1),)),
    ("scan-negative-offset", lambda s, n: s.scan_records(MAIN, -3, 10), MAIN, ("-3",)),
    ("scan-float-length", lambda s, n: s.scan_records(MAIN, 0, 2.5), MAIN, ("2.5",)),
    ("scan-negative-length", lambda s, n: s.scan_records(MAIN, 0, -4), MAIN, ("-4",)),
    ("scan-negative-records", lambda s, n: s.scan_records(MAIN, 0, 9, -1), MAIN, ("max_records", "-1")),
    ("scan-float-records", lambda s, n: s.scan_records(MAIN, 0, 9, 1.0), MAIN, ("max_records", "1.0")),
    # attribute updates
    (
        "attr-creation-time",
        lambda s, n: s.update_attributes(MAIN, [A(CREATION_TIME, 1)]),
        MAIN,
        ("CREATION_TIME",),
    ),
    (
        "attr-last-write",
        lambda s, n: s.update_attributes(MAIN, [A(1, 2), A(LAST_WRITE_TIME, 1)]),
        MAIN,
        ("LAST_WRITE_TIME",),
    ),
    (
        "attr-core-range",
        lambda s, n: s.update_attributes(MAIN, [A(CORE_KEY_MIN + 77, 1)]),
        MAIN,
        (str(CORE_KEY_MIN + 77),),
    ),
    (
        "attr-rie-mismatch",
        lambda s, n: s.update_attributes(MAIN, [A(3, 1), A(1, 5, RIE, 11)]),
        MAIN,
        ("11", "10"),
    ),
    ("attr-rie-absent", lambda s, n: s.update_attributes(MAIN, [A(1, 5, RIE, None)]), MAIN, ("absent", "10")),
    ("attr-rig-equal", lambda s, n: s.update_attributes(MAIN, [A(1, 10, RIG)]), MAIN, ("10",)),
    (
        "attr-acc-overflow",
        lambda s, n: s.update_attributes(MAIN, [A(5, 1), A(2, 1, ACC)]),
        MAIN,
        (str(INT64_MAX),),
    ),
    ("attr-not-an-update", lambda s, n: s.update_attributes(MAIN, [A(5, 1), (1, 2)]), MAIN, ("(1, 2)",)),
    ("attrs-none", lambda s, n: s.update_attributes(MAIN, None), MAIN, ("None",)),
    ("attrs-int", lambda s, n: s.update_attributes(MAIN, 7), MAIN, ("7",)),
    ("attrs-map-str-value", lambda s, n: s.update_attributes(MAIN, {1: "x"}), MAIN, ("'x'",)),
    ("attrs-map-float-key", lambda s, n: s.update_attributes(MAIN, {1.5: 1}), MAIN, ("1.5",)),
    ("attrs-map-core", lambda s, n: s.update_attributes(MAIN, {CREATION_TIME: 1}), MAIN, ("CREATION_TIME",)),
    ("attrs-map-big", lambda s, n: s.update_attributes(MAIN, {1: 2**63}), MAIN, (str(2**63),)),
    ("get-attrs-int-keys", lambda s, n: s.get_attributes(MAIN, 5), MAIN, ("5",)),
    ("get-attrs-str-keys", lambda s, n: s.get_attributes(MAIN, "ab"), MAIN, ("'ab'",)),
    ("get-attrs-str-key", lambda s, n: s.get_attributes(MAIN, [1, "a"]), MAIN, ("'a'",)),
    # payloads
    ("payload-str", lambda s, n: s.append(MAIN, "text"), MAIN, ("str",)),
    ("payload-int", lambda s, n: s.append(MAIN, 5), MAIN, ("int",)),
    ("payload-none", lambda s, n: s.append(MAIN, None), MAIN, ("None",)),
    ("payload-list", lambda s, n: s.append(MAIN, [1, 2]), MAIN, ("list",)),
    ("payload-empty", lambda s, n: s.append(MAIN, b""), MAIN, ("0",)),
    ("batch-single-bytes", lambda s, n: s.append_batch(MAIN, b"abc"), MAIN, ("bytes",)),
    ("batch-str-event", lambda s, n: s.append_batch(MAIN, [b"a", "b"]), MAIN, ("str",)),
    ("batch-int-event", lambda s, n: s.append_batch(MAIN, [b"a", 5]), MAIN, ("int",)),
    ("batch-empty-event", lambda s, n: s.append_batch(MAIN, [b"a", b""]), MAIN, ("empty",)),
    ("batch-no-events", lambda s, n: s.append_batch(MAIN, []), MAIN, ("0",)),
    ("writer-float", lambda s, n: s.append(MAIN, b"x", writer_id=1.5, event_number=1), MAIN, ("1.5",)),
    (
        "writer-core-key",
        lambda s, n: s.append(MAIN, b"x", writer_id=CREATION_TIME, event_number=1),
        MAIN,
        (str(CREATION_TIME),),
    ),
]


@pytest.mark.parametrize(("call", "segment", "values"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_and_changes_nothing(
    store: SegmentStore,
    clock: ManualClock,
    call: _Call,
    segment: str,
    values: tuple[str, ...],
) -> None:
    names = _populate(store, clock)
    if segment.startswith("@"):
        segment = names[segment[1:]]
    before = _snapshot(store)
    with pytest.raises(SegmentStoreError) as ei:
        call(store, names)
    msg = str(ei.value)
    assert segment in msg, f"the error does not name the segment {segment!r}: {msg}"
    for v in values:
        assert v in msg, f"the error does not name {v!r}: {msg}"
    assert _snapshot(store) == before
    store._check()
    # the store still works afterwards
    assert store.append(MAIN, b"ok").offset == MAIN_LEN


def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_failed_operations_do_not_consume_timestamps(store: SegmentStore, clock: ManualClock) -> None:
    """A rejected operation after a clock step-back must not have pushed the processor's time."""
    names = _populate(store, clock)
    t0 = store.last_timestamp
    clock.advance(500)
    for _, call, _, _ in CASES:
        with pytest.raises(SegmentStoreError):
            call(store, names)
    assert store.last_timestamp == t0
    clock.set(t0 + 1)
    assert store.append(MAIN, b"z").timestamp == t0 + 1


class _BadClock:
    """A clock that returns ``value`` once set, ``ManualClock``'s time before."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.value: object = None
        self.bad = False

    def now(self) -> Any:
        return self.value if self.bad else self.clock.now()


@pytest.mark.parametrize(
    "value",
    [1.7e12, 1_700_000_000_000.0, None, 2**63, -(2**63), "1700000000000", True],
    ids=["float", "whole-float", "none", "beyond-int64", "int64-min", "str", "bool"],
)
def test_a_clock_that_is_not_int64_ms_is_refused_and_changes_nothing(value: object) -> None:
    clock = ManualClock(1_000)
    bad = _BadClock(clock)
    st = SegmentStore(clock=bad)  # type: ignore[arg-type]
    try:
        names = _populate(st, clock)
        before = _snapshot(st)
        bad.bad, bad.value = True, value
        for call in (
            lambda: st.append(MAIN, b"x"),
            lambda: st.append_batch(MAIN, [b"x", b"y"]),
            lambda: st.create_segment("new"),
            lambda: st.create_transaction(MAIN),
            lambda: st.seal(OTHER),
            lambda: st.update_attributes(MAIN, {7: 7}),
            lambda: st.truncate(MAIN, 2),
            lambda: st.delete(OTHER),
            lambda: st.merge_transaction(names["txn_sealed"]),
            lambda: st.read_future(MAIN, MAIN_LEN, 10, 100),
        ):
            with pytest.raises(InvalidClockError) as ei:
                call()
            assert repr(value) in str(ei.value) and "_BadClock" in str(ei.value)
        bad.bad = False
        assert _snapshot(st) == before
        st._check()
        clock.advance(1)
        assert st.append(MAIN, b"ok").timestamp == clock.now()  # usable once the clock is right
    finally:
        bad.bad = False
        st.close()


def test_a_numpy_integer_clock_is_taken_as_its_value() -> None:
    clock = ManualClock(1_000)
    bad = _BadClock(clock)
    bad.bad, bad.value = True, np.int64(5_000)
    with SegmentStore(clock=bad) as st:  # type: ignore[arg-type]
        st.create_segment("s")
        r = st.append("s", b"x")
        assert r.timestamp == 5_000 and type(r.timestamp) is int
