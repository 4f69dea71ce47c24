"""One seed, one random generator per component: ``Seeds(seed).rng("writers.w-0.arrivals")``.

Every random part of a run (a writer's arrivals, its event-time disorder, its clock
drift, its write latency, a reader's processing time, failures) draws from its own
``numpy.random.Generator``. Each generator comes from one ``SeedSequence(seed)``
spawned by a *stable hash of the component's name* (BLAKE2b, not Python's salted
``hash``), not by creation order: adding a writer or a reader does not change what
the other components draw, and the same seed gives the same numbers in any process.

``Seeds`` also records which components asked for a generator *and drew from it*
(``used``), so a run's summary can list its random parts.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["Seeds", "component_key"]


def component_key(name: str) -> tuple[int, ...]:
    """Four 32-bit words of the BLAKE2b digest of ``name``: the spawn key of its generator."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


class Seeds:
    """Generators by component name from one seed; ``random_parts`` lists the components that drew."""

    __slots__ = ("_drawn", "seed")

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"a seed must be >= 0, got {seed}")
        self.seed = seed
        self._drawn: set[str] = set()

    def rng(self, component: str) -> np.random.Generator:
        """The generator of ``component`` (the same sequence every time it is asked for)."""
        ss = np.random.SeedSequence(self.seed, spawn_key=component_key(component))
        return np.random.Generator(np.random.PCG64(ss))

    def note(self, part: str) -> None:
        """Record that ``part`` (e.g. ``"writers.w-0.arrivals: poisson"``) is random in this run."""
        self._drawn.add(part)

    @property
    def random_parts(self) -> list[str]:
        """What is random in this run, sorted (empty: the seed changes nothing)."""
        return sorted(self._drawn)

    def _check(self) -> None:
        assert self.seed >= 0, self.seed
