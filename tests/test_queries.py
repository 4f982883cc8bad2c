"""The query library: every queries/*.sql against the tiny sweep (conftest.py), each answer worked out here by
brute force over the Parquet rows with polars, never by running the same SQL; then the CLI around it."""

import re

import polars as pl
import pytest

from engine import QUERIES_DIR
from engine.ask.queries import Param, bind, convert, list_queries, parse_query, read_query, run_query
from engine.catalogs import catalog
from engine.errors import UserError

GIB = 2**30
BASE_METHOD = "amp_bf16 adamw pytorch"  # CONFIG.md defaults: of the method axes the tiny sweep varies only lora_rank
REQUIRED = {"bottlenecks", "breakdown", "cheapest_fleet", "compare_gpus", "feasibility_map", "fits", "frontier",
            "max_micro_batch", "max_seq_len", "min_gpus", "summary", "zero_tp_recompute"}
SAMPLE_PARAMS = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb"}
LAYOUT = ["n_gpus", "tp", "pp", "zero_stage", "checkpointing"]


def fitting(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("valid") & pl.col("fits"))


def with_method(frame: pl.DataFrame) -> pl.DataFrame:
    lora = pl.when(pl.col("lora_rank") > 0).then(pl.lit(" lora-r") + pl.col("lora_rank").cast(pl.String))
    return frame.with_columns(method=pl.lit(BASE_METHOD) + lora.otherwise(pl.lit("")))


def as_map(frame: pl.DataFrame, keys: list[str], value: str) -> dict:
    return {tuple(r[:-1]): r[-1] for r in frame.select(*keys, value).iter_rows()}


