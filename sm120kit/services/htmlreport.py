"""A support bundle as one self-contained HTML page (``sm120kit report``, and ``collect`` writes
it beside the tarball): the phase timeline per rank, the progress channels over time, where
each rank stopped and the findings with their evidence lines.

The page needs no server and no network: inline CSS and inline SVG, no script, no external
resource. It reads the bundle through :class:`~sm120kit.evidence.bundle_reader.BundleReader`;
the findings are diagnose's (``DiagnoseResult.to_dict()``), handed in by the CLI, which composes
the two (a service never imports a capability).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

from sm120kit import __version__
from sm120kit.evidence.bundle_reader import BundleReader

#: phase colours, by first appearance (colour-blind-safe palette, then greys)
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295")
CHANNELS = (  # series key, title, what it is, unit, how it is drawn (rate of a counter or level)
    ("output", "output", "lines printed by the command", "", "ticks"),
    ("cpu_s", "CPU", "CPU of the command's processes (compilers apart)", "cores", "rate"),
    ("compile_cpu_s", "compiler CPU", "CPU of nvcc, cicc, ptxas, cc, ...", "cores", "rate"),
    ("io_read_bytes", "IO read", "bytes read (weights, caches)", "MB/s", "rate"),
    ("gpu_used_bytes", "GPU memory", "GPU memory used (NVML)", "GiB", "level"),
    ("compilers", "compilers", "compiler processes running", "", "level"),
)
W, LEFT, RIGHT = 960, 170, 20
HOT = ' class="stalled"'


@dataclass
class BundleView:
    """What the page shows, read from a bundle (every part optional: old or partial bundles)."""

    name: str
    timeline: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)


def read_view(reader: BundleReader, name: str, diagnosis: dict[str, Any] | None) -> BundleView:
    def obj(member: str) -> dict[str, Any]:
        try:
            got = reader.read_json(member)
        except Exception:  # a corrupt member: the page shows the rest
            return {}
        return got if isinstance(got, dict) else {}

    return BundleView(name=name, timeline=obj("timeline.json"), progress=obj("progress.json"),
                      analysis=obj("stacks/analysis.json").get("processes") or {},
                      manifest=obj("manifest.json"), diagnosis=diagnosis or {})


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


# --- the page ------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1000px;
color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #dde}
.meta{color:#555}.verdict{background:#fff4e5;border-left:4px solid #f28e2b;padding:8px 12px;
margin:12px 0}table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f6f7f9}code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f7f9;padding:6px 8px;margin:4px 0}
.finding{border:1px solid #dde;border-radius:6px;padding:8px 12px;margin:10px 0}
.cat{font-weight:600}.fix{margin-top:6px}.none{color:#777;font-style:italic}
.stalled{background:#fdecea}svg text{font:11px system-ui,sans-serif;fill:#333}
"""


def render_html(view: BundleView) -> str:
    parts = [_head(view), _timeline_section(view), _channels_section(view),
             _ranks_section(view), _findings_section(view), _collectors_section(view)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>sm120kit report: {esc(view.name)}</title><style>{CSS}</style></head>"
            f"<body>{''.join(parts)}<p class=\"meta\">sm120kit {esc(__version__)}, "
            f"{esc(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))}</p></body></html>\n")


def _head(v: BundleView) -> str:
    tl, d = v.timeline, v.diagnosis
    meta = [f"mode {esc(tl.get('mode') or '?')}"]
    if tl.get("started"):
        meta.append(f"started {esc(tl['started'])}")
    if tl.get("current_phase"):
        meta.append(f"last phase {esc(tl['current_phase'])}")
    if tl.get("exit_code") is not None:
        meta.append(f"exit code {esc(tl['exit_code'])}")
    out = [f"<h1>{esc(v.name)}</h1><p class=\"meta\">{' · '.join(meta)}</p>"]
    if tl.get("reason"):
        out.append(f"<p><b>Why the bundle was taken:</b> {esc(tl['reason'])}</p>")
    if d.get("verdict"):
        out.append(f"<div class=\"verdict\"><b>Verdict:</b> {esc(d['verdict'])}</div>")
    return "".join(out)


