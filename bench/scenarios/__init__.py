"""bench.scenarios: the shipped YAML files, data only (the language that reads them is ``bench.spec``).

- ``*.yaml``: scenarios: the simulator runs any (``ingestwm simulate NAME``), the lab any
  with windows (``ingestwm compare NAME``; those made for it have a ``strategies:`` section).
- ``sweeps/*.yaml``: parameter grids of either (``ingestwm experiment NAME``, ``bench.study.sweep``).

``bench.spec.loader.shipped()`` lists them; a package so that they ship in the wheel and
``importlib.resources`` finds them.
"""

__all__: list[str] = []