def headroom(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(spare_bytes=pl.col("usable_bytes") - pl.col("device_peak_bytes"))


def run(con, name, **params) -> pl.DataFrame:
    return run_query(con, name, params)


# --- fits -------------------------------------------------------------------------------------------------


def test_fits_returns_only_fitting_rows_of_the_model(sweep_con, sweep_frame):
    got = run(sweep_con, "fits", model="llama-3.1-8b", limit=100_000)
    want = fitting(sweep_frame).filter(pl.col("model") == "llama-3.1-8b")
    assert sorted(got["index"]) == sorted(want["index"])


def test_fits_orders_by_fewest_gpus_then_most_headroom(sweep_con, sweep_frame):
    got = run(sweep_con, "fits", model="qwen2.5-14b", limit=15)
    want = headroom(fitting(sweep_frame).filter(pl.col("model") == "qwen2.5-14b"))
    want = want.sort(["n_gpus", "spare_bytes", "index"], descending=[False, True, False]).head(15)
    assert got["index"].to_list() == want["index"].to_list()


def test_fits_limit_defaults_to_20(sweep_con):
    assert run(sweep_con, "fits", model="llama-3.2-1b").height == 20


def test_fits_gpu_filter_accepts_a_catalog_alias(sweep_con):
    got = run(sweep_con, "fits", model="llama-3.2-1b", gpu="h100", limit=1000)
    assert set(got["gpu"]) == {"h100-sxm-80gb"}


# --- max_micro_batch, max_seq_len, min_gpus: the extreme that fits, per group -----------------------------

# query -> (the column it answers the extreme of, "max" or "min", the groups it answers it per)
EXTREMES = {
    "max_micro_batch": ("micro_batch", "max", ["model", "method", "gpu", *LAYOUT, "seq_len"]),
    "max_seq_len": ("seq_len", "max", ["model", "method", "gpu", *LAYOUT, "micro_batch"]),
    "min_gpus": ("n_gpus", "min", ["model", "method", "gpu"]),
}


def extreme(column: str, which: str) -> pl.Expr:
    return getattr(pl.col(column), which)()


@pytest.mark.parametrize("query", EXTREMES)
def test_a_max_or_min_query_is_the_extreme_that_fits_per_group(sweep_con, sweep_frame, query):
    # the largest fitting micro-batch per layout and sequence, the longest sequence per layout and micro-batch,
    # the fewest GPUs per model and GPU type
    column, which, keys = EXTREMES[query]
    want = with_method(fitting(sweep_frame)).group_by(keys).agg(extreme(column, which))
    got = run(sweep_con, query)
    assert as_map(got, keys, query) == as_map(want, keys, column)


@pytest.mark.parametrize("query", EXTREMES)
def test_a_max_or_min_query_has_the_lowest_peak_at_that_extreme(sweep_con, sweep_frame, query):
    column, which, keys = EXTREMES[query]
    rows = with_method(fitting(sweep_frame))
    there = rows.filter(pl.col(column) == extreme(column, which).over(keys))
    want = there.group_by(keys).agg((pl.col("device_peak_bytes").min() / GIB).alias("gib"))
    got = run(sweep_con, query)
    assert as_map(got, keys, "device_peak_gib") == pytest.approx(as_map(want, keys, "gib"))


def test_max_micro_batch_seq_len_param_keeps_that_length_only(sweep_con):
    got = run(sweep_con, "max_micro_batch", seq_len="4096")
    assert set(got["seq_len"]) == {4096}


def test_min_gpus_leaves_out_pairs_that_never_fit(sweep_con):
    # qwen2.5-14b, full training, needs more than 8 x 24 GB: no row for it on the A10
    got = run(sweep_con, "min_gpus", seq_len=4096)
    pairs = set(zip(got["model"], got["method"], got["gpu"]))
    assert ("qwen2.5-14b", BASE_METHOD, "a10") not in pairs


# --- frontier ---------------------------------------------------------------------------------------------


def test_frontier_is_the_largest_fitting_model_per_gpu_and_count(sweep_con, sweep_frame):
    n_params = {k: v["n_params"] for k, v in catalog.load_models().items()}
    keys = ["gpu", "n_gpus", "method"]
    rows = with_method(fitting(sweep_frame)).with_columns(n_params=pl.col("model").replace_strict(n_params))
    want = rows.sort("n_params").group_by(keys).agg(pl.col("model").last())
    got = run(sweep_con, "frontier")
    assert as_map(got, keys, "model") == as_map(want, keys, "model")


# --- cheapest_fleet, compare_gpus -------------------------------------------------------------------------


def test_cheapest_fleet_ranks_gpus_by_fleet_price(sweep_con, sweep_frame):
    price = {k: v.get("usd_per_hour") for k, v in catalog.load_gpus().items()}
    fleets = with_method(fitting(sweep_frame)).filter(pl.col("model") == "llama-3.1-8b")
    fleets = fleets.group_by("method", "gpu").agg(pl.col("n_gpus").min())
    fleets = fleets.filter(pl.col("gpu").replace_strict(price, default=None).is_not_null())
    for method, group in fleets.group_by("method"):
        by_price = sorted(group.iter_rows(named=True), key=lambda r: r["n_gpus"] * price[r["gpu"]])
        got = run(sweep_con, "cheapest_fleet", model="llama-3.1-8b").filter(pl.col("method") == method[0])
        ranked = got.filter(pl.col("price_rank").is_not_null())
        assert ranked["gpu"].to_list() == [r["gpu"] for r in by_price]


def test_cheapest_fleet_lists_unpriced_gpus_last_without_rank(sweep_con):
    assert catalog.load_gpus()["a10"].get("usd_per_hour") is None  # the premise
    got = run(sweep_con, "cheapest_fleet", model="llama-3.2-1b").filter(pl.col("method") == BASE_METHOD)
    assert got["gpu"][-1] == "a10" and got["price_rank"][-1] is None and got["fleet_usd_per_hour"][-1] is None


def test_compare_gpus_max_micro_batch_is_taken_at_the_fewest_gpus(sweep_con, sweep_frame):
    rows = with_method(fitting(sweep_frame)).filter(pl.col("model") == "qwen2.5-14b")
    fewest = rows.filter(pl.col("n_gpus") == pl.col("n_gpus").min().over("method", "gpu"))
    want = fewest.group_by("method", "gpu").agg(pl.col("n_gpus").first(), pl.col("micro_batch").max())
    got = run(sweep_con, "compare_gpus", model="qwen2.5-14b")
    assert as_map(got, ["method", "gpu", "min_gpus"], "max_micro_batch") == as_map(want, ["method", "gpu", "n_gpus"], "micro_batch")


def test_compare_gpus_fleet_price_is_count_times_gpu_price(sweep_con):
    got = run(sweep_con, "compare_gpus", model="llama-3.2-1b").filter(pl.col("gpu") == "a100-sxm-80gb")
    price = catalog.load_gpus()["a100-sxm-80gb"]["usd_per_hour"]
    assert got["fleet_usd_per_hour"].to_list() == pytest.approx([n * price for n in got["min_gpus"]])
    entry = catalog.load_gpus()["a100-sxm-80gb"]  # every price answered with where and when it was read
    assert set(got["price_source"]) == {entry["price_source"]} and set(got["price_date"].cast(str)) == {str(entry["price_date"])}


# --- bottlenecks --------------------------------------------------------------------------------------------


def failing_with_miss(frame: pl.DataFrame) -> pl.DataFrame:
    usable = pl.col("capacity_bytes") * (1 - 0.10)  # the default headroom: the tiny sweep does not vary it
    return frame.filter(pl.col("valid") & ~pl.col("fits")).with_columns(miss=(pl.col("device_peak_bytes") - usable) / GIB)


def test_bottlenecks_count_failing_configurations_per_component(sweep_con, sweep_frame):
    want = failing_with_miss(sweep_frame).group_by("model", "bottleneck").len()
    got = run(sweep_con, "bottlenecks")
    assert as_map(got, ["model", "bottleneck"], "failing") == as_map(want, ["model", "bottleneck"], "len")


def test_bottlenecks_median_miss_is_peak_over_usable_memory(sweep_con, sweep_frame):
    want = failing_with_miss(sweep_frame).group_by("model", "bottleneck").agg(pl.col("miss").median())
    got = run(sweep_con, "bottlenecks")
    assert as_map(got, ["model", "bottleneck"], "median_miss_gib") == pytest.approx(as_map(want, ["model", "bottleneck"], "miss"))


def test_bottlenecks_max_miss_is_the_worst_miss(sweep_con, sweep_frame):
    want = failing_with_miss(sweep_frame).group_by("model", "bottleneck").agg(pl.col("miss").max())
    got = run(sweep_con, "bottlenecks")
    assert as_map(got, ["model", "bottleneck"], "max_miss_gib") == pytest.approx(as_map(want, ["model", "bottleneck"], "miss"))


def test_bottleneck_shares_sum_to_one_per_model(sweep_con):
    got = run(sweep_con, "bottlenecks").group_by("model").agg(pl.col("share").sum())
    assert got["share"].to_list() == pytest.approx([1.0] * got.height)


# --- breakdown, zero_tp_recompute -------------------------------------------------------------------------

COMPONENTS = ["weight_gib", "grad_gib", "optimizer_gib", "activation_gib", "temp_gib", "slack_gib", "overhead_gib"]


def test_breakdown_components_sum_to_the_device_peak(sweep_con):
    got = run(sweep_con, "breakdown")
    total = got.select(pl.sum_horizontal(COMPONENTS))[:, 0]
    assert total.to_list() == pytest.approx(got["device_peak_gib"].to_list())


def test_breakdown_grads_are_all_or_none_of_the_resident_grads(sweep_con, sweep_frame):
    # the peak either holds every gradient (backward, optimizer step) or none yet (a forward peak, no accumulation)
    got = run(sweep_con, "breakdown", n_gpus=8)
    keys = ["model", "method", "gpu", "n_gpus", "tp", "pp", "zero_stage", "checkpointing", "micro_batch", "seq_len"]
    resident = as_map(with_method(fitting(sweep_frame)), keys, "grad_bytes")
    for row in got.iter_rows(named=True):
        grads = resident[tuple(row[k] for k in keys)] / GIB
        assert row["grad_gib"] == pytest.approx(0) or row["grad_gib"] == pytest.approx(grads), row


def test_breakdown_picks_the_fewest_gpus_that_fit(sweep_con, sweep_frame):
    keys = ["model", "method", "gpu"]
    want = with_method(fitting(sweep_frame)).group_by(keys).agg(pl.col("n_gpus").min())
    got = run(sweep_con, "breakdown")
    assert as_map(got, keys, "n_gpus") == as_map(want, keys, "n_gpus")


def test_zero_tp_recompute_is_the_lowest_valid_peak_per_zero_tp_and_recompute(sweep_con, sweep_frame):
    keys = ["method", "zero_stage", "tp", "checkpointing"]
    rows = with_method(sweep_frame.filter(pl.col("valid") & (pl.col("model") == "llama-3.1-8b") & (pl.col("gpu") == "a100-sxm-80gb")))
    want = rows.group_by(keys).agg((pl.col("device_peak_bytes").min() / GIB).alias("gib"))
    got = run(sweep_con, "zero_tp_recompute", model="llama-3.1-8b", gpu="a100-sxm-80gb")
    assert as_map(got, keys, "min_device_peak_gib") == pytest.approx(as_map(want, keys, "gib"))


# --- summary, feasibility_map, method -----------------------------------------------------------------------


def test_summary_counts_rows_valid_and_fitting(sweep_con, sweep_frame):
    got = run(sweep_con, "summary").row(0, named=True)
    want = (sweep_frame.height, sweep_frame["valid"].sum(), fitting(sweep_frame).height, 3, 3)
    assert (got["configurations"], got["valid"], got["fit"], got["models"], got["gpus"]) == want


def test_feasibility_map_marks_cells_where_any_layout_fits(sweep_con, sweep_frame):
    keys = ["gpu", "model", "method", "n_gpus"]
    want = with_method(sweep_frame.filter(pl.col("valid"))).group_by(keys).agg(pl.col("fits").any())
    got = run(sweep_con, "feasibility_map")
    assert as_map(got, keys, "any_fits") == as_map(want, keys, "fits")


def test_feasibility_map_best_spare_is_the_roomiest_fitting_layout(sweep_con, sweep_frame):
    keys = ["gpu", "model", "method", "n_gpus"]
    want = headroom(with_method(fitting(sweep_frame))).group_by(keys).agg((pl.col("spare_bytes").max() / GIB).alias("gib"))
    got = run(sweep_con, "feasibility_map").filter(pl.col("any_fits"))
    assert as_map(got, keys, "best_spare_gib") == pytest.approx(as_map(want, keys, "gib"))


def test_method_names_lora_rank_only_when_lora_is_used(sweep_con):
    got = run(sweep_con, "min_gpus", seq_len=1024)
    assert set(got["method"]) == {BASE_METHOD, BASE_METHOD + " lora-r16"}


# --- the library as a registry --------------------------------------------------------------------------------


def test_the_issue_s_queries_all_exist():
    assert REQUIRED <= {name for name, _ in list_queries()}


@pytest.mark.parametrize("name", [n for n, _ in list_queries()])
def test_every_query_header_has_purpose_params_and_returns(name):
    q = read_query(name)
    assert q.purpose.endswith(".") and q.returns.startswith("one row")


@pytest.mark.parametrize("name", [n for n, _ in list_queries()])
def test_every_query_declares_exactly_the_params_its_sql_uses(name):
    q = read_query(name)
    body = "\n".join(line for line in q.sql.splitlines() if not line.startswith("--"))
    assert set(re.findall(r"\$([a-z_][a-z0-9_]*)", body)) == {p.name for p in q.params}


@pytest.mark.parametrize("name", [n for n, _ in list_queries()])
def test_every_query_reads_only_the_views_and_ends_with_order_by(name):
    sql = (QUERIES_DIR / f"{name}.sql").read_text()
    assert "read_parquet" not in sql and "ORDER BY" in sql.rsplit(")", 1)[-1]


@pytest.mark.parametrize("name", [n for n, _ in list_queries()])
def test_every_query_runs_and_returns_rows_on_the_tiny_sweep(name, sweep_con):
    q = read_query(name)
    params = {p.name: SAMPLE_PARAMS[p.name] for p in q.params if not p.optional}
    assert run_query(sweep_con, name, params).height > 0


def test_param_text_is_converted_to_the_declared_type(sweep_con):
    as_text = run(sweep_con, "breakdown", n_gpus="8", gpu="A100-80GB")
    assert as_text.equals(run(sweep_con, "breakdown", n_gpus=8, gpu="a100-sxm-80gb"))


def test_omitted_optional_param_means_any(sweep_con):
    assert set(run(sweep_con, "max_micro_batch")["model"]) == {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b"}


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("1", True), ("no", False)])
def test_boolean_params_accept_the_usual_spellings(text, value):
    assert convert(Param("sp", "BOOLEAN", "sequence parallel", True), text, "q") is value


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400"])
def test_a_double_param_refuses_a_number_that_is_not_finite(text):
    with pytest.raises(UserError, match="takes a DOUBLE"):
        convert(Param("tokens", "DOUBLE", "tokens to train", True), text, "q")


