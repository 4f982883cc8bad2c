"""The memory model by hand: tiny cases with the arithmetic in comments, and the properties that must hold."""

import pytest

from engine.inputs.codes import Invalid
from engine.model.levels import rank_terms
from engine.model.params import param_count
from engine.model.peak import buckets_bytes, grads_live_in_forward, peak
from engine.model.split import rank_layers
from engine.model.stage import layer_activation_bytes
from engine.model.states import (
    device_grad_bytes,
    device_optimizer_bytes,
    device_weight_bytes,
    host_states_bytes,
    quantized_linear_bytes,
)
from engine.model.temporaries import optimizer_step_bytes
from tests.support import config, outputs, random_case

TINY_LLAMA = dict(n_layers=2, vocab=32000, ffn_type="swiglu", norm_type="rmsnorm", seq_len=512)


def layer_bytes(c, moe=False):
    """One layer's activations for one micro-batch."""
    return layer_activation_bytes(c, rank_terms(c), moe)


def test_param_count_tiny_gqa_swiglu_by_hand():
    # L=2 h=8 a=2 g=1 d=4 f=16 V=10, SwiGLU, RMSNorm, untied:
    #   attention: q 8*8 + k,v 2*8*4 + o 8*8 = 192;  FFN 3*8*16 = 384;  norms 2*8 = 16  -> 592 per layer
    #   embedding 10*8 = 80;  final norm 8 + head 80 = 88  -> 80 + 2*592 + 88 = 1352
    c = config(n_layers=2, d_model=8, n_heads=2, n_kv_heads=1, d_ff=16, vocab=10)
    assert param_count(c) == 1352


def test_param_count_gpt2_small_matches_hugging_face():
    # GPT2LMHeadModel.num_parameters() for the 124M config is 124,439,808 (tied head, learned positions).
    c = config(n_layers=12, d_model=768, n_heads=12, n_kv_heads=12, d_ff=3072, vocab=50257, ffn_type="gelu",
               norm_type="layernorm", linear_bias="all", n_positions=1024, tied_embeddings=True)
    assert param_count(c) == 124_439_808


def test_mixed_precision_adam_is_16_bytes_per_param_under_deepspeed():
    # ZeRO paper sec. 3.1: 2 (fp16 weights) + 2 (fp16 grads) + 12 (fp32 master, m, v) = 16 bytes.
    c = config(n_params=1000, n_layers=0, precision="amp_fp16", framework="deepspeed")
    assert device_weight_bytes(c) + device_grad_bytes(c) + device_optimizer_bytes(c) == 16 * 1000


def test_megatron_keeps_fp32_main_grads_18_bytes_per_param():
    # megatron/training/theoretical_memory_usage.py: 18 bytes/param, 6 + 12/dp with the distributed optimizer.
    c = config(n_params=1000, n_layers=0, precision="amp_bf16", framework="megatron")
    assert device_weight_bytes(c) + device_grad_bytes(c) + device_optimizer_bytes(c) == 18 * 1000
    c = config(n_params=1000, n_layers=0, precision="amp_bf16", framework="megatron", zero_stage=1, n_gpus=4)
    assert device_weight_bytes(c) + device_grad_bytes(c) + device_optimizer_bytes(c) == 6 * 1000 + 12 * 1000 // 4


def test_korthikanti_table2_tensor_parallel_row_by_hand():
    # s=4 b=1 h=8 a=2 t=2, GPT layer (GeLU, LayerNorm, dropout), Megatron's fused kernels, eager attention:
    #   10 sbh = 320;  (24 sbh + 5 a s^2 b) / t = (768 + 160) / 2 = 464  -> 784 bytes
    c = config(seq_len=4, micro_batch=1, d_model=8, n_heads=2, n_kv_heads=2, d_ff=32, ffn_type="gelu",
               norm_type="layernorm", tp=2, framework="megatron", precision="amp_fp16", dropout=0.1,
               attention="eager")
    assert layer_bytes(c) == 320 + 464


