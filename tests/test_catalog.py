"""The catalogs (data/models.toml, data/gpus.toml), name resolution and Hugging Face config.json reading."""

import os
import re
from pathlib import Path

import polars as pl
import pytest

from engine.catalogs.catalog import (
    catalog_version,
    load_gpus,
    load_models,
    model_fields,
    model_record,
    parse_catalog,
    resolve_gpu,
    resolve_model,
)
from engine.catalogs.hf_config import model_from_hf_config
from engine.catalogs.hub import cached_config
from engine.configure.tables import gpus_table, models_table
from engine.errors import UserError
from engine.model.params import param_count

MODELS = load_models()
GPUS = load_gpus()
FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
EXACT = [k for k, e in MODELS.items() if e.get("exact_count", True)]


def dims_count(entry: dict) -> int:
    """param_count from the dims alone (n_params zeroed, so it cannot override)."""
    rec = model_record(entry)
    rec["n_params"] = 0
    return int(param_count(rec))


def one_line_error(call, *args) -> str:
    with pytest.raises(UserError) as err:
        call(*args)
    message = str(err.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------------- models


@pytest.mark.parametrize("key", EXACT, ids=EXACT)
def test_param_count_of_dims_equals_published_n_params(key):
    assert dims_count(MODELS[key]) == MODELS[key]["n_params"]


@pytest.mark.parametrize("key", [k for k in MODELS if k not in EXACT])
def test_inexact_count_keeps_published_n_params_and_says_why(key):
    entry = MODELS[key]
    assert entry["count_note"] and param_count(model_record(entry)) == entry["n_params"]


def test_catalog_has_at_least_35_models():
    assert len(MODELS) >= 35


@pytest.mark.parametrize(
    "key",
    ["llama-2-7b", "llama-3.1-405b", "llama-7b", "llama-65b", "mistral-7b-v0.1", "mixtral-8x22b", "qwen2.5-72b",
     "gemma-2-27b", "phi-3-medium", "gpt2-xl", "gpt-3-175b", "megatron-22b", "mt-nlg-530b", "megatron-1t",
     "bert-large-uncased", "t5-large", "t5-3b", "t0-3b", "deepseek-v2-lite", "deepseek-v3", "qwen1.5-moe-a2.7b",
     "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b",
     "llama-4-scout", "llama-4-maverick", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "gpt-oss-20b",
     "gpt-oss-120b", "olmo-2-7b", "olmo-2-13b", "olmo-2-32b", "deepseek-v3.1", "deepseek-r1", "kimi-k2",
     "mistral-small-24b", "phi-4"],
)
def test_required_model_is_in_catalog(key):
    assert key in MODELS


@pytest.mark.parametrize("key", list(MODELS))
def test_model_entry_names_source_family_and_arch(key):
    entry = MODELS[key]
    assert entry["source"] and entry["family"] and entry["arch"]


def test_encoder_decoder_models_are_not_counted_from_dims():
    assert all(not e.get("exact_count", True) for e in MODELS.values() if e["arch"] != "decoder")


def test_megatron_gpt_3_matches_korthikanti_table_3_dims():
    e = MODELS["gpt-3-175b"]
    assert (e["n_layers"], e["d_model"], e["n_heads"], e["vocab"]) == (96, 12288, 96, 51200)


def test_model_keys_are_lowercase_and_dashed():
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", k) for k in MODELS)


# ---------------------------------------------------------------------------------------------------- GPUs


def test_catalog_has_at_least_22_gpus():
    assert len(GPUS) >= 22


@pytest.mark.parametrize("key", list(GPUS))
def test_gpu_entry_names_source_and_memory_note(key):
    assert GPUS[key]["source"] and GPUS[key]["memory_note"]


@pytest.mark.parametrize("key", list(GPUS))
def test_gpu_memory_lies_between_8_and_300_gib(key):
    assert 8 * 2**30 < GPUS[key]["hbm_bytes"] < 300 * 2**30


@pytest.mark.parametrize("key", [k for k in GPUS if re.search(r"-(\d+)gb$", k)])
def test_gpu_memory_lies_between_nominal_gb_less_7pct_and_nominal_gib(key):
    # "80gb" exposes ~79.2 GiB: above 0.93 * 80e9, below 80 GiB (B200: 191.5e9 vs "192gb")
    nominal = int(re.search(r"-(\d+)gb$", key).group(1))
    assert 0.93 * nominal * 10**9 <= GPUS[key]["hbm_bytes"] <= nominal * 2**30


@pytest.mark.parametrize("key", [k for k in GPUS if "usd_per_hour" in GPUS[k]])
def test_gpu_price_names_its_provider(key):
    assert GPUS[key]["price_source"]


# ---------------------------------------------------------------------------------------------------- names


def test_gpu_alias_resolves_case_insensitively():
    assert resolve_gpu("H100")["gpu"] == "h100-sxm-80gb"


def test_model_hf_repo_alias_resolves():
    assert resolve_model("meta-llama/Llama-2-7b-hf")["model"] == "llama-2-7b"


@pytest.mark.parametrize(
    "hub_id, key",
    [("Qwen/Qwen3-8B", "qwen3-8b"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
     ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"), ("google/gemma-3-27b-it", "gemma-3-27b"),
     ("openai/gpt-oss-120b", "gpt-oss-120b"), ("allenai/OLMo-2-1124-7B", "olmo-2-7b"),
     ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1"), ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
     ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-24b"),
     ("microsoft/phi-4", "phi-4")],
)
def test_published_hub_id_resolves_to_its_entry_without_a_cache(hub_id, key, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))  # nothing downloaded: the alias alone answers
    assert resolve_model(hub_id)["model"] == key


def test_unknown_gpu_suggests_nearest_key():
    message = one_line_error(resolve_gpu, "h100-sxm")
    assert message.startswith("unknown gpu 'h100-sxm'") and "h100-sxm-80gb" in message


def test_unknown_model_suggests_nearest_key():
    message = one_line_error(resolve_model, "llama-3.1-8")
    assert message.startswith("unknown model 'llama-3.1-8'") and "llama-3.1-8b" in message


def test_ambiguous_gpu_name_lists_every_match():
    message = one_line_error(resolve_gpu, "a100")
    assert message.startswith("ambiguous gpu 'a100'")
    assert all(k in message for k in ["a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb"])


def test_missing_json_model_path_is_a_user_error():
    assert "no such model config file" in one_line_error(resolve_model, "does/not/exist/config.json")


def test_model_path_resolves_through_hf_config():
    entry = resolve_model(str(FIXTURES / "gpt2.json"))
    assert (entry["model"], entry["d_model"]) == (str(FIXTURES / "gpt2.json"), 768)


# ---------------------------------------------------------------------------------------------------- Hub cache


def cache_snapshot(hub: Path, repo_id: str, fixture: str, *, commit: str = "0123abcd", ref: bool = True) -> Path:
    """A Hub cache entry laid out as huggingface_hub writes it: refs/main and snapshots/<commit>/config.json."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    (folder / "snapshots" / commit).mkdir(parents=True)
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(commit)
    config = folder / "snapshots" / commit / "config.json"
    config.write_text((FIXTURES / fixture).read_text())
    return config


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    return tmp_path / "hub"


def test_hub_id_outside_the_catalog_reads_the_cached_config_json(hf_home):
    config = cache_snapshot(hf_home, "acme/Qwen3-0.6B-finetune", "qwen3-0.6b.json")
    entry = resolve_model("acme/Qwen3-0.6B-finetune")
    assert (entry["model"], entry["source"], entry["family"]) == ("acme/Qwen3-0.6B-finetune", str(config), "qwen3")
    assert param_count(model_record(entry)) == MODELS["qwen3-0.6b"]["n_params"]


def test_hub_id_case_differs_from_the_cache_folder(hf_home):
    cache_snapshot(hf_home, "acme/Gemma-3-1B-tuned", "gemma-3-1b.json")
    assert resolve_model("ACME/gemma-3-1b-TUNED")["d_model"] == 1152


def test_snapshot_named_by_refs_main_wins_over_others(hf_home):
    cache_snapshot(hf_home, "acme/model", "qwen3-8b.json", commit="old")  # refs/main -> old
    newer = hf_home / "models--acme--model" / "snapshots" / "new" / "config.json"
    newer.parent.mkdir()
    newer.write_text((FIXTURES / "olmo-2-7b.json").read_text())
    os.utime(newer, (2e9, 2e9))  # the most recently written snapshot, yet not the one main points to
    assert resolve_model("acme/model")["family"] == "qwen3"


def test_snapshot_without_refs_main_is_still_found(hf_home):
    cache_snapshot(hf_home, "acme/no-ref", "olmo-2-7b.json", ref=False)
    assert resolve_model("acme/no-ref")["family"] == "olmo2"


def test_hf_hub_cache_takes_precedence_over_hf_home(hf_home, tmp_path, monkeypatch):
    cache_snapshot(hf_home, "acme/model", "qwen3-8b.json")
    cache_snapshot(tmp_path / "elsewhere", "acme/model", "olmo-2-7b.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert resolve_model("acme/model")["family"] == "olmo2"


def test_cache_lookup_finds_the_file_huggingface_hub_finds(hf_home):
    hub = pytest.importorskip("huggingface_hub")
    cache_snapshot(hf_home, "acme/model", "qwen3-8b.json", commit="main-commit")
    found = hub.try_to_load_from_cache("acme/model", "config.json", cache_dir=hf_home)
    assert cached_config("acme/model") == Path(found)


def test_legacy_huggingface_hub_cache_is_honoured(hf_home, tmp_path, monkeypatch):
    cache_snapshot(tmp_path / "legacy", "acme/model", "olmo-2-7b.json")
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert resolve_model("acme/model")["family"] == "olmo2"


def test_hub_id_neither_in_catalog_nor_cache_is_unknown(hf_home):
    assert one_line_error(resolve_model, "acme/never-downloaded").startswith("unknown model 'acme/never-downloaded'")


# ---------------------------------------------------------------------------------------------------- catalog checks


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    return path


def test_unknown_field_names_entry_and_field(tmp_path):
    path = write(tmp_path, '[tiny]\nn_layer = 2\nsource = "x"\n')
    message = one_line_error(parse_catalog, path, "model")
    assert "[tiny]" in message and "'n_layer'" in message and "n_layers" in message


def test_missing_source_is_an_error(tmp_path):
    path = write(tmp_path, "[tiny]\nn_params = 1000\n")
    assert "'source'" in one_line_error(parse_catalog, path, "model")


def test_wrong_type_is_an_error(tmp_path):
    path = write(tmp_path, '[tiny]\nn_params = "7B"\nsource = "x"\n')
    assert "'n_params' must be a non-negative integer" in one_line_error(parse_catalog, path, "model")


def test_unknown_categorical_value_lists_accepted_ones(tmp_path):
    path = write(tmp_path, '[tiny]\nn_params = 1000\nffn_type = "relu"\nsource = "x"\n')
    assert "gelu, swiglu" in one_line_error(parse_catalog, path, "model")


def test_alias_shared_by_two_entries_is_an_error(tmp_path):
    entry = 'name = "x"\nvendor = "nvidia"\narch = "hopper"\nhbm_bytes = 1\nsource = "x"\naliases = ["gpu"]\n'
    path = write(tmp_path, f"[one]\n{entry}\n[two]\n{entry}")
    assert "'gpu' already belongs to [one]" in one_line_error(parse_catalog, path, "gpu")


def test_shipped_aliases_never_shadow_another_key():
    for entries in (MODELS, GPUS):
        for key, entry in entries.items():
            assert not set(entry.get("aliases", [])) & (set(entries) - {key})


# ---------------------------------------------------------------------------------------------- Hugging Face configs

FIXTURE_KEYS = sorted(p.stem for p in FIXTURES.glob("*.json"))


@pytest.mark.parametrize("key", FIXTURE_KEYS)
def test_hf_config_maps_to_catalog_fields(key):
    got = model_fields(model_from_hf_config(FIXTURES / f"{key}.json"))
    want = model_fields(MODELS[key]) | {"n_params": 0}
    assert got == want


@pytest.mark.parametrize("key", FIXTURE_KEYS)
def test_hf_config_counts_catalog_n_params(key):
    assert dims_count(model_from_hf_config(FIXTURES / f"{key}.json")) == MODELS[key]["n_params"]


def test_hf_config_directory_reads_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text((FIXTURES / "mixtral-8x7b.json").read_text())
    assert model_from_hf_config(tmp_path)["n_experts"] == 8


def test_malformed_config_json_is_a_user_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096,,}')
    message = one_line_error(model_from_hf_config, path)
    assert str(path) in message and "invalid JSON" in message


def test_unknown_model_type_is_a_user_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "mamba"}')
    assert "unsupported model_type 'mamba'" in one_line_error(model_from_hf_config, path)


def test_missing_key_is_a_user_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}')
    assert "missing key 'n_layer'" in one_line_error(model_from_hf_config, path)


def test_non_positive_size_is_a_user_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((FIXTURES / "llama-3.1-8b.json").read_text().replace('"hidden_size": 4096', '"hidden_size": 0'))
    assert "'hidden_size' must be positive" in one_line_error(model_from_hf_config, path)


# ---------------------------------------------------------------------------------------------------- tables


def test_models_table_has_one_row_per_entry():
    assert models_table()["model"].to_list() == list(MODELS)


def test_models_table_counts_are_int64():
    table = models_table()
    assert table.schema["n_params"] == pl.Int64 and table["n_params"].null_count() == 0


def test_gpus_table_bytes_are_int64():
    schema = gpus_table().schema
    assert schema["hbm_bytes"] == schema["host_ram_bytes_per_node"] == pl.Int64


def test_catalog_version_is_12_hex_digits():
    assert re.fullmatch(r"[0-9a-f]{12}", catalog_version())