def test_a_bigint_param_refuses_a_fraction():
    with pytest.raises(UserError, match="takes a BIGINT"):
        convert(Param("n_gpus", "BIGINT", "GPU count", True), "2.5", "q")


# --- the CLI: bad input is one line and exit 2 -------------------------------------------------------------------

BAD_INPUT = [
    (["query", "fitz", "--sweep", "{sweep}"], "did you mean fits?"),
    (["query", "fits", "--sweep", "{sweep}"], "needs $model"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model=llama-3.1-8b", "--param", "limit=ten"], "$limit takes a BIGINT"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model=llama-3.1-8b", "--param", "n_gpu=8"], "accepted: $model VARCHAR"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model=llama-3.1-8"], "did you mean: llama-3.1-8b"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model"], "--param takes name=value"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model=llama-3.1-8b", "--param", "limit=-1"], "$limit must be >= 1"),
    (["query", "fits", "--sweep", "{sweep}", "--param", "model=llama-3.1-8b", "--param", f"limit={2**63}"],
     "$limit takes a BIGINT"),
    (["query", "time_to_train", "--sweep", "{sweep}", "--param", "tokens=nan"], "$tokens takes a DOUBLE"),
    (["query", "cheapest_fleet", "--sweep", "{sweep}", "--param", "tokens=1e400"], "$tokens takes a DOUBLE"),
    (["query", "time_to_train", "--sweep", "{sweep}", "--param", "tokens=-1"], "$tokens must be >= 1, got -1"),
    (["query", "time_to_train", "--sweep", "{sweep}", "--param", "tokens=0"], "$tokens must be >= 1, got 0"),
    (["query", "time_to_train", "--sweep", "{sweep}", "--param", "tokens=0.5"], "$tokens must be >= 1, got 0.5"),
    (["query", "min_gpus", "--sweep", "{sweep}", "--param", "seq_len=0"], "$seq_len must be >= 1, got 0"),
    (["query", "zero_tp_recompute", "--sweep", "{sweep}", "--param", "model=llama-3.1-8b", "--param", "gpu=h100",
      "--param", "micro_batch=-4"], "$micro_batch must be >= 1"),
    (["query", "summary", "--sweep", "{empty}"], "is not a memsim sweep directory"),
    (["query", "summary"], "add --sweep DIR"),
    (["query", "summary", "--sweep", "{sweep}", "--format", "parquet"], "add -o FILE.parquet"),
    (["sql", "SELEC 1"], "SQL failed: Parser Error"),
    (["sql", "SELECT nope FROM sweep", "--sweep", "{sweep}"], "SQL failed: Binder Error"),
]


