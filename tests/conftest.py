"""Shared fixtures: a manual ingestion clock and an in-memory store on it; hypothesis profiles."""

from __future__ import annotations

import os
from collections.abc import Iterator

import flink_venv
import pytest
from hypothesis import HealthCheck, settings

from segmentstore import ManualClock, SegmentStore, TickingClock
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.net.server import SegmentStoreServer

settings.register_profile(
    "ingestwm",
    deadline=None,  # examples run servers, threads and numba: their time says nothing
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""The suite's hypothesis settings, loaded below: a test file names only what differs (its
``max_examples``, a ``stateful_step_count``, a function-scoped fixture it means to share)."""
settings.register_profile(
    "long", settings.get_profile("ingestwm"), max_examples=1_000, stateful_step_count=100
)
"""``pytest --hypothesis-profile=long``: many more examples and steps, for a soak run."""
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ingestwm"))

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


@pytest.fixture(params=["embedded", "remote"])
def client(request: pytest.FixtureRequest, store: SegmentStore) -> Iterator[SegmentStoreClient]:
    """The client under test: direct calls, or through a server of ``store`` on loopback.

    Client-facing suites use it to run over both implementations; a module may
    override it with its own ``client`` fixture.
    """
    if request.param == "embedded":
        yield EmbeddedClient(store)
        return
    server = SegmentStoreServer(store)
    remote = RemoteClient(("127.0.0.1", server.start()), timeout_s=20)
    try:
        yield remote
    finally:
        remote.close()
        server.stop()


@pytest.fixture(params=["embedded", "remote"])
def ticking(request: pytest.FixtureRequest) -> Iterator[tuple[TickingClock, SegmentStoreClient]]:
    """A store on a clock that moves 1 ms at every reading, and a client of it: direct or over loopback."""
    clock = TickingClock(START_MS)
    store = SegmentStore(clock=clock)
    try:
        if request.param == "embedded":
            yield clock, EmbeddedClient(store)
        else:
            with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
                yield clock, c
        store._check()
    finally:
        store.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (the README's ``-n 2 --dist loadgroup``), every test that uses the suite's
    in-process SparkSession runs on one worker: one JVM starts, not one per worker, and the
    worker's session is shared as it is in a serial run. A test that starts Spark inside this
    process another way (a command run in-process) says so with ``xdist_group("spark")``."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("spark"))
    items.sort(key=_start_order)  # stable: the order within each class is the collection's


def _start_order(item: pytest.Item) -> int:
    """Longest first, so that ``loadgroup`` never leaves one worker idle while the other runs a
    long unit it took last: xdist hands out work units (a group, or one test) in collection
    order. The Spark replays of every shipped scenario (the largest unit), then the other Spark
    tests, then the other slow tests, then Flink's (a minute or more each; its venv, installed
    in the background from the start, is ready by then), then the short rest, which fills
    both workers to the end."""
    group = item.get_closest_marker("xdist_group")
    name = group.args[0] if group is not None and group.args else None
    if item.get_closest_marker("flink") is not None:
        return 3
    if name == "spark-validate":
        return 0
    if name == "spark":
        return 1
    return 2 if item.get_closest_marker("slow") is not None else 4


def pytest_collection_finish(session: pytest.Session) -> None:
    """A test marked ``flink`` is selected: start installing PyFlink's venv now, beside the suite."""
    if any(item.get_closest_marker("flink") for item in session.items):
        flink_venv.start()
