"""Options and offsets of the Spark source and sink: parsing, validation, errors that name the option."""

from __future__ import annotations

import json

import pytest

from spark_source.errors import InvalidOffsetError, InvalidOptionError
from spark_source.offsets import SourceOffset, StreamOffset
from spark_source.options import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BASE = {"endpoint": "127.0.0.1:9090", "stream": "iot/sensors"}


def src(streaming: bool = True, **extra: str) -> object:
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def test_option_names_are_case_insensitive_and_defaults_apply() -> None:
    o = parse_source_options(
        {
            "ENDPOINT": "localhost:1",
            "Stream": "a/b",
            "maxeventtimelag": "10 seconds",
            "MAXEVENTSPERTRIGGER": "5",
        },
        streaming=True,
    )
    assert o.endpoint == "localhost:1" and o.streams == ("a/b",) and o.patterns == ()
    assert o.max_event_time_lag_ms == 10_000 and o.max_events_per_trigger == 5
    assert o.max_bytes_per_trigger is None and o.emit_watermark_rows and o.fail_on_data_loss
    assert o.starting.kind == "latest"  # streaming default, like Kafka's and Pulsar's
    assert parse_source_options(BASE, streaming=False).starting.kind == "earliest"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1500", 1500),
        ("500ms", 500),
        ("10 seconds", 10_000),
        ("2 min", 120_000),
        ("1 hour", 3_600_000),
        (250, 250),
    ],
)
def test_durations(text: object, ms: int) -> None:
    assert parse_duration_ms(text, "maxEventTimeLag") == ms


@pytest.mark.parametrize("bad", ["-3", "ten seconds", "10 parsecs", "1.5 s", ""])
def test_a_bad_lag_names_the_option(bad: str) -> None:
    with pytest.raises(InvalidOptionError, match="maxEventTimeLag"):
        src(maxEventTimeLag=bad)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"stream": "a/b"}, "endpoint"),
        ({"endpoint": "h:1"}, "stream"),
        ({**BASE, "endpoint": "nohost"}, "endpoint"),
        ({**BASE, "endpoint": "h:99999"}, "endpoint"),
        ({**BASE, "stream": "no-scope"}, "stream"),
        ({**BASE, "stream": "a/b,,c/d"}, "stream"),
        ({**BASE, "maxEventsPerTrigger": "0"}, "maxEventsPerTrigger"),
        ({**BASE, "maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger"),
        ({**BASE, "emitWatermarkRows": "yes"}, "emitWatermarkRows"),
        ({**BASE, "failOnDataLoss": "1"}, "failOnDataLoss"),
        ({**BASE, "timeoutMs": "-5"}, "timeoutMs"),
        ({**BASE, "consumerName": "a b"}, "consumerName"),
        ({**BASE, "startingPosition": "{not json"}, "startingPosition"),
        ({**BASE, "startingPosition": '{"stream": "x/y", "positions": [["x/y/0", -1]]}'}, "startingPosition"),
        ({**BASE, "startingPosition": '{"stream": "other/s", "positions": []}'}, "startingPosition"),
        ({**BASE, "maxEventsPerTriger": "5"}, "maxEventsPerTriger"),
    ],
)
def test_bad_source_options_fail_naming_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        parse_source_options(options, streaming=True)


def test_ending_position_is_for_batch_reads_and_latest_start_is_for_streams() -> None:
    with pytest.raises(InvalidOptionError, match="endingPosition applies to batch reads only"):
        src(endingPosition="latest")
    with pytest.raises(InvalidOptionError, match="startingPosition"):
        src(streaming=False, startingPosition="latest")
    with pytest.raises(InvalidOptionError, match="endingPosition"):
        src(streaming=False, endingPosition="earliest")
    assert parse_source_options({**BASE, "endingPosition": "latest"}, streaming=None).ending.kind == "latest"


def test_streams_lists_and_patterns() -> None:
    o = parse_source_options({**BASE, "stream": " a/b , iot/* , c/d,a/b"}, streaming=True)
    assert o.streams == ("a/b", "c/d") and o.patterns == ("iot/*",)