@pytest.mark.parametrize("argv, needle", BAD_INPUT, ids=[n for _, n in BAD_INPUT])
def test_bad_input_is_one_clear_line_and_exit_2(memsim, sweep_dir, tmp_path, argv, needle):
    argv = [a.format(sweep=sweep_dir, empty=tmp_path) for a in argv]
    code, out, err = memsim(*argv)
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err, err


# --- the CLI: output ------------------------------------------------------------------------------------------------


def test_query_list_names_every_query_with_its_purpose(memsim):
    code, out, _ = memsim("query", "--list")
    assert code == 0 and all(any(line.split()[0] == n for line in out.splitlines()) for n, _ in list_queries())


def test_query_list_with_a_name_shows_its_params(memsim):
    code, out, _ = memsim("query", "--list", "fits")
    assert code == 0 and "$model VARCHAR" in out and "$limit BIGINT" in out


def test_query_csv_output_matches_run_query(memsim, sweep_dir, sweep_con, tmp_path):
    out_file = tmp_path / "min.csv"
    code, _, _ = memsim("query", "min_gpus", "--sweep", sweep_dir, "--param", "seq_len=4096", "-o", out_file)
    assert code == 0 and pl.read_csv(out_file).equals(run(sweep_con, "min_gpus", seq_len=4096))