def test_korthikanti_full_recompute_keeps_the_layer_input_only():
    # Table 2, full recomputation: 2 sbh = 2*4*1*8 = 64 bytes (not divided by t without SP).
    c = config(seq_len=4, micro_batch=1, d_model=8, n_heads=2, n_kv_heads=2, tp=2, framework="megatron",
               precision="amp_fp16", checkpointing="full")
    assert layer_bytes(c) == 64


def test_flash_attention_drops_the_quadratic_term():
    eager = config(seq_len=512, attention="eager")
    flash = config(seq_len=512, attention="flash")
    assert layer_bytes(flash) < layer_bytes(eager)
    # doubling s doubles flash's activations exactly: nothing quadratic left
    assert layer_bytes(config(seq_len=1024, attention="flash")) == 2 * layer_bytes(flash)


REAL = dict(model="llama-3.1-8b", gpu="h100-sxm-80gb", seq_len=4096, micro_batch=2, attention="eager")


def allocated(**kw):
    return outputs(config(**{**REAL, **kw}))["allocated_peak_bytes"]


@pytest.mark.parametrize(
    "axis, values, fixed",
    [
        # ZeRO's stages (DeepSpeed). Not PyTorch's: FSDP's SHARD_GRAD_OP without a MixedPrecisionPolicy holds
        # the gathered fp32 model beside its shards at the loss, more than ZeRO-1's replicas (PARALLEL.md).
        ("zero_stage", [0, 1, 2, 3], dict(n_gpus=8, framework="deepspeed")),
        ("tp", [1, 2, 4, 8], dict(n_gpus=8, dp=0)),
        ("pp", [1, 2, 4, 8], dict(n_gpus=8, grad_accum=8)),
        ("checkpointing", ["none", "selective", "full"], dict()),
    ],
)
def test_more_sharding_or_recompute_never_raises_the_peak(axis, values, fixed):
    peaks = [allocated(**{**fixed, axis: v}) for v in values]
    assert peaks == sorted(peaks, reverse=True), dict(zip(values, peaks))


@pytest.mark.parametrize("axis, values", [("micro_batch", [1, 2, 4, 8]), ("seq_len", [512, 1024, 2048, 4096])])
def test_larger_batch_or_sequence_never_lowers_the_peak(axis, values):
    peaks = [allocated(**{axis: v}) for v in values]
    assert peaks == sorted(peaks)


def test_lora_never_needs_more_than_full_fine_tuning():
    for target in ("qv", "attn", "all_linear"):
        for quant in ("none", "nf4"):
            assert allocated(lora_rank=64, lora_targets=target, base_quant=quant) < allocated()


def test_nf4_with_and_without_double_quantization():
    # 65,536 weights: 32,768 B packed; with double quantization 1,024 8-bit absmaxes + 4 fp32 absmaxes of those
    # (QLoRA arXiv:2305.14314 sec. 3); without, 1,024 fp32 absmaxes (bitsandbytes compress_statistics=False)
    n = 65536
    kw = dict(model="llama-2-7b", lora_rank=8, lora_targets="qv")
    dq, nodq, int8 = (config(**kw, base_quant=q) for q in ("nf4", "nf4_nodq", "int8"))
    assert quantized_linear_bytes(dq, n) == 32768 + 1024 + 4 * 4
    assert quantized_linear_bytes(nodq, n) == 32768 + 4 * 1024
    assert quantized_linear_bytes(int8, n) == n


def test_more_expert_parallelism_never_raises_expert_memory():
    kw = dict(model="mixtral-8x7b", n_gpus=8, seq_len=2048, micro_batch=1)
    states = [device_weight_bytes(config(**kw, ep=e)) for e in (1, 2, 4, 8)]
    assert states == sorted(states, reverse=True) and states[-1] < states[0]


