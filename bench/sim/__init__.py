"""bench.sim: the experiment package — the one scenario language, and a discrete-event simulation
(SimPy) driving the real segment store and reader groups. The lab (``bench.lab``) runs the
same scenarios through its watermark strategies.

- ``scenario``: the frozen scenario schema, YAML loading, ``--set`` overrides;
  ``schema_doc``: the schema as Markdown (``ingestwm scenario schema``).
- ``seeds``: one generator per component, spawned from the seed by name.
- ``arrivals``: a writer's events (arrival processes, traces, disorder, drift, latency),
  shared with the lab; ``workloads``: rate integrals and vectorised framing;
  ``_sim_kernels``: numba kernels of the writers' framing and the recorder's counts.
- ``actors`` / ``readers``: the world and its SimPy processes (writers, transactions,
  scaling, the watermark advancer, readers with joins, leaves, crashes and stalls).
- ``pipeline``: ``flink_compat``'s event-time reordering and windows after the readers.
- ``stages``: ``pipeline.stages``, a chain of window/aggregate operators with lag per stage.
- ``recorder`` / ``plots``: samples over simulated time, JSON/CSV/Parquet and PNG/SVG/PDF
  figures (``bench.figures``).
- ``engine``: ``run_scenario`` and ``write_result``; ``result``: the ``SimResult`` they share.
- ``sim_clock``: ``SimClock``, the store's ingestion clock on SimPy time.
- ``simulate``: what ``ingestwm simulate`` does (output directory, progress bar, summary).
- ``experiment``: tasks (one run of simulate or compare) in processes or Spark tasks, and
  their aggregation; ``stats``: mean, sd, Student-t 95 % intervals; ``strategy_shipping``:
  custom strategies' modules from the driver's path to Spark's executors.
- ``replicate``: ``--replications``; ``sweep``: ``ingestwm experiment`` — grids of either.
- ``manifest``: ``manifest.json``, the provenance of every output directory.
- ``sentinels``: how outputs write the watermarks that are not times (none yet, ``+inf``).
"""

from .engine import run_scenario, write_result
from .errors import ExecutorError, OutputError, ScenarioError, SimulationError, SweepError
from .result import SimResult
from .scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    scenario_from_dict,
    scenario_to_dict,
    shipped_scenarios,
)
from .sim_clock import SimClock

__all__ = [
    "ExecutorError",
    "OutputError",
    "Scenario",
    "ScenarioError",
    "SimClock",
    "SimResult",
    "SimulationError",
    "SweepError",
    "apply_overrides",
    "load_scenario",
    "run_scenario",
    "scenario_from_dict",
    "scenario_to_dict",
    "shipped_scenarios",
    "write_result",
]