def test_query_parquet_output_round_trips_and_leaves_no_temporary(memsim, sweep_dir, sweep_con, tmp_path):
    out_file = tmp_path / "map.parquet"
    code, _, _ = memsim("query", "feasibility_map", "--sweep", sweep_dir, "-o", out_file)
    assert code == 0 and pl.read_parquet(out_file).equals(run(sweep_con, "feasibility_map"))
    assert [p.name for p in tmp_path.iterdir()] == ["map.parquet"]


def test_query_json_output_is_one_object_per_row(memsim, sweep_dir):
    code, out, _ = memsim("query", "summary", "--sweep", sweep_dir, "--format", "json")
    assert code == 0 and pl.read_json(out.encode())["configurations"].to_list() == [9216]


def test_query_table_prints_every_column(memsim, sweep_dir, sweep_con):
    code, out, _ = memsim("query", "compare_gpus", "--sweep", sweep_dir, "--param", "model=llama-3.1-8b")
    header = out.splitlines()[1]
    assert code == 0 and all(c in header for c in run(sweep_con, "compare_gpus", model="llama-3.1-8b").columns)


def test_sql_without_a_sweep_reads_the_catalogs(memsim):
    code, out, _ = memsim("sql", "SELECT gpu FROM gpus WHERE gpu = 'h100-sxm-80gb' ORDER BY gpu", "--format", "csv")
    assert code == 0 and out.splitlines() == ["gpu", "h100-sxm-80gb"]


