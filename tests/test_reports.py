"""Reports: every chart module in reports/ is found, runs on the tiny sweep (conftest.py) and serialises; the page
is self-contained and draws every chart in headless Chromium without a JavaScript error; a sweep where nothing fits
yields a page that says so. Expected findings are worked out from the Parquet rows with polars, not from the SQL.

Chromium is required, not optional: CI installs it (`apt-get install chromium`). Set MEMSIM_CHROMIUM to use another
binary, and MEMSIM_SCREENSHOT=path.png to keep a screenshot of the page.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

import reports
from engine import QUERIES_DIR
from engine.ask.queries import read_query
from engine.ask.report import build_report, write_report
from engine.dataset.sweep import run_sweep
from engine.errors import UserError

pytestmark = pytest.mark.slow  # beyond the fast core tier (pytest -m 'not slow')

MODULES = reports.chart_modules()
CHROMIUM = os.environ.get("MEMSIM_CHROMIUM", "/usr/bin/chromium")
UNITS = ("GiB", "GPUs", "$/h", "parameters", "tokens", "samples", "count")
NOTHING_FITS_SPEC = """\
title = "Nothing fits: a 70B model on one 24 GB card"

[axes]
model = ["llama-3.1-70b"]
gpu = ["rtx-4090"]
n_gpus = [1]

[output]
feasible_only = true
"""


@pytest.fixture(scope="module")
def tiny_report(sweep_dir):
    return build_report(sweep_dir)


@pytest.fixture(scope="module")
def tiny_page(sweep_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(sweep_dir, path)
    return path


@pytest.fixture(scope="module")
def nothing_fits_dir(tmp_path_factory) -> Path:
    spec = tmp_path_factory.mktemp("empty") / "nothing.toml"
    spec.write_text(NOTHING_FITS_SPEC)
    out = spec.parent / "sweep"
    run_sweep(spec, out, progress=False, say=lambda *_: None)
    return out


def section(report, module):
    return next(s for s in report.sections if s.name == reports.short_name(module))


def chromium(*args: str, profile: Path, timeout: int = 120) -> str:
    """Run headless Chromium offline (no network features, throwaway profile) and return its stdout."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: the report test needs Chromium (CI installs it)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=10000"]
    done = subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def chart_sections(dom: str) -> dict[str, tuple[str, str]]:
    """chart name -> (data-rendered, inner HTML) of each chart section in a dumped DOM."""
    found = re.finditer(r'<section class="chart" id="chart-(\w+)"[^>]*?data-rendered="(\w+)"[^>]*>(.*?)</section>', dom, re.S)
    return {m[1]: (m[2], m[3]) for m in found}