def test_context_parallel_divides_activations():
    kw = dict(model="llama-3.1-8b", seq_len=8192, attention="flash", n_gpus=4)
    one, four = (layer_bytes(config(**kw, cp=cp)) for cp in (1, 4))
    assert one == 4 * four


def test_offload_moves_bytes_to_the_host_without_losing_any():
    # ZeRO-Offload (arXiv:2101.06840 sec. 4): fp32 master + moments and the fp32 gradient partition live on
    # the host; on the device the same fp32 partition exists only during the optimizer step (DeepSpeed casts
    # the fp16 gradient partition to fp32 there). What leaves the device arrives on the host, byte for byte.
    kw = dict(model="llama-3.1-8b", n_gpus=8, zero_stage=2, precision="amp_bf16", framework="deepspeed")
    on, off = config(**kw), config(**kw, offload="optimizer")
    on_device = device_weight_bytes(on) + device_optimizer_bytes(on) + optimizer_step_bytes(on, rank_terms(on).trainable_params)
    assert device_weight_bytes(off) + host_states_bytes(off) == on_device
    assert device_optimizer_bytes(off) == 0 and device_grad_bytes(off) == 0 and host_states_bytes(on) == 0


@pytest.mark.parametrize("precision, fp32_buffers", [("bf16", 4), ("fp16", 4), ("fp32", 2), ("amp_bf16", 2)])
def test_adafactor_steps_with_fp32_copies_of_a_16_bit_tensor_beside_its_update(precision, fp32_buffers):
    # transformers' Adafactor.step, per tensor: grad.float() and p.float() of 16-bit parameters, then two
    # update-sized fp32 tensors at once (grad**2 and + eps; the old update and _approx_sq_grad's new one). GPT-2 XL's
    # largest tensor is its 50,257 x 1,600 embedding
    c = config(model="gpt2-xl", optimizer="adafactor", precision=precision)
    assert optimizer_step_bytes(c, rank_terms(c).trainable_params) == fp32_buffers * 4 * 50_257 * 1_600


def test_peak_phase_is_optimizer_for_tiny_activations():
    c = config(model="llama-3.1-8b", seq_len=16, micro_batch=1)
    assert peak(c, rank_terms(c)).phase == 2  # Phase.OPTIMIZER: the foreach AdamW sqrt buffer on top of all states


def test_an_evaluation_forward_holds_the_states_and_its_loss_by_hand():
    # bf16 Llama, 2 layers, h 256, V 32000: an evaluation of 16 x 512 tokens after the step holds the weights and
    # AdamW moments (the gradients are gone), the 16-bit logits, their fp32 upcast and the fp32 log-probs (10 B per
    # token and entry) and the final hidden states (2 B x h per token); nothing saved for backward
    c = config(**TINY_LLAMA, d_model=256, n_heads=4, d_ff=704, precision="bf16", micro_batch=1, eval_micro_batch=16)
    r = rank_terms(c)
    p = peak(c, r)
    tokens = 16 * 512
    assert p.phase == 3 and p.activation_bytes == 0 and not p.grads_live  # Phase.EVAL
    states = r.columns.weight_bytes + r.columns.optimizer_bytes
    assert p.allocated_bytes == states + tokens * (10 * 32000 + 2 * 256)
    # an evaluation smaller than the step leaves the step's peak where it was
    small = config(**{**TINY_LLAMA, "seq_len": 512}, d_model=256, n_heads=4, d_ff=704, precision="bf16", micro_batch=4,
                   eval_micro_batch=1)
    plain = config(**TINY_LLAMA, d_model=256, n_heads=4, d_ff=704, precision="bf16", micro_batch=4)
    assert peak(small, rank_terms(small)) == peak(plain, rank_terms(plain))
    # Megatron's contiguous gradient buffer outlives the step into the evaluation
    megatron = config(**TINY_LLAMA, d_model=256, n_heads=4, d_ff=704, framework="megatron", precision="amp_bf16",
                      micro_batch=1, eval_micro_batch=16)
    m = peak(megatron, rank_terms(megatron))
    assert m.phase == 3 and m.grads_live


