"""The checkpoints one process initiated: their futures, completed or aborted from its replica.

A checkpoint is an update in the group's state log like any other, and readers in any
process reach it; only the process that initiated it holds its future. After every batch
its replica applies, ``InitiatedCheckpoints.settle`` completes the futures of the
checkpoints that batch completed, and fails those a reset (a new epoch) aborted or that
this replica can no longer know (it fell behind a compaction and over
``checkpoints_kept`` completed since). ``ReaderGroupState`` owns one.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from segmentstore.checks import checked

from ..errors import CheckpointAbortedError
from .checkpoint import CheckpointFuture
from .group_model import GroupModel

__all__ = ["InitiatedCheckpoints"]


class InitiatedCheckpoints:
    """The futures of the checkpoints this process initiated, by the log offset of their update.

    Not thread-safe: its owner calls it under the group state's lock.
    """

    def __init__(self, group: str, poll: Callable[[], None]) -> None:
        self.group = group
        self._poll = poll  # what a waiting future does: catch up with the log (which settles it)
        self._futures: dict[int, tuple[int, str, CheckpointFuture]] = {}  # token -> (epoch, name, future)
        self._settled: tuple[int, int, int, int] = (0, 0, 0, 0)

    def add(self, token: int, epoch: int, name: str) -> CheckpointFuture:
        """The future of checkpoint ``name`` initiated in ``epoch`` by the update at log offset ``token``."""
        fut = CheckpointFuture(self._poll)
        self._futures[token] = (epoch, name, fut)
        return fut

    def settle(self, m: GroupModel) -> None:
        """Complete or abort the futures from the replica ``m``, after a batch it applied.

        The checkpoints completed by it are taken from the replica whether or not it still
        keeps them. After a reload (this replica fell behind a compaction) only the kept ones
        are known; an older one is reported lost. O(1) when nothing changed.
        """
        if not self._futures:
            if m.completions:
                m.take_completions()
            return
        done = m.take_completions()
        for token, completed in done:
            entry = self._futures.pop(token, None)
            if entry is not None:
                entry[2].set_result(completed)
        seen = (id(m), m.epoch, m.results_added, len(self._futures))
        if seen == self._settled:
            return  # no checkpoint completed, no reset, no new future since the last look
        self._settled = seen
        for token, (epoch, name, fut) in list(self._futures.items()):
            cp = m.result(token)
            if cp is not None:
                fut.set_result(cp)
            elif not m.is_pending(token):
                fut.set_exception(
                    CheckpointAbortedError(
                        f"group {self.group!r}: checkpoint {name!r} aborted by a reset to epoch {m.epoch}"
                        if m.epoch > epoch
                        else f"group {self.group!r}: checkpoint {name!r} was lost (this replica fell "
                        f"behind a compaction, and over checkpoints_kept={m.config.checkpoints_kept} "
                        "completed since)"
                    )
                )
            else:
                continue
            del self._futures[token]

    def abort_all(self, why: str) -> None:
        """Fail every future with ``why`` (the group was deleted)."""
        for _, name, fut in list(self._futures.values()):
            fut.set_exception(CheckpointAbortedError(f"group {self.group!r}: checkpoint {name!r}: {why}"))
        self._futures.clear()

    def epochs(self) -> list[int]:
        """The epochs the pending checkpoints were initiated in."""
        return [e for e, _, _ in self._futures.values()]

    @checked
    def _check(self) -> None:
        """Assert that every future kept is pending (its checkpoint neither completed nor aborted)."""
        for token, (_, name, fut) in self._futures.items():
            assert not Future.done(fut), (token, name)  # (done() would catch up)
