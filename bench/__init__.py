"""bench: the ingestwm CLI, scenarios, experiments and benchmarks."""

__all__: list[str] = []