def test_deepspeed_reduce_bucket_is_allocated_whole_and_zero3_keeps_its_gradients():
    # DeepSpeed makes its reduce bucket reduce_bucket_size = 5e8 elements of the 16-bit dtype however small the model:
    # ZeRO-1/2 as each backward begins, ZeRO-3 once; only ZeRO-3 keeps gradient buffers between steps (traced with
    # DeepSpeed 0.19.8: data/measured/PARALLEL.md, "DeepSpeed's reduce bucket")
    kw = dict(TINY_LLAMA, d_model=256, n_heads=4, d_ff=704, framework="deepspeed", precision="amp_bf16", n_gpus=4)
    for stage in (1, 2, 3):
        c = config(**kw, zero_stage=stage)
        r = rank_terms(c)
        assert r.bucket_bytes == 2 * 500_000_000
        assert grads_live_in_forward(c, 0) == (stage == 3)
        assert buckets_bytes(c, r, False) == (r.bucket_bytes if stage == 3 else 0)  # forward, optimizer step
        assert buckets_bytes(c, r, True) == r.bucket_bytes  # backward
    # overlap_comm: two buckets at ZeRO-1/2, one at ZeRO-3; the HF Trainer's "auto" size is d_model squared
    for stage, copies in ((2, 2), (3, 1)):
        c = config(**kw, zero_stage=stage, overlap_comm=True, reduce_bucket_size=256 * 256)
        assert rank_terms(c).bucket_bytes == copies * 2 * 256 * 256


def test_moe_capacity_factor_scales_the_routed_expert_activations():
    # Switch eq. 3: buffers sized to capacity_factor x the average load; the attention part does not change.
    kw = dict(model="mixtral-8x7b", n_gpus=8, ep=8, seq_len=1024)
    base, double = (layer_bytes(config(**kw, capacity_factor=cf), moe=True) for cf in (1.0, 2.0))
    dense = layer_bytes(config(**kw, capacity_factor=1.0))
    assert double > base > dense


def test_offloaded_states_must_fit_the_hosts_ram():
    kw = dict(model="llama-3.1-70b", gpu="h100-sxm-80gb", n_gpus=8, zero_stage=3, offload="optimizer",
              checkpointing="full", framework="deepspeed")
    assert outputs(config(**kw))["fits"] == 1  # fits: a DGX H100 has 2 TiB of RAM for 8 GPUs
    assert outputs(config(**kw, host_ram_bytes=2**30))["fits"] == 0  # 1 GiB of host RAM per GPU cannot hold the states


def test_zero_offload_trains_13b_on_one_v100():
    # ZeRO-Offload (arXiv:2101.06840 sec. 6.2): a 13B model on one 32 GB V100. The optimizer steps on the CPU,
    # so the GPU holds the fp16 weights, activations and buckets, no step buffer; the host's 194 GiB of states
    # fit because one GPU of a node has the node's RAM to itself (a full node's share would be 64 GiB).
    kw = dict(model="llama-2-13b", gpu="v100-sxm2-32gb", n_gpus=1, zero_stage=2, offload="optimizer",
              framework="deepspeed", precision="amp_fp16", checkpointing="full", seq_len=1024)
    c = config(**kw)
    assert optimizer_step_bytes(c, rank_terms(c).trainable_params) == 0
    out = outputs(c)
    assert out["fits"] == 1 and out["host_bytes"] > 64 * 2**30
    crowded = outputs(config(**{**kw, "host_ram_bytes": 16 * 2**30}))  # a node with 8 x 16 GiB cannot hold them
    assert crowded["valid"] == 1 and crowded["device_peak_bytes"] == out["device_peak_bytes"] and crowded["fits"] == 0


