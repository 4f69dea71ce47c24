"""bench.sim: the simulation — a discrete-event world (SimPy) driving the real segment store and
reader groups through a scenario of the one language (``bench.spec``).

Imports only ``bench.spec`` below it. What a run's outputs are made of lives here (the
recorder's series); writing a run's files, replications and sweeps is the study layer's
(``bench.study``).

- ``engine``: ``run_scenario``; ``result``: the ``SimResult`` it returns.
- ``arrivals``: a writer's events (arrival processes, traces, disorder, drift, latency),
  shared with the lab; ``workloads``: rate integrals and vectorised framing;
  ``_sim_kernels``: numba kernels of the writers' framing and the recorder's counts.
- ``actors`` / ``readers``: the world and its SimPy processes (writers, transactions,
  scaling, the watermark advancer, readers with joins, leaves, crashes and stalls);
  ``failure_schedule``: when each reader instance joins, leaves, crashes and stalls.
- ``reader_process_actors``: ``group.processes: true``, the readers as real processes
  (``reader_worker``: one reader process's life, and the supervisor that starts and kills them).
- ``pipeline``: ``flink_compat``'s event-time reordering and windows after the readers;
  ``stages``: ``pipeline.stages``, a chain of window/aggregate operators with lag per stage.
- ``recorder``: samples over simulated time, JSON/CSV/Parquet series; ``holder``: what
  held the group watermark; ``sentinels``: the watermarks that are not times.
- ``sim_clock``: ``SimClock``, the store's ingestion clock on SimPy time.
"""

from ..spec.errors import SimulationError
from .engine import run_scenario
from .result import SimResult
from .sim_clock import SimClock

__all__ = ["SimClock", "SimResult", "SimulationError", "run_scenario"]
