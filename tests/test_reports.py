"""Reports: every chart module in reports/ is found, runs on the tiny sweep (conftest.py) and serialises; the page
is self-contained and draws every chart in headless Chromium without a JavaScript error, none wider than a 900 px
window; a sweep where nothing fits yields a page that says so. A second small sweep over three training methods
(full, LoRA, QLoRA) and every recompute setting checks that each method is charted, that `selective` is drawn where it
equals `none`, and that a micro-batch capped by the sweep says so. Expected answers are worked out from the Parquet
rows with polars, not from the SQL.

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
from engine.ask.findings import methods_finding
from engine.ask.queries import read_query, run_query
from engine.ask.report import MAX_METHODS, build_report, charted_methods, write_report
from engine.catalogs import catalog
from engine.dataset.views import connect
from engine.errors import UserError
from reports import max_micro_batch, zero_tp_recompute
from tests.dataset_helpers import swept

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
METHODS_SPEC = """\
title = "Full, LoRA and QLoRA fine-tuning of a 1B model"

[axes]
model = ["llama-3.2-1b"]
gpu = ["a10", "a100-sxm-80gb"]
n_gpus = [1, 2, 4]
tp = [1, 2]
pp = [1, 2]
zero_stage = [0, 3]
micro_batch = [1, 2]
seq_len = [1024, 2048]
checkpointing = ["none", "selective", "full"]
lora_rank = [0, 16]
base_quant = ["none", "nf4"]
"""
PRICES = "Prices: CoreWeave on-demand, read 2026-09-20"


@pytest.fixture(scope="module")
def methods_dir(tmp_path_factory) -> Path:
    """Three training methods (nf4 without LoRA is an invalid row), flash attention: selective recompute = none."""
    return swept(tmp_path_factory.mktemp("methods"), METHODS_SPEC)


@pytest.fixture(scope="module")
def methods_report(methods_dir):
    return build_report(methods_dir)


@pytest.fixture(scope="module")
def methods_frame(methods_dir) -> pl.DataFrame:
    frame = pl.read_parquet(methods_dir / "part-*.parquet").with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
    lora = pl.when(pl.col("lora_rank") > 0).then(pl.lit(" lora-r") + pl.col("lora_rank").cast(pl.String)).otherwise(pl.lit(""))
    nf4 = pl.when(pl.col("base_quant") != "none").then(pl.lit(" ") + pl.col("base_quant")).otherwise(pl.lit(""))
    return frame.with_columns(method=pl.lit("amp_bf16 adamw pytorch") + lora + nf4)


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
    return swept(tmp_path_factory.mktemp("empty"), NOTHING_FITS_SPEC)


def section(report, module, part: int = 0):
    return next(s for s in report.parts[part].sections if s.name.startswith(reports.short_name(module)))


def chart_rows(chart) -> list[dict]:
    """The rows a chart was given (altair keeps them once, in `datasets`)."""
    spec = chart.to_dict()
    return next(iter(spec["datasets"].values()))


def dump_dom(page: Path, profile: Path, width: int = 900) -> str:
    """The page's DOM once its charts are drawn, in a window `width` px wide."""
    return chromium(f"--window-size={width},1200", "--dump-dom", page.as_uri(), profile=profile)


def assert_drawn(dom: str, names: set[str]) -> dict[str, tuple[str, str]]:
    """No JavaScript error, and each named chart drawn with marks and not wider than the window."""
    errors = re.search(r'<pre id="js-errors"[^>]*>(.*?)</pre>', dom, re.DOTALL)
    assert errors is not None and errors[1] == "", errors and errors[1]
    assert 'data-charts-done="true"' in dom
    drawn = chart_sections(dom)
    assert set(drawn) == names
    for name, (state, inner) in drawn.items():
        assert state == "ok", name
        assert 'role="graphics-document"' in inner, name  # vega's <svg class="marks">
        assert inner.count('role="graphics-symbol"') > 0, name  # marks were drawn, not an empty frame
    wide = re.findall(r'id="chart-(\w+)"[^>]*data-fits-window="false"', dom)
    assert wide == [], f"wider than the window: {wide}"
    shown, window = re.search(r'data-page-width="(\d+)/(\d+)"', dom).groups()
    assert int(shown) <= int(window)  # no horizontal scrolling
    return drawn


