"""Every name and list a command carries has a limit (``segmentstore.limits``), the same embedded and remote.

A command over a limit is refused with an ``InvalidArgumentError`` naming the field, its
size and the limit, and changes nothing; a long name never comes back whole in an error.
"""

from __future__ import annotations

import pytest

from segmentstore import AttributeUpdate, InvalidArgumentError, SegmentNotFoundError, StreamNotFoundError
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import (
    MAX_ATTRIBUTE_KEYS,
    MAX_ATTRIBUTE_UPDATES,
    MAX_NAME_PART_CHARS,
    MAX_PATTERN_CHARS,
    MAX_SEGMENT_NAME_CHARS,
    MAX_STREAM_SEGMENTS,
    SYSTEM_NAME_EXTRA_CHARS,
)
from segmentstore.store import SegmentStore


def test_segment_names_longer_than_the_limit_are_refused(
    client: SegmentStoreClient, store: SegmentStore
) -> None:
    longest = "n" * MAX_SEGMENT_NAME_CHARS
    client.create_segment(longest)
    txn = client.create_transaction(longest)  # a transaction's name is longer than its parent's
    client.append(txn, b"x")
    client.create_segment("_system/" + "p" * (MAX_SEGMENT_NAME_CHARS + SYSTEM_NAME_EXTRA_CHARS - 8))
    too_long = "m" * (MAX_SEGMENT_NAME_CHARS + 1)
    with pytest.raises(
        InvalidArgumentError, match=r"1025 characters.*1024 \(segmentstore.limits.MAX_SEGMENT_NAME_CHARS\)"
    ):
        client.create_segment(too_long)
    huge = "h" * 200_000  # the names were 15 MiB: refused, and never echoed whole
    with pytest.raises(InvalidArgumentError, match="MAX_SEGMENT_NAME_CHARS") as e:
        client.create_segment(huge)
    assert len(str(e.value)) < 400
    with pytest.raises(SegmentNotFoundError) as missing:
        client.append(huge, b"x")
    assert len(str(missing.value)) < 400 and "200000 characters" in str(missing.value)
    assert not client.exists(too_long)
    assert len(store.list_segments()) == 3


def test_attribute_updates_and_keys_per_call_are_limited(
    client: SegmentStoreClient, store: SegmentStore
) -> None:
    client.create_segment("s")
    ok = [AttributeUpdate(k, k) for k in range(1, MAX_ATTRIBUTE_UPDATES + 1)]
    with pytest.raises(
        InvalidArgumentError, match=r"attribute updates has 65537 items.*MAX_ATTRIBUTE_UPDATES"
    ):
        client.update_attributes("s", [*ok, AttributeUpdate(0, 1)])
    with pytest.raises(InvalidArgumentError, match="MAX_ATTRIBUTE_UPDATES"):
        client.update_attributes("s", {k: 1 for k in range(1, MAX_ATTRIBUTE_UPDATES + 2)})
    assert client.get_attributes("s", [1]) == {}  # nothing was changed
    client.update_attributes("s", ok[:3])
    with pytest.raises(InvalidArgumentError, match=r"attribute keys has 65537 items.*MAX_ATTRIBUTE_KEYS"):
        client.get_attributes("s", range(MAX_ATTRIBUTE_KEYS + 1))
    assert client.get_attributes("s", range(1, MAX_ATTRIBUTE_KEYS + 1)) == {1: 1, 2: 2, 3: 3}


def test_stream_names_patterns_and_segment_lists_are_limited(client: SegmentStoreClient) -> None:
    part = "p" * MAX_NAME_PART_CHARS
    client.create_stream(f"{part}/{part}")
    with pytest.raises(InvalidArgumentError, match=r"at most 255 characters.*MAX_NAME_PART_CHARS") as e:
        client.create_stream(f"scope/{part}x")
    assert len(str(e.value)) < 600
    with pytest.raises(StreamNotFoundError) as missing:
        client.get_stream("s/" + "x" * 100_000)
    assert len(str(missing.value)) < 400
    with pytest.raises(InvalidArgumentError, match="MAX_PATTERN_CHARS"):
        client.list_streams("*" * (MAX_PATTERN_CHARS + 1))
    assert client.list_streams("p*") == [f"{part}/{part}"]

    info = client.create_stream("sc/st", 2)
    first = [s.name for s in info.active_segments]
    n = MAX_STREAM_SEGMENTS  # splitting the first half into n, while the second half stays: n + 1
    lows = [i / (2 * n) for i in range(n)]
    over = MAX_STREAM_SEGMENTS + 1
    with pytest.raises(InvalidArgumentError, match=rf"{over} active segments.*MAX_STREAM_SEGMENTS"):
        client.scale_stream("sc/st", first[:1], list(zip(lows, [*lows[1:], 0.5], strict=True)))
    assert [s.name for s in client.get_stream("sc/st").active_segments] == first  # nothing changed
    with pytest.raises(
        InvalidArgumentError, match=rf"transaction segments has {over} items.*MAX_STREAM_SEGMENTS"
    ):
        client.commit_transaction("sc/st", [f"t{i}" for i in range(MAX_STREAM_SEGMENTS + 1)])
    with pytest.raises(InvalidArgumentError, match="MAX_STREAM_SEGMENTS"):
        client.create_stream("sc/many", MAX_STREAM_SEGMENTS + 1)
