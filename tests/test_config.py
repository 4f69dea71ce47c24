"""StoreConfig: defaults, validation at construction, checks by the store (the one table of its options)."""

from __future__ import annotations

import dataclasses

import pytest

from segmentstore import (
    InvalidArgumentError,
    ManualClock,
    SegmentStore,
    SegmentStoreError,
    StoreConfig,
)

_INT_FIELDS = [f.name for f in dataclasses.fields(StoreConfig) if f.name not in ("sync", "advancer_thread")]


def test_defaults_are_valid_and_documented_fields_exist() -> None:
    c = StoreConfig()
    assert (c.max_watermark_lag_ms, c.polling_period_ms) == (10_000, 1_000)
    assert c.sync in ("always", "interval", "none")
    assert c.advancer_thread is None


def test_custom_values_are_kept() -> None:
    c = StoreConfig(max_watermark_lag_ms=250, polling_period_ms=20, sync="always", advancer_thread=False)
    assert (c.max_watermark_lag_ms, c.polling_period_ms, c.sync, c.advancer_thread) == (
        250,
        20,
        "always",
        False,
    )
    assert c == StoreConfig(
        max_watermark_lag_ms=250, polling_period_ms=20, sync="always", advancer_thread=False
    )
    c = StoreConfig(max_watermark_lag_ms=1, polling_period_ms=60_000)
    assert (c.max_watermark_lag_ms, c.polling_period_ms) == (1, 60_000)


@pytest.mark.parametrize("field", _INT_FIELDS)
@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, None])
def test_integer_options_must_be_positive_ints(field: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError) as ei:
        StoreConfig(**{field: bad})  # type: ignore[arg-type]
    msg = str(ei.value)
    assert field in msg
    assert repr(bad) in msg or str(bad) in msg
    assert isinstance(ei.value, SegmentStoreError)


@pytest.mark.parametrize("bad", ["sometimes", "", None, 1])
def test_sync_policy_must_be_known(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="sync"):
        StoreConfig(sync=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1, "yes", 0.0])
def test_advancer_thread_must_be_bool_or_none(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="advancer_thread"):
        StoreConfig(advancer_thread=bad)  # type: ignore[arg-type]


def test_store_keeps_its_config_and_clock() -> None:
    cfg = StoreConfig(max_watermark_lag_ms=123)
    clk = ManualClock(7)
    with SegmentStore(clock=clk, config=cfg) as s:
        assert s.config is cfg
        assert s.clock is clk


@pytest.mark.parametrize("bad", [{}, "config", 5])
def test_store_rejects_a_config_that_is_not_a_store_config(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="StoreConfig"):
        SegmentStore(clock=ManualClock(0), config=bad)  # type: ignore[arg-type]


def test_store_rejects_a_clock_without_now() -> None:
    with pytest.raises(InvalidArgumentError, match="clock"):
        SegmentStore(clock=object())  # type: ignore[arg-type]


def test_max_append_bytes_bounds_appends() -> None:
    with SegmentStore(clock=ManualClock(0), config=StoreConfig(max_append_bytes=8)) as s:
        s.create_segment("s")
        s.append("s", b"12345678")
        with pytest.raises(InvalidArgumentError, match="9"):
            s.append("s", b"123456789")
        assert s.get_info("s").length == 8


def test_max_watermark_lag_decides_which_segments_are_idle() -> None:
    clk = ManualClock(1_000)
    with SegmentStore(clock=clk, config=StoreConfig(max_watermark_lag_ms=100)) as s:
        s.create_segment("s")
        clk.advance(99)
        assert s.advance_idle_watermarks() == []
        clk.advance(1)
        assert s.advance_idle_watermarks() == ["s"]
        assert s.watermark_at("s", 0) == clk.now() - 1
