"""explain's named temporaries (engine/ask/temporaries.py) add up to the model's temp_bytes at the peak
for every kind of step: each framework, ZeRO stage, pipeline schedule, recompute, loss, LoRA/QLoRA and loop
convention, on one GPU and many. A change to peak.stage_peak that the itemization does not follow fails here."""

import random

from engine.ask.temporaries import SOURCES, temporaries_at_peak
from engine.configure.resolve import resolve_case
from engine.inputs.codes import Invalid
from engine.model.levels import evaluate_one

AXES = {
    "model": ["llama-3.1-8b", "gpt2", "qwen2.5-0.5b", "mixtral-8x7b", "gemma-2-2b"],
    "framework": ["pytorch", "fsdp", "deepspeed", "megatron"],
    "precision": ["amp_bf16", "bf16", "fp32", "fp8"],
    "zero_stage": [0, 1, 2, 3],
    "checkpointing": ["none", "selective", "full", "selective_op"],
    "loss_impl": ["standard", "chunked", "fused_linear"],
    "layout": [(1, 1, 1), (8, 1, 1), (8, 2, 1), (16, 2, 2), (32, 2, 4), (8, 1, 4)],  # n_gpus, tp, pp
    "grad_accum": [1, 2, 8],
    "pp_schedule": ["1f1b", "gpipe", "interleaved"],
    "method": [{}, {"lora_rank": 16}, {"lora_rank": 16, "base_quant": "nf4"}],
    "loop": [{}, {"outputs_held": True}, {"optimizer_in_backward": True}, {"activation_offload": True},
             {"zero_grad": "zeros"}],
    "micro_batch": [1, 4],
    "eval_micro_batch": [0, 0, 16],
    "seq_len": [1024, 4096],
}


def cases(n=200, seed=21):
    rng = random.Random(seed)
    for _ in range(n):
        pick = {k: rng.choice(v) for k, v in AXES.items()}
        n_gpus, tp, pp = pick.pop("layout")
        case = {**pick.pop("method"), **pick.pop("loop"), **pick, "gpu": "h100-sxm-80gb", "n_gpus": n_gpus, "tp": tp,
                "pp": pp, "vpp": 2 if pick["pp_schedule"] == "interleaved" and pp > 1 else 1}
        if pp == 1:
            case["pp_schedule"] = "1f1b"
        yield case


def test_named_temporaries_add_up_to_temp_bytes_at_the_peak():
    itemized = 0
    for case in cases():
        rec, _, _ = resolve_case(case)
        r, s, _, _ = evaluate_one(rec)
        if s.reason != Invalid.OK:
            continue
        parts = temporaries_at_peak(rec, r)
        assert sum(size for _, size in parts) == s.columns.temp_bytes, case
        assert "temporaries" not in dict(parts) and set(dict(parts)) <= set(SOURCES), (case, parts)  # no lump
        itemized += 1
    assert itemized > 80  # most sampled cases run: the test covers what it claims
