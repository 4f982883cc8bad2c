"""Saving a checkpoint between steps (engine/model/save.py): the one tensor a full save gathers, worked by hand, and
the phase it peaks in where the step holds less."""

import pytest

from engine.ask.explain import explain
from engine.inputs.codes import Phase
from engine.model.levels import rank_terms
from engine.model.peak import save_peak
from engine.model.save import save_gather_bytes
from tests.measure_helpers import quiet_harness  # noqa: F401 (the fixture)
from tests.support import config, outputs

LLAMA_8B = dict(model="llama-3.1-8b", n_gpus=8, zero_stage=3, micro_batch=1, seq_len=2048)  # V = 128,256, h = 4,096
V_H, H_F = 128_256 * 4_096, 4_096 * 14_336


@pytest.mark.parametrize("overrides, want", [
    (dict(framework="fsdp"), 4 * V_H),  # FSDP2 under amp: the fp32 embedding (and its fp32 moments), whole
    (dict(framework="fsdp", precision="bf16"), 2 * V_H),  # pure bf16: parameters and moments in 16 bits
    (dict(framework="fsdp", lora_rank=8), 2 * V_H),  # a frozen base in the compute dtype; the adapters' moments tiny
    (dict(framework="fsdp", lora_rank=8, base_quant="nf4", model="llama-2-70b"),  # V = 32,000, h = 8,192, f = 28,672
     2 * 8_192 * 28_672 + 8_192 * 28_672 // 2 + 8_192 * 28_672 // 64 + 4 * (8_192 * 28_672 // (64 * 256))),
    (dict(framework="deepspeed"), 2 * V_H),  # ZeRO-3: one module's own parameters in 16 bits, the embedding
    (dict(framework="deepspeed", zero_stage=2), 0),  # ZeRO-2 keeps every 16-bit weight whole: nothing to gather
    (dict(framework="megatron", zero_stage=1), 0),  # Megatron writes per rank
    (dict(n_gpus=1, zero_stage=0, lora_rank=8, base_quant="nf4"), 2 * H_F),  # one GPU: one weight dequantized
    (dict(n_gpus=1, zero_stage=0), 0),  # whole already: torch.save copies each storage to the host
    (dict(n_gpus=1, zero_stage=0, lora_rank=8, base_quant="int8"), 0),  # bitsandbytes' int8 weights saved as int8
    (dict(n_gpus=2, zero_stage=0, tp=2, lora_rank=8, base_quant="nf4"), H_F),  # a TP rank's shard, dequantized
    # Mixtral's experts are one 3D parameter per layer (transformers 5: gate_up_proj [8, 2 x 14,336, 4,096]), whole in
    # fp32 under FSDP2; DeepSpeed gathers the experts module's two parameters together, in 16 bits
    (dict(framework="fsdp", model="mixtral-8x7b"), 4 * 8 * 2 * 14_336 * 4_096),
    (dict(framework="deepspeed", model="mixtral-8x7b"), 2 * 8 * 3 * 14_336 * 4_096),
])
def test_a_full_save_gathers_one_tensor_at_a_time(overrides, want):
    c = config(**(LLAMA_8B | overrides | dict(save_state_dict="full")))
    assert save_gather_bytes(c) == want
    assert save_gather_bytes(config(**(LLAMA_8B | overrides))) == 0  # sharded, the default: nothing gathered


def test_the_save_is_the_peak_where_tensor_parallel_shrinks_the_step_but_not_the_gathered_tensor():
    # Qwen3 14B LoRA over 64 GPUs with TP 8 at 128 tokens: each rank's step holds a few hundred MiB, the full state
    # dict the whole 151,936 x 5,120 embedding in bf16 (1.45 GiB)
    case = dict(model="qwen3-14b", framework="fsdp", zero_stage=3, n_gpus=64, tp=8, seq_len=128, micro_batch=1,
                checkpointing="full", lora_rank=16)
    full, sharded = (outputs(config(**case, save_state_dict=s)) for s in ("full", "sharded"))
    assert full["peak_phase"] == Phase.SAVE and sharded["peak_phase"] != Phase.SAVE
    c = config(**case, save_state_dict="full")
    r = rank_terms(c)
    assert r.save_bytes == 2 * 151_936 * 5_120
    assert full["allocated_peak_bytes"] == r.columns.weight_bytes + r.columns.optimizer_bytes + r.save_bytes
    assert full["reserved_peak_bytes"] >= max(full["allocated_peak_bytes"], sharded["reserved_peak_bytes"])
    result = explain({**case, "save_state_dict": "full", "capacity_bytes": 4 * 2**30})  # a 4 GiB card: it does not fit
    assert [t["part"] for t in result["temporaries"]] == ["tensor gathered to save"] and not result["fits"]
    sharded_save = [s for s in result["suggestions"] if s["set"] == {"save_state_dict": "sharded"}]
    assert sharded_save and sharded_save[0]["device_peak_bytes"] < result["outputs"]["device_peak_bytes"]


@pytest.mark.slow
@pytest.mark.usefixtures("quiet_harness")
def test_a_traced_full_save_adds_what_memsim_counts():
    # Qwen2.5-0.5B's dims on 4 FSDP2 ranks: the save gathers 871 tensors one at a time; the fp32 embedding (tied to the
    # head), 151,936 x 896 x 4 B, is the most it adds (engine/checks/measure/save_probe.py)
    pytest.importorskip("torch")
    from engine.checks.measure import save_probe
    from engine.checks.measure.case import resolve
    from engine.configure.resolve import resolve_cases
    from engine.model.kernel import PlainRecord

    case = save_probe.case_of(*save_probe.CASES[2])
    seen = save_probe.traced_save(resolve(case))
    inputs = {k: v for k, v in case.items() if k not in ("model", "rank", "fsdp_param_dtype", "fsdp_reduce_dtype")}
    c = PlainRecord(resolve_cases([inputs])[0][0])
    r = rank_terms(c)
    assert seen["tensors"] == 871 and seen["extra"] == seen["largest"] == r.save_bytes == 151_936 * 896 * 4
    assert save_peak(c, r).allocated_bytes == pytest.approx(seen["base"] + seen["extra"], rel=1e-4)


def test_what_outlives_the_step_stays_through_the_save_and_a_paged_optimizer_stays_paged_out():
    # torchtune's full recipe (paged 8-bit AdamW in backward) under DeepSpeed ZeRO-3 on two 24 GB cards: the save
    # gathers the experts module (0.58 GiB) beside what the step leaves, ZeRO-3's reduce bucket included; the paged
    # states stay on the host, so the backward's peak is still the run's
    case = dict(recipe="torchtune-full", model="qwen3-30b-a3b", framework="deepspeed", zero_stage=3, n_gpus=2,
                seq_len=128, micro_batch=4, gpu="rtx-4090")
    c = config(**case, save_state_dict="full")
    r = rank_terms(c)
    save = save_peak(c, r)
    assert save.temp_bytes == r.save_bytes + r.bucket_bytes and r.bucket_bytes > 0
    assert save.allocated_bytes == r.columns.weight_bytes + save.temp_bytes  # no gradient, no unpaged state
    full, sharded = (outputs(config(**case, save_state_dict=s)) for s in ("full", "sharded"))
    assert full["peak_phase"] == sharded["peak_phase"] == Phase.BACKWARD
    assert full["device_peak_bytes"] == sharded["device_peak_bytes"]
