"""Issue #23 item 5: LoRA's frozen base under ZeRO-3 / FSDP, as PyTorch runs it.

torch.autocast caches the 16-bit cast of an fp32 leaf only when it requires grad (aten/src/ATen/autocast_mode.cpp,
cached_cast: `arg.requires_grad() && arg.is_leaf()`); a frozen weight's cast lives only where a matmul saved it
for backward. With recomputation nothing is saved, so a LoRA model under full recomputation keeps none of its
base's casts through forward (it was charged a 16-bit copy of the whole base: 134.8 GiB for 70B on 8 x H100).
FSDP and ZeRO-3 gather a quantized base in its packed storage, nf4 or int8, not in 16 bits.
"""

import pytest

from engine.model.levels import rank_terms
from engine.model.params import lora_params_per_layer
from engine.model.peak import forward_cast_bytes, saved_cast_bytes, stage_cast_bytes
from engine.model.sharding import prefetch_bytes, reduce_bytes_per_param, reduce_scatter_bytes
from engine.model.split import block_params_per_gpu, trainable_params_per_gpu
from engine.model.states import quantized_linear_bytes
from tests.support import config, outputs

GIB = 2**30
LLAMA_70B_LORA = {"model": "llama-2-70b", "n_gpus": 8, "zero_stage": 3, "lora_rank": 8, "lora_targets": "all_linear",
                  "micro_batch": 8, "grad_accum": 4, "framework": "pytorch", "precision": "amp_bf16", "attention": "flash"}


@pytest.mark.slow
def test_autocast_caches_only_the_casts_of_weights_that_require_grad():
    # The mechanism itself, on torch's CPU autocast (the same cached_cast as CUDA's): which 16-bit weight copies
    # are alive when forward ends, for four linears run with and without a checkpoint.
    torch = pytest.importorskip("torch")
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint

    class Casts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten._to_copy.default and out.shape == (64, 64):
                self.made.append(weakref.ref(out))
            return out

    def alive_at_end_of_forward(frozen: bool, recompute: bool) -> int:
        linears = [torch.nn.Linear(64, 64, bias=False).requires_grad_(not frozen) for _ in range(4)]
        x = torch.randn(8, 64) + torch.nn.Parameter(torch.randn(8, 64))  # the stream requires grad, as under LoRA

        def block(h):
            for linear in linears:
                h = linear(h)
            return h

        casts = Casts()
        with torch.autocast("cpu", dtype=torch.bfloat16), casts:
            y = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
            alive = sum(ref() is not None for ref in casts.made)
        del y
        return alive

    assert alive_at_end_of_forward(frozen=False, recompute=True) == 4  # the cache holds them until autocast exits
    assert alive_at_end_of_forward(frozen=False, recompute=False) == 4
    assert alive_at_end_of_forward(frozen=True, recompute=False) == 4  # saved by the matmuls for backward
    assert alive_at_end_of_forward(frozen=True, recompute=True) == 0  # neither cached nor saved


def test_a_frozen_base_keeps_no_casts_through_a_recomputed_forward():
    c = config(**LLAMA_70B_LORA, checkpointing="full")
    r = rank_terms(c)
    assert r.cast_bytes > 100 * GIB  # what the 16-bit copies would be: 2 bytes x 69B
    head_cast = 2 * 32000 * 8192  # the LM head is outside every checkpoint: its matmul saves its frozen weight's cast
    assert forward_cast_bytes(c, r, 0, True) == saved_cast_bytes(c, r, 0, True) == head_cast
    full = config(**{**LLAMA_70B_LORA, "lora_rank": 0}, checkpointing="full")
    rf = rank_terms(full)
    assert forward_cast_bytes(full, rf, 0, True) == stage_cast_bytes(full, rf, 0) == rf.cast_bytes  # cached


def test_lora_70b_on_8_h100_under_zero3_is_not_charged_the_base_in_16_bits():
    # was 134.83 GiB of temporaries and a 220.01 GiB device peak (PEFT's docs measure 64 GB per GPU with DeepSpeed
    # and a bf16 base; under framework = pytorch the frozen base is fp32, 32.17 GiB a GPU)
    # (the device peak also holds what FSDP2's side streams cache: fp32 all-gathers of the root and a block, 12 GiB)
    got = outputs(config(**LLAMA_70B_LORA, checkpointing="full"))
    assert got["temp_bytes"] < 20 * GIB and got["device_peak_bytes"] < 120 * GIB
    # without recomputation every layer's matmuls save their casts until backward: the copies are real then
    kept = outputs(config(**LLAMA_70B_LORA, checkpointing="none"))
    assert kept["temp_bytes"] > 2 * 64e9


@pytest.mark.parametrize("framework", ["pytorch", "fsdp"])
def test_fsdp_gathers_a_quantized_base_in_its_storage(framework):
    case = {"model": "llama-2-70b", "n_gpus": 8, "zero_stage": 3, "lora_rank": 8, "checkpointing": "full",
            "framework": framework}
    none, nf4, int8 = (config(**case, base_quant=q) for q in ("none", "nf4", "int8"))
    block = block_params_per_gpu(nf4)
    # bitsandbytes' quantization constants are no parameters (whole on every rank), torchao's NF4 scalers are
    constants = 0 if framework == "fsdp" else quantized_linear_bytes(nf4, block) - block // 2
    assert prefetch_bytes(nf4, block) == block // 2 + constants  # 4 bits a weight
    assert prefetch_bytes(int8, block) == block  # a byte
    assert prefetch_bytes(none, block) >= 2 * block  # the parameter dtype
    temps = [outputs(c)["temp_bytes"] for c in (nf4, int8, none)]
    assert temps == sorted(temps) and temps[0] < temps[1]  # were equal for nf4 and int8


def test_deepspeed_zero3_gathers_a_quantized_base_in_its_storage():
    case = {"model": "llama-2-70b", "n_gpus": 8, "zero_stage": 3, "lora_rank": 8, "checkpointing": "full",
            "framework": "deepspeed"}
    nf4, int8 = (rank_terms(config(**case, base_quant=q)) for q in ("nf4", "int8"))
    assert nf4.gather_bytes < int8.gather_bytes


def test_lora_reduce_scatters_only_a_block_of_adapters():
    c = config(**LLAMA_70B_LORA, checkpointing="full")
    block, trainable = block_params_per_gpu(c), trainable_params_per_gpu(c)
    adapters = lora_params_per_layer(c)  # one block's, tp = 1
    assert trainable > adapters  # every block's adapters: what a block reduce-scattered before
    assert reduce_scatter_bytes(c, block, trainable) == reduce_bytes_per_param(c) * (adapters + -(-adapters // 8))
