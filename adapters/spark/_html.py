"""The report as one static HTML page: inline SVG charts drawn here into the Jinja2 page
``templates/report.html`` (autoescaped), no script, no CDN."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

__all__ = ["render_report_html"]

PALETTE = (
    "#4269d0",
    "#efb118",
    "#ff725c",
    "#6cc5b0",
    "#3ca951",
    "#ff8ab7",
    "#a463f2",
    "#97bbf5",
    "#9c6b4e",
    "#9498a0",
)
WIDTH = 920
FONT = "font-family:system-ui,-apple-system,Segoe UI,sans-serif"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _n(value: float) -> str:
    """A number for a label: 1,234 / 12.3 / 0.123."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


_TEMPLATES = Environment(
    loader=PackageLoader("adapters.spark", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)
_TEMPLATES.filters["n"] = _n


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return float(step * exponent)
    return float(10 * exponent)


def _svg(height: int, body: str, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_e(label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" style="max-width:{WIDTH}px;{FONT}">'
        f"<title>{_e(label)}</title>{body}</svg>"
    )


def _y_axis(left: int, top: int, plot_w: int, plot_h: int, y_max: float) -> str:
    parts = []
    for i in range(5):
        value = y_max * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
            f'fill="#555">{_e(_n(value))}</text>'
        )
    return "".join(parts)


def bar_chart(
    values: Sequence[float],
    labels: Sequence[str],
    *,
    title: str,
    mean: float | None = None,
    highlight_above: float | None = None,
    height: int = 260,
) -> str:
    """Vertical bars (e.g. rows per partition), with an optional dashed mean line."""
    left, top, bottom = 60, 28, 34
    plot_w, plot_h = WIDTH - left - 16, height - top - bottom
    y_max = _nice_max(max(values, default=0))
    slot = plot_w / max(len(values), 1)
    parts = [
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{_e(title)}</text>',
        _y_axis(left, top, plot_w, plot_h, y_max),
    ]
    label_every = max(1, math.ceil(len(values) / 32))
    for i, (value, label) in enumerate(zip(values, labels, strict=True)):
        h = plot_h * value / y_max
        x = left + i * slot
        hot = highlight_above is not None and value > highlight_above
        color = "#ff725c" if hot else "#4269d0"
        parts.append(
            f'<rect x="{x + slot * 0.1:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(slot * 0.8, 0.5):.1f}" height="{h:.1f}" fill="{color}">'
            f"<title>{_e(label)}: {_e(_n(value))}</title></rect>"
        )
        if i % label_every == 0:
            parts.append(
                f'<text x="{x + slot / 2:.1f}" y="{top + plot_h + 14}" font-size="10" '
                f'text-anchor="middle" fill="#555">{_e(label)}</text>'
            )
    if mean is not None:
        y = top + plot_h - plot_h * mean / y_max
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#111" stroke-dasharray="5 4"/>'
            f'<text x="{left + plot_w}" y="{y - 4:.1f}" font-size="11" text-anchor="end">'
            f"mean {_e(_n(mean))}</text>"
        )
    return _svg(height, "".join(parts), title)


