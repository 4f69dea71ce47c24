"""One figure style for the simulator and the lab: formats, a colour-blind-safe palette, reproducible files.

- ``FORMATS``: ``png`` (raster, 150 dpi), ``svg`` and ``pdf`` (vector, for papers).
- ``OKABE_ITO``: the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"),
  distinguishable with every common colour-vision deficiency; ``colour(i)`` cycles it
  (black last, since the simulator draws reference lines in black), ``linestyle(i)``
  adds a dash pattern once the colours repeat.
- ``pyplot()``: matplotlib on the Agg backend with the shared rc settings.
- ``save(fig, out_dir, stem, fmt)``: writes ``<stem>.<fmt>`` with no timestamps or
  tool versions in it (same run, same bytes: PNG without ``Software``, SVG without
  ``Date`` and with a fixed id salt, PDF without ``CreationDate``/``Producer``).
- ``legend(ax)``: a legend inside the axes (best corner, translucent frame).
- ``mark_scaling(ax, times_s, labels)``: a dotted line at each scaling event, labelled
  along the top of the axes (or, when there are many, named once in the legend).

Errors: an unknown format raises ``ValueError`` naming it and the choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "OKABE_ITO",
    "MAX_LABELLED",
    "colour",
    "linestyle",
    "pyplot",
    "save",
    "legend",
    "mark_scaling",
    "check",
]

FORMATS = ("png", "svg", "pdf")

OKABE_ITO = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#F0E442",  # yellow
    "#000000",  # black
)

_STYLES = ("-", "--", "-.", ":")

MAX_LABELLED = 8
"""Scaling events labelled one by one at most; more are named once in the legend."""

_RC: dict[str, Any] = {
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "legend.framealpha": 0.8,
    "svg.hashsalt": "ingestwm",
    "svg.fonttype": "none",  # text stays text in SVG (editable, searchable)
    "pdf.fonttype": 42,  # TrueType in PDF, as publishers ask
}


def check(fmt: str, error: type[Exception] = ValueError) -> str:
    """``fmt`` if it is one of ``FORMATS``; ``error`` (the caller's package error) otherwise."""
    if fmt not in FORMATS:
        raise error(f"figure format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def colour(i: int) -> str:
    """The ``i``-th colour of the Okabe-Ito palette (cycled)."""
    return OKABE_ITO[i % len(OKABE_ITO)]


def linestyle(i: int) -> str:
    """Solid for the first ``len(OKABE_ITO)`` series, then dashed, dash-dotted, dotted."""
    return _STYLES[(i // len(OKABE_ITO)) % len(_STYLES)]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, with the shared style applied."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from cycler import cycler

    rc: Any = matplotlib.rcParams
    for k, v in {**_RC, "axes.prop_cycle": cycler(color=list(OKABE_ITO))}.items():
        rc[k] = v
    return plt


_METADATA: dict[str, dict[str, Any]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}


def save(fig: Any, out_dir: Path, stem: str, fmt: str = "png") -> Path:
    """Write ``fig`` to ``out_dir/<stem>.<fmt>`` reproducibly and return the path (raises ``OSError``)."""
    check(fmt)
    path = out_dir / f"{stem}.{fmt}"
    kw: dict[str, Any] = {"metadata": _METADATA[fmt]}
    if fmt == "png":
        kw["dpi"] = 150
    fig.savefig(path, format=fmt, **kw)
    return path


def legend(ax: Any, **kw: Any) -> None:
    """A legend inside the axes (``loc="best"`` unless given), if anything is labelled."""
    _, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(loc=kw.pop("loc", "best"), **kw)


def mark_scaling(ax: Any, times_s: Sequence[float], labels: Sequence[str] | str = "scale") -> None:
    """A dotted grey line at each scaling event; each labelled at the top of the axes if there are at most
    ``MAX_LABELLED`` of them, else one legend entry names them (``scaling events (n)``).

    ``labels``: one text for all lines, or one per line.
    """
    texts = [labels] * len(times_s) if isinstance(labels, str) else list(labels)
    trans = ax.get_xaxis_transform()  # x in data, y in axes fraction
    few = len(times_s) <= MAX_LABELLED
    for i, (x, text) in enumerate(zip(times_s, texts, strict=True)):
        name = f"scaling events ({len(times_s)})" if not few and i == 0 else None
        ax.axvline(x, color="0.45", linestyle=":", linewidth=0.9, zorder=1, label=name)
        if few:
            ax.text(
                x,
                0.98,
                f" {text}",
                transform=trans,
                rotation=90,
                va="top",
                ha="left",
                fontsize=7,
                color="0.3",
            )
