"""memsim's parameter count from a config.json equals what transformers instantiates, exactly.

Each case is a small config.json of one model_type (a variant where the architecture branches: tied or untied,
biases, MoE every layer or interleaved, shared experts on or off). transformers builds the model on the meta
device (no memory), and the sum of its parameters must equal engine.model.params' count of the dims that
engine.catalogs.hf_config reads from the same file. Multimodal checkpoints (Gemma 3, Llama 4) are counted as
memsim counts them: every parameter but the vision tower and the multimodal projector.
"""

import json
from pathlib import Path

import pytest

from engine.catalogs import hf_mappers
from engine.catalogs.catalog import load_models, model_record
from engine.catalogs.hf_config import model_from_hf_config
from engine.errors import UserError
from engine.model.params import moe_layers_between, n_moe_layers, param_count

pytestmark = pytest.mark.slow  # the torch tier: real PyTorch and transformers code
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# A small Llama-style base: 4 layers, h 64, 4 heads (d 16), 2 key/value heads, vocabulary 128.
BASE = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96, "vocab_size": 128}
MOE = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
MLA = {"kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
       "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
       **MOE}

CASES = {
    "llama": {"model_type": "llama", **BASE},
    "llama-tied": {"model_type": "llama", **BASE, "tie_word_embeddings": True},
    "llama-head-dim": {"model_type": "llama", **BASE, "head_dim": 24},
    "llama-attention-bias": {"model_type": "llama", **BASE, "attention_bias": True},
    "llama-all-biases": {"model_type": "llama", **BASE, "attention_bias": True, "mlp_bias": True},
    "mistral-head-dim": {"model_type": "mistral", **BASE, "head_dim": 32},
    "phi3": {"model_type": "phi3", **BASE, "pad_token_id": 0},
    "qwen2": {"model_type": "qwen2", **BASE},
    "qwen2-tied": {"model_type": "qwen2", **BASE, "tie_word_embeddings": True},
    "gemma": {"model_type": "gemma", **BASE, "head_dim": 32},
    "gemma2": {"model_type": "gemma2", **BASE, "head_dim": 32},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 128, "n_positions": 32},
    "gpt2-n-inner": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 128,
                     "n_positions": 32, "n_inner": 80},
    "mixtral": {"model_type": "mixtral", **BASE, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2-moe-shared": {"model_type": "qwen2_moe", **BASE, **MOE, "num_experts": 4,
                         "shared_expert_intermediate_size": 64},
    "qwen2-moe-no-shared": {"model_type": "qwen2_moe", **BASE, **MOE, "num_experts": 4,
                            "shared_expert_intermediate_size": 0},
    "qwen2-moe-interleaved": {"model_type": "qwen2_moe", **BASE, **MOE, "num_experts": 4,
                              "shared_expert_intermediate_size": 32, "decoder_sparse_step": 2},
    "qwen2-moe-leading-dense": {"model_type": "qwen2_moe", **BASE, **MOE, "num_experts": 4,
                                "shared_expert_intermediate_size": 32, "mlp_only_layers": [0]},
    "deepseek-v2-full-q": {"model_type": "deepseek_v2", **BASE, **MLA, "q_lora_rank": None,
                           "num_key_value_heads": 4},
    "deepseek-v3": {"model_type": "deepseek_v3", **BASE, **MLA, "num_key_value_heads": 4},
    "deepseek-v3-two-shared": {"model_type": "deepseek_v3", **BASE, **MLA, "num_key_value_heads": 4,
                               "n_shared_experts": 2, "first_k_dense_replace": 2},
    "kimi-k2": {"model_type": "kimi_k2", **BASE, **MLA, "num_key_value_heads": 4},
    "qwen3": {"model_type": "qwen3", **BASE},
    "qwen3-tied-head-dim": {"model_type": "qwen3", **BASE, "tie_word_embeddings": True, "head_dim": 32},
    "qwen3-attention-bias": {"model_type": "qwen3", **BASE, "attention_bias": True, "head_dim": 16},
    "qwen3-moe": {"model_type": "qwen3_moe", **BASE, **MOE, "num_experts": 4},
    "qwen3-moe-interleaved": {"model_type": "qwen3_moe", **BASE, **MOE, "num_experts": 4,
                              "decoder_sparse_step": 2},
    "qwen3-moe-leading-dense": {"model_type": "qwen3_moe", **BASE, **MOE, "num_experts": 4,
                                "mlp_only_layers": [0, 1], "tie_word_embeddings": True},
    "qwen3-moe-step-3-after-dense": {"model_type": "qwen3_moe", **BASE, **MOE, "num_experts": 4,
                                     "num_hidden_layers": 7, "decoder_sparse_step": 3, "mlp_only_layers": [0, 1, 2]},
    "qwen3-moe-no-experts": {"model_type": "qwen3_moe", **BASE, **MOE, "num_experts": 0},
    "olmo2": {"model_type": "olmo2", **BASE},
    "olmo2-mha-tied": {"model_type": "olmo2", **BASE, "num_key_value_heads": 4, "tie_word_embeddings": True},
    "gemma3-text": {"model_type": "gemma3_text", **BASE, "head_dim": 32},
    "gemma3-text-untied-bias": {"model_type": "gemma3_text", **BASE, "head_dim": 16, "tie_word_embeddings": False,
                                "attention_bias": True},
    "llama4-text-moe-every-layer": {"model_type": "llama4_text", **BASE, "head_dim": 16, "num_local_experts": 4,
                                    "num_experts_per_tok": 1, "intermediate_size_mlp": 128},
    "llama4-text-interleaved": {"model_type": "llama4_text", **BASE, "head_dim": 16, "num_local_experts": 4,
                                "num_experts_per_tok": 1, "intermediate_size_mlp": 128,
                                "interleave_moe_layer_step": 2},
    "llama4-text-bias-tied": {"model_type": "llama4_text", **BASE, "head_dim": 16, "num_local_experts": 4,
                              "intermediate_size_mlp": 128, "interleave_moe_layer_step": 2,
                              "attention_bias": True, "tie_word_embeddings": True},
    "gpt-oss": {"model_type": "gpt_oss", **BASE, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt-oss-tied-no-bias": {"model_type": "gpt_oss", **BASE, "head_dim": 16, "num_local_experts": 4,
                             "tie_word_embeddings": True, "attention_bias": False},
}

