"""Replication statistics: mean, sample standard deviation and a Student-t 95 % confidence interval.

``summarise([x1, ..., xn])`` gives ``{"n", "mean", "sd", "ci95", "low", "high"}``:
``sd`` with ``n - 1`` degrees of freedom, ``ci95`` the half-width
``t(0.975, n - 1) * sd / sqrt(n)``, ``[low, high] = mean -/+ ci95``. With one value the
spread is unknown (``sd``, ``ci95`` ``None``). ``None`` values (a metric a run did not
have) are left out; booleans count as 0/1. The t quantiles come from a table (exact to
three decimals for 1-30 degrees of freedom, interpolated in 1/df beyond), so scipy is
not needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["t_quantile_975", "summarise", "mean_ci", "T975"]

T975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""The 97.5th percentile of Student's t with ``df`` degrees of freedom (two-sided 95 %)."""

_Z975 = 1.959964


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


def summarise(values: Iterable[Any]) -> dict[str, Any]:
    """``n``, ``mean``, ``sd``, ``ci95`` (half-width), ``low``, ``high`` of the numeric values."""
    xs = [x for x in (_number(v) for v in values) if x is not None]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None, "low": None, "high": None}
    mean = math.fsum(xs) / n
    if n == 1:
        return {"n": 1, "mean": _r(mean), "sd": None, "ci95": None, "low": None, "high": None}
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {
        "n": n,
        "mean": _r(mean),
        "sd": _r(sd),
        "ci95": _r(half),
        "low": _r(mean - half),
        "high": _r(mean + half),
    }


def _r(x: float) -> float | int:
    """Rounded to 6 significant decimals (an int when whole): stable text in CSV/JSON across platforms."""
    v = float(f"{x:.6g}")
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def mean_ci(s: Mapping[str, Any], sep: str = " ± ") -> str:
    """A ``summarise`` result as text: ``mean ± ci95``, the mean alone with one value, ``-`` with none."""
    if s["mean"] is None:
        return "-"
    if s["ci95"] is None:
        return f"{s['mean']:g}"
    return f"{s['mean']:g}{sep}{s['ci95']:.3g}"
