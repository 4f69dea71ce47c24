"""bench.cli: the ``ingestwm`` command (``[project.scripts]``) and the main job it runs.

- ``app``: the click group and its commands (``demo``, ``simulate``, ``experiment``,
  ``compare``, ``bench``, ``serve``); ``main`` is the console script's entry point.
- ``group``: ``ingestwm group list|describe|offline``, shared reader groups of a served store.
- ``validate_cmd``: ``ingestwm validate``, the lab's engine models against Spark and Flink.
- ``cache_cmd``: ``ingestwm cache info|clear``, what validate keeps in ``~/.cache/ingestwm``.
- ``main_job``: ``ingestwm demo`` — the iot-sensors simulation, then the same store
  read by a Spark streaming query, with a short report.

``python -m bench.cli ...`` runs the same command.
"""

from .app import cli, main

__all__ = ["cli", "main"]