def hbar_chart(items: Sequence[tuple[str, float, str]], *, title: str) -> str:
    """Horizontal bars: (label, value, note) per row, largest first."""
    left, top, row_h = 190, 26, 20
    height = top + row_h * max(len(items), 1) + 10
    plot_w = WIDTH - left - 130
    x_max = _nice_max(max((v for _, v, _ in items), default=0))
    parts = [f'<text x="8" y="16" font-size="13" font-weight="600">{_e(title)}</text>']
    for i, (label, value, note) in enumerate(items):
        y = top + i * row_h
        w = plot_w * value / x_max
        parts.append(
            f'<text x="{left - 6}" y="{y + 14}" font-size="11" text-anchor="end">'
            f"{_e(label[:28])}</text>"
            f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="#4269d0"/>'
            f'<text x="{left + w + 6:.1f}" y="{y + 14}" font-size="11" fill="#333">'
            f"{_e(_n(value))} {_e(note)}</text>"
        )
    return _svg(height, "".join(parts), title)


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    markers: Sequence[tuple[float, str]] = (),
    height: int = 300,
) -> str:
    """One line per series over time (x: epoch seconds), with dashed vertical markers."""
    left, top, bottom, right = 60, 28, 40, 150
    plot_w, plot_h = WIDTH - left - right, height - top - bottom
    xs = [x for _, pts in series for x, _ in pts] + [x for x, _ in markers]
    ys = [y for _, pts in series for _, y in pts]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    y_max = _nice_max(max(ys, default=0))

    def px(x: float) -> float:
        return left + plot_w * (x - x_lo) / (x_hi - x_lo)

    def py(y: float) -> float:
        return top + plot_h - plot_h * y / y_max

    parts = [
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{_e(title)}</text>',
        _y_axis(left, top, plot_w, plot_h, y_max),
    ]
    for i in range(5):
        x = x_lo + (x_hi - x_lo) * i / 4
        label = datetime.fromtimestamp(x, UTC).strftime("%H:%M:%S")
        parts.append(
            f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" font-size="10" '
            f'text-anchor="middle" fill="#555">{_e(label)}</text>'
        )
    for x, label in markers:
        parts.append(
            f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{top + plot_h}" '
            f'stroke="#ff725c" stroke-dasharray="4 3"/>'
            f'<text x="{px(x) + 3:.1f}" y="{top + 10}" font-size="10" fill="#c2410c">'
            f"{_e(label)}</text>"
        )
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        if len(pts) == 1:
            x, y = pts[0]
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        else:
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6">'
                f"<title>{_e(name)}</title></polyline>"
            )
        ly = top + 12 + i * 15
        if ly < top + plot_h:
            parts.append(
                f'<rect x="{left + plot_w + 12}" y="{ly - 8}" width="10" height="10" '
                f'fill="{color}"/><text x="{left + plot_w + 26}" y="{ly + 1}" font-size="11">'
                f"{_e(name[:18])}</text>"
            )
    return _svg(height, "".join(parts), title)


def latency_histogram(
    bins: Sequence[dict[str, Any]], marks: Sequence[tuple[str, float]], *, title: str
) -> str:
    """Counts per log-spaced latency bin (ms), with percentile markers."""
    height, left, top, bottom = 260, 60, 28, 36
    plot_w, plot_h = WIDTH - left - 16, height - top - bottom
    positive = [b for b in bins if b["hi"] > 0]
    lo = min((b["lo"] for b in positive), default=0.01)
    hi = max((b["hi"] for b in positive), default=1.0)
    lo_log, hi_log = math.log10(lo), math.log10(hi)
    if hi_log <= lo_log:
        hi_log = lo_log + 1
    y_max = _nice_max(max((b["count"] for b in positive), default=0))

    def px(ms: float) -> float:
        v = math.log10(min(max(ms, lo), hi))
        return left + plot_w * (v - lo_log) / (hi_log - lo_log)

    parts = [
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{_e(title)}</text>',
        _y_axis(left, top, plot_w, plot_h, y_max),
    ]
    for b in positive:
        x0, x1 = px(b["lo"]), px(b["hi"])
        h = plot_h * b["count"] / y_max
        parts.append(
            f'<rect x="{x0:.1f}" y="{top + plot_h - h:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" '
            f'height="{h:.1f}" fill="#6cc5b0"><title>{_e(_n(b["lo"]))}-{_e(_n(b["hi"]))} ms: '
            f"{_e(_n(b['count']))}</title></rect>"
        )
    decade = math.ceil(lo_log)
    while decade <= hi_log:
        x = px(10**decade)
        parts.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 16}" font-size="10" text-anchor="middle" '
            f'fill="#555">{_e(_n(10**decade))} ms</text>'
        )
        decade += 1
    for i, (name, value) in enumerate(marks):
        x = px(value)
        right = x > left + plot_w * 0.75  # label on the left of the line near the edge
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#111" '
            f'stroke-dasharray="4 3"/><text x="{x - 3 if right else x + 3:.1f}" '
            f'y="{top + 10 + 12 * i}" font-size="11" text-anchor="{"end" if right else "start"}" '
            f'fill="#111" stroke="#fff" stroke-width="3" paint-order="stroke">'
            f"{_e(name)} {_e(_n(value))} ms</text>"
        )
    return _svg(height, "".join(parts), title)


