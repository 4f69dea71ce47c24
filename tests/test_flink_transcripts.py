"""The shared watermark transcripts (readergroup/transcript_cases/*.yaml) played through the Flink layer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from flink_compat.transcript_runner import run_transcript
from readergroup.errors import TranscriptError
from readergroup.transcripts import load_transcript, parse_transcript, transcript_files, transcripts_dir

TRANSCRIPTS = transcripts_dir()
FILES = transcript_files()


def test_there_are_shared_transcripts() -> None:
    assert len(FILES) >= 3
    names = [load_transcript(p).name for p in FILES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript_runs_as_expected_on_the_flink_layer(path: Path) -> None:
    transcript = load_transcript(path)
    result = run_transcript(transcript)
    assert result.mismatches(transcript.expected) == []


def test_a_wrong_expectation_is_reported() -> None:
    t = load_transcript(TRANSCRIPTS / "pdp26_prototype_output.yaml")
    wrong = dataclasses.replace(t.expected, on_time=tuple(reversed(t.expected.on_time)))
    problems = run_transcript(t).mismatches(wrong)
    assert len(problems) == 1 and problems[0].startswith("on_time")


def _doc(**overrides: object) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((TRANSCRIPTS / "pdp26_prototype_output.yaml").read_text())
    doc.update(overrides)
    return doc


def test_an_event_below_an_earlier_watermark_is_rejected_as_unrealistic() -> None:
    steps = [
        {"watermark": 1000},
        {"event": {"key": "x", "event_time": 1, "ingestion_time": 1000}},
    ]
    expected = {"watermarks": [0], "on_time": [], "late": [{"key": "x", "event_time": 1}]}
    with pytest.raises(TranscriptError, match=r"step 1: event 'x' has ingestion time 1000 <= watermark 1000"):
        parse_transcript(_doc(steps=steps, expected=expected, max_event_time_lag=1000))


def test_a_reader_watermark_that_does_not_ascend_is_rejected() -> None:
    doc = _doc()
    doc["steps"].append({"watermark": 1510626764349})
    with pytest.raises(TranscriptError, match="step 6: reader 0's ingestion watermark"):
        parse_transcript(doc)


def test_expected_must_account_for_every_event_once() -> None:
    doc = _doc()
    doc["expected"]["late"] = []
    with pytest.raises(TranscriptError, match="missing"):
        parse_transcript(doc)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_event_time_lag": -1}, "max_event_time_lag: must be >= 0"),
        ({"readers": 0}, "readers: must be >= 1"),
        ({"steps": [{"watermark": 1, "status": "idle"}]}, "step 0: needs exactly one"),
        ({"steps": [{"watermark": 1, "reader": 3}]}, "step 0: reader 3 out of range"),
        ({"surprise": 1}, "unknown fields"),
    ],
)
def test_malformed_transcripts_name_what_is_wrong(change: dict[str, Any], message: str) -> None:
    with pytest.raises(TranscriptError, match=message):
        parse_transcript(_doc(**change))