@pytest.mark.parametrize("dims, precision, traced", [
    # Bytes per token Inductor's partition saves for one block (engine/checks/measure/recipe_compile.py, flash,
    # rotary cos/sin left out; data/measured/RECIPES.md, compile).
    (dict(d_model=1024, n_heads=16, n_kv_heads=16, d_ff=2816), "bf16", 33_352),  # llama-400m-like
    (dict(d_model=1024, n_heads=16, n_kv_heads=16, d_ff=2816), "amp_bf16", 35_400),
    (dict(d_model=2048, n_heads=32, n_kv_heads=4, d_ff=5632), "bf16", 59_528),  # tinyllama-1.1b-like
    (dict(d_model=1024, n_heads=16, n_kv_heads=16, d_ff=4096, ffn_type="gelu", norm_type="layernorm",
          act_fn="gelu_new", fused_projections=True, linear_bias="all", dropout=0.1), "bf16", 34_888),  # gpt2-355m
])
def test_compiled_block_keeps_what_inductors_partition_saves(dims, precision, traced):
    c = config(**{**TINY_LLAMA, **dims}, precision=precision, attention="flash", compile=True)
    r = rank_terms(c)
    assert r.compiled_replicated_per_token + r.compiled_split_per_token == traced
    eager = config(**{**TINY_LLAMA, **dims}, precision=precision, attention="flash")
    assert layer_bytes(c) < layer_bytes(eager)


@pytest.mark.parametrize("dims, precision, traced", [
    # Bytes per token a compiled block saves under torchtitan's op policy (memsim measure --compiled on a
    # selective_op case, flash, rotary cos/sin left out; selective_op.py): the eager policy's set less the down
    # projection's output where the policy keeps it (Llama, GPT-2), the same set where it recomputes it (Qwen2).
    (dict(d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192), "bf16", 29_824),  # llama-3.2-1b-like
    (dict(d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192), "amp_bf16", 33_920),
    (dict(d_model=896, n_heads=14, n_kv_heads=2, d_ff=4864, linear_bias="qkv"), "bf16", 17_464),  # qwen2.5-0.5b
    (dict(d_model=768, n_heads=12, n_kv_heads=12, d_ff=3072, ffn_type="gelu", norm_type="layernorm",
          act_fn="gelu_new", fused_projections=True, linear_bias="all"), "bf16", 15_408),  # gpt2-124m
])
def test_compiled_selective_op_block_keeps_what_inductors_partition_saves(dims, precision, traced):
    kw = dict(precision=precision, attention="flash", checkpointing="selective_op", micro_batch=1)
    compiled = config(**{**TINY_LLAMA, **dims}, compile=True, **kw)
    assert layer_bytes(compiled) == traced * compiled.seq_len
    eager = layer_bytes(config(**{**TINY_LLAMA, **dims}, **kw))
    assert eager - layer_bytes(compiled) == (0 if dims.get("linear_bias") == "qkv" else 2 * dims["d_model"] * 512)


def test_a_compiled_block_keeps_the_down_projections_output_where_a_post_norm_reads_it():
    # Gemma 2's post-FFN norm and OLMo 2's post-norms read the down projection's output in backward, so a compiled
    # block saves it as the eager policy does; a pre-norm decoder drops it. What backward rebuilds stays eager's.
    from engine.model.stage import layer_bytes as step_layer_bytes

    def per_layer(model, **kw):
        kw = dict(model=model, checkpointing="selective_op", attention="flash", seq_len=4096, **kw)
        eager, compiled = config(**kw), config(**kw, compile=True)
        return [(layer_bytes(c), step_layer_bytes(c, rank_terms(c)).recomputed) for c in (eager, compiled)]

    for post_norm in ("gemma-2-9b", "olmo-2-7b"):
        assert len(set(per_layer(post_norm))) == 1, post_norm
    (eager, eager_rebuilt), (compiled, rebuilt) = per_layer("llama-3.1-8b")
    assert eager - compiled == 2 * 4096 * 4096 and rebuilt == eager_rebuilt
    assert len(set(per_layer("llama-3.1-8b", lora_rank=16))) == 1  # LoRA's adapters on it: not traced
    no_recompute = dict(model="llama-3.1-8b", attention="flash", lora_rank=16, base_quant="nf4")
    assert layer_bytes(config(**no_recompute, compile=True)) == layer_bytes(config(**no_recompute))  # nor compiled


