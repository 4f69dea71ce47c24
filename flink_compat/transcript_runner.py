"""The shared watermark transcripts (``readergroup.transcripts``) played through this layer.

``run_transcript`` gives each reader of the transcript a ``PravegaSourceSubtask`` over a
scripted reader (it returns the transcript's deliveries, one per poll, then ``EMPTY``),
runs them in a ``JobRunner`` into an ``EventTimeOrderingOperator`` and returns what came
out as a ``TranscriptResult``; ``result.mismatches(transcript.expected)`` is empty when
the Flink layer does what the transcript says.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from readergroup.errors import TranscriptError
from readergroup.reading.reader import EventRead, ReaderStats, ReadKind
from readergroup.transcripts import Transcript, TranscriptResult, TranscriptStep

from .job_checkpoint import JobCheckpoint
from .operators import LATE_DATA, EventTimeOrderingOperator
from .pravega_source import PravegaSourceConfig, PravegaSourceSubtask
from .runner import JobRunner
from .strategies import RecordTimestampAssigner

__all__ = ["run_transcript"]


def run_transcript(transcript: Transcript) -> TranscriptResult:
    """Play ``transcript`` through the source subtasks, the runner and the ordering operator."""
    source = _ScriptedSource(transcript)
    runner = JobRunner(source, lambda: [EventTimeOrderingOperator()])
    for step in transcript.steps:
        reader = source.readers[step.reader]
        if step.kind == "status":
            reader.has_segments = not step.idle
        else:
            reader.push(step)
        runner.poll_subtask(step.reader)
        runner._check()
    released = len(runner.output.records)
    watermarks = tuple(w.timestamp for w in runner.downstream_watermarks[0])
    subtask_watermarks = tuple(tuple(w.timestamp for w in ws) for ws in runner.source_watermarks)
    runner.end_of_input()
    runner._check()
    records = [(r.value, r.timestamp) for r in runner.output.records]
    late = [(r.value, r.timestamp) for r in runner.side_output(LATE_DATA)]
    return TranscriptResult(
        watermarks=watermarks,
        subtask_watermarks=subtask_watermarks,
        on_time=tuple(records[:released]),  # type: ignore[arg-type]
        late=tuple(late),  # type: ignore[arg-type]
        pending=tuple(records[released:]),  # type: ignore[arg-type]
    )


class _ScriptedReader:
    """A reader that returns the reads it is given, one per call, then ``EMPTY``."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.has_segments = True
        self._reads: deque[EventRead] = deque()
        self._position = 0

    def push(self, step: TranscriptStep) -> None:
        if step.event is not None:
            e = step.event
            self._reads.append(
                EventRead(
                    ReadKind.EVENT,
                    0,
                    f"transcript/{self.index}",
                    self._position,
                    1,
                    e.key,
                    e.payload,
                    e.event_time,
                    e.ingestion_time,
                )
            )
            self._position += 1
        else:
            self._reads.append(EventRead(ReadKind.WATERMARK, 0, watermark=step.watermark))

    def read_next_event(self, timeout_ms: int = 0) -> EventRead:
        return self._reads.popleft() if self._reads else EventRead(ReadKind.EMPTY, 0)

    @property
    def stats(self) -> ReaderStats:
        segments = (f"transcript/{self.index}",) if self.has_segments else ()
        return ReaderStats(f"transcript-{self.index}", 0, self._position, 0, 0, None, 0, 0, segments)


class _ScriptedSource:
    """One scripted reader per transcript reader; no checkpoints."""

    def __init__(self, transcript: Transcript) -> None:
        self.readers = [_ScriptedReader(i) for i in range(transcript.readers)]
        self.config = PravegaSourceConfig(
            parallelism=transcript.readers,
            max_event_time_lag=transcript.max_event_time_lag,
            timestamp_assigner=RecordTimestampAssigner(),
            deserializer=lambda read: read.routing_key,
        )

    def create_subtasks(self, restore: JobCheckpoint | None = None) -> Sequence[PravegaSourceSubtask]:
        return [PravegaSourceSubtask(r.index, r, self.config, _NoClock()) for r in self.readers]

    def trigger_checkpoint(self, checkpoint_id: int) -> str:
        raise TranscriptError("transcripts take no checkpoints")

    def complete_checkpoint(self, name: str) -> str | None:
        raise TranscriptError("transcripts take no checkpoints")


class _NoClock:
    """Transcripts have no processing time (only heuristic strategies would read it)."""

    def now(self) -> int:
        raise TranscriptError("transcripts have no processing clock")