# --- phase timeline per rank ---------------------------------------------------------------
def _phase_rows(v: BundleView) -> tuple[list[tuple[str, list[tuple[str, float, float]]]], float,
                                        bool]:
    """Rows (label, [(phase, start, end)]), the end of the time axis, and whether the times are
    real seconds (launch mode) or only the order of the phases (logs without our clock)."""
    phases = [p for p in v.timeline.get("phases") or [] if isinstance(p, dict)]
    if phases:
        end = max([float(p.get("t") or 0) for p in phases] + [_series_end(v)]) or 1.0
        by: dict[str, list[tuple[str, float]]] = {}
        for p in phases:
            by.setdefault(str(p.get("stream") or "main"), []).append(
                (str(p.get("phase")), float(p.get("t") or 0)))
        rows = []
        for stream, seq in by.items():
            seq.sort(key=lambda x: x[1])
            segs = [(ph, t, seq[i + 1][1] if i + 1 < len(seq) else end)
                    for i, (ph, t) in enumerate(seq)]
            rows.append((stream, segs))
        return rows, end, True
    ordered: list[tuple[str, list[tuple[str, float, float]]]] = []
    for r in v.diagnosis.get("ranks") or []:
        names = [str(x) for x in r.get("phases") or []]
        if names:
            ordered.append((_rank_label(r), [(ph, float(i), float(i + 1))
                                             for i, ph in enumerate(names)]))
    return ordered, float(max((len(s) for _, s in ordered), default=1)), False


def _series_end(v: BundleView) -> float:
    pts = v.progress.get("series") or v.progress.get("history") or []
    return float(pts[-1].get("t") or 0) if pts and isinstance(pts[-1], dict) else 0.0


def _rank_label(r: dict[str, Any]) -> str:
    name = r.get("process") or r.get("role") or "process"
    rank = f" rank {r['rank']}" if r.get("rank") is not None else ""
    pid = f" (pid {r['pid']})" if r.get("pid") is not None else ""
    return f"{name}{rank}{pid}"


def _timeline_section(v: BundleView) -> str:
    rows, end, timed = _phase_rows(v)
    head = "<h2>Phase timeline per rank</h2>"
    if not rows:
        return head + "<p class=\"none\">no phases in this bundle (attach mode sees no output; " \
                      "see where each rank stopped below)</p>"
    colours: dict[str, str] = {}
    for _, segs in rows:
        for ph, _, _ in segs:
            colours.setdefault(ph, PALETTE[len(colours) % len(PALETTE)])
    rh, top = 26, 24
    h = top + rh * len(rows) + 40
    scale = (W - LEFT - RIGHT) / max(end, 1e-9)
    svg = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
           f'viewBox="0 0 {W} {h}" role="img" aria-label="phase timeline per rank">']
    svg += _axis(end, scale, top + rh * len(rows) + 4, timed)
    for i, (label, segs) in enumerate(rows):
        y = top + i * rh
        svg.append(f'<text x="{LEFT - 6}" y="{y + 16}" text-anchor="end">{esc(label[:28])}</text>')
        for ph, t0, t1 in segs:
            x, w = LEFT + t0 * scale, max(2.0, (t1 - t0) * scale)
            svg.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{rh - 8}" '
                       f'fill="{colours[ph]}"><title>{esc(ph)}: {t0:.1f}–{t1:.1f}'
                       f'{" s" if timed else ""}</title></rect>')
            if w > 7 * len(ph):
                svg.append(f'<text x="{x + 4:.1f}" y="{y + 16}" style="fill:#fff">{esc(ph)}'
                           "</text>")
        last = segs[-1]
        svg.append(f'<text x="{min(W - RIGHT, LEFT + last[2] * scale) - 2:.1f}" y="{y + 16}" '
                   f'text-anchor="end" style="font-weight:700">■ stopped in {esc(last[0])}'
                   "</text>" if timed and _is_stop(v) else "")
    svg.append("</svg>")
    legend = " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{c}">'
                      f'</span> {esc(ph)}' for ph, c in colours.items())
    note = "" if timed else "<p class=\"meta\">order of the phases only: the logs carry no " \
                            "clock of ours</p>"
    return head + "".join(svg) + f"<p class=\"meta\">{legend}</p>" + note


def _is_stop(v: BundleView) -> bool:
    return bool(v.timeline.get("reason") or v.timeline.get("stall_kind"))