def encodings(spec):
    """Every encoding channel definition in a Vega-Lite spec, with its channel name."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "encoding":
                for channel, definition in value.items():
                    for d in definition if isinstance(definition, list) else [definition]:
                        yield channel, d
            else:
                yield from encodings(value)
    elif isinstance(spec, list):
        for item in spec:
            yield from encodings(item)


# --- the modules ------------------------------------------------------------------------------------------


def test_every_chart_module_in_the_package_is_found():
    files = {p.stem for p in Path(reports.__file__).parent.glob("*.py") if not p.stem.startswith("_")}
    assert {reports.short_name(m) for m in MODULES} == files
    assert len(files) >= 6


@pytest.mark.parametrize("module", MODULES, ids=reports.short_name)
def test_chart_module_has_the_gallery_shape(module):
    title, sentence = reports.heading(module)
    assert title and sentence.endswith(".")
    assert (QUERIES_DIR / f"{module.QUERY}.sql").is_file()
    declared = {p.name for p in read_query(module.QUERY).params}
    assert set(module.PARAMS) <= declared
    assert set(module.PARAMS.values()) <= set(reports.PICKS)


@pytest.mark.parametrize("module", MODULES, ids=reports.short_name)
def test_chart_runs_on_the_tiny_sweep_under_the_row_limit(module, tiny_report):
    s = section(tiny_report, module)
    assert s.chart is not None, s.note
    assert 0 < s.rows < reports.MAX_ROWS


@pytest.mark.parametrize("module", MODULES, ids=reports.short_name)
def test_chart_spec_round_trips_through_json(module, tiny_report):
    spec = section(tiny_report, module).chart.to_dict()
    assert json.loads(json.dumps(spec)) == spec


@pytest.mark.parametrize("module", MODULES, ids=reports.short_name)
def test_every_field_encoding_is_typed(module, tiny_report):
    untyped = [(c, d["field"]) for c, d in encodings(section(tiny_report, module).chart.to_dict())
               if isinstance(d, dict) and "field" in d and "type" not in d]
    assert untyped == []


@pytest.mark.parametrize("module", MODULES, ids=reports.short_name)
def test_numeric_axes_name_their_unit(module, tiny_report):
    # quantitative and ordinal axes (GPU counts, GiB, $/h, TP degree); nominal ones name models or GPU types
    titles = [d.get("title") for c, d in encodings(section(tiny_report, module).chart.to_dict())
              if c in ("x", "y") and isinstance(d, dict) and d.get("type") in ("quantitative", "ordinal")]
    assert titles and all(t and any(u in t for u in UNITS) for t in titles), titles


def test_charts_show_one_training_method(tiny_report, sweep_frame):
    # the tiny sweep has two methods (lora_rank 0 and 16); the report shows the one with more fitting rows
    fits = sweep_frame.filter(pl.col("valid") & pl.col("fits")).group_by("lora_rank").len().sort("len")
    lora = fits["lora_rank"][-1]
    frontier = next(s for s in tiny_report.sections if s.name == "frontier").chart.to_dict()
    methods = {row["method"] for row in frontier["datasets"][frontier["data"]["name"]]}
    assert methods == {"amp_bf16 adamw pytorch" + (f" lora-r{lora}" if lora else "")}


# --- the findings -------------------------------------------------------------------------------------------


def test_findings_state_the_fit_share(tiny_report, sweep_frame):
    valid = sweep_frame.filter(pl.col("valid"))
    fit = valid.filter(pl.col("fits")).height
    assert tiny_report.findings[0].startswith(f"{fit:,} of {valid.height:,} valid configurations fit")


def test_findings_name_each_models_fewest_gpus(tiny_report, sweep_frame):
    fitting = sweep_frame.filter(pl.col("valid") & pl.col("fits"))
    lora = fitting.group_by("lora_rank").len().sort("len")["lora_rank"][-1]
    fewest = fitting.filter(pl.col("lora_rank") == lora).group_by("model").agg(pl.col("n_gpus").min())
    text = "\n".join(tiny_report.findings)
    for model, n in fewest.iter_rows():
        assert f"{model} needs at least {n:,} × " in text


def test_unknown_method_is_refused(sweep_dir):
    with pytest.raises(UserError, match="not in this sweep"):
        build_report(sweep_dir, method="fp32 sgd pytorch")


# --- the page -------------------------------------------------------------------------------------------------


def test_page_is_self_contained(tiny_page):
    page = tiny_page.read_text()
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=[\"']?https?:", page)
    assert "window.vegaEmbed" in page  # the bundle is inlined


def test_page_holds_title_spec_and_findings(tiny_page):
    page = tiny_page.read_text()
    assert "<title>memsim test sweep: 3 models x 3 GPUs</title>" in page
    assert 'model = [&quot;llama-3.2-1b&quot;' in page and "<details>" in page
    assert "needs at least" in page


def test_report_draws_every_chart_in_headless_chromium(tiny_page, tmp_path):
    dom = chromium("--dump-dom", tiny_page.as_uri(), profile=tmp_path / "profile")
    errors = re.search(r'<pre id="js-errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors is not None and errors[1] == "", errors and errors[1]
    assert 'data-charts-done="true"' in dom
    drawn = chart_sections(dom)
    assert set(drawn) == {reports.short_name(m) for m in MODULES}
    for name, (state, inner) in drawn.items():
        assert state == "ok", name
        assert 'role="graphics-document"' in inner, name  # vega's <svg class="marks">
        assert inner.count('role="graphics-symbol"') > 0, name  # marks were drawn, not an empty frame
    if os.environ.get("MEMSIM_SCREENSHOT"):
        shot = Path(os.environ["MEMSIM_SCREENSHOT"]).resolve()
        chromium("--hide-scrollbars", "--window-size=1300,7000", f"--screenshot={shot}", tiny_page.as_uri(),
                 profile=tmp_path / "profile-shot")
        assert shot.stat().st_size > 0


def test_sweep_where_nothing_fits_says_so(nothing_fits_dir, tmp_path):
    page = tmp_path / "nothing.html"
    report, _ = write_report(nothing_fits_dir, page)
    assert report.sections == []
    text = page.read_text()
    assert "No configuration fits" in text
    assert 'class="vis"' not in text and "var MEMSIM_SPECS = {};" in text


def test_page_where_nothing_fits_opens_without_error(nothing_fits_dir, tmp_path):
    page = tmp_path / "nothing.html"
    write_report(nothing_fits_dir, page)
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile")
    assert re.search(r'<pre id="js-errors"[^>]*></pre>', dom)
    assert 'data-charts-done="true"' in dom and "No configuration fits" in dom


# --- the command ------------------------------------------------------------------------------------------------


def test_report_command_says_where_the_page_is(memsim, sweep_dir, tmp_path):
    page = tmp_path / "out" / "report.html"
    code, out, err = memsim("report", "--sweep", sweep_dir, "-o", page)
    assert code == 0, err
    assert str(page.resolve()) in out and page.is_file()


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG"), ("svg", b"<svg")])
def test_report_exports_each_chart_beside_the_page(memsim, sweep_dir, tmp_path, fmt, magic):
    code, out, err = memsim("report", "--sweep", sweep_dir, "-o", tmp_path / "r.html", "--format", fmt)
    assert code == 0, err
    for module in MODULES:
        path = tmp_path / f"r-{reports.short_name(module)}.{fmt}"
        assert path.read_bytes().startswith(magic), path


def test_report_command_refuses_a_directory_that_is_not_a_sweep(memsim, tmp_path):
    code, out, err = memsim("report", "--sweep", tmp_path, "-o", tmp_path / "r.html")
    assert code == 2 and "not a memsim sweep directory" in err
