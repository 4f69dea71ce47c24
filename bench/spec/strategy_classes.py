"""Custom lab strategies by name: ``module:Class`` loaded and checked when a scenario loads.

The scenario schema (``bench.spec.scenario``) checks a ``strategies.custom`` entry with these
at load time, so a bad class path fails before anything runs; ``bench.lab.plugins`` runs
the instances (docs/strategies.md).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from .errors import ScenarioError

__all__ = ["TIME_DOMAIN_NAMES", "load_strategy_class", "instantiate"]

TIME_DOMAIN_NAMES = ("processing", "ingestion", "event")
"""The values a strategy class's ``time_domain`` may take."""

_REQUIRED = ("on_event", "watermark")


def load_strategy_class(class_path: str) -> type[Any]:
    """The class named by ``module:Class`` (``Class`` may be dotted); ``ScenarioError`` if unusable."""
    module_name, sep, qual = class_path.partition(":")
    if not sep or not module_name or not qual:
        raise ScenarioError(f"must be 'module:Class', got {class_path!r}", "class_path")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ScenarioError(f"cannot import module {module_name!r}: {e}", "class_path") from None
    except Exception as e:  # the module itself raised while importing
        raise ScenarioError(
            f"importing module {module_name!r} raised {type(e).__name__}: {e}", "class_path"
        ) from None
    for part in qual.split("."):
        if not hasattr(obj, part):
            raise ScenarioError(f"module {module_name!r} has no attribute {qual!r}", "class_path")
        obj = getattr(obj, part)
    if not inspect.isclass(obj):
        raise ScenarioError(f"{class_path!r} is a {type(obj).__name__}, not a class", "class_path")
    missing = [m for m in _REQUIRED if not callable(getattr(obj, m, None))]
    if missing:
        raise ScenarioError(
            f"{class_path!r} is not a lab watermark strategy: it lacks {', '.join(missing)}() "
            "(see docs/strategies.md)",
            "class_path",
        )
    domain = getattr(obj, "time_domain", "processing")
    if domain not in TIME_DOMAIN_NAMES:
        raise ScenarioError(
            f"{class_path!r}.time_domain must be one of {', '.join(TIME_DOMAIN_NAMES)}, got {domain!r}",
            "class_path",
        )
    return obj


def instantiate(spec: Any) -> Any:
    """A new instance of ``spec``'s class with its params; ``ScenarioError`` if the class rejects them."""
    cls = load_strategy_class(spec.class_path)
    params = dict(spec.params)
    try:
        return cls(**params)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{spec.class_path} rejected {params!r}: {e}", "params") from None