def _axis(end: float, scale: float, y: int, timed: bool) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}" stroke="#999"/>']
    step = _nice_step(end)
    t = 0.0
    while t <= end + 1e-9 and timed:
        x = LEFT + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                   f'<text x="{x:.1f}" y="{y + 16}" text-anchor="middle">{t:g} s</text>')
        t += step
    return out


def _nice_step(end: float) -> float:
    for s in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if end / s <= 10:
            return float(s)
    return 7200.0


# --- progress channels over time -----------------------------------------------------------
def _channels_section(v: BundleView) -> str:
    series = [p for p in v.progress.get("series") or [] if isinstance(p, dict)]
    head = "<h2>Progress channels over time</h2>"
    if len(series) >= 2:
        charts = [_chart(series, key, title, what, unit, how)
                  for key, title, what, unit, how in CHANNELS]
        return head + "".join(c for c in charts if c)
    hist = [h for h in v.progress.get("history") or [] if isinstance(h, dict)]
    if hist:
        return head + _raster(hist)
    return head + "<p class=\"none\">no progress samples in this bundle (attach and Ray " \
                  "snapshots, or a launch with --no-progress)</p>"


def _values(series: list[dict[str, Any]], key: str, how: str) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    prev: dict[str, Any] | None = None
    for p in series:
        val = p.get(key)
        if how == "ticks":
            out.append((float(p["t"]), 1.0 if val else 0.0))
        elif how == "level":
            out.append((float(p["t"]), float(val or 0) / (2**30 if key.endswith("bytes") else 1)))
        elif prev is not None:
            dt = float(p["t"]) - float(prev["t"])
            dv = float(val or 0) - float(prev.get(key) or 0)
            div = 1e6 if key.endswith("bytes") else 1.0
            out.append((float(p["t"]), max(0.0, dv / div / dt) if dt > 0 else 0.0))
        prev = p
    return out


def _chart(series: list[dict[str, Any]], key: str, title: str, what: str, unit: str,
           how: str) -> str:
    if all(p.get(key) is None for p in series):
        return ""
    pts = _values(series, key, how)
    if not pts:
        return ""
    end = max(float(series[-1]["t"]), 1e-9)
    top = max(y for _, y in pts) or 1.0
    h, ph = 70, 50
    sx, sy = (W - LEFT - RIGHT) / end, ph / top
    svg = [f'<svg class="channel" data-channel="{esc(key)}" xmlns="http://www.w3.org/2000/svg" '
           f'width="{W}" height="{h}" viewBox="0 0 {W} {h}">',
           f'<title>{esc(what)}</title>',
           f'<text x="{LEFT - 6}" y="20" text-anchor="end">{esc(title)}</text>',
           f'<text x="{LEFT - 6}" y="36" text-anchor="end" style="fill:#777">max {top:.3g} '
           f'{esc(unit)}</text>',
           f'<rect x="{LEFT}" y="6" width="{W - LEFT - RIGHT}" height="{ph}" fill="#f6f7f9"/>']
    if how == "ticks":
        svg += [f'<rect x="{LEFT + t * sx:.1f}" y="8" width="2" height="{ph - 4}" fill="#4e79a7"/>'
                for t, y in pts if y]
    else:
        poly = " ".join(f"{LEFT + t * sx:.1f},{6 + ph - y * sy:.1f}" for t, y in pts)
        svg.append(f'<polyline points="{poly}" fill="none" stroke="#e15759" stroke-width="1.6"/>')
    svg.append(f'<text x="{W - RIGHT}" y="{h - 2}" text-anchor="end" style="fill:#777">'
               f'{end:.0f} s</text></svg>')
    return "".join(svg)


def _raster(hist: list[dict[str, Any]]) -> str:
    chans = sorted({c for h in hist for c in h.get("moved") or []})
    end = max(float(hist[-1].get("t") or 0), 1e-9)
    rh = 18
    h = rh * len(chans) + 24
    sx = (W - LEFT - RIGHT) / end
    svg = [f'<svg class="channel" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
           f'viewBox="0 0 {W} {h}">']
    for i, ch in enumerate(chans):
        y = 4 + i * rh
        svg.append(f'<text x="{LEFT - 6}" y="{y + 12}" text-anchor="end">{esc(ch)}</text>')
        svg += [f'<rect x="{LEFT + float(e.get("t") or 0) * sx:.1f}" y="{y + 2}" width="3" '
                f'height="{rh - 6}" fill="#59a14f"/>' for e in hist if ch in (e.get("moved") or [])]
    svg.append(f'<text x="{W - RIGHT}" y="{h - 4}" text-anchor="end">{end:.0f} s</text></svg>')
    return "<p class=\"meta\">when each channel moved (the bundle keeps no values)</p>" + \
        "".join(svg)


