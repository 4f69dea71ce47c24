"""bench.perf: the benchmark suite — one ``bench_<area>.py`` module per area.

Areas: ``index`` (the watermark index), ``store``, ``durable`` (sync policies, recovery),
``server`` (loopback vs raw sockets), ``reader``, ``waiting`` (idle calls, latency),
``sim`` (the simulator), ``spark`` and ``spark_io`` (the Spark source and sink). The
module protocol (``run(size)``, ``SLOW``) is in ``suite``.

``ingestwm bench [--quick | --tiny] [--only bench_X]`` runs every module's ``run(size)``
and prints one table of ratios measured side by side in one run (a figure beside its
baseline: machine load hits both alike). Benchmarks are not tests: ``pytest`` alone
runs ``tests/``.
"""

__all__: list[str] = []
