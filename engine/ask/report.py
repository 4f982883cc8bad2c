"""`memsim report`: one self-contained HTML page with a sweep's capacity-planning story.

The page holds the spec's title, the spec itself (TOML), the dates, a few findings in words and, for each training
method the sweep covers (up to MAX_METHODS), its findings and one chart per module of reports/ (each fed by its
query from queries/). Vega, Vega-Lite and vega-embed are inlined, so the
page opens offline. A `window.onerror` handler writes JavaScript errors into `#js-errors`, and each chart's
section gets `data-rendered="ok"` (or `"error"`) once vega-embed is done, so a headless browser can check it.
"""

import time
import tomllib
from pathlib import Path

import polars as pl

import reports
from engine.ask.findings import findings, method_findings
from engine.ask.page import export_charts, render_html
from engine.ask.sections import Part, Report, Runner, Section, of_method
from engine.atomic import output_path, write_atomic
from engine.dataset.views import connect, refusing_damage, sweep_parts
from engine.errors import UserError

FORMATS = ("html", "png", "svg")
PICK_WORDS = {"method": "method", "model": "model", "gpu": "GPU type", "min_gpus": "GPUs", "layout_gpus": "GPUs"}
MAX_METHODS = 3  # training methods charted one after another; the others through --method


def charted_methods(methods: pl.DataFrame, method: str | None = None) -> list[str]:
    """The training methods the report charts: the one asked for, else every method that fits, up to MAX_METHODS
    (then the most fitting of each kind, full, LoRA and QLoRA, before a second of any kind), most fits first."""
    if method is not None:
        if method not in methods["method"].to_list():
            raise UserError(f"--method {method!r} is not in this sweep (methods: {', '.join(methods['method'])})")
        return [method]
    fitting = methods.filter(pl.col("fit") > 0)["method"].to_list()  # most fits first
    firsts = methods.filter(pl.col("fit") > 0).unique("kind", keep="first", maintain_order=True)["method"].to_list()
    chosen = (firsts + [m for m in fitting if m not in firsts])[:MAX_METHODS]
    return sorted(chosen, key=fitting.index)


def choose_picks(run: Runner, method: str, model=None, gpu=None) -> dict | None:
    """The GPU type and model one method's charts show: given by the user, else report_picks.sql's (None: the
    given model or GPU fits nowhere with this method)."""
    picks = run("report_picks", method=method, model=model, gpu=gpu)
    return None if picks.is_empty() else {"method": method, **picks.row(0, named=True)}


def no_fit_words(method: str | None, model=None, gpu=None) -> str:
    asked = " on ".join(f"{k} {v}" for k, v in (("model", model), ("GPU", gpu)) if v)
    how = f"method {method!r}" if method else "any charted training method"
    return (f"no configuration of {asked or 'this sweep'} fits with {how}; "
            "choose another --model/--gpu (memsim query min_gpus --sweep DIR lists what fits)")


def build_section(module, run: Runner, picks: dict, compact: bool = False, suffix: str = "",
                  name_method: bool = False) -> Section:
    title, caption = reports.heading(module)
    name = reports.short_name(module) + suffix
    if compact and getattr(module, "NEEDS_FULL_ROWS", False):
        note = "This sweep keeps compact rows ([output] compact = true): the memory components are not in it."
        return Section(name, title, caption, "", 0, note=note)
    params = {key: picks[pick] for key, pick in module.PARAMS.items()}
    rows = of_method(run(module.QUERY, **params), picks["method"])
    shows = [f"{PICK_WORDS[pick]} {picks[pick]}" for pick in module.PARAMS.values() if pick != "method"]
    if name_method:
        shows.insert(0, f"method {picks['method']}")
    section = Section(name, title, caption, ", ".join(shows), rows.height)
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


def build_part(run: Runner, method: str, k: int, n_parts: int, n_methods: int, summary: dict, compact: bool,
               model=None, gpu=None) -> Part:
    """One training method's findings and charts (sections named `<chart>_<k>` when several methods are charted)."""
    picks = choose_picks(run, method, model, gpu)
    if picks is None:
        return Part(method, [], [], note=f"Nothing to chart: {no_fit_words(method, model, gpu)}.")
    suffix = f"_{k}" if n_parts > 1 else ""
    sections = [build_section(m, run, picks, compact, suffix, name_method=n_methods > 1) for m in reports.chart_modules()]
    return Part(method, method_findings(run, method, summary["max_n_gpus"], picks), sections)


def build_report(sweep_dir, method=None, model=None, gpu=None, partial: bool = False) -> Report:
    """Run every chart's query over the sweep in `sweep_dir` (a directory or a URI) for each charted training
    method and describe what it found. An incomplete dataset is refused unless `partial`; then the report covers the complete shards and
    its `partial` says so."""
    parts = sweep_parts(sweep_dir, partial)
    run = Runner(connect(parts, read_only=True))
    info = parts.manifest
    spec_text = (parts.place.read_bytes("_spec.toml") or b"").decode(errors="replace")
    try:
        with refusing_damage(parts):
            summary = run("summary").row(0, named=True)
            spec = tomllib.loads(spec_text) if spec_text else {}
            compact = bool(spec.get("output", {}).get("compact", False))
            methods = run("report_methods")
            charted = charted_methods(methods, method) if summary["fit"] else []
            built = [build_part(run, m, k, len(charted), methods.height, summary, compact, model, gpu)
                     for k, m in enumerate(charted, 1)]
            if built and all(p.note for p in built) and (method or model or gpu):
                raise UserError(no_fit_words(method, model, gpu))
            said = findings(run, summary, info.get("total", summary["configurations"]), methods, charted)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{parts.place.shown('_spec.toml')} is damaged ({err}): re-sweep the dataset") from None
    finally:
        run.con.close()
    report = Report(
        title=info.get("title") or "memsim sweep",
        spec_text=spec_text,
        created=info.get("created", "unknown"),
        generated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        findings=said,
        parts=built,
    )
    report.partial = parts.note()  # shown as a banner on the page ('' for a whole dataset)
    return report


def write_report(sweep_dir, output, fmt: str = "html", method=None, model=None, gpu=None,
                 partial: bool = False) -> tuple[Report, list[Path]]:
    """Build the report and write the page (and, for png or svg, each chart beside it); returns the paths."""
    if fmt not in FORMATS:
        raise UserError(f"--format takes one of {', '.join(FORMATS)}, got {fmt!r}")
    output_path(output)  # a path that cannot be written is refused before any work
    report = build_report(sweep_dir, method, model, gpu, partial)
    page, output = render_html(report), Path(output)
    paths = [write_atomic(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))]
    if fmt != "html":
        paths += export_charts(report, output, fmt)
    return report, paths