def test_starting_position_accepts_cuts_in_several_shapes() -> None:
    seg = "iot/sensors/0.#epoch.0"
    cut = json.dumps({"stream": "iot/sensors", "positions": [[seg, 42]]})
    shapes = [
        cut,
        f"[{cut}]",
        json.dumps({"iot/sensors": {seg: 42}}),
        json.dumps(SourceOffset({"iot/sensors": StreamOffset({seg: 42})}, 7).to_dict()),
    ]
    for text in shapes:
        pos = src(startingPosition=text).starting
        assert pos.kind == "cut" and pos.cut_of("iot/sensors") == {seg: 42}, text
        assert pos.cut_of("other/stream") is None


def test_sink_options() -> None:
    o = parse_sink_options(BASE)
    assert o.delivery_guarantee == AT_LEAST_ONCE and o.stream == "iot/sensors"
    o = parse_sink_options({**BASE, "deliveryGuarantee": "EXACTLY-ONCE", "sinkId": "q1"})
    assert o.delivery_guarantee == EXACTLY_ONCE and o.sink_id == "q1"
    from_ckpt = parse_sink_options({**BASE, "deliveryGuarantee": "exactly-once", "checkpointLocation": "/x"})
    again = parse_sink_options({**BASE, "deliveryGuarantee": "exactly-once", "checkpointLocation": "/x"})
    other = parse_sink_options({**BASE, "deliveryGuarantee": "exactly-once", "checkpointLocation": "/y"})
    assert from_ckpt.sink_id == again.sink_id != other.sink_id
    with pytest.raises(InvalidOptionError, match="sinkId is required"):
        parse_sink_options({**BASE, "deliveryGuarantee": "exactly-once"})
    batch = parse_sink_options({**BASE, "deliveryGuarantee": "exactly-once"}, streaming=False)
    assert batch.delivery_guarantee == "exactly-once"  # a batch write commits at its end: no sinkId
    with pytest.raises(InvalidOptionError, match="deliveryGuarantee"):
        parse_sink_options({**BASE, "deliveryGuarantee": "twice"})
    with pytest.raises(InvalidOptionError, match="stream"):
        parse_sink_options({**BASE, "stream": "a/*"})
    with pytest.raises(InvalidOptionError, match="startingPosition"):
        parse_sink_options({**BASE, "startingPosition": "earliest"})


def test_offsets_round_trip_as_sorted_json() -> None:
    o = SourceOffset(
        {
            "s/b": StreamOffset({"s/b/1": 10, "s/b/0": 5}, frozenset({"s/b/0"}), {"s/b/1": 3}),
            "s/a": StreamOffset({"s/a/0": 0}),
        },
        1234,
    )
    d = o.to_dict()
    assert list(d["streams"]) == ["s/a", "s/b"] and list(d["streams"]["s/b"]["positions"]) == [
        "s/b/0",
        "s/b/1",
    ]
    back = SourceOffset.from_dict(json.loads(json.dumps(d)))
    assert back == o and json.dumps(back.to_dict()) == json.dumps(d)
    assert back.stream("s/b") is not None and back.stream("s/b").begin_of("s/b/1") == 3  # type: ignore[union-attr]
    assert o.total_position() == 15


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ([], "JSON object"),
        ({"v": 2, "watermark": 0, "streams": {}}, "version"),
        ({"v": 1, "watermark": "x", "streams": {}}, "watermark"),
        ({"v": 1, "watermark": 0, "streams": {"s/a": {"positions": {"s/a/0": -1}}}}, "s/a/0"),
        ({"v": 1, "watermark": 0, "streams": {"s/a": {"positions": {}, "done": ["s/a/0"]}}}, "done segment"),
        (
            {"v": 1, "watermark": 0, "streams": {"s/a": {"positions": {"s/a/0": 1}, "starts": {"s/a/0": 5}}}},
            "starts at",
        ),
    ],
)
def test_malformed_offsets_are_rejected(obj: object, match: str) -> None:
    with pytest.raises(InvalidOffsetError, match=match):
        SourceOffset.from_dict(obj)


def test_moved_from_ignores_dropping_done_segments() -> None:
    start = SourceOffset({"s/a": StreamOffset({"s/a/0": 9, "s/a/1": 4}, frozenset({"s/a/0"}))}, 5)
    same = SourceOffset({"s/a": StreamOffset({"s/a/1": 4})}, 6)
    assert not same.moved_from(start)
    assert SourceOffset({"s/a": StreamOffset({"s/a/1": 5})}, 5).moved_from(start)
    assert SourceOffset({"s/a": StreamOffset({"s/a/1": 4}), "s/b": StreamOffset({"s/b/0": 0})}, 5).moved_from(
        start
    )
