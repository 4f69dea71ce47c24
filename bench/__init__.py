"""bench: the experiment side on top of the engines — a folder per role, each importing only those before it.

- ``spec``: the scenario language every tool reads (schema, fields, loader, generated
  docs, custom strategies by ``module:Class``, seeds, errors).
- ``scenarios``: the shipped YAML scenarios and ``sweeps/`` (data only).
- ``sim``: the discrete-event simulation driving the real store and reader groups.
- ``lab``: the watermark-strategy lab, the strategies side by side on one workload.
- ``study``: runs into results — the ``simulate``/``compare``/``tune`` drivers, outputs,
  figures, replications, sweeps, statistics, executors (local pool, Spark), manifest.
- ``validate``: the lab's engine models against real Spark and Flink (``ingestwm validate``).
- ``perf``: the benchmark suite (``ingestwm bench``; ``pytest bench/perf --benchmark-only``).
- ``cli``: the ``ingestwm`` command and the main job (``ingestwm demo``); ``python -m bench.cli``.

Every folder may also import the engines below ``bench`` (``spark_source``, ``flink_compat``,
``readergroup``, ``segmentstore``; docs/design.md §2). ``tests/test_project.py`` checks the order.
"""

__all__: list[str] = []
