"""The GPU catalog's data (data/gpus.toml): one pricing basis, dense compute peaks, link bandwidths, memory sizes."""

import csv
import re

import polars as pl
import pytest

from engine import DATA_DIR
from engine.catalogs.catalog import load_gpus, parse_catalog
from engine.configure.resolve import architectures
from engine.configure.tables import gpus_table
from engine.errors import UserError

GPUS = load_gpus()
PRICED = [k for k, e in GPUS.items() if "usd_per_hour" in e]
BASIS_PROVIDER, BASIS_DATE = "CoreWeave", "2026-09-20"  # the header of data/gpus.toml says why this one
# Dense FP8 is twice dense BF16 on every architecture with FP8 tensor cores but Gaudi, whose MMEs run both at one rate.
FP8_DOUBLES_BF16 = ("ada", "hopper", "blackwell", "cdna3", "cdna4")
# Keys without a memory suffix, with the vendor's nominal size in (decimal or binary) GB.
NOMINAL_GB = {"a40": 48, "l40": 48, "l40s": 48, "rtx-6000-ada": 48, "gb200": 186, "mi355x": 288, "gaudi3": 128}
NVLINK5_BYTES_PER_S = 900e9  # the fastest per-direction intra-node link in the catalog (NVLink 5)


def one_line_error(tmp_path, fields: str) -> str:
    path = tmp_path / "gpus.toml"
    path.write_text(f'[x]\nname = "x"\nvendor = "nvidia"\narch = "hopper"\nhbm_bytes = 1\nsource = "s"\n{fields}\n')
    with pytest.raises(UserError) as err:
        parse_catalog(path, "gpu")
    assert "\n" not in str(err.value)
    return str(err.value)


# ---------------------------------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("key", ["a40", "rtx-6000-ada", "l40", "h20-96gb", "b300-sxm-288gb", "gb200", "mi355x", "gaudi3"])
def test_issue_14_gpu_is_in_catalog(key):
    assert key in GPUS and GPUS[key]["source"]


def test_gaudi3_is_an_intel_part():
    assert (GPUS["gaudi3"]["vendor"], GPUS["gaudi3"]["arch"]) == ("intel", "gaudi3")


# ---------------------------------------------------------------------------------------------------- prices


def test_every_price_comes_from_one_provider_on_one_date():
    assert {GPUS[k]["price_date"] for k in PRICED} == {BASIS_DATE}
    assert all(GPUS[k]["price_source"].startswith(BASIS_PROVIDER) for k in PRICED)


@pytest.mark.parametrize("key", PRICED)
def test_price_source_states_its_date(key):
    assert BASIS_DATE in GPUS[key]["price_source"]


@pytest.mark.parametrize("key", PRICED)
def test_price_is_the_instance_price_over_its_gpus(key):
    entry = GPUS[key]
    instance = float(re.search(r"\$([\d,.]+)/h", entry["price_source"]).group(1).replace(",", ""))
    assert entry["usd_per_hour"] * entry["gpus_per_node"] == pytest.approx(instance, abs=0.005)


@pytest.mark.parametrize("key", PRICED)
def test_priced_node_is_the_rented_instance(key):
    assert GPUS[key]["node"].startswith(BASIS_PROVIDER)


def test_core_training_gpus_are_priced():
    assert {"a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-sxm-192gb", "gb200"} <= set(PRICED)


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if {"consumer", "workstation"} & set(e.get("tags", []))])
def test_consumer_and_workstation_cards_are_not_priced_on_the_datacenter_basis(key):
    assert "usd_per_hour" not in GPUS[key]


def test_newer_gpu_never_costs_less_per_hour_than_the_one_it_succeeds():
    price = {k: GPUS[k]["usd_per_hour"] for k in PRICED}
    assert price["a100-sxm-80gb"] < price["h100-sxm-80gb"] <= price["h200-sxm-141gb"] < price["b200-sxm-192gb"]