# Multimodal checkpoints: the text model lives in text_config; the vision tower takes its class's defaults.
MULTIMODAL = {
    "gemma3": {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", **BASE, "head_dim": 32}},
    "llama4": {"model_type": "llama4", "text_config": {"model_type": "llama4_text", **BASE, "head_dim": 16,
                                                        "num_local_experts": 4, "intermediate_size_mlp": 128,
                                                        "interleave_moe_layer_step": 2}},
}
MODEL_CLASS = {"kimi_k2": "deepseek_v3"}  # model types transformers builds under another type's classes
NOT_TEXT = ("vision", "multi_modal_projector")  # module names of the parts memsim leaves to n_params


def write_config(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def memsim_count(path) -> int:
    return int(param_count(model_record(model_from_hf_config(path))))


def instantiate(cfg: dict):
    """The model transformers builds from the config, on the meta device (shapes only, no memory)."""
    # Kimi K2's config.json names DeepseekV3ForCausalLM (remote code) under model_type kimi_k2
    config = transformers.AutoConfig.for_model(**(cfg | {"model_type": MODEL_CLASS.get(cfg["model_type"], cfg["model_type"])}))
    with torch.device("meta"):
        if cfg["model_type"] in MULTIMODAL:
            return transformers.AutoModelForImageTextToText.from_config(config)
        return transformers.AutoModelForCausalLM.from_config(config)


def text_param_count(model) -> int:
    """Parameters outside the vision tower and projector; named_parameters counts a tied weight once."""
    return sum(p.numel() for name, p in model.named_parameters() if not any(n in name for n in NOT_TEXT))


@pytest.mark.parametrize("case", list(CASES))
def test_count_equals_transformers_model(case, tmp_path):
    cfg = CASES[case]
    assert memsim_count(write_config(tmp_path, cfg)) == text_param_count(instantiate(cfg))


@pytest.mark.parametrize("case", list(MULTIMODAL))
def test_multimodal_count_equals_transformers_text_model(case, tmp_path):
    model = instantiate(MULTIMODAL[case])
    vision = sum(p.numel() for p in model.parameters()) - text_param_count(model)
    assert vision > 0  # the vision tower was built, and left out of the text count
    assert memsim_count(write_config(tmp_path, MULTIMODAL[case])) == text_param_count(model)


@pytest.mark.parametrize(
    "defaults, config_class",
    [(hf_mappers.GEMMA3_TEXT_DEFAULTS, "Gemma3TextConfig"), (hf_mappers.LLAMA4_TEXT_DEFAULTS, "Llama4TextConfig")],
)
def test_reader_defaults_are_the_config_class_defaults(defaults, config_class):
    hf_defaults = getattr(transformers, config_class)().to_dict()
    assert {k: hf_defaults[k] for k in defaults} == defaults


def test_interleaved_moe_counts_only_every_step_th_layer(tmp_path):
    # Same dims, experts every layer vs every second layer: half the MoE blocks become dense FFNs.
    every = memsim_count(write_config(tmp_path, CASES["qwen3-moe"]))
    half = memsim_count(write_config(tmp_path, CASES["qwen3-moe-interleaved"]))
    assert every != half


def test_mlp_only_layers_that_are_not_leading_are_a_user_error(tmp_path):
    cfg = CASES["qwen3-moe"] | {"mlp_only_layers": [1]}
    with pytest.raises(UserError, match=r"mlp_only_layers \[1\] cannot be expressed"):
        model_from_hf_config(write_config(tmp_path, cfg))


def test_llama4_moe_layers_off_the_step_pattern_are_a_user_error(tmp_path):
    cfg = {"model_type": "llama4_text", **BASE, "moe_layers": [0, 3]}
    with pytest.raises(UserError, match=r"moe_layers \[0, 3\] cannot be expressed"):
        model_from_hf_config(write_config(tmp_path, cfg))


def test_mlp_bias_alone_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="mlp_bias = true without attention_bias"):
        model_from_hf_config(write_config(tmp_path, {"model_type": "llama", **BASE, "mlp_bias": True}))


def test_missing_text_config_names_the_key(tmp_path):
    with pytest.raises(UserError, match="'text_config'"):
        model_from_hf_config(write_config(tmp_path, {"model_type": "gemma3"}))


# ---------------------------------------------------------------------------------------------- real config.json files

MODELS = load_models()
FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
REAL = sorted(p.stem for p in FIXTURES.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("key", REAL)
def test_published_config_counts_what_transformers_builds(key):
    # The catalog's n_params for each shipped config.json is what transformers instantiates from it (the text
    # model of a multimodal checkpoint), so the catalog, the reader and transformers agree on real dims too.
    cfg = json.loads((FIXTURES / f"{key}.json").read_text())
    assert text_param_count(instantiate(cfg)) == memsim_count(FIXTURES / f"{key}.json") == MODELS[key]["n_params"]


def moe_block_flags(model) -> list[bool]:
    """Which decoder blocks transformers built with routed experts (a module holding an `experts` child)."""
    layers = model.model.layers if hasattr(model.model, "layers") else model.model.language_model.layers
    return [any(name.endswith("experts") for name, _ in layer.named_modules()) for layer in layers]


@pytest.mark.parametrize(
    "case", ["qwen3-moe-interleaved", "qwen3-moe-step-3-after-dense", "llama4-text-interleaved", "deepseek-v3-two-shared"]
)
def test_moe_layers_of_every_layer_range_match_the_blocks_transformers_builds(case, tmp_path):
    # What a pipeline stage holding layers first..last-1 gets: exact for every contiguous range.
    flags = moe_block_flags(instantiate(CASES[case]))
    rec = model_record(model_from_hf_config(write_config(tmp_path, CASES[case])))
    n = len(flags)
    for first in range(n + 1):
        for last in range(first, n + 1):
            assert moe_layers_between(rec, first, last) == sum(flags[first:last]), (first, last)
    assert n_moe_layers(rec) == sum(flags)
