"""spark_source: the ``ingestwm`` PySpark data source (streaming and batch reads, sink) and its helpers.

- ``source``: ``IngestDataSource`` (``format("ingestwm")``), ``register(spark)``.
- ``options`` / ``offsets`` / ``planner`` / ``reading``: options, checkpointed offsets,
  micro-batch planning on the driver, reading segment ranges as Arrow on executors.
- ``sink``: ``df.writeStream.format("ingestwm")`` at-least-once or exactly-once.
- ``eventtime``: event-time reordering and windows on the source's watermark.
- ``session``: a quiet local SparkSession; ``demo``: the Spark part of ``ingestwm demo``.

Importing this package is cheap; ``pyspark`` is imported by the modules that need it.
Spark's camelCase names stay inside this package (docs/design.md §5).
"""

__all__: list[str] = []
