"""bench: what runs on top of the engines — the ``ingestwm`` command, the simulator, the lab, the benchmarks.

- ``cli``: the ``ingestwm`` command (``demo``, ``simulate``, ``experiment``, ``compare``,
  ``bench``, ``serve``, ``group``) and the main job (``ingestwm demo``); ``python -m bench.cli``.
- ``sim``: the discrete-event simulator driving the real store and reader groups, and
  its parameter sweeps on Spark (``ingestwm simulate``, ``ingestwm experiment``).
- ``lab``: the watermark-strategy lab (``ingestwm compare``).
- ``perf``: the benchmark suite (``ingestwm bench``; ``pytest bench/perf --benchmark-only``).
- ``scenarios``: the shipped YAML (simulator scenarios, ``lab/``, ``sweeps/``) and the one
  loader the simulator, the lab and the sweeps read them with.

Each folder imports only the engines below (``spark_source``, ``flink_compat``,
``readergroup``, ``segmentstore``; docs/design.md §2), ``scenarios``, and, for ``cli`` and
``perf``, the other folders whose work they run.
"""

__all__: list[str] = []