# ---------------------------------------------------------------------------------------------------- compute


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if e["arch"] in FP8_DOUBLES_BF16 and "fp8_tflops" in e])
def test_dense_fp8_is_twice_dense_bf16(key):
    # 2.5%: the L40S datasheet prints BF16 362.05 and FP8 733 (2.02x)
    assert GPUS[key]["fp8_tflops"] == pytest.approx(2 * GPUS[key]["bf16_tflops"], rel=0.025)


def test_gaudi3_runs_fp8_at_the_bf16_rate():
    assert GPUS["gaudi3"]["fp8_tflops"] == GPUS["gaudi3"]["bf16_tflops"]


@pytest.mark.parametrize("key", list(GPUS))
def test_an_fp8_peak_only_where_the_architecture_has_fp8_tensor_cores(key):
    # data/architectures.toml says which run precision = fp8 at all (GeForce Ada and Blackwell do, unpriced by the
    # catalog's sources); an fp8 peak on any other would time a step that cannot run.
    has_cores = architectures()[GPUS[key]["arch"]]["fp8_tensor_cores"]
    assert has_cores or "fp8_tflops" not in GPUS[key]
    assert has_cores == (GPUS[key]["arch"] not in ("volta", "turing", "ampere", "cdna2"))


@pytest.mark.parametrize("key", [k for k in GPUS if "matmul_tflops_achievable" in GPUS[k]])
def test_achievable_matmul_is_half_to_all_of_the_dense_peak(key):
    # A sparse peak would put every measured matmul below ~45% of it.
    assert 0.45 < GPUS[key]["matmul_tflops_achievable"] / GPUS[key]["bf16_tflops"] < 1


@pytest.mark.parametrize("key", [k for k in GPUS if "fp8_matmul_tflops_achievable" in GPUS[k]])
def test_achievable_fp8_matmul_is_half_to_all_of_the_dense_fp8_peak(key):
    assert 0.45 < GPUS[key]["fp8_matmul_tflops_achievable"] / GPUS[key]["fp8_tflops"] < 1


def test_h100_sxm_peak_is_the_dense_datasheet_figure():
    # NVIDIA prints 1,979 TFLOPS BF16 "with sparsity"; dense is half.
    assert GPUS["h100-sxm-80gb"]["bf16_tflops"] == pytest.approx(1979 / 2, abs=0.5)


# ---------------------------------------------------------------------------------------------------- links


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if "intra_node_bytes_per_s" in e])
def test_intra_node_link_is_per_direction(key):
    assert GPUS[key]["intra_node_bytes_per_s"] <= NVLINK5_BYTES_PER_S


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if {"intra_node_bytes_per_s", "inter_node_bytes_per_s"} <= set(e)])
def test_node_fabric_is_faster_than_the_network(key):
    assert GPUS[key]["intra_node_bytes_per_s"] > GPUS[key]["inter_node_bytes_per_s"]


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if "nvlink" in e.get("tags", [])])
def test_nvlink_gpu_has_an_intra_node_link_of_at_least_nvlink_2(key):
    assert GPUS[key]["intra_node_bytes_per_s"] >= 150e9


def test_dgx_h100_network_is_400_gbit_per_gpu():
    assert GPUS["h100-sxm-80gb"]["inter_node_bytes_per_s"] == 400e9 / 8


# ---------------------------------------------------------------------------------------------------- memory


@pytest.mark.parametrize("key", list(NOMINAL_GB))
def test_memory_of_unsuffixed_key_lies_between_nominal_gb_less_8pct_and_nominal_gib(key):
    assert 0.92 * NOMINAL_GB[key] * 10**9 <= GPUS[key]["hbm_bytes"] <= NOMINAL_GB[key] * 2**30


@pytest.mark.parametrize("key", [k for k, e in GPUS.items() if "ECC on" in e["memory_note"] and "ECC off" not in e["memory_note"]])
def test_ecc_on_gddr_card_exposes_at_most_15_16_of_its_memory(key):
    nominal = int(re.search(r"(\d+) Gi?B GDDR", GPUS[key]["memory_note"]).group(1))
    assert GPUS[key]["hbm_bytes"] <= nominal * 2**30 * 15 // 16


