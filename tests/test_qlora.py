"""LoRA over a bitsandbytes base: the inputs old bitsandbytes keeps, LoRA dropout, held outputs (hand-worked from the
tensors each module saves; data/measured/QLORA.md), and the harness that measures them under fake tensors."""

import pytest

from engine.inputs.codes import Phase
from engine.model.levels import rank_terms
from engine.model.peak import peak
from engine.model.states import device_weight_bytes, replicated_quant_state_bytes
from tests.support import config, outputs

# A Llama-style block: h = 64, 4 heads of 16, f = 176; bf16 weights and compute unless amp.
LLAMA = {"n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "d_ff": 176, "vocab": 256, "ffn_type": "swiglu",
         "seq_len": 128, "micro_batch": 2, "attention": "flash"}
QLORA = {**LLAMA, "lora_rank": 8, "base_quant": "nf4"}


def per_token(**kw):
    r = rank_terms(config(**kw))
    return r.replicated_per_token, r.split_per_token


def test_old_bitsandbytes_keeps_each_quantized_input_once():
    # bf16, q/v adapters: the norm outputs before q/k/v and gate/up (2 B x h each, one tensor per group: Linear4bit's
    # x.to(bf16) is the input itself) and the down projection's input (2 B x f); the out-projection's input is
    # flash attention's saved output, already counted
    new = per_token(**QLORA, precision="bf16", lora_targets="qv")
    old = per_token(**QLORA, precision="bf16", lora_targets="qv", quant_saves_input=True)
    assert old[0] - new[0] == 2 * (2 * 64)
    assert old[1] - new[1] == 2 * 176


def test_under_autocast_each_quantized_linear_keeps_its_own_cast():
    # amp_bf16: the stream is fp32, so q, k, v, gate and up each cast their input (5 x 2 B x h); the down input is
    # the fp32 FFN product (Linear4bit returns in its input's dtype), cast once more (2 B x f)
    new = per_token(**QLORA, precision="amp_bf16", lora_targets="all_linear")
    old = per_token(**QLORA, precision="amp_bf16", lora_targets="all_linear", quant_saves_input=True)
    assert old[0] - new[0] == 5 * 2 * 64
    assert old[1] - new[1] == 2 * 176


def test_kept_inputs_escape_full_recomputation():
    # a checkpointed layer keeps its input (2 B x h) and, with old bitsandbytes, the kept inputs: 2h + f, and the
    # out-projection's input (flash's output, no longer saved by flash there): 2 B x (2h + f + a*d) per token
    kw = {**QLORA, "precision": "bf16", "lora_targets": "qv", "checkpointing": "full"}
    tokens = 128 * 2
    new = peak(config(**kw), rank_terms(config(**kw))).activation_bytes
    old = peak(config(**kw, quant_saves_input=True), rank_terms(config(**kw, quant_saves_input=True))).activation_bytes
    assert old - new == 4 * tokens * 2 * (2 * 64 + 176 + 64)


def test_lora_dropout_adds_a_mask_per_adapter():
    # bf16 over a 16-bit base: peft's fp32 adapters save the dropped fp32 copy in place of the cast; masks of 1 B:
    # q, k, v, gate, up on h (5h), o on a*d (h), down on f
    base = per_token(**QLORA, precision="bf16", lora_targets="all_linear")
    drop = per_token(**QLORA, precision="bf16", lora_targets="all_linear", lora_dropout=0.1)
    assert (drop[0] - base[0], drop[1] - base[1]) == (5 * 64, 64 + 176)


def test_adapters_in_the_compute_dtype_take_the_input_as_it_is():
    # bf16, q/v adapters, no dropout: peft's fp32 adapters each cast x to fp32 (2 x 4 B x h) and save an fp32 r-wide
    # lora_A output (2 x 4 B x r); bf16 adapters share x (2 B x h) and save bf16 outputs (2 x 2 B x r)
    kw = {**LLAMA, "lora_rank": 8, "lora_targets": "qv", "precision": "bf16"}
    fp32, half = per_token(**kw), per_token(**kw, lora_dtype="compute")
    assert fp32[0] - half[0] == (2 * 4 * 64 + 2 * 4 * 8) - (2 * 64 + 2 * 2 * 8)
    assert fp32[1] == half[1]
    # the adapters (r x (h + h) on q and on v, 4 layers), their gradients and AdamW moments: 4 + 4 + 8 B each in
    # fp32, 2 + 2 + 4 B in bf16
    adapters = 4 * 2 * 8 * (64 + 64)
    big, small = (rank_terms(config(**kw, lora_dtype=d)).columns for d in ("fp32", "compute"))
    assert big.weight_bytes - small.weight_bytes == 2 * adapters
    assert big.grad_bytes - small.grad_bytes == 2 * adapters
    assert big.optimizer_bytes - small.optimizer_bytes == 4 * adapters


def test_held_outputs_never_lower_the_peak_and_add_the_last_graph_to_forward():
    kw = {**QLORA, "precision": "bf16", "lora_targets": "qv", "quant_saves_input": True, "vocab": 32000}
    plain, held = (peak(config(**kw, outputs_held=h), rank_terms(config(**kw, outputs_held=h))) for h in (False, True))
    assert held.allocated_bytes > plain.allocated_bytes


def test_nf4_without_double_quantization_weighs_more():
    dq, nodq = (config(**{**QLORA, "base_quant": q}, precision="bf16", lora_targets="qv") for q in ("nf4", "nf4_nodq"))
    assert rank_terms(nodq).columns.weight_bytes > rank_terms(dq).columns.weight_bytes


# ---- the harness (bitsandbytes' own Linear4bit under fake tensors)