def test_uneven_pipeline_splits_are_valid_rows():
    # Llama 3.1 405B's 126 layers on 8 stages (torchtitan): 16 on the first six, 15 on the last two.
    c = config(model="llama-3.1-405b", n_gpus=8, pp=8, grad_accum=8)
    assert outputs(c)["valid"] == 1 and [rank_layers(c, r) for r in range(8)] == [16] * 6 + [15] * 2
    llama24 = {**TINY_LLAMA, "n_layers": 24, "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "d_ff": 128}
    fixed = config(**llama24, pp=4, n_gpus=4, grad_accum=8, pp_first_layers=5, pp_last_layers=3)
    assert [rank_layers(fixed, r) for r in range(4)] == [5, 8, 8, 3] and outputs(fixed)["valid"] == 1
    too_many = config(**llama24, pp=4, n_gpus=4, grad_accum=8, pp_first_layers=20, pp_last_layers=4)
    assert outputs(too_many)["invalid_reason"] == Invalid.PP_LAYERS  # the two middle stages would be empty


def test_compile_loss_false_keeps_the_compiled_blocks_and_the_eager_loss():
    # torchtitan's Dec-2024 train.py left loss_fn eager under training.compile; torchtune upcasts the logits in its
    # eager output layer: the blocks keep Inductor's saved set, the loss its eager buffers (loss.py).
    from engine.model.loss import loss_backward_bytes, loss_forward_bytes

    kw = dict(model="llama-3.1-8b", seq_len=4096, attention="flash", precision="bf16")
    blocks_only, compiled, eager = (config(**kw, compile=True, compile_loss=False), config(**kw, compile=True),
                                    config(**kw))
    t = 4096  # one sequence, as each of the three runs it
    for loss in (loss_forward_bytes, loss_backward_bytes):
        assert loss(blocks_only, t) == loss(eager, t) > loss(compiled, t)
    assert layer_bytes(blocks_only) == layer_bytes(compiled) < layer_bytes(eager)


def test_the_shape_keeps_the_loss_per_token_only_where_every_step_is_a_whole_multiple_of_it():
    """loss.loss_bytes_per_token: where the shape keeps bytes per token, every token count's loss is exactly that
    many times them (the step multiplies instead of working it out); elsewhere it keeps none and the step works the
    loss out. Random configurations of every loss, vocabulary split and precision the kernel's tests draw."""
    import numpy as np

    from engine.configure.resolve import resolve_cases
    from engine.model.activations import local_tokens
    from engine.model.kernel import PlainRecord
    from engine.model.loss import NOT_PROPORTIONAL, loss_bytes, loss_bytes_per_token, step_loss_bytes
    from engine.model.params import has_dims

    rng = np.random.default_rng(47)
    records, _, _ = resolve_cases([random_case(rng) for _ in range(2000)])
    kept = worked_out = 0
    for record in records:
        c = PlainRecord(record)
        if not has_dims(c):
            continue
        per_token = loss_bytes_per_token(c)
        assert step_loss_bytes(c, per_token) == loss_bytes(c, local_tokens(c))
        if per_token == NOT_PROPORTIONAL:
            worked_out += 1
            continue
        kept += 1
        for t in (1, 3, 1000, 12_345):
            assert loss_bytes(c, t) == tuple(t * x for x in per_token)
    assert kept > 100 and worked_out > 100  # both kinds drawn