# ---------------------------------------------------------------------------------------------------- checks


def test_price_without_a_date_is_an_error(tmp_path):
    message = one_line_error(tmp_path, 'usd_per_hour = 1.0\nprice_source = "p"\ngpus_per_node = 8')
    assert "usd_per_hour needs price_date" in message


def test_price_without_gpus_per_node_is_an_error(tmp_path):
    message = one_line_error(tmp_path, 'usd_per_hour = 1.0\nprice_source = "p"\nprice_date = "2026-09-20"')
    assert "usd_per_hour needs gpus_per_node" in message


def test_malformed_price_date_is_an_error(tmp_path):
    fields = 'usd_per_hour = 1.0\nprice_source = "p"\nprice_date = "Sept 2026"\ngpus_per_node = 8'
    assert "price_date must be YYYY-MM-DD" in one_line_error(tmp_path, fields)


def test_achievable_matmul_above_the_peak_is_an_error(tmp_path):
    fields = 'bf16_tflops = 100.0\nmatmul_tflops_achievable = 120.0\nmatmul_source = "m"'
    assert "matmul_tflops_achievable 120.0 exceeds bf16_tflops 100.0" in one_line_error(tmp_path, fields)


def test_link_without_its_source_is_an_error(tmp_path):
    assert "intra_node_bytes_per_s needs link_source" in one_line_error(tmp_path, "intra_node_bytes_per_s = 1")


def test_zero_link_bandwidth_is_an_error(tmp_path):
    message = one_line_error(tmp_path, 'inter_node_bytes_per_s = 0\nlink_source = "l"')
    assert "inter_node_bytes_per_s must be positive" in message


def test_fp8_peak_without_bf16_peak_is_an_error(tmp_path):
    assert "fp8_tflops needs bf16_tflops" in one_line_error(tmp_path, "fp8_tflops = 100.0")


def test_gpus_table_link_columns_are_int64():
    schema = gpus_table().schema
    assert schema["intra_node_bytes_per_s"] == schema["inter_node_bytes_per_s"] == pl.Int64


# ---------------------------------------------------------------------------------------------------- throughput set

THROUGHPUT = list(csv.DictReader((DATA_DIR / "golden" / "throughput.csv").open(encoding="utf-8")))
FIGURES = ("tokens_per_gpu_s", "mfu", "tflops_per_gpu")


def test_throughput_set_has_at_least_30_runs_on_several_gpu_types():
    assert len(THROUGHPUT) >= 30 and len({r["gpu"] for r in THROUGHPUT}) >= 5


@pytest.mark.parametrize("row", THROUGHPUT, ids=[r["case_id"] for r in THROUGHPUT])
def test_throughput_row_names_a_catalog_gpu_a_source_a_quote_and_a_figure(row):
    assert row["gpu"] in GPUS and row["source"] and row["quote"] and any(row[f] for f in FIGURES)


@pytest.mark.parametrize("row", THROUGHPUT, ids=[r["case_id"] for r in THROUGHPUT])
def test_throughput_row_layout_multiplies_to_its_gpu_count(row):
    tp, pp, cp, dp = (int(row[k] or 1) for k in ("tp", "pp", "cp", "dp"))
    assert tp * pp * cp * dp == int(row["n_gpus"])


@pytest.mark.parametrize("row", [r for r in THROUGHPUT if r["mfu"]], ids=[r["case_id"] for r in THROUGHPUT if r["mfu"]])
def test_throughput_mfu_is_a_fraction(row):
    assert 0.05 < float(row["mfu"]) < 0.8


@pytest.mark.parametrize("row", [r for r in THROUGHPUT if r["tflops_per_gpu"]], ids=[r["case_id"] for r in THROUGHPUT if r["tflops_per_gpu"]])
def test_throughput_tflops_stay_below_the_gpu_peak_of_their_precision(row):
    gpu = GPUS[row["gpu"]]
    peak = gpu["fp8_tflops"] if row["precision"] == "fp8" else gpu["bf16_tflops"]
    assert float(row["tflops_per_gpu"]) < peak
