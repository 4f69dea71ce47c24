"""bench.perf: the benchmark suite — one ``bench_<area>.py`` module per area, two ways to run it.

Areas: ``index`` (the watermark index), ``store``, ``append_cost`` (what one append costs),
``durable`` (sync policies, recovery), ``server`` (loopback vs raw sockets), ``writer``
(``EventWriter`` and transactions at wire speed), ``reader``, ``remote_reader`` (calls and
bytes per poll over ``RemoteClient``), ``group`` (reader-group state), ``waiting`` (idle
calls, latency), ``sim`` (the simulator), ``poll`` (a simulated reader's poll, call by call),
``spark``, ``spark_io`` and ``spark_wide`` (the
Spark source and sink; thousands of segments), ``pravega`` (the real Pravega client's writes
beside ``EventWriter``'s into one served store; Pravega-framed reads beside ingestwm-framed).
The module protocol (``run(size)``, ``test_*`` functions, ``SLOW``) is in ``suite``;
``pytest_bench`` runs the suite under pytest-benchmark; ``serving`` a store served by another
process; ``call_counts`` counts a client's calls by name; ``spark_data`` what the Spark
benchmarks read and its checks; ``errors`` the suite's one root (``BenchmarkError``).

- ``ingestwm bench [--quick | --tiny] [--only bench_X]``: every module's ``run(size)``,
  one table of ratios measured side by side in one run (a figure beside its baseline:
  machine load hits both alike).
- ``pytest bench/perf --benchmark-only``: pytest-benchmark over the same measurement
  functions (``--bench-size``, default ``quick``; ``--bench-slow`` adds Spark). Save a
  run with ``--benchmark-autosave`` (JSON under ``.benchmarks/``), compare with the
  last saved one and fail on a regression with ``--benchmark-compare
  --benchmark-compare-fail=min:25%`` (``REGRESSION``: the fastest round 25 % slower;
  the minimum is the statistic other load on the machine disturbs least).
  ``ingestwm bench --pytest`` does all of that, storing runs per size under
  ``.benchmarks/<size>``; the first run is the baseline.

Benchmarks are not tests: ``pytest`` alone runs ``tests/``; ``tests/test_bench_smoke.py``
only imports every module and runs it at the ``tiny`` size so that none can rot.
"""

__all__ = ["REGRESSION"]

REGRESSION = "min:25%"
"""``--benchmark-compare-fail`` of ``ingestwm bench --pytest``: a best round 25 % slower fails."""
