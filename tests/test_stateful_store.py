"""A hypothesis state machine drives a store on a ManualClock and checks it against a plain model.

Random creates, appends (single, batch, conditional, many in one ``append_each``),
transactions (create, append, seal, merge), seals, truncates, attribute updates of all four
types (failing ones included), deletes, advancer passes, clock advances and clock
step-backs. After every step the store must agree with the reference model below on data,
lengths, start offsets, seal state, attributes, ``watermark_at`` for every offset,
``ingestion_time_at`` for every byte, the batch ``watermarks_at``, and the operation
processor's last timestamp; ``_check()`` holds.

Run longer with ``pytest tests/test_stateful_store.py --hypothesis-profile=long``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from segmentstore import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AppendResult,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    ManualClock,
    MergeResult,
    NotATransactionError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentRead,
    SegmentSealedError,
    SegmentStore,
    SegmentStoreError,
    SegmentTruncatedError,
    StoreConfig,
    WrongParentError,
)

T = TypeVar("T")

NAMES = ("a", "b", "c", "d")
LAG_MS = 40
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

R = AttributeUpdateType.REPLACE
RIG = AttributeUpdateType.REPLACE_IF_GREATER
ACC = AttributeUpdateType.ACCUMULATE
RIE = AttributeUpdateType.REPLACE_IF_EQUALS


# ---------------------------------------------------------------- the reference model
class _Fail(Exception):
    """The model says this operation must fail with ``exc``."""

    def __init__(self, exc: type[SegmentStoreError]) -> None:
        super().__init__(exc.__name__)
        self.exc = exc


@dataclass
class _Seg:
    creation_time: int
    parent: str | None = None
    last_write_time: int = 0
    data: bytearray = field(default_factory=bytearray)
    times: list[int] = field(default_factory=list)  # ingestion time of byte o is times[o]
    start: int = 0
    sealed: bool = False
    attrs: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last_write_time = self.creation_time

    def watermark_at(self, p: int) -> int:
        return self.times[p] - 1 if p < len(self.data) else self.last_write_time - 1


class _Model:
    """What a store must do, written as plainly as possible."""

    def __init__(self) -> None:
        self.segs: dict[str, _Seg] = {}  # insertion order = the store's iteration order
        self.last_ts: int | None = None

    def stamp(self, now: int) -> int:
        ts = now if self.last_ts is None else max(now, self.last_ts)
        assert self.last_ts is None or ts >= self.last_ts
        self.last_ts = ts
        return ts

    def get(self, name: str) -> _Seg:
        if name not in self.segs:
            raise _Fail(SegmentNotFoundError)
        return self.segs[name]

    def writable(self, name: str) -> _Seg:
        seg = self.get(name)
        if seg.sealed:
            raise _Fail(SegmentSealedError)
        return seg

    def create(self, name: str, now: int) -> _Seg:
        if name in self.segs:
            raise _Fail(SegmentExistsError)
        seg = self.segs[name] = _Seg(self.stamp(now))
        return seg

    def check_create_transaction(self, parent: str) -> bool:
        if self.writable(parent).parent is not None:
            raise _Fail(NotATransactionError)
        return True

    def append(self, name: str, data: bytes, expected: int | None, now: int) -> tuple[int, int]:
        seg = self.writable(name)
        offset = len(seg.data)
        if expected is not None and expected != offset:
            raise _Fail(BadOffsetError)
        ts = self.stamp(now)
        seg.data += data
        seg.times += [ts] * len(data)
        seg.last_write_time = ts
        return offset, ts

    def update_attributes(self, name: str, updates: list[AttributeUpdate], now: int) -> int:
        seg = self.writable(name)
        planned: dict[int, int] = {}
        for u in updates:
            if u.key in (CREATION_TIME, LAST_WRITE_TIME):
                raise _Fail(BadAttributeUpdateError)
            old = planned[u.key] if u.key in planned else seg.attrs.get(u.key)
            if u.update_type is R:
                new = u.value
            elif u.update_type is RIG:
                if old is not None and u.value <= old:
                    raise _Fail(BadAttributeUpdateError)
                new = u.value
            elif u.update_type is ACC:
                new = (0 if old is None else old) + u.value
                if not INT64_MIN <= new <= INT64_MAX:
                    raise _Fail(BadAttributeUpdateError)
            else:
                if old != u.comparison:
                    raise _Fail(BadAttributeUpdateError)
                new = u.value
            planned[u.key] = new
        ts = self.stamp(now)
        seg.attrs.update(planned)
        seg.last_write_time = ts
        return ts

    def seal(self, name: str, now: int) -> int:
        seg = self.writable(name)
        seg.sealed = True
        seg.last_write_time = self.stamp(now)
        return len(seg.data)

    def truncate(self, name: str, offset: int, now: int) -> bool:
        seg = self.get(name)
        if offset > len(seg.data) or offset < seg.start:  # below the start: refused (Pravega)
            raise _Fail(BadOffsetError)
        if offset > seg.start:  # a truncate at the start is no operation at all
            self.stamp(now)
            seg.start = offset
        return True

    def delete(self, name: str, now: int) -> bool:
        self.get(name)
        self.stamp(now)
        del self.segs[name]
        for txn in [n for n, s in self.segs.items() if s.parent == name]:  # they end with it
            del self.segs[txn]
        return True

    def merge(self, txn: str, parent: str | None, now: int) -> tuple[int, int, int]:
        t = self.get(txn)
        if t.parent is None:
            raise _Fail(NotATransactionError)
        if parent is not None and parent != t.parent:
            raise _Fail(WrongParentError)
        if not t.sealed:
            raise _Fail(SegmentNotSealedError)
        if t.start != 0:
            raise _Fail(SegmentTruncatedError)
        p = self.get(t.parent)
        if p.sealed:
            raise _Fail(SegmentSealedError)
        ts = self.stamp(now)
        offset = len(p.data)
        p.data += t.data
        p.times += [ts] * len(t.data)  # merged bytes take the merge's time
        p.last_write_time = ts
        del self.segs[txn]
        return offset, len(t.data), ts

    def advance_idle(self, now: int) -> list[str]:
        base = now if self.last_ts is None else max(now, self.last_ts)
        out = []
        for name, seg in self.segs.items():
            if seg.parent is None and not seg.sealed and seg.last_write_time <= base - LAG_MS:
                seg.last_write_time = self.stamp(now)
                out.append(name)
        return out

    def read(self, name: str, offset: int, n: int) -> SegmentRead:
        seg = self.get(name)
        if offset < seg.start:
            raise _Fail(SegmentTruncatedError)
        if offset > len(seg.data):
            raise _Fail(BadOffsetError)
        end = min(len(seg.data), offset + n)
        at_tail = end == len(seg.data)
        return SegmentRead(
            offset, bytes(seg.data[offset:end]), seg.watermark_at(end), at_tail and seg.sealed, at_tail
        )


# ---------------------------------------------------------------- strategies
_payloads = st.binary(min_size=1, max_size=6)
_batches = st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=4)
# ("n", name) picks a plain segment name; ("t", i) picks a transaction (live or gone) by index.
_targets = st.one_of(
    st.tuples(st.just("n"), st.sampled_from(NAMES)), st.tuples(st.just("t"), st.integers(0, 7))
)
_conditions = st.sampled_from(["none", "none", "right", "wrong"])
_values = st.sampled_from([*range(-2, 4), INT64_MAX, INT64_MIN])
_keys = st.sampled_from([1, 2, 1, 2, 1, 2, 3, CREATION_TIME, LAST_WRITE_TIME])


@st.composite
def _updates(draw: st.DrawFn) -> AttributeUpdate:
    key, value = draw(_keys), draw(_values)
    kind = draw(st.sampled_from(list(AttributeUpdateType)))
    cmp = draw(st.sampled_from([None, *range(-2, 4)])) if kind is RIE else None
    return AttributeUpdate(key, value, kind, cmp)


# ---------------------------------------------------------------- the machine
class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1_000_000)
        self.store = SegmentStore(clock=self.clock, config=StoreConfig(max_watermark_lag_ms=LAG_MS))
        self.model = _Model()
        self.gone_txns: list[str] = []
        self.last_seen_ts: int | None = None

    def teardown(self) -> None:
        self.store.close()

    # -------------------------------------------------------------- helpers
    def _target(self, seg: tuple[str, Any]) -> str:
        """Resolve a drawn target to a segment name."""
        kind, v = seg
        if kind == "n":
            return str(v)
        live = [n for n, s in self.model.segs.items() if s.parent is not None]
        pool = live if v < 6 and live else self.gone_txns  # mostly live ones, sometimes gone ones
        return pool[v % len(pool)] if pool else "a#transaction.ffffffffffffffff"

    def _run(self, model_op: Callable[[], T], store_op: Callable[[], object]) -> tuple[T | None, object]:
        """Run the model, then the store; both fail with the same error or both succeed."""
        rule_name = sys._getframe(1).f_code.co_name
        try:
            expected = model_op()
        except _Fail as f:
            event(f"{rule_name}: {f.exc.__name__}")
            with pytest.raises(f.exc):
                store_op()
            return None, None
        event(f"{rule_name}: ok")
        return expected, store_op()

    def _saw(self, ts: int) -> None:
        assert self.last_seen_ts is None or ts >= self.last_seen_ts, "a timestamp went backwards"
        self.last_seen_ts = ts

    def _expected_offset(self, name: str, cond: str) -> int | None:
        seg = self.model.segs.get(name)
        length = 0 if seg is None else len(seg.data)
        return {"none": None, "right": length, "wrong": length + 1 + length % 3}[cond]

    # -------------------------------------------------------------- operations, checked
    def _create_transaction(self, parent: str) -> str | None:
        ok, txn = self._run(
            lambda: self.model.check_create_transaction(parent),
            lambda: self.store.create_transaction(parent),
        )
        if not ok:
            return None
        assert isinstance(txn, str) and txn not in self.model.segs and txn not in self.gone_txns
        mseg = self.model.create(txn, self.clock.now())
        mseg.parent = parent
        self._saw(mseg.creation_time)
        return txn

    def _append(self, name: str, data: bytes, cond: str) -> None:
        exp = self._expected_offset(name, cond)
        now = self.clock.now()
        want, got = self._run(
            lambda: self.model.append(name, data, exp, now), lambda: self.store.append(name, data, exp)
        )
        if want is not None:
            assert isinstance(got, AppendResult)
            assert (got.offset, got.length, got.timestamp, got.duplicate) == (
                *want[:1],
                len(data),
                want[1],
                False,
            )
            self._saw(want[1])

    def _seal(self, name: str) -> None:
        now = self.clock.now()
        want, got = self._run(lambda: self.model.seal(name, now), lambda: self.store.seal(name))
        if want is not None:
            assert got == want
            self._saw(self.model.segs[name].last_write_time)

    def _merge(self, txn: str, parent: str, result: bool) -> None:
        mseg = self.model.segs.get(txn)
        real = mseg.parent if mseg is not None else None
        given = {"none": None, "right": real, "wrong": "b" if real != "b" else "c"}[parent]
        now = self.clock.now()
        if result:
            want, got = self._run(
                lambda: self.model.merge(txn, given, now),
                lambda: self.store.merge_transaction_result(txn, given),
            )
            if want is not None:
                assert isinstance(got, MergeResult)
                assert (got.offset, got.length, got.timestamp) == want
        else:
            want, got = self._run(
                lambda: self.model.merge(txn, given, now), lambda: self.store.merge_transaction(txn, given)
            )
            if want is not None:
                assert got == want[0]
        if want is not None:
            self.gone_txns.append(txn)
            self._saw(want[2])

    # -------------------------------------------------------------- rules
    @initialize()
    def first_segments(self) -> None:
        self.create(NAMES[0])
        self.create(NAMES[1])

    @rule(name=st.sampled_from(NAMES))
    def create(self, name: str) -> None:
        now = self.clock.now()
        mseg, info = self._run(lambda: self.model.create(name, now), lambda: self.store.create_segment(name))
        if mseg is not None:
            assert info == SegmentInfo(name, 0, 0, False, mseg.creation_time, mseg.creation_time)
            self._saw(mseg.creation_time)

    @rule(seg=_targets)
    def create_transaction(self, seg: tuple[str, Any]) -> None:
        self._create_transaction(self._target(seg))

    @rule(seg=_targets, data=_payloads, cond=_conditions)
    def append(self, seg: tuple[str, Any], data: bytes, cond: str) -> None:
        self._append(self._target(seg), data, cond)

    @rule(seg=_targets, events=_batches, cond=_conditions)
    def append_batch(self, seg: tuple[str, Any], events: list[bytes], cond: str) -> None:
        name = self._target(seg)
        exp = self._expected_offset(name, cond)
        now = self.clock.now()
        data = b"".join(events)
        want, got = self._run(
            lambda: self.model.append(name, data, exp, now),
            lambda: self.store.append_batch(name, events, exp),
        )
        if want is not None:
            assert isinstance(got, AppendResult)
            assert (got.offset, got.length, got.timestamp) == (want[0], len(data), want[1])
            self._saw(want[1])

    @rule(pairs=st.lists(st.tuples(_targets, _payloads, st.booleans()), max_size=5))
    def append_each(self, pairs: list[tuple[tuple[str, Any], bytes, bool]]) -> None:
        """Each pair its own append (a view or bytes), answered with its result or its segment's error."""
        batch = [(self._target(seg), memoryview(data) if view else data) for seg, data, view in pairs]
        now = self.clock.now()
        want: list[object] = []
        for name, data in batch:
            try:
                offset, ts = self.model.append(name, bytes(data), None, now)
                want.append(AppendResult(offset, len(data), ts, False))
                self._saw(ts)
            except _Fail as f:
                want.append(f.exc)
        got = self.store.append_each(batch)
        assert [a if isinstance(a, AppendResult) else type(a) for a in got] == want
        event(f"append_each: {len(batch)} pairs, {len({n for n, _ in batch})} segments")

    @rule(seg=_targets, updates=st.lists(_updates(), max_size=3), twice=st.booleans())
    def update_attributes(self, seg: tuple[str, Any], updates: list[AttributeUpdate], twice: bool) -> None:
        name = self._target(seg)
        self._update_attributes(name, updates)
        if twice:  # the same updates again meet their own results: equal values, stale comparisons
            self._update_attributes(name, updates)

    def _update_attributes(self, name: str, updates: list[AttributeUpdate]) -> None:
        now = self.clock.now()
        want, got = self._run(
            lambda: self.model.update_attributes(name, updates, now),
            lambda: self.store.update_attributes(name, updates),
        )
        if want is not None:
            assert got == want
            self._saw(want)

    @rule(seg=_targets)
    def seal(self, seg: tuple[str, Any]) -> None:
        self._seal(self._target(seg))

    @rule(seg=_targets, where=st.integers(0, 12))
    def truncate(self, seg: tuple[str, Any], where: int) -> None:
        name = self._target(seg)
        mseg = self.model.segs.get(name)
        # anywhere in [0, length + 2]: below the start, inside, or beyond the length
        offset = where if mseg is None else where % (len(mseg.data) + 3)
        now = self.clock.now()
        self._run(
            lambda: self.model.truncate(name, offset, now),
            lambda: self.store.truncate(name, offset),
        )

    @rule(seg=_targets)
    def delete(self, seg: tuple[str, Any]) -> None:
        name = self._target(seg)
        now = self.clock.now()
        before = set(self.model.segs)
        ok, _ = self._run(lambda: self.model.delete(name, now), lambda: self.store.delete(name))
        if ok:
            self.gone_txns.extend(n for n in before - set(self.model.segs) if "#transaction." in n)

    @rule(seg=_targets, parent=st.sampled_from(["none", "right", "wrong"]), result=st.booleans())
    def merge(self, seg: tuple[str, Any], parent: str, result: bool) -> None:
        self._merge(self._target(seg), parent, result)

    @rule(
        parent=st.sampled_from(NAMES),
        chunks=st.lists(_payloads, max_size=3),
        gap=st.integers(0, 20),
        result=st.booleans(),
        cut=st.sampled_from([0, 0, 0, 1, 3]),
    )
    def transaction_round_trip(
        self, parent: str, chunks: list[bytes], gap: int, result: bool, cut: int
    ) -> None:
        """Create a transaction, write it over time, seal it and merge it: all checked."""
        txn = self._create_transaction(parent)
        if txn is None:
            return
        for chunk in chunks:
            self.clock.advance(gap)
            self._append(txn, chunk, "right")
        if cut:  # a truncated transaction cannot be merged
            self._run(
                lambda: self.model.truncate(txn, cut, self.clock.now()),
                lambda: self.store.truncate(txn, cut),
            )
        self._seal(txn)
        self.clock.advance(gap)
        self._merge(txn, "right", result)

    @rule(seg=_targets, where=st.integers(0, 30), n=st.integers(0, 8))
    def read(self, seg: tuple[str, Any], where: int, n: int) -> None:
        name = self._target(seg)
        mseg = self.model.segs.get(name)
        offset = where if mseg is None else where % (len(mseg.data) + 3)
        want, got = self._run(
            lambda: self.model.read(name, offset, n), lambda: self.store.read(name, offset, n)
        )
        if want is not None:
            assert got == want

    @rule()
    def advance_idle_watermarks(self) -> None:
        want = self.model.advance_idle(self.clock.now())
        assert self.store.advance_idle_watermarks() == want

    @rule(name=st.sampled_from(NAMES), delta=st.integers(-1, 1))
    def advancer_at_the_idle_threshold(self, name: str, delta: int) -> None:
        """Set the clock to just below, at or just above ``name``'s idle threshold, then run a pass."""
        mseg = self.model.segs.get(name)
        if mseg is not None:
            self.clock.set(mseg.last_write_time + LAG_MS + delta)
        self.advance_idle_watermarks()

    @rule(ms=st.integers(0, 30))
    def clock_advances(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(ms=st.integers(1, 60))
    def clock_steps_back(self, ms: int) -> None:
        self.clock.set(self.clock.now() - ms)

    # -------------------------------------------------------------- the comparison
    @invariant()
    def agrees_with_the_model(self) -> None:
        st_, m = self.store, self.model
        assert sorted(st_.list_segments()) == sorted(m.segs)
        if m.last_ts is not None:
            assert st_.last_timestamp == m.last_ts
        for name, seg in m.segs.items():
            length = len(seg.data)
            info = st_.get_info(name)
            assert info == SegmentInfo(
                name,
                seg.start,
                length,
                seg.sealed,
                seg.creation_time,
                seg.last_write_time,
                seg.parent is not None,
                seg.parent,
            )
            assert st_.get_attributes(name) == {
                **seg.attrs,
                CREATION_TIME: seg.creation_time,
                LAST_WRITE_TIME: seg.last_write_time,
            }
            assert st_.read(name, seg.start, length + 1) == m.read(name, seg.start, length + 1)
            assert seg.times == sorted(seg.times)
            assert all(seg.creation_time <= t <= seg.last_write_time for t in seg.times[seg.start :])
            wms = [st_.watermark_at(name, p) for p in range(seg.start, length + 1)]
            assert wms == [seg.watermark_at(p) for p in range(seg.start, length + 1)]
            its = [st_.ingestion_time_at(name, o) for o in range(seg.start, length)]
            assert its == seg.times[seg.start :]
            batch = st_.watermarks_at(name, np.arange(seg.start, length + 1, dtype=np.int64))
            assert batch.tolist() == wms
        st_._check()


if settings.get_current_profile_name() == "long":
    _SETTINGS = settings.get_profile("long")
else:
    _SETTINGS = settings(
        max_examples=400,
        stateful_step_count=50,
    )

StoreMachine.TestCase.settings = _SETTINGS
TestStoreStateful = StoreMachine.TestCase
