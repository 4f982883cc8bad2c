"""`memsim report`: one self-contained HTML page with a sweep's capacity-planning story.

The page holds the spec's title, the spec itself (TOML), the dates, a few findings in words and one chart per
module of reports/ (each fed by its query from queries/). Vega, Vega-Lite and vega-embed are inlined, so the
page opens offline. A `window.onerror` handler writes JavaScript errors into `#js-errors`, and each chart's
section gets `data-rendered="ok"` (or `"error"`) once vega-embed is done, so a headless browser can check it.
"""

import html
import json
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

import engine
import reports
from engine.ask.queries import run_query
from engine.atomic import write_atomic
from engine.dataset.views import connect, manifest
from engine.errors import UserError

FORMATS = ("html", "png", "svg")
PICK_WORDS = {"method": "method", "model": "model", "gpu": "GPU type", "min_gpus": "GPUs", "layout_gpus": "GPUs"}
EMBED_OPTIONS = {"renderer": "svg", "actions": {"export": True, "source": False, "compiled": False, "editor": False}}


@dataclass
class Section:
    name: str
    title: str
    caption: str
    shows: str  # the picks the chart was drawn for, in words
    rows: int
    chart: object = None  # the altair chart; None when there is nothing to draw
    note: str = ""  # why there is no chart


@dataclass
class Report:
    title: str
    spec_text: str
    created: str
    generated: str
    findings: list[str]
    sections: list[Section]


class Runner:
    """Runs each (query, params) once: charts and findings share results."""

    def __init__(self, con):
        self.con, self.cache = con, {}

    def __call__(self, name: str, **params) -> pl.DataFrame:
        key = (name, tuple(sorted(params.items())))
        if key not in self.cache:
            self.cache[key] = run_query(self.con, name, params)
        return self.cache[key]


def of_method(rows: pl.DataFrame, method: str) -> pl.DataFrame:
    return rows.filter(pl.col("method") == method) if "method" in rows.columns else rows


def choose_picks(run: Runner, method=None, model=None, gpu=None) -> dict | None:
    """The training method, GPU type and model the charts show: given by the user, else report_picks.sql's."""
    methods = run("report_methods")
    if method is not None and method not in methods["method"].to_list():
        raise UserError(f"--method {method!r} is not in this sweep (methods: {', '.join(methods['method'])})")
    if method is None:
        fitting = methods.filter(pl.col("fit") > 0)
        if fitting.is_empty():
            return None
        method = fitting["method"][0]
    picks = run("report_picks", method=method, model=model, gpu=gpu)
    if picks.is_empty():
        asked = " on ".join(f"{k} {v}" for k, v in (("model", model), ("GPU", gpu)) if v)
        raise UserError(f"no configuration of {asked or 'this sweep'} fits with method {method!r}; "
                        "choose another --model/--gpu (memsim query min_gpus --sweep DIR lists what fits)")
    return {"method": method, **picks.row(0, named=True), "n_methods": methods.height}


def build_section(module, run: Runner, picks: dict, compact: bool = False) -> Section:
    title, caption = reports.heading(module)
    if compact and getattr(module, "NEEDS_FULL_ROWS", False):
        note = "This sweep keeps compact rows ([output] compact = true): the memory components are not in it."
        return Section(reports.short_name(module), title, caption, "", 0, note=note)
    params = {name: picks[pick] for name, pick in module.PARAMS.items()}
    rows = of_method(run(module.QUERY, **params), picks["method"])
    shows = [f"{PICK_WORDS[pick]} {picks[pick]}" for pick in module.PARAMS.values() if pick != "method"]
    if picks["n_methods"] > 1:
        shows.insert(0, f"method {picks['method']}")
    section = Section(reports.short_name(module), title, caption, ", ".join(shows), rows.height)
    missing = getattr(module, "missing", lambda _: "")
    if rows.is_empty():
        section.note = "Nothing to chart: no configuration of this view fits."
    elif missing(rows):
        section.note = missing(rows)
    elif rows.height >= reports.MAX_ROWS:  # never let altair truncate or choke: say so instead
        section.note = (f"{rows.height:,} rows are too many to chart (limit {reports.MAX_ROWS:,}); "
                        "narrow the sweep, or choose --method/--model/--gpu.")
    else:
        section.chart = module.chart(rows)
    return section