def grouped_bars(
    groups: Sequence[str], before: Sequence[float], after: Sequence[float], *, title: str
) -> str:
    """Per handler: rows before (grey) and after (blue) a rebalance."""
    height, left, top, bottom = 200, 60, 28, 34
    plot_w, plot_h = WIDTH - left - 16, height - top - bottom
    y_max = _nice_max(max([*before, *after], default=0))
    slot = plot_w / max(len(groups), 1)
    parts = [
        f'<text x="{left}" y="16" font-size="13" font-weight="600">{_e(title)}</text>',
        f'<rect x="{WIDTH - 190}" y="6" width="10" height="10" fill="#9498a0"/>'
        f'<text x="{WIDTH - 176}" y="15" font-size="11">before</text>'
        f'<rect x="{WIDTH - 120}" y="6" width="10" height="10" fill="#4269d0"/>'
        f'<text x="{WIDTH - 106}" y="15" font-size="11">after</text>',
        _y_axis(left, top, plot_w, plot_h, y_max),
    ]
    width = min(slot * 0.38, 40)
    for i, name in enumerate(groups):
        center = left + slot * (i + 0.5)
        for value, offset, color in ((before[i], -width, "#9498a0"), (after[i], 0, "#4269d0")):
            h = plot_h * value / y_max
            parts.append(
                f'<rect x="{center + offset:.1f}" y="{top + plot_h - h:.1f}" width="{width:.1f}" '
                f'height="{h:.1f}" fill="{color}"><title>{_e(name)}: {_e(_n(value))}</title>'
                f"</rect>"
            )
        parts.append(
            f'<text x="{center:.1f}" y="{top + plot_h + 14}" font-size="10" '
            f'text-anchor="middle">{_e(name[:16])}</text>'
        )
    return _svg(height, "".join(parts), title)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def render_report_html(report: dict[str, Any]) -> str:
    """The whole page for a ``SparkAnalytics.report`` result."""
    s = report["summary"]
    parts_load = report["partitions_load"]
    handlers = report["handlers"]
    latency = report["latency_ms"]
    rebalances = report["rebalances"]
    loads = parts_load["loads"]

    mean = parts_load["mean_rows"]
    partition_chart = bar_chart(
        [x["rows"] for x in loads],
        [str(x["partition"]) for x in loads],
        title=(
            f"Rows per partition — max/mean {parts_load['skew_rows']:.2f} "
            f"(partition {parts_load['max_partition']}), {parts_load['empty_partitions']} empty"
        ),
        mean=mean,
        highlight_above=1.5 * mean,
    )
    top = report["projects"]["top"][:20]
    project_chart = hbar_chart(
        [(p["project_id"], p["rows"], f"(p{p['partition']}, {p['share']:.1%})") for p in top],
        title=f"Top {len(top)} projects by rows",
    )
    marker_list = [(_epoch(c["at"]), f"g{c['from']}→g{c['to']}") for c in rebalances["changes"]]
    handler_chart = line_chart(
        [
            (h["handler_id"], [(_epoch(t), float(n)) for t, n in h["points"]])
            for h in handlers["series"]
        ],
        title=f"Rows per handler per {handlers['bucket_seconds']} s (dashed: rebalances)",
        markers=marker_list,
    )
    latency_chart = latency_histogram(
        latency["histogram"],
        [
            ("p50", latency["p50"]),
            ("p95", latency["p95"]),
            ("p99", latency["p99"]),
            ("max", latency["max"]),
        ],
        title=f"End-to-end latency (received_at → handled_at), {_n(latency['count'])} rows",
    )
    rebalance_html = []
    for change in rebalances["changes"][-10:]:
        names = sorted(set(change["before"]) | set(change["after"]))
        rebalance_html.append(
            grouped_bars(
                names,
                [change["before"].get(n, 0) for n in names],
                [change["after"].get(n, 0) for n in names],
                title=(
                    f"g{change['from']} → g{change['to']} at {change['at']}: rows per handler, "
                    f"{_n(rebalances['window_seconds'])} s before / after"
                ),
            )
        )
    return _TEMPLATES.get_template("report.html").render(
        report=report,
        s=s,
        partitions_load=parts_load,
        handlers=handlers,
        latency=latency,
        rebalances=rebalances,
        font=FONT,
        charts={
            "partitions": Markup(partition_chart),
            "projects": Markup(project_chart),
            "handlers": Markup(handler_chart),
            "latency": Markup(latency_chart),
            "rebalances": [Markup(chart) for chart in rebalance_html],
        },
        handler_rows=[[h["handler_id"], _n(h["rows"])] for h in handlers["totals"]],
        latency_rows=[
            [h["handler_id"], _n(h["rows"]), _n(h["p50"]), _n(h["p99"]), _n(h["max"])]
            for h in latency["by_handler"]
        ],
        generation_rows=[
            [
                g["generation"],
                g["first_handled_at"],
                g["last_handled_at"],
                _n(g["rows"]),
                ", ".join(g["handlers"]),
            ]
            for g in rebalances["generations"]
        ],
    )
