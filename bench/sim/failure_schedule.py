"""A reader's failure schedule: when it joins, stalls, leaves, crashes, is declared offline and restarts.

The one reading of a ``ReaderSpec``'s lifecycle fields, for every reader that follows
one: the simulator's in-process readers (``bench.sim.readers``), its reader processes
(``bench.sim.reader_process_actors``) and the lab's (``bench.lab.lab_readers``). The rules:

- a reader joins at ``join_ms``; each *session* (from a join or a restart) ends when it
  leaves (``leave_ms``), crashes for good (``crash_ms``) or crashes at random (with
  ``mtbf_ms``: an exponential time of that mean after the session began, at least 1 ms);
  at one instant a leave comes before a crash, and a scheduled crash before a random one;
- a crashed reader is declared offline ``offline_after_ms`` after it crashed; after a
  *random* crash it restarts (joins again under its name) ``restart_ms`` (drawn) after
  that, a new session; after ``crash_ms`` it stays offline;
- a ``noack`` stall holds from ``start_ms`` to ``end_ms`` (``None``: for good) in any
  session: the reader stays online and does nothing, so a leave or crash that falls in
  the stall happens when it ends (and none after a stall for good).

``FailureSchedule`` hands the sessions out one by one, each starting when its reader
really (re)joined and each outage from when it really crashed: a simulated reader busy
processing a batch notices a due crash at its next wake-up, and what follows is timed
from then. ``timeline`` plays the same rules on time, for a reader that acts at the
scheduled instants. Random draws come from
the reader's own generator, ``readers.<name>.failures`` of the run's seed (``for_reader``),
in the order a run makes them: each session's failure time, then, after a random crash,
its restart delay. O(1) per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..spec.errors import SimulationError
from ..spec.scenario import ReaderSpec
from ..spec.seeds import Seeds

__all__ = [
    "Due",
    "FailureSchedule",
    "Outage",
    "Session",
    "Transition",
    "TransitionKind",
    "failure_stream",
    "timeline",
]

Due = Literal["leave", "crash", "failure", "stall"]
"""What a session asks of its reader at an instant: leave, crash for good, crash at random, stall."""

TransitionKind = Literal["join", "stall", "resume", "leave", "crash", "offline", "restart"]


def failure_stream(name: str) -> str:
    """The seed component whose generator draws reader instance ``name``'s failures."""
    return f"readers.{name}.failures"


@dataclass(frozen=True, slots=True)
class Session:
    """One life of a reader, from ``start_ms`` (its join or restart) to its leave or crash.

    ``failure_ms``: its random crash (``None``: no ``mtbf_ms``); ``stall_start_ms`` /
    ``stall_end_ms``: the ``noack`` window (end ``None``: for good).
    """

    start_ms: int
    leave_ms: int | None = None
    crash_ms: int | None = None
    failure_ms: int | None = None
    stall_start_ms: int | None = None
    stall_end_ms: int | None = None
    first_ms: int | None = field(init=False, repr=False, compare=False)
    """The first of the leave, the crashes and the stall's start (``None``: none): before it, nothing
    is due and it is the next change (a poll asks both)."""

    def __post_init__(self) -> None:
        times = [
            t for t in (self.leave_ms, self.crash_ms, self.stall_start_ms, self.failure_ms) if t is not None
        ]
        object.__setattr__(self, "first_ms", min(times) if times else None)

    def due(self, now: int) -> Due | None:
        """What the reader must do at ``now`` (it acts on the first that applies), or ``None``: read. O(1)."""
        first = self.first_ms
        if first is None or now < first:
            return None
        if self.leave_ms is not None and now >= self.leave_ms:
            return "leave"
        if self.crash_ms is not None and now >= self.crash_ms:
            return "crash"
        if self.failure_ms is not None and now >= self.failure_ms:
            return "failure"
        if self.stalled(now):
            return "stall"
        return None

    def stalled(self, now: int) -> bool:
        """Whether ``now`` is in the ``noack`` window."""
        s = self.stall_start_ms
        return s is not None and s <= now and (self.stall_end_ms is None or now < self.stall_end_ms)

    def next_change(self, now: int) -> int | None:
        """The first leave, crash or stall start after ``now`` (``None``: none): when to look next. O(1)."""
        first = self.first_ms
        if first is None or now < first:
            return first
        later = [
            t
            for t in (self.leave_ms, self.crash_ms, self.stall_start_ms, self.failure_ms)
            if t is not None and t > now
        ]
        return min(later) if later else None

    def _check(self) -> None:
        assert self.failure_ms is None or self.failure_ms > self.start_ms, self
        assert self.stall_end_ms is None or self.stall_start_ms is not None, self
        times = [
            t for t in (self.leave_ms, self.crash_ms, self.failure_ms, self.stall_start_ms) if t is not None
        ]
        assert self.first_ms == (min(times) if times else None), self


