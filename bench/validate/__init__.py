"""bench.validate: the lab's engine models checked against the engines (``ingestwm validate``).

- ``spark_engine``: replays the Spark model's micro-batches through a real Spark query.
- ``flink_java``: replays the Flink model's splits through a Java Flink job whose processing
  time the replay drives (``java/DrivenReplay.java``, compiled on first use): exact or differs.
- ``flink_engine`` / ``flink_job``: replays them through PyFlink (``ingestwm[flink]``), in a
  subprocess, paced in the stated regime (the fallback where only a JRE is).
- ``verdict``: model against engine, one ``Verdict`` per scenario and strategy.
- ``run``: both engines over scenarios; ``report``: the table, CSV and JSON.
- ``user_cache``: what validate keeps in ``~/.cache/ingestwm`` (compiled Java jobs, Flink
  venvs): bounded, held while in use, listed and cleared (``ingestwm cache``).
- ``errors``: ``ValidateError``, the package's one root (an engine missing, an engine's run failed).

PySpark and PyFlink are imported only when an engine runs.
"""

from .errors import EngineRunError, EngineUnavailableError, ValidateError
from .flink_engine import FlinkTiming
from .report import format_verdicts, write_verdicts
from .run import ENGINES, validate
from .verdict import Verdict

__all__ = [
    "ENGINES",
    "EngineRunError",
    "EngineUnavailableError",
    "FlinkTiming",
    "ValidateError",
    "Verdict",
    "format_verdicts",
    "validate",
    "write_verdicts",
]
