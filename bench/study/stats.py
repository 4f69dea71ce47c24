"""Replication statistics: mean, sample standard deviation and a Student-t 95 % confidence interval
that stays inside the metric's domain.

``summarise([x1, ..., xn], domain)`` gives ``{"n", "mean", "sd", "ci95", "low", "high",
"clipped"}``: ``sd`` with ``n - 1`` degrees of freedom, ``ci95`` the half-width
``t(0.975, n - 1) * sd / sqrt(n)``, ``[low, high] = mean -/+ ci95`` intersected with the
``domain`` (``low``/``high`` bounds, ``None``: unbounded), and ``clipped`` which bound that
cut (``"low"``, ``"high"``, ``"both"``; ``None`` when none did). With one value the spread
is unknown (``sd``, ``ci95``, ``low``, ``high`` ``None``). ``None`` values (a metric a run did
not have) are left out; booleans count as 0/1. ``domain_of(metric)`` is each metric's
domain (docs/metrics.md, "Intervals"): fractions ``[0, 1]``, counts, durations proven
non-negative and rates ``>= 0``, the rest (lags and latencies that can be negative)
unbounded. Intersecting keeps the coverage: the true mean lies in the domain, so whenever
the t interval holds it the clipped one does too. The t quantiles come from a table (exact
to three decimals for 1-30 degrees of freedom, interpolated in 1/df beyond), so scipy is
not needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "t_quantile_975",
    "summarise",
    "mean_ci",
    "T975",
    "Domain",
    "FRACTION",
    "NON_NEGATIVE",
    "UNBOUNDED",
    "DOMAINS",
    "domain_of",
    "error_bars",
]

T975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""The 97.5th percentile of Student's t with ``df`` degrees of freedom (two-sided 95 %)."""

_Z975 = 1.959964

Domain = tuple[float | None, float | None]
"""The values a metric can take: (lowest, highest), ``None`` for no bound."""

FRACTION: Domain = (0, 1)
NON_NEGATIVE: Domain = (0, None)
UNBOUNDED: Domain = (None, None)

DOMAINS: dict[str, Domain] = {
    # simulate (SIM_METRICS)
    "events_written": NON_NEGATIVE,
    "events_delivered": NON_NEGATIVE,
    "duplicates": NON_NEGATIVE,
    "late_ingestion": NON_NEGATIVE,
    "late_event_time": NON_NEGATIVE,
    "lag_mean_ms": NON_NEGATIVE,  # the group's ingestion-time watermark is below the clock
    "lag_p99_ms": NON_NEGATIVE,
    "lag_max_ms": NON_NEGATIVE,
    "idle_lag_max_ms": NON_NEGATIVE,
    "group_lag_ms": NON_NEGATIVE,  # the series
    "advances_per_s": NON_NEGATIVE,
    "examined_per_pass": NON_NEGATIVE,
    "scale_events": NON_NEGATIVE,
    "late_dropped": NON_NEGATIVE,
    "window_latency_mean_ms": NON_NEGATIVE,  # fires at (ingestion watermark - lag) >= end - 1
    "window_latency_max_ms": NON_NEGATIVE,
    "monotonic": FRACTION,
    # compare (LAB_METRICS, as <strategy>.<metric>)
    "events": NON_NEGATIVE,
    "delivered": NON_NEGATIVE,
    "late": NON_NEGATIVE,
    "late_fraction": FRACTION,
    "completeness": FRACTION,
    "windows_fired": NON_NEGATIVE,
    "buffer_peak_events": NON_NEGATIVE,
    "buffer_peak_bytes": NON_NEGATIVE,
    # a strategy's watermark can run ahead of the clock (a fast producer clock, Spark's max)
    "wm_lag_mean_ms": UNBOUNDED,
    "wm_lag_max_ms": UNBOUNDED,
    "wm_lag_ms": UNBOUNDED,
    "result_latency_p50_ms": UNBOUNDED,
    "result_latency_max_ms": UNBOUNDED,
}
"""Each metric's domain by name (a lab metric by the part after ``<strategy>.``; docs/metrics.md)."""


def domain_of(metric: str) -> Domain:
    """The domain of ``metric`` (``<strategy>.<metric>`` too); unbounded for a name not in ``DOMAINS``."""
    return DOMAINS.get(metric, DOMAINS.get(metric.rsplit(".", 1)[-1], UNBOUNDED))


def t_quantile_975(df: int) -> float:
    """t(0.975, df): from the table, interpolated linearly in 1/df between its rows; 1.96 as df -> inf."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in T975:
        return T975[df]
    rows = sorted(T975)
    hi = next((d for d in rows if d > df), None)
    lo = max(d for d in rows if d < df)
    q_lo = T975[lo]
    if hi is None:  # beyond 120: towards the normal quantile
        x_lo, x_hi, q_hi = 1 / lo, 0.0, _Z975
    else:
        x_lo, x_hi, q_hi = 1 / lo, 1 / hi, T975[hi]
    x = 1 / df
    return q_lo + (q_hi - q_lo) * (x - x_lo) / (x_hi - x_lo)


def _number(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def summarise(values: Iterable[Any], domain: Domain = UNBOUNDED) -> dict[str, Any]:
    """``n``, ``mean``, ``sd``, ``ci95`` (half-width), ``low``, ``high`` (within ``domain``), ``clipped``."""
    xs = [x for x in (_number(v) for v in values) if x is not None]
    n = len(xs)
    none = {"sd": None, "ci95": None, "low": None, "high": None, "clipped": None}
    if n == 0:
        return {"n": 0, "mean": None, **none}
    mean = math.fsum(xs) / n
    if n == 1:
        return {"n": 1, "mean": _r(mean), **none}
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    low, high = _r(mean - half), _r(mean + half)
    floor, ceiling = domain
    cut_low = floor is not None and low < floor
    cut_high = ceiling is not None and high > ceiling
    return {
        "n": n,
        "mean": _r(mean),
        "sd": _r(sd),
        "ci95": _r(half),
        "low": _r(floor) if cut_low and floor is not None else low,
        "high": _r(ceiling) if cut_high and ceiling is not None else high,
        "clipped": "both" if cut_low and cut_high else "low" if cut_low else "high" if cut_high else None,
    }


def _r(x: float) -> float | int:
    """Rounded to 6 significant decimals (an int when whole): stable text in CSV/JSON across platforms."""
    v = float(f"{x:.6g}")
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def mean_ci(s: Mapping[str, Any], sep: str = " ± ") -> str:
    """A ``summarise`` result as text: ``mean ± ci95``, the mean alone with one value, ``-`` with none;
    ``mean [low, high]`` when the domain clipped the interval (it is then not symmetric)."""
    if s["mean"] is None:
        return "-"
    if s["ci95"] is None:
        return f"{s['mean']:g}"
    if s.get("clipped"):
        return f"{s['mean']:g} [{s['low']:.3g}, {s['high']:.3g}]"
    return f"{s['mean']:g}{sep}{s['ci95']:.3g}"


def error_bars(summaries: Iterable[Mapping[str, Any]]) -> list[list[float]]:
    """Matplotlib's ``yerr`` for ``summarise`` results: ``[below, above]`` each mean (0 without an interval).

    Asymmetric where the domain clipped the interval, so no bar leaves it.
    """
    below: list[float] = []
    above: list[float] = []
    for s in summaries:
        mean, low, high = s.get("mean"), s.get("low"), s.get("high")
        if mean is None or low is None or high is None:
            below.append(0.0)
            above.append(0.0)
        else:
            below.append(max(0.0, float(mean - low)))
            above.append(max(0.0, float(high - mean)))
    return [below, above]