@dataclass(frozen=True, slots=True)
class Outage:
    """After a crash at ``crashed_ms``: declared offline at ``offline_ms``, restarted at ``restart_ms``
    (``None``: never, the crash was for good)."""

    crashed_ms: int
    offline_ms: int
    restart_ms: int | None


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a reader's state at ``t_ms``: ``join``, ``stall``, ``resume`` (the stall ended),
    ``leave``, ``crash``, ``offline`` (the group is told) or ``restart`` (it joins again)."""

    t_ms: int
    kind: TransitionKind


class FailureSchedule:
    """A reader's sessions and outages, drawn as its run reaches them."""

    __slots__ = ("_last_ms", "_rng", "_session", "spec")

    def __init__(self, spec: ReaderSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self._rng = rng
        self._session: Session | None = None  # the current one; None before a join and after a crash
        self._last_ms = spec.join_ms

    @classmethod
    def for_reader(cls, spec: ReaderSpec, name: str, seeds: Seeds) -> FailureSchedule:
        """The schedule of reader instance ``name`` of ``spec``, drawing from its stream of ``seeds``."""
        return cls(spec, seeds.rng(failure_stream(name)))

    @property
    def join_ms(self) -> int:
        return self.spec.join_ms

    def session(self, start_ms: int) -> Session:
        """The session of a reader that joins (or restarts) at ``start_ms``; draws its failure time."""
        if start_ms < self._last_ms:
            raise SimulationError(
                f"reader {self.spec.name!r}: a session cannot start at {start_ms} ms, "
                f"before {self._last_ms} ms (its join or its last restart)"
            )
        s = self.spec
        failure = None
        if s.mtbf_ms is not None:
            failure = start_ms + max(1, int(self._rng.exponential(s.mtbf_ms)))
        f = s.noack
        self._session = Session(
            start_ms,
            s.leave_ms,
            s.crash_ms,
            failure,
            f.start_ms if f is not None else None,
            f.end_ms if f is not None else None,
        )
        self._last_ms = start_ms
        return self._session

    def crashed(self, kind: Literal["crash", "failure"], at_ms: int) -> Outage:
        """The outage after the current session crashed (``kind`` as ``Session.due`` said) at ``at_ms``;
        after a random crash (``failure``) draws the restart delay."""
        cur = self._session
        if cur is None or at_ms < cur.start_ms:
            raise SimulationError(
                f"reader {self.spec.name!r}: no session running at {at_ms} ms to crash"
                + ("" if cur is None else f" (it started at {cur.start_ms} ms)")
            )
        s = self.spec
        offline = at_ms + s.offline_after_ms
        restart = None
        if kind == "failure":
            restart = offline + int(s.restart_ms.draw(self._rng, 1)[0])
            self._last_ms = restart
        self._session = None
        return Outage(at_ms, offline, restart)

    def _check(self) -> None:
        assert self._last_ms >= self.spec.join_ms, (self._last_ms, self.spec.join_ms)
        if self._session is not None:
            self._session._check()


def timeline(spec: ReaderSpec, rng: np.random.Generator, until_ms: int) -> tuple[Transition, ...]:
    """The transitions up to ``until_ms`` of a reader that acts at every scheduled instant. O(sessions).

    Draws from ``rng`` as ``FailureSchedule`` does, so a simulated reader that is never late
    goes through the same transitions.
    """
    sched = FailureSchedule(spec, rng)
    out: list[Transition] = []
    now = spec.join_ms
    kind: TransitionKind = "join"
    while now <= until_ms:
        out.append(Transition(now, kind))
        session = sched.session(now)
        while True:
            due = session.due(now)
            if due == "leave":
                out.append(Transition(now, "leave"))
                return _until(out, until_ms)
            if due == "crash" or due == "failure":
                outage = sched.crashed(due, now)
                out += [Transition(now, "crash"), Transition(outage.offline_ms, "offline")]
                if outage.restart_ms is None:
                    return _until(out, until_ms)
                now, kind = outage.restart_ms, "restart"
                break
            if due == "stall":
                out.append(Transition(now, "stall"))
                end = session.stall_end_ms
                if end is None:
                    return _until(out, until_ms)
                out.append(Transition(end, "resume"))
                now = end
                continue
            nxt = session.next_change(now)
            if nxt is None or nxt > until_ms:
                return _until(out, until_ms)
            now = nxt
    return _until(out, until_ms)


def _until(out: list[Transition], until_ms: int) -> tuple[Transition, ...]:
    return tuple(t for t in out if t.t_ms <= until_ms)
