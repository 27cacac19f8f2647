"""The report's charts, drawn by matplotlib as SVG from the report document alone.

matplotlib is the optional extra ``httk-workflow[report]``; this module imports it
inside :func:`render_charts` only, which only ``workspace report`` calls, so no other
command pays its start-up. Figures are built without pyplot (no global state, no GUI
backend: ``Figure`` draws through its own SVG canvas), with text kept as text so a
page search finds the labels, and each chart's element ids salted by its name so
the inlined SVGs of one page never share an id. docs/report.md says why matplotlib
rather than hand-written SVG.
"""

from __future__ import annotations

import datetime
import io
from collections.abc import Mapping
from typing import Any

#: The extra that brings matplotlib, named in the refusal when it is missing.
INSTALL_HINT = "pip install 'httk-workflow[report]'"

#: One colour per state kind, the same in every chart and in the page's tables.
KIND_COLOURS = {
    "submitted": "#9e9e9e", "ready": "#64b5f6", "claimed": "#4fc3f7", "running": "#1e88e5",
    "committing": "#3949ab", "waiting": "#ffb74d", "paused": "#ba68c8", "cancelling": "#f06292",
    "succeeded": "#43a047", "failed": "#e53935", "cancelled": "#8d6e63", "transferring": "#26a69a",
}


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed here."""


def render_charts(document: Mapping[str, Any]) -> dict[str, bytes]:
    """``{file name: SVG}`` for the states, placements, throughput and time-in-state charts of ``document``."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartsUnavailable(f"workspace report draws its charts with matplotlib, which is not installed here: "
                                f"{INSTALL_HINT}") from None
    charts = {
        "states.svg": _states,
        "placements.svg": _placements,
        "throughput.svg": _throughput,
        "time_in_state.svg": _time_in_state,
    }
    out: dict[str, bytes] = {}
    for name, draw in charts.items():
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": 9,
                                    "axes.spines.top": False, "axes.spines.right": False}):
            figure = Figure(figsize=(7.2, 3.4), layout="constrained")
            draw(figure, document)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="svg", metadata={"Date": None})
            out[name] = buffer.getvalue()
    return out


def MaxNLocator(**options: Any) -> Any:  # noqa: N802 - matplotlib's class, imported on first use
    from matplotlib.ticker import MaxNLocator as Locator

    return Locator(**options)


def _empty(axes: Any, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="#757575")
    axes.set_xticks([])
    axes.set_yticks([])


def _states(figure: Any, document: Mapping[str, Any]) -> None:
    axes = figure.add_subplot()
    counts = [(kind, count) for kind, count in document["counts"].items()]
    kinds = [kind for kind, _ in counts][::-1]
    values = [count for _, count in counts][::-1]
    bars = axes.barh(kinds, values, color=[KIND_COLOURS.get(kind, "#607d8b") for kind in kinds])
    axes.bar_label(bars, padding=2)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("jobs")
    axes.set_title("Jobs per state")
    axes.margins(x=0.08)


def _placements(figure: Any, document: Mapping[str, Any]) -> None:
    axes = figure.add_subplot()
    rows = sorted(document["placements"], key=lambda row: -row["total"])[:20][::-1]
    if not rows:
        _empty(axes, "no jobs")
        axes.set_title("Jobs per placement subtree")
        return
    left = [0] * len(rows)
    names = [row["subtree"] for row in rows]
    for kind in KIND_COLOURS:
        values = [row["counts"].get(kind, 0) for row in rows]
        if any(values):
            axes.barh(names, values, left=left, color=KIND_COLOURS[kind], label=kind)
            left = [a + b for a, b in zip(left, values, strict=True)]
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("jobs")
    axes.set_title("Jobs per placement subtree, by state")
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


def _throughput(figure: Any, document: Mapping[str, Any]) -> None:
    import matplotlib.dates as mdates

    axes = figure.add_subplot()
    series = document["throughput"]
    interval = series["interval_seconds"]
    axes.set_title("Transitions per interval (from the journal)")
    if not series["bins"]:
        _empty(axes, "no transitions in the journal")
        return
    starts = [_utc(row["start"]) for row in series["bins"]]
    width = datetime.timedelta(seconds=interval)
    bottom = [0] * len(starts)
    for kind in KIND_COLOURS:
        values = [row["by_kind"].get(kind, 0) for row in series["bins"]]
        if any(values):
            axes.bar(starts, values, width=width, bottom=bottom, align="edge", color=KIND_COLOURS[kind],
                     label=kind)
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    locator = mdates.AutoDateLocator(tz=datetime.UTC)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=datetime.UTC))
    axes.set_xlabel("time (UTC)")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(f"transitions per {_duration(interval)}")
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False, title="entered",
                title_fontsize=7)


def _time_in_state(figure: Any, document: Mapping[str, Any]) -> None:
    axes = figure.add_subplot()
    kinds = document["time_in_state"]["kinds"]
    axes.set_title("Time spent in each state (jobs that left it)")
    if not kinds:
        _empty(axes, "no job has left a state yet")
        return
    order = [kind for kind in KIND_COLOURS if kind in kinds][::-1]
    floor = 0.01  # a log axis has no zero: an instant transition is drawn at 10 ms
    for row, kind in enumerate(order):
        stats = kinds[kind]
        low, high = max(stats["min"], floor), max(stats["max"], floor)
        median, p90 = max(stats["median"], floor), max(stats["p90"], floor)
        colour = KIND_COLOURS[kind]
        axes.plot([low, high], [row, row], color=colour, linewidth=1)
        axes.plot([median, p90], [row, row], color=colour, linewidth=7, solid_capstyle="butt")
        axes.plot([median], [row], marker="|", color="black", markersize=12)
        axes.annotate(f"n={stats['count']}", (high, row), xytext=(4, -3), textcoords="offset points", fontsize=7)
    axes.set_yticks(range(len(order)), order)
    axes.set_xscale("log")
    axes.set_xlabel("seconds in state (log scale; line: min–max, bar: median–90th percentile)")


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}" if count != 1 or unit != "day" else "day"
    return f"{seconds:g} s"