TINY = {"n_layers": 3, "d_model": 256, "n_heads": 4, "d_ff": 704, "vocab": 512, "ffn_type": "swiglu", "seq_len": 256,
        "micro_batch": 2, "precision": "bf16", "lora_rank": 8, "lora_targets": "qv", "base_quant": "nf4"}


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("bitsandbytes")
    from engine.checks.measure.measure import measure_case

    return {k: measure_case({**TINY, **kw}) for k, kw in
            {"new": {}, "old": {"quant_saves_input": True}, "nodq": {"base_quant": "nf4_nodq"}}.items()}


@pytest.mark.slow  # torch and bitsandbytes: the torch tier
def test_harness_runs_bitsandbytes_and_the_old_era_keeps_the_inputs(measured):
    new, old = measured["new"], measured["old"]
    # blocks 1 and 2 keep 2h (q/k/v and gate/up inputs) + f (down input) in bf16; block 0's q/k/v input comes from the
    # frozen embedding and needs no gradient, so MatMul4Bit keeps nothing there
    tokens, h, f = 256 * 2, 256, 704
    kept = tokens * 2 * (3 * (h + f) + 2 * h)
    assert old["measured_saved_activation_bytes"] - new["measured_saved_activation_bytes"] == kept


@pytest.mark.slow  # torch and bitsandbytes: the torch tier
def test_harness_weights_follow_the_quantization(measured):
    from engine.checks.measure.quantized import BLOCKSIZE

    # per linear weight of n: without double quantization an fp32 absmax per 64 weights; with it an 8-bit absmax per
    # 64, an fp32 absmax per 256 of those, the 256-entry fp32 code of that second quantization and an fp32 offset
    sizes = [256 * 256] * 4 + [256 * 704] * 3  # q, k, v, o; gate, up, down
    diff = 0
    for n in sizes:
        blocks = -(-n // BLOCKSIZE)
        diff += 4 * blocks - (blocks + 4 * -(-blocks // 256) + 4 * 256 + 4)
    assert measured["nodq"]["measured_weight_bytes"] - measured["new"]["measured_weight_bytes"] == 3 * diff


# PEFT's published 70B QLoRA run under DeepSpeed ZeRO-3 on two GPUs (data/golden/hardware.csv, peft-70b-qlora-dsz3-2gpu)
DS_QLORA_70B = dict(model="llama-2-70b", seq_len=2048, micro_batch=2, grad_accum=2, n_gpus=2, zero_stage=3,
                    precision="amp_bf16", framework="deepspeed", checkpointing="full", attention="flash", lora_rank=8,
                    lora_targets="all_linear", base_quant="nf4")


def test_a_quantized_base_under_deepspeed_zero3_loads_whole_on_every_gpu():
    # transformers builds a quantized model without zero.Init, so each GPU holds the whole NF4 base (the 16-bit copy
    # of the weight being quantized and peft's fp32 adapters beside it) until deepspeed.initialize partitions it over
    # the two ranks: twice the weights each keeps, less the quantization constants every rank keeps whole
    c = config(**DS_QLORA_70B)
    out, constants = outputs(c), replicated_quant_state_bytes(c)
    assert out["peak_phase"] == Phase.LOAD and 0.98e9 < constants < 1.1e9
    quantizing = 2 * 8192 * 28672  # Llama 2 70B's largest linear weight in bf16
    beyond_shards = out["allocated_peak_bytes"] - (2 * out["weight_bytes"] - constants)
    assert quantizing < beyond_shards < quantizing + 0.3e9  # + the adapters in fp32 rather than bf16
    assert out["temp_bytes"] == out["allocated_peak_bytes"] - out["weight_bytes"]
    assert out["activation_bytes"] == out["peak_grad_bytes"] == out["peak_optimizer_bytes"] == 0
    # the step reuses the load's segments: the reserve is the larger of the two
    step = peak(c, rank_terms(c))
    assert out["reserved_peak_bytes"] >= out["allocated_peak_bytes"] > step.allocated_bytes
    # nothing splits the model while it loads: the same whole base whatever the layout
    for layout in ({"tp": 2}, {"pp": 2}, {"n_gpus": 8}):
        assert outputs(config(**{**DS_QLORA_70B, **layout}))["allocated_peak_bytes"] == out["allocated_peak_bytes"]


@pytest.mark.parametrize("change", [{"base_quant": "none"}, {"framework": "fsdp"}, {"zero_stage": 2}])
def test_no_load_peak_where_the_base_is_sharded_as_it_loads_or_never_sharded(change):
    # unquantized: transformers' zero.Init shards at construction; FSDP (accelerate) loads it unsharded on the CPU;
    # ZeRO-2 keeps the whole weights anyway
    out = outputs(config(**{**DS_QLORA_70B, **change}))
    assert out["peak_phase"] != Phase.LOAD


def test_sharded_weights_leave_bitsandbytes_quant_states_whole_on_every_rank():
    # FSDP (accelerate) over bitsandbytes: the packed weights halve over two ranks, the QuantStates do not, even
    # offloaded; torchtune's torchao NF4Tensor (framework pytorch) shards its scalers with the data
    fsdp = config(**{**DS_QLORA_70B, "framework": "fsdp"})
    torchao = config(**{**DS_QLORA_70B, "framework": "pytorch"})
    constants = replicated_quant_state_bytes(fsdp)
    assert constants > 0 and replicated_quant_state_bytes(torchao) == 0
    assert abs(device_weight_bytes(fsdp) - device_weight_bytes(torchao) - constants / 2) <= 1
    offloaded = config(**{**DS_QLORA_70B, "framework": "fsdp", "offload": "optimizer_params"})
    assert device_weight_bytes(offloaded) == constants