def build_report(sweep_dir, method=None, model=None, gpu=None) -> Report:
    """Run every chart's query over the sweep in `sweep_dir` and describe what it found."""
    sweep_dir = Path(sweep_dir)
    run = Runner(connect(sweep_dir))
    info = manifest(sweep_dir)
    spec_path = sweep_dir / "_spec.toml"
    try:
        summary = run("summary").row(0, named=True)
        picks = choose_picks(run, method, model, gpu) if summary["fit"] else None
        spec = tomllib.loads(spec_path.read_text()) if spec_path.exists() else {}
        compact = bool(spec.get("output", {}).get("compact", False))
        sections = [build_section(m, run, picks, compact) for m in reports.chart_modules()] if picks else []
        said = findings(run, summary, info.get("total", summary["configurations"]), picks)
    finally:
        run.con.close()
    return Report(
        title=info.get("title") or "memsim sweep",
        spec_text=spec_path.read_text() if spec_path.exists() else "",
        created=info.get("created", "unknown"),
        generated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        findings=said,
        sections=sections,
    )


# --- findings in words -------------------------------------------------------------------------------------


COMPONENT_WORDS = {"temp": "temporaries", "grads": "gradients", "optimizer": "optimizer states"}


def layout_words(r: dict) -> str:
    recompute = "no" if r["checkpointing"] == "none" else r["checkpointing"]
    return (f"tp {r['tp']}, pp {r['pp']}, ZeRO-{r['zero_stage']}, {recompute} recompute, "
            f"micro-batch {r['micro_batch']}, {r['seq_len']:,} tokens")


def either(names: list[str], shown: int = 3) -> str:
    """'a', 'a or b', 'a, b or c', 'a, b, c or 2 other GPU types'."""
    if len(names) > shown:
        names = names[:shown] + [f"{len(names) - shown} other GPU type{'s' if len(names) - shown > 1 else ''}"]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def findings(run: Runner, s: dict, total: int, picks: dict | None) -> list[str]:
    kept = "" if s["configurations"] >= total else (
        f" (the dataset keeps {s['configurations']:,} of {total:,} swept configurations: only valid or fitting rows were written)")
    if s["configurations"] == 0:
        return [f"No configuration fits: the sweep evaluated {plural(total, 'configuration')} and wrote only fitting ones, "
                "so nothing was kept. Try larger GPUs, more of them, ZeRO-3, recompute or a smaller model."]
    if s["valid"] == 0:
        return [f"No configuration fits: none of the {plural(s['configurations'], 'configuration')} is a valid layout "
                "(see the invalid_reason column: memsim sql \"SELECT invalid_reason, count(*) FROM sweep GROUP BY ALL\")."]
    if s["fit"] == 0:
        cells = run("report_feasibility_map", method=None).sort("least_miss_gib").row(0, named=True)
        return [f"No configuration fits: none of the {plural(s['valid'], 'valid layout')} fits in memory{kept}. The closest is "
                f"{cells['model']} on {cells['n_gpus']} × {cells['gpu']}, {cells['least_miss_gib']:,.1f} GiB over the usable memory."]
    lines = [f"{s['fit']:,} of {s['valid']:,} valid configurations fit ({s['fit_share']:.1%}), across {s['models']} models "
             f"and {s['gpus']} GPU types{kept}; {s['models_that_fit']} models fit on at least one GPU type."]
    if picks["n_methods"] > 1:
        lines.append(f"The sweep covers {picks['n_methods']} training methods; the charts show {picks['method']}, the one with "
                     "the most fitting configurations (memsim report --method chooses another).")
    lines += model_findings(run, picks["method"], s["max_n_gpus"])
    lines.append(bottleneck_finding(run("bottlenecks")))
    lines.append(f"Single-model charts show {picks['model']} on {picks['gpu']} (the median-size model on the median-memory "
                 "GPU type among those that fit the most models; memsim report --model/--gpu chooses others).")
    return [line for line in lines if line]


