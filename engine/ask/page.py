"""The report as one self-contained HTML page (Vega, Vega-Lite and vega-embed inlined; opens offline), and its
charts exported as PNG or SVG. A `window.onerror` handler writes JavaScript errors into `#js-errors`, and each
chart's section gets `data-rendered="ok"` (or `"error"`) once vega-embed is done, so a headless browser can check.
"""

import html
import json
from pathlib import Path

import engine
from engine.ask.sections import Part, Report, Section
from engine.atomic import write_atomic

EMBED_OPTIONS = {"renderer": "svg", "actions": {"export": True, "source": False, "compiled": False, "editor": False}}

def script_json(value) -> str:
    """JSON safe inside a <script> element: no `</script>` or `<!--` can appear."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def render_html(report: Report) -> str:
    import vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=vl_version())
    specs = {s.name: s.chart.to_dict() for s in report.sections if s.chart is not None}
    esc = html.escape
    one = len(report.parts) == 1  # one method: its findings join the sweep's, no heading of its own
    said = report.findings + (report.parts[0].findings if one else [])
    findings_html = "".join(f"<li>{esc(line)}</li>" for line in said)
    sections_html = "".join(part_html(p, k, heading=not one) for k, p in enumerate(report.parts, 1)) or (
        '<p class="empty">No charts: there is no fitting configuration to draw.</p>')
    partial = getattr(report, "partial", "")
    banner = f'<p class="partial" id="partial">{esc(partial)}</p>' if partial else ""
    return PAGE.format(
        banner=banner, title=esc(report.title), created=esc(report.created), generated=esc(report.generated),
        version=esc(engine.__version__), findings=findings_html, spec=esc(report.spec_text or "(no spec text recorded)"),
        sections=sections_html, bundle=bundle, specs=script_json(specs), options=script_json(EMBED_OPTIONS),
        style=STYLE_CSS, handlers=ERROR_HANDLERS, embed=EMBED_SCRIPT,
    )


def part_html(part: Part, k: int, heading: bool) -> str:
    """One training method's charts; with several methods, under a heading with the method's own findings."""
    esc = html.escape
    note = f'<p class="note">{esc(part.note)}</p>' if part.note else ""
    body = note + "".join(section_html(s) for s in part.sections)
    if not heading:
        return body
    said = "".join(f"<li>{esc(line)}</li>" for line in part.findings)
    return (f'<section class="method" id="method-{k}" data-method="{esc(part.method)}">'
            f'<h2 class="method">Training method: {esc(part.method)}</h2><ul class="findings">{said}</ul>{body}</section>\n')


def section_html(s: Section) -> str:
    esc = html.escape
    body = f'<div class="vis" id="vis-{s.name}"></div>' if s.chart is not None else f'<p class="note">{esc(s.note)}</p>'
    state = "pending" if s.chart is not None else "none"
    shows = f'<p class="shows">Shows: {esc(s.shows)}</p>' if s.shows else ""
    return (f'<section class="chart" id="chart-{s.name}" data-chart="{s.name}" data-rendered="{state}">'
            f"<h2>{esc(s.title)}</h2><p>{esc(s.caption)}</p>{shows}{body}</section>\n")


def vl_version() -> str:
    import altair as alt

    return "_".join(alt.SCHEMA_VERSION.split(".")[:2])  # 'v6.4.1' -> 'v6_4', as vl-convert names versions


def export_charts(report: Report, html_path: Path, fmt: str) -> list[Path]:
    """Each chart as `<stem>-<chart>.<fmt>` beside the HTML page, drawn by vl-convert."""
    import vl_convert

    written = []
    for s in report.sections:
        if s.chart is None:
            continue
        spec, path = s.chart.to_dict(), html_path.with_name(f"{html_path.stem}-{s.name}.{fmt}")
        if fmt == "png":
            data = vl_convert.vegalite_to_png(spec, vl_version=vl_version(), scale=2)
            write_atomic(path, lambda tmp: tmp.write_bytes(data))
        else:
            text = vl_convert.vegalite_to_svg(spec, vl_version=vl_version())
            write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        written.append(path)
    return written


STYLE_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em}.meta,.shows{color:#666;font-size:.9em}
.note,.empty{background:#fff4e5;padding:.6em 1em;border-left:4px solid #f0a030}
h2.method{font-size:1.4em;margin-top:2.5em;padding-top:.6em;border-top:3px solid #444}
.vis{max-width:100%}.vis .vega-embed{max-width:100%}.vis svg{max-width:100%;height:auto}
pre{background:#f6f6f6;padding:1em;overflow:auto}
.partial{background:#fde7ea;color:#8a0015;font-weight:bold;padding:.8em 1em;border-left:6px solid #b00020}#js-errors{color:#b00020;background:#fde7ea}"""

ERROR_HANDLERS = """window.memsimErrors = [];
function memsimError(text) {
  window.memsimErrors.push(String(text));
  var el = document.getElementById('js-errors');
  el.textContent = window.memsimErrors.join('\\n');
  el.hidden = false;
}
window.addEventListener('error', function (e) { memsimError('error: ' + e.message + ' (' + e.filename + ':' + e.lineno + ')'); });
window.addEventListener('unhandledrejection', function (e) { memsimError('unhandled rejection: ' + e.reason); });
var memsimConsoleError = console.error;
console.error = function () { memsimError('console.error: ' + Array.prototype.join.call(arguments, ' ')); memsimConsoleError.apply(console, arguments); };"""

EMBED_SCRIPT = """Promise.allSettled(Object.keys(MEMSIM_SPECS).map(function (name) {
  var section = document.getElementById('chart-' + name);
  return vegaEmbed('#vis-' + name, MEMSIM_SPECS[name], MEMSIM_OPTIONS)
    .then(function () { section.dataset.rendered = 'ok'; })
    .catch(function (err) { section.dataset.rendered = 'error'; memsimError(name + ': ' + err); });
})).then(function () {
  // a chart is scaled down to its column (CSS max-width), never cut off: say whether each one fits the window
  var width = document.documentElement.clientWidth;
  Object.keys(MEMSIM_SPECS).forEach(function (name) {
    var svg = document.querySelector('#vis-' + name + ' svg');
    var box = svg && svg.getBoundingClientRect();
    document.getElementById('chart-' + name).dataset.fitsWindow = String(!!box && box.left >= 0 && box.right <= width);
  });
  document.body.dataset.pageWidth = String(document.documentElement.scrollWidth) + '/' + String(width);
  document.body.dataset.chartsDone = 'true';
});"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<pre id="js-errors" hidden></pre>
<script>{handlers}</script>
{banner}
<h1>{title}</h1>
<p class="meta">Sweep created {created}; report generated {generated} by memsim {version}.</p>
<h2>Findings</h2>
<ul id="findings">{findings}</ul>
<details><summary>Sweep spec (TOML)</summary><pre id="spec">{spec}</pre></details>
{sections}
<script>{bundle}</script>
<script>
var MEMSIM_SPECS = {specs};
var MEMSIM_OPTIONS = {options};
{embed}
</script>
</body>
</html>
"""
