"""A tiny deterministic job runner: source subtasks -> channels -> operator chains -> sinks.

The runner reproduces how Flink moves elements, single-threaded and in a fixed order,
so tests and simulations are repeatable:

- Source subtask ``s`` is input channel ``s`` of every downstream subtask. Records go to
  one downstream subtask (by a stable hash of ``key_selector(value)``, or all to subtask
  0 when there is no key selector); watermarks and statuses go to all of them (Flink's
  broadcast of watermarks over a keyed exchange).
- Each downstream subtask combines its channels with a ``StatusWatermarkValve`` and
  feeds an operator chain; the chain's last output goes to the job's sink
  (``JobRunner.output``); side outputs of any operator go to the sink's side outputs.
- Delivery is synchronous: when ``poll_subtask`` returns, everything the subtask emitted
  has been processed downstream.
- ``checkpoint()`` triggers a reader-group checkpoint and polls each subtask until it
  reads the checkpoint marker; a subtask that reached it is not polled again until all
  have (barrier alignment). The operator and valve state is then exactly the effect of
  everything before the markers, and the reader-group checkpoint holds the positions
  right after it. A restore resumes from there and no watermark goes backwards:
  source subtasks, valves and operators all restore their last watermark.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from segmentstore.checks import checked

from .errors import CheckpointError, InvalidConfigError
from .job_checkpoint import JobCheckpoint, SubtaskState
from .operators import CollectingOutput, OutputTag, StreamOperator
from .watermark import (
    MAX_TIMESTAMP,
    StatusWatermarkValve,
    StreamElement,
    StreamRecord,
    Watermark,
    WatermarkStatus,
)

__all__ = ["PollResult", "SourceSubtaskLike", "SourceLike", "JobRunner", "stable_partition"]


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll of a source subtask produced.

    ``progressed`` says the subtask read or emitted something; ``checkpoint`` names the
    reader-group checkpoint whose marker the subtask read in this poll.
    """

    elements: tuple[StreamElement, ...] = ()
    progressed: bool = False
    checkpoint: str | None = None


class SourceSubtaskLike(Protocol):
    """One parallel instance of a source."""

    @property
    def index(self) -> int: ...

    def poll(self) -> PollResult: ...

    def snapshot_state(self) -> SubtaskState: ...


class SourceLike(Protocol):
    """A parallel source: creates its subtasks (restored or fresh) and takes checkpoints."""

    def create_subtasks(self, restore: JobCheckpoint | None = None) -> Sequence[SourceSubtaskLike]: ...

    def trigger_checkpoint(self, checkpoint_id: int) -> str: ...

    def complete_checkpoint(self, name: str) -> str | None: ...


def stable_partition(key: Hashable, parallelism: int) -> int:
    """The downstream subtask of ``key``: CRC-32 of its repr, modulo ``parallelism`` (stable across runs)."""
    if isinstance(key, bytes):
        data = key
    elif isinstance(key, str):
        data = key.encode("utf-8")
    else:
        data = repr(key).encode("utf-8")
    return zlib.crc32(data) % parallelism