def test_sql_runs_over_the_sweep(memsim, sweep_dir, sweep_frame):
    code, out, _ = memsim("sql", "SELECT count(*) AS n FROM sweep WHERE valid AND fits", "--sweep", sweep_dir, "--format", "csv")
    assert code == 0 and out.splitlines() == ["n", str(fitting(sweep_frame).height)]


# --- cheapest_fleet by time and cost, time_to_train, report_cost_frontier (issue #16) --------------------------

TOKENS = 1e12  # the queries' default $tokens


def cluster(frame: pl.DataFrame) -> pl.DataFrame:
    """Fitting rows of known speed with the days they take to train TOKENS and what it costs."""
    rows = with_method(fitting(frame)).filter(pl.col("tokens_per_gpu_s").is_not_null())
    return rows.with_columns(days=TOKENS / (pl.col("tokens_per_gpu_s") * pl.col("n_gpus")) / 86400,
                             usd=pl.col("cost_per_mtok") * TOKENS / 1e6)


def filled(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows whose pipeline runs at least as many micro-batches as it has stages (the tiny sweep accumulates none)."""
    accum = pl.col("grad_accum") if "grad_accum" in frame.columns else pl.lit(1)
    return frame.filter((pl.col("pp") == 1) | (accum >= pl.col("pp")))


def pareto(rows: list[dict]) -> set:
    """(gpu, n_gpus) of the priced rows that no other priced row beats on days and cost, one of them strictly."""
    priced = [r for r in rows if r["usd"] is not None]
    return {(r["gpu"], r["n_gpus"]) for r in priced
            if not any(o["days"] <= r["days"] and o["usd"] <= r["usd"] and (o["days"] < r["days"] or o["usd"] < r["usd"])
                       for o in priced)}


def test_cheapest_fleet_costs_the_fewest_dollars_per_million_tokens_of_each_gpu(sweep_con, sweep_frame):
    rows = filled(cluster(sweep_frame)).filter(pl.col("model") == "llama-3.1-8b")
    want = rows.group_by("method", "gpu").agg(pl.col("cost_per_mtok").min()).drop_nulls()
    got = run(sweep_con, "cheapest_fleet", model="llama-3.1-8b").filter(pl.col("usd_per_mtok").is_not_null())
    assert as_map(got, ["method", "gpu"], "usd_per_mtok") == pytest.approx(as_map(want, ["method", "gpu"], "cost_per_mtok"))
    assert got["cost_usd"].to_list() == pytest.approx((got["usd_per_mtok"] * TOKENS / 1e6).to_list())


def test_cheapest_fleet_cost_rank_orders_gpus_by_dollars_per_million_tokens(sweep_con):
    got = run(sweep_con, "cheapest_fleet", rank_by="cost").filter(pl.col("cost_rank").is_not_null())
    for _, group in got.group_by("model", "method"):
        assert group["usd_per_mtok"].to_list() == sorted(group["usd_per_mtok"].to_list())
        assert group["cost_rank"].to_list() == sorted(group["cost_rank"].to_list())


def test_cheapest_fleet_time_is_the_fastest_fleet_for_the_tokens(sweep_con, sweep_frame):
    rows = filled(cluster(sweep_frame)).filter(pl.col("model") == "qwen2.5-14b")
    want = rows.group_by("method", "gpu").agg(pl.col("days").min())
    got = run(sweep_con, "cheapest_fleet", model="qwen2.5-14b").filter(pl.col("fast_days").is_not_null())
    assert as_map(got, ["method", "gpu"], "fast_days") == pytest.approx(as_map(want, ["method", "gpu"], "days"))
    fifth = run(sweep_con, "cheapest_fleet", model="qwen2.5-14b", tokens=TOKENS / 5).filter(pl.col("fast_days").is_not_null())
    assert fifth["fast_days"].to_list() == pytest.approx((got["fast_days"] / 5).to_list())


def test_cheapest_fleet_rank_by_time_puts_the_fastest_first(sweep_con):
    got = run(sweep_con, "cheapest_fleet", rank_by="time")
    for _, group in got.group_by("model", "method", maintain_order=True):
        timed = group.filter(pl.col("fast_days").is_not_null())
        assert timed["fast_days"].to_list() == sorted(timed["fast_days"].to_list())
        assert timed["time_rank"].to_list()[0] == 1


def test_cheapest_fleet_names_the_price_source_and_date(sweep_con):
    gpus = catalog.load_gpus()
    got = run(sweep_con, "cheapest_fleet").filter(pl.col("usd_per_gpu_hour").is_not_null())
    assert got.height > 0
    for row in got.iter_rows(named=True):
        assert (row["price_source"], str(row["price_date"])) == (gpus[row["gpu"]]["price_source"], str(gpus[row["gpu"]]["price_date"]))


def test_cheapest_fleet_refuses_an_unknown_ranking(sweep_con):
    with pytest.raises(UserError, match="rank_by must be usd_per_hour, cost or time"):
        run(sweep_con, "cheapest_fleet", rank_by="speed")


def test_time_to_train_takes_the_fastest_layout_at_each_gpu_count(sweep_con, sweep_frame):
    keys = ["model", "method", "gpu", "n_gpus"]
    want = cluster(sweep_frame).group_by(keys).agg(pl.col("tokens_per_gpu_s").max(), pl.col("days").min())
    got = run(sweep_con, "time_to_train")
    assert as_map(got, keys, "tokens_per_gpu_s") == pytest.approx(as_map(want, keys, "tokens_per_gpu_s"))
    assert as_map(got, keys, "days") == pytest.approx(as_map(want, keys, "days"))


def test_time_to_train_frontier_is_the_fleets_no_other_beats_on_both(sweep_con):
    got = run(sweep_con, "time_to_train")
    for _, group in got.group_by("model", "method"):
        rows = group.to_dicts()
        assert {(r["gpu"], r["n_gpus"]) for r in rows if r["on_frontier"]} == pareto(rows)


def test_report_cost_frontier_is_the_priced_frontier_of_the_method(sweep_con, sweep_frame):
    method = BASE_METHOD
    rows = filled(cluster(sweep_frame)).filter((pl.col("method") == method) & pl.col("cost_per_mtok").is_not_null())
    got = run(sweep_con, "report_cost_frontier", method=method)
    for (model,), group in rows.group_by("model"):
        best = group.group_by("gpu", "n_gpus").agg(pl.col("days").min(), pl.col("usd").min()).to_dicts()
        drawn = got.filter((pl.col("model") == model) & pl.col("drawn"))
        assert {(r["gpu"], r["n_gpus"]) for r in drawn.iter_rows(named=True) if r["on_frontier"]} == pareto(best)
        assert drawn.height == len(best)


def test_report_cost_frontier_says_why_a_fleet_that_fits_has_no_point(sweep_con, sweep_frame):
    # issue #22: a GPU type without a price, or fleets where only unfilled pipelines fit, are named, not dropped
    got = run(sweep_con, "report_cost_frontier", method=BASE_METHOD)
    fleets = with_method(fitting(sweep_frame)).filter(pl.col("method") == BASE_METHOD)
    assert got.height == fleets.select("model", "gpu", "n_gpus").unique().height
    left = got.filter(~pl.col("drawn"))
    a10 = {n: why for n, why in left.filter(pl.col("gpu") == "a10").select("n_gpus", "why_not_drawn").iter_rows()}
    assert a10 and left["why_not_drawn"].null_count() == 0
    assert {a10[n] for n in a10 if n <= 4} <= {  # a10: 4-GPU nodes, no price, no network in the catalog
        "no catalog price", "only pipelines with fewer micro-batches than stages fit (sweep grad_accum >= pp)"}
    assert a10.get(8, "no network").startswith("no network bandwidth between its nodes")  # 8 GPUs: two nodes
    assert got.filter(pl.col("drawn"))["why_not_drawn"].null_count() == got.filter(pl.col("drawn")).height
    timed = fleets.filter(pl.col("tokens_per_gpu_s").is_not_null())
    only_pipelines = timed.group_by("model", "gpu", "n_gpus").agg((pl.col("pp") == 1).any().alias("flat"))
    for model, gpu, n in only_pipelines.filter(~pl.col("flat")).select("model", "gpu", "n_gpus").iter_rows():
        row = got.filter((pl.col("model") == model) & (pl.col("gpu") == gpu) & (pl.col("n_gpus") == n)).row(0, named=True)
        assert not row["drawn"] and "pipelines" in row["why_not_drawn"], (model, gpu, n)


# --- parameter ranges (issue #23 item 3) ---------------------------------------------------------------------

RANGED = """-- A query with ranged parameters.
-- params:  $share  DOUBLE  a fraction (> 0) (<= 1) (default 0.5)
--          $count  BIGINT  how many (>= 1), or NULL for all
--          $seq_len  BIGINT  tokens per sample, or NULL for any
-- returns: nothing
SELECT 1;
"""


def test_a_header_range_is_parsed_from_the_meaning():
    q = parse_query("ranged", RANGED)
    assert q.param("share").bounds == ((">", 0.0), ("<=", 1.0)) and q.param("share").default == 0.5
    assert q.param("count").bounds == ((">=", 1),) and q.param("count").optional


@pytest.mark.parametrize("params, says", [({"share": "0"}, "$share must be > 0, got 0"),
                                          ({"share": "1.5"}, "$share must be <= 1, got 1.5"),
                                          ({"count": "0"}, "$count must be >= 1, got 0"),
                                          ({"seq_len": "-1"}, "$seq_len must be >= 1")])
def test_a_value_outside_the_range_is_refused(params, says):
    with pytest.raises(UserError, match=re.escape(says)):
        bind(parse_query("ranged", RANGED), params)


def test_values_inside_the_range_and_null_are_taken():
    q = parse_query("ranged", RANGED)
    assert bind(q, {"share": "1", "count": "1"}) == {"share": 1.0, "count": 1, "seq_len": None}


@pytest.mark.parametrize("header, says", [("$name VARCHAR a name (>= 1)", "only BIGINT and DOUBLE take a range"),
                                          ("$n BIGINT how many (>= 1) (default 0)", "$n must be >= 1, got 0")])
def test_a_range_that_cannot_hold_is_a_header_error(header, says):
    with pytest.raises(UserError, match=re.escape(says)):
        parse_query("bad", f"-- A bad query.\n-- params: {header}\n-- returns: nothing\nSELECT 1;\n")


@pytest.mark.parametrize("name", ["cheapest_fleet", "report_cost_frontier"])
def test_every_query_refuses_a_negative_token_budget(name):
    q = read_query(name)
    required = {p.name: {**SAMPLE_PARAMS, "method": BASE_METHOD}.get(p.name) for p in q.params if not p.optional}
    with pytest.raises(UserError, match=re.escape("$tokens must be >= 1")):
        bind(q, {**required, "tokens": "-1"})


def test_a_row_limit_below_one_is_refused():  # it reached DuckDB as LIMIT -1: a Binder error
    q = read_query("fits")
    required = {p.name: {**SAMPLE_PARAMS, "method": BASE_METHOD}.get(p.name) for p in q.params if not p.optional}
    with pytest.raises(UserError, match=re.escape("$limit must be >= 1")):
        bind(q, {**required, "limit": "-1"})


def test_time_to_train_never_answers_in_negative_days_or_dollars(sweep_con):
    got = run(sweep_con, "time_to_train", tokens=1)
    assert got.height > 0 and got["days"].min() > 0 and got.filter(pl.col("usd").is_not_null())["usd"].min() > 0
