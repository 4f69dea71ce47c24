"""Shared fixtures: a manual ingestion clock and an in-memory store on it; hypothesis profiles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from segmentstore import ManualClock, SegmentStore

settings.register_profile(
    "long",
    max_examples=1_000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

START_MS = 1_000_000


@pytest.fixture
def clock() -> ManualClock:
    """A ManualClock at 1_000_000 ms; tests move it themselves."""
    return ManualClock(START_MS)


@pytest.fixture
def store(clock: ManualClock) -> Iterator[SegmentStore]:
    """An in-memory SegmentStore on ``clock``, closed after the test."""
    s = SegmentStore(clock=clock)
    try:
        yield s
    finally:
        s.close()