def marks(inner: str, role: str) -> list[dict]:
    """The SVG paths of one kind of mark ('point', 'line mark', ...) as {aria-label, transform}."""
    def attr(tag, name):
        found = re.search(rf'{name}="([^"]*)"', tag)
        return found[1] if found else None
    tags = [t for t in re.findall(r"<path [^>]*>", inner) if attr(t, "aria-roledescription") == role]
    return [{"label": attr(t, "aria-label"), "at": attr(t, "transform")} for t in tags]


def chromium(*args: str, profile: Path, timeout: int = 120) -> str:
    """Run headless Chromium offline (no network features, throwaway profile) and return its stdout."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: the report test needs Chromium (CI installs it)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=10000"]
    done = subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def chart_sections(dom: str) -> dict[str, tuple[str, str]]:
    """chart name -> (data-rendered, inner HTML) of each chart section in a dumped DOM."""
    found = re.finditer(r'<section class="chart" id="chart-(\w+)"[^>]*?data-rendered="(\w+)"[^>]*>(.*?)</section>', dom, re.DOTALL)
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


def test_each_training_method_is_charted(tiny_report, sweep_frame):
    # the tiny sweep has two methods (lora_rank 0 and 16): one part each, its charts only its method's rows
    fits = sweep_frame.filter(pl.col("valid") & pl.col("fits")).group_by("lora_rank").len().sort("len", descending=True)
    want = ["amp_bf16 adamw pytorch" + (f" lora-r{r}" if r else "") for r in fits["lora_rank"]]
    assert [p.method for p in tiny_report.parts] == want  # most fits first
    for k, part in enumerate(tiny_report.parts, 1):
        assert {s.name for s in part.sections} == {f"{reports.short_name(m)}_{k}" for m in MODULES}
        frontier = section(tiny_report, reports.frontier, k - 1).chart
        assert {row["method"] for row in chart_rows(frontier)} == {part.method}


def test_full_lora_and_qlora_are_each_charted(methods_report, methods_frame):
    fitting = methods_frame.filter(pl.col("valid") & pl.col("fits"))
    assert {p.method for p in methods_report.parts} == set(fitting["method"].unique())
    assert len(methods_report.parts) == 3 and all(p.sections and not p.note for p in methods_report.parts)
    assert "the charts are drawn for" in " ".join(methods_report.findings)


def test_methods_past_the_limit_are_named_not_dropped():
    methods = pl.DataFrame({"method": [f"m{i}" for i in range(6)], "kind": ["LoRA", "LoRA", "full", "LoRA", "QLoRA", "full"],
                            "fit": [50, 40, 30, 20, 10, 0]})
    chosen = charted_methods(methods)
    assert len(chosen) == MAX_METHODS and chosen == ["m0", "m2", "m4"]  # one of each kind, most fits first
    line = methods_finding(methods, chosen)
    assert "not charted: m1 and m3" in line and "nothing fits with m5" in line


# --- what ZeRO, TP and recompute buy; the largest micro-batch ----------------------------------------------------


def test_zero_tp_recompute_shows_every_pipeline_split_at_one_stated_workload(methods_report, methods_frame):
    part = methods_report.parts[0]
    chart = section(methods_report, zero_tp_recompute).chart
    rows = pl.DataFrame(chart_rows(chart))
    model, gpu, n_gpus = rows.select("model", "gpu", "n_gpus").unique().row(0)
    here = methods_frame.filter(pl.col("valid") & (pl.col("method") == part.method) & (pl.col("model") == model)
                                & (pl.col("gpu") == gpu) & (pl.col("n_gpus") == n_gpus))
    fit = here.filter(pl.col("fits")).with_columns(tokens=pl.col("micro_batch") * pl.col("seq_len"))
    top = fit.sort(["tokens", "seq_len"]).row(-1, named=True)  # the largest workload that fits
    assert rows.select("micro_batch", "seq_len").unique().rows() == [(top["micro_batch"], top["seq_len"])]
    at = here.filter((pl.col("micro_batch") == top["micro_batch"]) & (pl.col("seq_len") == top["seq_len"]))
    want = at.group_by("pp", "zero_stage", "tp", "checkpointing").agg(pl.col("device_peak_bytes").min() / 2**30)
    got = {tuple(r[:4]): r[4] for r in rows.select("pp", "zero_stage", "tp", "checkpointing", "min_device_peak_gib").rows()}
    assert got == pytest.approx({tuple(r[:4]): r[4] for r in want.rows()})
    assert set(rows["pp"]) == {1, 2}  # both pipeline splits, not the better one
    spec = chart.to_dict()
    assert spec["facet"]["row"]["field"] == "pp" and spec["facet"]["column"]["field"] == "zero_stage"
    assert f"micro-batch {top['micro_batch']}" in spec["title"]["text"]


def test_zero_tp_recompute_axis_is_linear_for_a_narrow_range_and_tight_when_log():
    narrow = pl.DataFrame({"min_device_peak_gib": [39.0, 72.5, 110.0], "usable_gib": [71.3] * 3})
    scale, title = zero_tp_recompute.y_scale(narrow)
    assert scale.to_dict() == {"zero": True, "nice": True} and "log" not in title
    wide = pl.DataFrame({"min_device_peak_gib": [5.0, 600.0], "usable_gib": [71.3] * 2})
    scale, title = zero_tp_recompute.y_scale(wide)
    lo, hi = scale.to_dict()["domain"]
    assert scale.to_dict()["type"] == "log" and "log scale" in title and 4 < lo < 5 and 600 < hi < 700


def test_zero_tp_recompute_colours_every_setting_the_sweep_holds(methods_report):
    spec = section(methods_report, zero_tp_recompute).chart.to_dict()
    colours = [d for c, d in encodings(spec) if c == "color" and isinstance(d, dict) and d.get("field") == "checkpointing"]
    assert colours and all(d["scale"]["domain"] == ["none", "selective", "full"] for d in colours)


def test_largest_micro_batch_marks_cells_capped_by_the_sweep(methods_report, methods_frame):
    chart = section(methods_report, max_micro_batch).chart
    rows = pl.DataFrame(chart_rows(chart)).filter(pl.col("max_micro_batch").is_not_null())
    top = methods_frame["micro_batch"].max()
    assert set(rows["top_micro_batch"]) == {top}
    want = [f"{n}+" if n == top else str(n) for n in rows["max_micro_batch"]]
    assert rows["label"].to_list() == want
    assert rows["capped"].any() and f"{top}+: the sweep's largest micro-batch ({top}) fits" in chart.to_dict()["title"]["subtitle"]


def titles(spec) -> list[str]:
    """Every title, subtitle and caption-like string of a Vega-Lite spec (axis, legend, tooltip and chart titles)."""
    if isinstance(spec, dict):
        found = [v for k, v in spec.items() if k in ("title", "subtitle", "text") and isinstance(v, str)]
        return found + [t for k, v in spec.items() if k != "datasets" for t in titles(v)]
    if isinstance(spec, list):
        return [t for item in spec for t in titles(item)]
    return []


def test_headroom_names_only_the_share_kept_free(tiny_report):
    # CONFIG.md: headroom is the fraction of memory kept free; memory left at the peak is "to spare" (as explain says)
    words = [t for s in tiny_report.sections for t in titles(s.chart.to_dict())] + [s.caption for s in tiny_report.sections]
    uses = [t for t in words if "headroom" in t]
    assert uses and all(re.search(r"headroom (is )?kept free|less headroom", t) for t in uses), uses


# --- prices ------------------------------------------------------------------------------------------------------


def test_every_fleet_answer_states_its_price_source_and_date(sweep_dir, tiny_report):
    con = connect(sweep_dir)
    try:
        for name in ("cheapest_fleet", "time_to_train"):
            rows = run_query(con, name, {}).filter(pl.col("usd_per_mtok").is_not_null())
            assert rows.height
            for gpu, source, date in rows.select("gpu", "price_source", "price_date").unique().iter_rows():
                entry = catalog.resolve_gpu(gpu)
                assert (source, date) == (entry["price_source"], entry["price_date"]), (name, gpu)
    finally:
        con.close()
    for module in (reports.fleet, reports.cost_frontier):
        assert PRICES in json.dumps(section(tiny_report, module).chart.to_dict()["title"]), module
    assert any(line.startswith(PRICES) for line in tiny_report.parts[0].findings)


# --- the findings -------------------------------------------------------------------------------------------


def test_findings_state_the_fit_share(tiny_report, sweep_frame):
    valid = sweep_frame.filter(pl.col("valid"))
    fit = valid.filter(pl.col("fits")).height
    assert tiny_report.findings[0].startswith(f"{fit:,} of {valid.height:,} valid configurations fit")


def test_findings_name_each_models_fewest_gpus_per_method(tiny_report, sweep_frame):
    fitting = sweep_frame.filter(pl.col("valid") & pl.col("fits"))
    for part in tiny_report.parts:
        lora = int(part.method.split("lora-r")[1]) if "lora-r" in part.method else 0
        fewest = fitting.filter(pl.col("lora_rank") == lora).group_by("model").agg(pl.col("n_gpus").min())
        text = "\n".join(part.findings)
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


def test_report_draws_every_chart_in_headless_chromium_within_900_px(tiny_page, tmp_path):
    dom = dump_dom(tiny_page, tmp_path / "profile")
    assert_drawn(dom, {f"{reports.short_name(m)}_{k}" for m in MODULES for k in (1, 2)})
    if os.environ.get("MEMSIM_SCREENSHOT"):
        shot = Path(os.environ["MEMSIM_SCREENSHOT"]).resolve()
        chromium("--hide-scrollbars", "--window-size=900,9000", f"--screenshot={shot}", tiny_page.as_uri(),
                 profile=tmp_path / "profile-shot")
        assert shot.stat().st_size > 0


def test_methods_page_draws_selective_beside_none_and_capped_micro_batches(methods_dir, methods_report, tmp_path):
    page = tmp_path / "methods.html"
    write_report(methods_dir, page)
    drawn = assert_drawn(dump_dom(page, tmp_path / "profile"), {s.name for s in methods_report.sections})
    for k, part in enumerate(methods_report.parts, 1):
        rows = pl.DataFrame(chart_rows(section(methods_report, zero_tp_recompute, k - 1).chart))
        points = marks(drawn[f"zero_tp_recompute_{k}"][1], "point")
        assert len(points) == rows.height  # every row a point: none hidden behind another
        selective = [p for p in points if "recompute: selective;" in p["label"]]
        assert len(selective) == rows.filter(pl.col("checkpointing") == "selective").height > 0
        panels = [(re.search(r"pipeline stages: (\d+); ZeRO stage: (\d+)", p["label"]).groups(), p["at"]) for p in points]
        assert len(set(panels)) == len(panels)  # no two points of a panel at one spot
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", drawn[f"max_micro_batch_{k}"][1])
        assert "2+" in texts, part.method


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
    code, _, err = memsim("report", "--sweep", sweep_dir, "-o", tmp_path / "r.html", "--format", fmt)
    assert code == 0, err
    for module in MODULES:
        for k in (1, 2):  # the tiny sweep's two training methods
            path = tmp_path / f"r-{reports.short_name(module)}_{k}.{fmt}"
            assert path.read_bytes().startswith(magic), path


def test_report_command_refuses_a_directory_that_is_not_a_sweep(memsim, tmp_path):
    code, _, err = memsim("report", "--sweep", tmp_path, "-o", tmp_path / "r.html")
    assert code == 2 and "not a memsim sweep directory" in err


# --- cost and time (issue #22 item 5) ---------------------------------------------------------------------------


def test_cost_chart_draws_filled_layouts_and_names_what_has_no_point(tiny_report):
    chart = section(tiny_report, reports.cost_frontier).chart
    drawn = chart_rows(chart)
    assert drawn and all(r["drawn"] for r in drawn)
    assert all(r["layout"].split(" pp ")[1].startswith("1 ") or "grad_accum 1" not in r["layout"] for r in drawn)
    subtitle = " ".join(chart.to_dict()["title"]["subtitle"])
    assert "the fewest dollars to train 1T tokens (not the lowest $/h)" in subtitle
    assert "No dot: a10 at" in subtitle and "no catalog price" in subtitle  # the unpriced GPU type, said


def test_findings_name_the_cheapest_fleet_by_the_cost_of_the_tokens(tiny_report):
    text = "\n".join(tiny_report.parts[0].findings)
    assert "the cheapest to train 1T tokens is" in text and "cheapest priced fleet" not in text
    assert "Fleets that fit but have no cost/time point: a10 at" in text