def model_findings(run: Runner, method: str, max_n_gpus: int) -> list[str]:
    cells = run("report_feasibility_map", method=method)
    fewest, fleets = of_method(run("min_gpus"), method), of_method(run("cheapest_fleet"), method)
    models = cells.group_by("model").agg(pl.col("n_params").max(), pl.col("any_fits").any(), pl.col("least_miss_gib").min())
    lines = []
    for m in models.sort(["n_params", "model"], nulls_last=True).iter_rows(named=True):
        if not m["any_fits"]:
            lines.append(f"{m['model']} fits on none of the swept GPU types at up to {max_n_gpus:,} GPUs; "
                         f"its closest layout is {m['least_miss_gib']:,.1f} GiB over the usable memory.")
            continue
        rows = fewest.filter(pl.col("model") == m["model"]).sort(["min_gpus", "headroom_gib"], descending=[False, True])
        best = rows.row(0, named=True)
        gpus = rows.filter(pl.col("min_gpus") == best["min_gpus"])["gpu"].to_list()
        line = f"{m['model']} needs at least {best['min_gpus']:,} × {either(gpus)} (on {gpus[0]}: {layout_words(best)})"
        cheap = fleets.filter((pl.col("model") == m["model"]) & (pl.col("price_rank") == 1))
        if not cheap.is_empty():
            c = cheap.row(0, named=True)
            line += f"; the cheapest priced fleet is {c['min_gpus']:,} × {c['gpu']} at ${c['fleet_usd_per_hour']:,.2f}/h"
        lines.append(line + ".")
    unpriced = sorted(set(fleets.filter(pl.col("usd_per_gpu_hour").is_null())["gpu"].to_list()))
    if unpriced:
        lines.append(f"No catalog price for {', '.join(unpriced)}: fleets of these are left out of the cost ranking.")
    return lines


def bottleneck_finding(rows: pl.DataFrame) -> str:
    if rows.is_empty():
        return ""
    shares = rows.group_by("bottleneck").agg(pl.col("failing").sum()).with_columns(
        share=pl.col("failing") / pl.col("failing").sum()).sort(["failing", "bottleneck"], descending=[True, False])
    top = [f"{COMPONENT_WORDS.get(r['bottleneck'], r['bottleneck'])} ({r['share']:.0%})" for r in shares.head(3).iter_rows(named=True)]
    return f"Across the sweep, where valid layouts do not fit, the largest component is most often {', then '.join(top)}."


# --- the page ----------------------------------------------------------------------------------------------


def script_json(value) -> str:
    """JSON safe inside a <script> element: no `</script>` or `<!--` can appear."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def render_html(report: Report) -> str:
    import vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=vl_version())
    specs = {s.name: s.chart.to_dict() for s in report.sections if s.chart is not None}
    esc = html.escape
    findings_html = "".join(f"<li>{esc(line)}</li>" for line in report.findings)
    sections_html = "".join(section_html(s) for s in report.sections) or (
        '<p class="empty">No charts: there is no fitting configuration to draw.</p>')
    return PAGE.format(
        title=esc(report.title), created=esc(report.created), generated=esc(report.generated),
        version=esc(engine.__version__), findings=findings_html, spec=esc(report.spec_text or "(no spec text recorded)"),
        sections=sections_html, bundle=bundle, specs=script_json(specs), options=script_json(EMBED_OPTIONS),
        style=STYLE_CSS, handlers=ERROR_HANDLERS, embed=EMBED_SCRIPT,
    )


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


def write_report(sweep_dir, output, fmt: str = "html", method=None, model=None, gpu=None) -> tuple[Report, list[Path]]:
    """Build the report and write the page (and, for png or svg, each chart beside it); returns the paths."""
    if fmt not in FORMATS:
        raise UserError(f"--format takes one of {', '.join(FORMATS)}, got {fmt!r}")
    report = build_report(sweep_dir, method, model, gpu)
    page, output = render_html(report), Path(output)
    paths = [write_atomic(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))]
    if fmt != "html":
        paths += export_charts(report, output, fmt)
    return report, paths


STYLE_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em}.meta,.shows{color:#666;font-size:.9em}
.note,.empty{background:#fff4e5;padding:.6em 1em;border-left:4px solid #f0a030}
pre{background:#f6f6f6;padding:1em;overflow:auto}#js-errors{color:#b00020;background:#fde7ea}"""

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
})).then(function () { document.body.dataset.chartsDone = 'true'; });"""

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