class _Sink:
    """End of a chain: records and side outputs to the job's sink, watermarks per subtask."""

    __slots__ = ("_runner", "_subtask")

    def __init__(self, runner: JobRunner, subtask: int) -> None:
        self._runner, self._subtask = runner, subtask

    def collect(self, record: StreamRecord[Any]) -> None:
        self._runner.output.collect(record)

    def emit_watermark(self, watermark: Watermark) -> None:
        self._runner.downstream_watermarks[self._subtask].append(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._runner.downstream_statuses[self._subtask].append(status)

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None:
        self._runner.output.collect_side(tag, record)


class _ChainOutput:
    """Output of one operator into the next one of its chain."""

    __slots__ = ("_next", "_sink")

    def __init__(self, next_op: StreamOperator, sink: _Sink) -> None:
        self._next, self._sink = next_op, sink

    def collect(self, record: StreamRecord[Any]) -> None:
        self._next.process_element(record)

    def emit_watermark(self, watermark: Watermark) -> None:
        self._next.process_watermark(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._next.process_watermark_status(status)

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None:
        self._sink.collect_side(tag, record)


class JobRunner:
    """Runs ``source`` into ``parallelism`` chains built by ``operators()``; see the module docstring."""

    def __init__(
        self,
        source: SourceLike,
        operators: Callable[[], Sequence[StreamOperator]],
        *,
        parallelism: int = 1,
        key_selector: Callable[[Any], Hashable] | None = None,
        restore: JobCheckpoint | None = None,
    ) -> None:
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidConfigError(f"JobRunner: parallelism must be an int >= 1, got {parallelism!r}")
        if (restore is not None and parallelism != len(restore.valves)) or (
            restore is not None and parallelism != len(restore.operators)
        ):
            raise CheckpointError(
                f"JobRunner: checkpoint {restore.checkpoint_id} has {len(restore.valves)} downstream "
                f"subtasks, the job has parallelism {parallelism}"
            )
        self._source = source
        self._key_selector = key_selector
        self.output = CollectingOutput()
        """Records and side outputs of all chains, in processing order."""
        self.downstream_watermarks: list[list[Watermark]] = [[] for _ in range(parallelism)]
        self.downstream_statuses: list[list[WatermarkStatus]] = [[] for _ in range(parallelism)]
        # Operators first (a bad checkpoint fails here, before the source is touched), then the source.
        self._chains: list[list[StreamOperator]] = []
        self._sinks: list[_Sink] = []
        for i in range(parallelism):
            chain = list(operators())
            sink = _Sink(self, i)
            for j, op in enumerate(chain):
                op.setup(_ChainOutput(chain[j + 1], sink) if j + 1 < len(chain) else sink)
            if restore is not None:
                states = restore.operators[i]
                if len(states) != len(chain):
                    raise CheckpointError(
                        f"JobRunner: checkpoint {restore.checkpoint_id} has {len(states)} operators in "
                        f"subtask {i}, the chain has {len(chain)}"
                    )
                for op, state in zip(chain, states, strict=True):
                    op.restore_state(state)
            self._chains.append(chain)
            self._sinks.append(sink)
        self._subtasks = list(source.create_subtasks(restore))
        if not self._subtasks:
            raise InvalidConfigError("JobRunner: the source has no subtasks")
        n_in = len(self._subtasks)
        self.source_watermarks: list[list[Watermark]] = [[] for _ in range(n_in)]
        self.source_statuses: list[list[WatermarkStatus]] = [[] for _ in range(n_in)]
        self.source_records = [0] * n_in
        self._valves = [StatusWatermarkValve(n_in) for _ in range(parallelism)]
        if restore is not None:
            for valve, valve_state in zip(self._valves, restore.valves, strict=True):
                valve.restore_state(valve_state)
        self._next_checkpoint_id = (restore.checkpoint_id + 1) if restore is not None else 1

    @property
    def parallelism(self) -> int:
        return len(self._chains)

    @property
    def subtasks(self) -> tuple[SourceSubtaskLike, ...]:
        return tuple(self._subtasks)

    def chain(self, subtask: int) -> tuple[StreamOperator, ...]:
        """The operators of downstream subtask ``subtask``, first to last."""
        return tuple(self._chains[subtask])

    def side_output(self, tag: OutputTag) -> list[StreamRecord[Any]]:
        return self.output.side(tag)

    def poll_subtask(self, index: int) -> PollResult:
        """Poll source subtask ``index`` once and push what it emitted through the job."""
        result = self._subtasks[index].poll()
        for element in result.elements:
            self._route(index, element)
        return result

    def step(self) -> bool:
        """Poll every source subtask once, in index order; whether any progressed."""
        progressed = False
        for s in range(len(self._subtasks)):
            progressed |= self.poll_subtask(s).progressed
        return progressed

    def run_until_quiet(self, max_steps: int = 100_000) -> int:
        """Step until a whole round makes no progress; returns the number of steps."""
        for n in range(1, max_steps + 1):
            if not self.step():
                return n
        raise InvalidConfigError(f"JobRunner.run_until_quiet: still progressing after max_steps={max_steps}")

    def end_of_input(self) -> None:
        """All input is read: each source subtask ends event time (``Watermark(MAX_TIMESTAMP)``).

        Like a bounded Flink source finishing: an idle subtask turns active first, so
        every buffered record and window is flushed downstream.
        """
        for s in range(len(self._subtasks)):
            statuses, marks = self.source_statuses[s], self.source_watermarks[s]
            if statuses and statuses[-1] is WatermarkStatus.IDLE:
                self._route(s, WatermarkStatus.ACTIVE)
            if not marks or marks[-1].timestamp < MAX_TIMESTAMP:
                self._route(s, Watermark(MAX_TIMESTAMP))

    def checkpoint(self, max_steps: int = 100_000) -> JobCheckpoint:
        """Take an aligned checkpoint of the source, the valves and the operators (see module doc).

        If a subtask does not reach the marker within ``max_steps`` rounds, raises
        ``CheckpointError``; the elements read meanwhile stay processed (they cannot be unread).
        """
        cid = self._next_checkpoint_id
        self._next_checkpoint_id += 1
        name = self._source.trigger_checkpoint(cid)
        reached: set[int] = set()
        for _ in range(max_steps):
            for s in range(len(self._subtasks)):
                if s not in reached and self.poll_subtask(s).checkpoint == name:
                    reached.add(s)
            if len(reached) == len(self._subtasks):
                break
        else:
            missing = sorted(set(range(len(self._subtasks))) - reached)
            raise CheckpointError(f"checkpoint {name}: subtasks {missing} did not reach its marker")
        return JobCheckpoint(
            checkpoint_id=cid,
            reader_group_checkpoint=self._source.complete_checkpoint(name),
            subtasks=tuple(t.snapshot_state() for t in self._subtasks),
            valves=tuple(v.snapshot_state() for v in self._valves),
            operators=tuple(tuple(op.snapshot_state() for op in chain) for chain in self._chains),
        )

    def _route(self, source_index: int, element: StreamElement) -> None:
        if isinstance(element, StreamRecord):
            self.source_records[source_index] += 1
            i = 0
            if self._key_selector is not None and len(self._chains) > 1:
                i = stable_partition(self._key_selector(element.value), len(self._chains))
            chain = self._chains[i]
            if chain:
                chain[0].process_element(element)
            else:
                self._sinks[i].collect(element)
            return
        if isinstance(element, Watermark):
            self.source_watermarks[source_index].append(element)
            outs = [v.input_watermark(element, source_index) for v in self._valves]
        else:
            self.source_statuses[source_index].append(element)
            outs = [v.input_watermark_status(element, source_index) for v in self._valves]
        for i, out in enumerate(outs):
            for e in out:
                self._forward(i, e)

    def _forward(self, i: int, element: StreamElement) -> None:
        chain = self._chains[i]
        if isinstance(element, Watermark):
            if chain:
                chain[0].process_watermark(element)
            else:
                self._sinks[i].emit_watermark(element)
        elif isinstance(element, WatermarkStatus):
            if chain:
                chain[0].process_watermark_status(element)
            else:
                self._sinks[i].emit_watermark_status(element)

    @checked
    def _check(self) -> None:
        """Assert the job's contracts: per-subtask strictly ascending watermarks, valves, operators."""
        for s, marks in enumerate(self.source_watermarks):
            assert all(a.timestamp < b.timestamp for a, b in itertools.pairwise(marks)), (
                f"source subtask {s} emitted non-ascending watermarks"
            )
        for i, marks in enumerate(self.downstream_watermarks):
            assert all(a.timestamp < b.timestamp for a, b in itertools.pairwise(marks)), (
                f"downstream subtask {i} emitted non-ascending watermarks"
            )
        for t in self._subtasks:
            check = getattr(t, "_check", None)
            if check is not None:
                check()
        for v in self._valves:
            v._check()
        for chain in self._chains:
            for op in chain:
                op._check()
