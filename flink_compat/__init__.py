"""flink_compat: what a Flink job sees from an ingestion-watermarked Pravega source (docs/design.md §2).

Flink's contracts reproduced without a Flink cluster, with the names Flink users know:
``Watermark``, ``WatermarkStatus`` (IDLE/ACTIVE), ``StreamRecord``, ``TimestampAssigner``,
``WatermarkStrategy.for_bounded_out_of_orderness(...).with_idleness(...)``, side outputs
(``OutputTag``), ``TumblingEventTimeWindows``/``SlidingEventTimeWindows`` with allowed
lateness, and the PDP-26 prototype's ``EventTimeOrderingOperator``.

- ``watermark``: stream elements and ``StatusWatermarkValve`` (combining channels).
- ``strategies``: timestamp assigners and heuristic watermark strategies.
- ``pravega_source``: ``PravegaSource`` — subtasks are readers of one reader group; watermarks
  are ``ingestion watermark - max_event_time_lag``, strictly ascending per subtask.
- ``operators`` / ``windows``: event-time operators.
- ``runner``: ``JobRunner``, a deterministic job runner with aligned checkpoints.
- ``job_checkpoint``: ``JobCheckpoint`` (JSON, never pickle).
- ``transcript_runner``: plays the engine-neutral watermark transcripts
  (``readergroup.transcripts``) through this layer.
"""

from .errors import (
    CheckpointError,
    FlinkCompatError,
    InvalidConfigError,
    MissingTimestampError,
)
from .job_checkpoint import JobCheckpoint, OperatorState, SubtaskState
from .operators import (
    LATE_DATA,
    CollectingOutput,
    DiscardingOutput,
    EventTimeOrderingOperator,
    MapOperator,
    Output,
    OutputTag,
    StreamOperator,
)
from .pravega_source import (
    DEFAULT_MAX_EVENT_TIME_LAG,
    PravegaSource,
    PravegaSourceConfig,
    PravegaSourceSubtask,
)
from .runner import JobRunner, PollResult
from .strategies import (
    BoundedOutOfOrdernessWatermarks,
    RecordTimestampAssigner,
    TimestampAssigner,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
    WatermarksWithIdleness,
)
from .watermark import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    StatusWatermarkValve,
    StreamRecord,
    Watermark,
    WatermarkStatus,
)
from .windows import (
    AggregateFunction,
    CountAggregate,
    ListAggregate,
    SlidingEventTimeWindows,
    SumAggregate,
    TimeWindow,
    TumblingEventTimeWindows,
    WindowOperator,
    WindowResult,
)

__all__ = [
    "DEFAULT_MAX_EVENT_TIME_LAG",
    "LATE_DATA",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "AggregateFunction",
    "BoundedOutOfOrdernessWatermarks",
    "CheckpointError",
    "CollectingOutput",
    "DiscardingOutput",
    "CountAggregate",
    "EventTimeOrderingOperator",
    "FlinkCompatError",
    "InvalidConfigError",
    "JobCheckpoint",
    "JobRunner",
    "ListAggregate",
    "MapOperator",
    "MissingTimestampError",
    "OperatorState",
    "Output",
    "OutputTag",
    "PollResult",
    "PravegaSource",
    "PravegaSourceConfig",
    "PravegaSourceSubtask",
    "RecordTimestampAssigner",
    "SlidingEventTimeWindows",
    "StatusWatermarkValve",
    "StreamOperator",
    "StreamRecord",
    "SubtaskState",
    "SumAggregate",
    "TimeWindow",
    "TimestampAssigner",
    "TumblingEventTimeWindows",
    "Watermark",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStatus",
    "WatermarkStrategy",
    "WatermarksWithIdleness",
    "WindowOperator",
    "WindowResult",
]
