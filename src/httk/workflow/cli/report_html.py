"""The report's ``index.html``: one static page from the report document and its SVG charts.

No script, no external stylesheet, font or CDN: the charts are inlined (and also
published as files beside the page), so the page reads the same from disk, over
``ssh -L`` or after an ``rsync``. With ``--watch`` the page asks the browser to
reload itself at the watch interval.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Mapping, Sequence
from typing import Any

from .report_charts import KIND_COLOURS

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; color: #212121; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #616161; margin-top: .2em; } .note { background: #fff8e1; padding: .4em .8em; border-radius: 4px; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: .2em .7em; text-align: left;
  border-bottom: 1px solid #eee; vertical-align: top; } th { background: #fafafa; } td.n { text-align: right; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .4em; }
.tiles { display: flex; flex-wrap: wrap; gap: .6em; } .tile { border: 1px solid #e0e0e0; border-radius: 6px;
  padding: .4em .8em; min-width: 6em; } .tile b { display: block; font-size: 1.4em; }
figure.chart { margin: .5em 0; } figure.chart svg { max-width: 100%; height: auto; }
code { font-size: .92em; } .empty { color: #757575; font-style: italic; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def iso(seconds: float | None) -> str:
    """``seconds`` since the epoch as ``YYYY-MM-DD HH:MM:SS UTC``."""
    if seconds is None:
        return "—"
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    """A heartbeat age: ``12 s``, ``5 min``, ``3.2 h``; ``never`` for none."""
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _seconds(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[int] = (),
           attrs: str = "") -> str:
    head = "".join(f"<th>{_e(header)}</th>" for header in headers)
    body = "".join(
        "<tr>" + "".join(f"<td class='n'>{cell}</td>" if index in numeric else f"<td>{cell}</td>"
                         for index, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(charts: Mapping[str, bytes], name: str, label: str) -> str:
    svg = charts[name].decode("utf-8")
    svg = svg[svg.index("<svg"):]  # inline: the XML declaration and doctype belong to the file only
    return (f"<figure class='chart' id='chart-{_e(name.removesuffix('.svg'))}' aria-label='{_e(label)}'>{svg}"
            f"<figcaption><a href='{_e(name)}'>{_e(name)}</a></figcaption></figure>")


def _swatch(kind: str) -> str:
    return f"<span class='swatch' style='background:{KIND_COLOURS.get(kind, '#607d8b')}'></span>{_e(kind)}"


def render_html(document: Mapping[str, Any], charts: Mapping[str, bytes], *, refresh: float | None = None) -> bytes:
    """The page of ``document``, with ``charts`` (``render_charts``) inlined; ``refresh`` reloads it every N s."""
    workspace = document["workspace"]
    past = document["history"]
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>"]
    if refresh:
        parts.append(f"<meta http-equiv='refresh' content='{int(max(refresh, 1))}'>")
    parts.append(f"<title>httk-workflow report: {_e(workspace['name'])}</title><style>{_STYLE}</style></head><body>")
    parts.append(f"<h1>Workspace {_e(workspace['name'])}</h1>")
    remote = document["batch"].get("remote")
    where = f"{_e(remote)}:{_e(workspace['path'])}" if remote else _e(workspace["path"])
    parts.append(f"<p class='meta'><code>{where}</code> · generated {_e(iso(document['generated_at']))} · "
                 f"<a href='report.json'>report.json</a></p>")
    if past["collected"]:
        parts.append(f"<p class='note' id='history-note'>Journal history before {_e(iso(past['complete_since']))} "
                     f"was collected by <code>workspace gc</code>: the throughput and time-in-state charts start "
                     f"there ({past['truncated_jobs']} job(s) lost older frames).</p>")
    arrived = past.get("arrived_by_transfer") or {}
    if arrived.get("arrivals"):
        parts.append(f"<p class='note' id='arrival-note'>{arrived['arrivals']} arrival(s) by transfer, the first at "
                     f"{_e(iso(arrived['first']))}: a job's history before it arrived is in the workspace it came "
                     "from, and is not charted here.</p>")
    parts.append(_counts(document))
    parts.append(_chart(charts, "states.svg", "jobs per state"))
    parts.append("<h2 id='placements'>Placement subtrees</h2>")
    rows = [[_e(row["subtree"]), str(row["total"]),
             ", ".join(f"{_e(kind)} {count}" for kind, count in row["counts"].items())]
            for row in document["placements"]]
    parts.append(_table(["subtree", "jobs", "by state"], rows, numeric=[1]) if rows
                 else "<p class='empty'>no jobs</p>")
    parts.append(_chart(charts, "placements.svg", "jobs per placement subtree"))
    parts.append(_realizations(document.get("realizations")))  # absent from a report of an older httk
    parts.append("<h2 id='throughput'>Throughput</h2>")
    parts.append(f"<p class='meta'>{past['frames']} journal frames from {_e(iso(past['earliest']))} to "
                 f"{_e(iso(past['latest']))}.</p>")
    parts.append(_chart(charts, "throughput.svg", "transitions per interval"))
    parts.append("<h2 id='time-in-state'>Time in each state</h2>")
    kinds = document["time_in_state"]["kinds"]
    order = [kind for kind in KIND_COLOURS if kind in kinds]
    rows = [[_swatch(kind), str(kinds[kind]["count"]), *(_seconds(kinds[kind][key]) for key in ("min", "median", "p90",
                                                                                                 "max"))]
            for kind in order]
    parts.append(_table(["state", "jobs", "min s", "median s", "p90 s", "max s"], rows, numeric=[1, 2, 3, 4, 5])
                 if rows else "<p class='empty'>no job has left a state yet</p>")
    parts.append(_chart(charts, "time_in_state.svg", "time spent in each state"))
    parts.append(_failures(document))
    parts.append(_flapping(document))
    parts.append(_managers(document))
    parts.append(_batch(document))
    parts.append("</body></html>\n")
    return "".join(parts).encode("utf-8")


def _realizations(section: Mapping[str, Any] | None) -> str:
    """Jobs per realization (native, language, httk-v1), noting when they are of a sample."""
    if section is None:
        return ""
    rows = [[_e(f"{row['realization']} ({row['language']})" if row["language"] else row["realization"]),
             str(row["total"]), ", ".join(f"{_e(kind)} {count}" for kind, count in row["counts"].items())]
            for row in section["rows"]]
    note = "" if section["complete"] else (
        f"<p class='meta'>Of a sample: the job.json of {section['jobs_read']} jobs (the lowest job ids) was read.</p>")
    table = _table(["realization", "jobs", "by state"], rows, numeric=[1]) if rows else "<p class='empty'>no jobs</p>"
    return f"<h2 id='realizations'>Realizations</h2>{note}{table}"


def _counts(document: Mapping[str, Any]) -> str:
    tiles = "".join(f"<div class='tile' data-kind='{_e(kind)}'>{_swatch(kind)}<b>{count}</b></div>"
                    for kind, count in document["counts"].items() if count)
    return (f"<h2 id='counts'>Jobs: <span id='total'>{document['total']}</span></h2>"
            f"<div class='tiles'>{tiles or '<p class=empty>no jobs</p>'}</div>")


def _failures(document: Mapping[str, Any]) -> str:
    failures = document["failures"]
    out = [f"<h2 id='failures'>Failures: {failures['failed']} failed job(s)</h2>"]
    if not failures["codes"]:
        return out[0] + "<p class='empty'>no failed jobs</p>"
    rows = []
    for entry in failures["codes"]:
        examples = "<br>".join(f"<code>{_e(item['job'])}</code>: {_e(item['why'])}" for item in entry["examples"])
        rows.append([f"<code>{_e(entry['code'])}</code>", str(entry["jobs"]), examples])
    out.append(_table(["failure code", "jobs", "examples (job why)"], rows, numeric=[1], attrs=" id='failure-codes'"))
    if failures["other_codes"]:
        out.append(f"<p class='meta'>and {failures['other_codes']} rarer code(s) (see report.json)</p>")
    return "".join(out)


def _flapping(document: Mapping[str, Any]) -> str:
    flapping = document["flapping"]
    head = f"<h2 id='flapping'>Flapping jobs: {flapping['jobs']}</h2>"
    if not flapping["listed"]:
        return head + "<p class='empty'>none: no job is retrying without progress</p>"
    rows = [[f"<code>{_e(item['job'])}</code>", _e(item["kind"]), str(item["attempts"]), _e(item["why"])]
            for item in flapping["listed"]]
    return head + _table(["job", "state", "attempts", "job why"], rows, numeric=[2])


def _managers(document: Mapping[str, Any]) -> str:
    managers = document["managers"]
    live = sum(1 for manager in managers if manager["live"])
    head = f"<h2 id='managers'>Managers: {live} live, {len(managers) - live} not</h2>"
    if not managers:
        return head + "<p class='empty'>no manager has registered with this workspace</p>"
    rows = [[f"<code>{_e(m['manager_id'])}</code>", _e(m["state"]), _e(m["host"]), _e(age(m["heartbeat_age"])),
             _e(",".join(m.get("pools") or [])), _e(",".join(m.get("capabilities") or []) or "-"),
             _e(",".join(m.get("executors") or [])), _e(m.get("workers"))]
            for m in sorted(managers, key=lambda m: (not m["live"], m["manager_id"]))]
    return head + _table(["manager", "state", "host", "heartbeat age", "pools", "capabilities", "executors",
                          "workers"], rows, numeric=[7], attrs=" id='manager-table'")


def _batch(document: Mapping[str, Any]) -> str:
    batch = document["batch"]
    head = "<h2 id='batch'>Batch jobs</h2>"
    if batch.get("remote") is None:
        found = len(batch["jobs"])
        seen = f" ({found} batch output file(s) in .httk-workflow/batch)" if found else ""
        return head + (f"<p class='empty'>none: this is a report of a workspace on this machine{seen}; "
                       "<code>workspace report REMOTE:WORKSPACE</code> asks the remote's batch system</p>")
    if batch.get("note"):
        return head + f"<p class='empty'>none listed: {_e(batch['note'])}</p>"
    if not batch["jobs"]:
        return head + f"<p class='empty'>none: no manager was submitted to {_e(batch['remote'])}</p>"
    rows = [[_e(job["job_id"]), _e(job["state"] or "unknown")] for job in batch["jobs"]]
    return (head + f"<p class='meta'>{_e(batch['batch_system'])} on {_e(batch['remote'])}</p>"
            + _table(["batch job", "state"], rows))
