"""Checkpoints of a job: source subtask state, the reader-group checkpoint, operator and valve state.

A ``JobCheckpoint`` is an immutable in-memory object; ``to_json``/``from_json`` persist
it when every value in operator state is JSON-representable through ``encode_state``
(None, bool, int, float, str, bytes, list, tuple, dict, and the frozen types below).
Nothing is ever unpickled.

Vocabulary (one spelling across the project): every stateful part of a job captures its
state as a frozen ``...State`` value with ``snapshot_state()`` and takes it back on a
fresh instance with ``restore_state(state)``; ``to_json``/``from_json`` only persist such
values. These are Flink's names (``CheckpointedFunction.snapshotState``, operator
``restoreState``), which stream-processing users already know, and they do not clash
with the two domain meanings nearby: a *checkpoint* is the reader-group marker through
the stream (``ReaderGroup.initiate_checkpoint``) and the job-wide ``JobRunner.checkpoint()``
that aligns on it and collects every part's state; ``SegmentStore.snapshot()`` writes a
disk snapshot of the store and truncates its log.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from .errors import CheckpointError
from .watermark import MIN_TIMESTAMP, ValveState

__all__ = [
    "OperatorState",
    "SubtaskState",
    "JobCheckpoint",
    "encode_state",
    "decode_state",
]


@dataclass(frozen=True, slots=True)
class OperatorState:
    """One operator's state: its kind (class name), current watermark and its own data."""

    kind: str
    current_watermark: int
    data: Any = None


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """One source subtask's state: the last watermark it emitted and whether it was idle."""

    index: int
    last_watermark: int
    idle: bool = False


@dataclass(frozen=True, slots=True)
class JobCheckpoint:
    """A consistent snapshot of a job (taken when no element is in flight).

    ``reader_group_checkpoint`` is the reader group's checkpoint in its own JSON form
    (positions and watermarks per segment), or ``None`` for sources without one.
    ``operators[i]`` is the chain of operator states of downstream subtask ``i``;
    ``valves[i]`` its input valve.
    """

    checkpoint_id: int
    reader_group_checkpoint: str | None
    subtasks: tuple[SubtaskState, ...]
    valves: tuple[ValveState, ...]
    operators: tuple[tuple[OperatorState, ...], ...]

    @property
    def watermark(self) -> int:
        """The lowest watermark any downstream subtask had emitted (the job's event-time floor)."""
        return min((v.last_output_watermark for v in self.valves), default=MIN_TIMESTAMP)

    def to_json(self) -> str:
        """The checkpoint as JSON (raises ``CheckpointError`` if some state is not representable)."""
        doc = {
            "version": 1,
            "checkpoint_id": self.checkpoint_id,
            "reader_group_checkpoint": self.reader_group_checkpoint,
            "subtasks": [[s.index, s.last_watermark, s.idle] for s in self.subtasks],
            "valves": [v.last_output_watermark for v in self.valves],
            "operators": [
                [[op.kind, op.current_watermark, encode_state(op.data)] for op in chain]
                for chain in self.operators
            ],
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> JobCheckpoint:
        """Parse ``to_json`` output; raises ``CheckpointError`` naming the bad field."""
        try:
            doc = json.loads(text)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"JobCheckpoint.from_json: not JSON ({e})") from None
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise CheckpointError("JobCheckpoint.from_json: missing or unknown 'version' (expected 1)")
        try:
            rg = doc["reader_group_checkpoint"]
            if rg is not None and not isinstance(rg, str):
                raise CheckpointError("JobCheckpoint.from_json: 'reader_group_checkpoint' must be a string")
            return JobCheckpoint(
                checkpoint_id=_int(doc["checkpoint_id"], "checkpoint_id"),
                reader_group_checkpoint=rg,
                subtasks=tuple(
                    SubtaskState(_int(i, "subtasks.index"), _int(w, "subtasks.last_watermark"), bool(idle))
                    for i, w, idle in doc["subtasks"]
                ),
                valves=tuple(ValveState(_int(w, "valves")) for w in doc["valves"]),
                operators=tuple(
                    tuple(
                        OperatorState(str(kind), _int(wm, "operators.current_watermark"), decode_state(data))
                        for kind, wm, data in chain
                    )
                    for chain in doc["operators"]
                ),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"JobCheckpoint.from_json: malformed checkpoint ({e!r})") from None


def encode_state(value: Any) -> Any:
    """A JSON-able form of ``value``; tuples, bytes and dicts are tagged so they decode exactly. O(size)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [encode_state(v) for v in value]
    if isinstance(value, tuple):
        return {"$t": [encode_state(v) for v in value]}
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {"$m": [[encode_state(k), encode_state(v)] for k, v in value.items()]}
    raise CheckpointError(
        f"operator state holds a {type(value).__name__} ({value!r:.80}), which has no JSON form; "
        "keep the in-memory JobCheckpoint or store JSON-representable values"
    )


def decode_state(obj: Any) -> Any:
    """The inverse of ``encode_state``. O(size)."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    if isinstance(obj, dict) and len(obj) == 1:
        ((tag, payload),) = obj.items()
        if tag == "$t":
            return tuple(decode_state(v) for v in payload)
        if tag == "$b":
            return base64.b64decode(payload.encode("ascii"), validate=True)
        if tag == "$m":
            return {decode_state(k): decode_state(v) for k, v in payload}
    raise CheckpointError(f"operator state: cannot decode {obj!r:.80}")


def _int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"JobCheckpoint: field {field!r} must be an int, got {value!r}")
    return value