# --- where each rank stopped, findings, collectors -----------------------------------------
def _ranks_section(v: BundleView) -> str:
    named = {str(r) for f in (v.diagnosis.get("findings") or [])[:1] for r in f.get("ranks") or []}
    rows = []
    by_pid = {str(k): a for k, a in v.analysis.items() if isinstance(a, dict)}
    seen: set[str] = set()
    for r in v.diagnosis.get("ranks") or []:
        a = by_pid.get(str(r.get("pid")), {})
        seen.add(str(r.get("pid")))
        last = r.get("last_line") or {}
        rows.append((str(r.get("rank")) in named, _rank_label(r), r.get("stage") or r.get("phase"),
                     a.get("state"), a.get("collective") or a.get("caller") or a.get("top"),
                     f"{last.get('source', '')}:{last.get('line', '')} {last.get('text', '')}"
                     if last else ""))
    for pid, a in by_pid.items():
        if pid not in seen:
            label = f"{a.get('label') or a.get('role') or 'process'}" + (
                f" rank {a['rank']}" if a.get("rank") is not None else "") + f" (pid {pid})"
            rows.append((str(a.get("rank")) in named, label, None, a.get("state"),
                         a.get("collective") or a.get("caller") or a.get("top"), ""))
    head = "<h2>Where each rank stopped</h2>"
    if not rows:
        return head + "<p class=\"none\">no ranks found in this bundle</p>"
    body = "".join(
        f"<tr{HOT if hot else ''}><td>{esc(lbl)}</td><td>{esc(ph or '')}</td>"
        f"<td>{esc(st or '')}</td><td><code>{esc(fr or '')}</code></td>"
        f"<td><code>{esc(ln)}</code></td></tr>" for hot, lbl, ph, st, fr, ln in rows)
    return head + ("<table><tr><th>process</th><th>phase</th><th>stack</th><th>frame</th>"
                   f"<th>last log line</th></tr>{body}</table>")


def _findings_section(v: BundleView) -> str:
    fs = v.diagnosis.get("findings") or []
    head = "<h2>Findings</h2>"
    if not v.diagnosis:
        return head + "<p class=\"none\">not judged (no diagnosis was given)</p>"
    if not fs:
        return head + "<p class=\"none\">no findings</p>"
    out = [head]
    for f in fs:
        ranks = ", ".join(str(r) for r in f.get("ranks") or [])
        ev = "".join(f"<pre>{esc(e.get('source'))}:{esc(e.get('line'))}  {esc(e.get('text'))}"
                     "</pre>" for e in f.get("evidence") or [])
        out.append(
            f"<div class=\"finding\"><span class=\"cat\">{esc(f.get('category'))}</span> "
            f"({float(f.get('confidence') or 0):.0%}"
            f"{', phase ' + esc(f['phase']) if f.get('phase') else ''}"
            f"{', ranks ' + esc(ranks) if ranks else ''}): {esc(f.get('summary'))}{ev}"
            + (f"<div class=\"fix\"><b>Fix:</b> {esc(f['fix'])}</div>" if f.get("fix") else "")
            + "</div>")
    return "".join(out)


def _collectors_section(v: BundleView) -> str:
    recs = [c for c in v.manifest.get("collectors") or [] if isinstance(c, dict)]
    if not recs:
        return ""
    body = "".join(f"<tr><td>{esc(c.get('name'))}</td><td>{esc(c.get('status'))}</td>"
                   f"<td>{esc(c.get('seconds'))}</td><td>{esc(c.get('error') or c.get('detail'))}"
                   "</td></tr>" for c in recs)
    return ("<h2>Collectors</h2><table><tr><th>collector</th><th>status</th><th>s</th>"
            f"<th>detail</th></tr>{body}</table>")
