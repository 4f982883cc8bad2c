"""The measured LoRA / QLoRA set: a bitsandbytes-quantized base, old and new bitsandbytes, LoRA dropout, held
outputs, transformers' loss before 4.46 (shifted logits), a quantized LM head, and LoRA / QLoRA on several GPUs
(DDP, FSDP2).

Example:
    memsim measure --set qlora -o data/measured/qlora.csv
    memsim measure --set qlora -o /tmp/q.csv --only fsdp

Each case is ``measure_case(case, 'fake')``: one GPU as in cpu_fake.csv, several as one rank of a world simulated
under torch.distributed's fake process group (parallel.csv). The quantized base is bitsandbytes' own Linear4bit
under fake tensors (quantized.py). See data/measured/QLORA.md.
"""

from __future__ import annotations

from engine.checks.measure import reference_parallel
from engine.checks.measure.reference_set import MODELS
from engine.errors import UserError

# inputs beside reference_set's CONFIG_COLUMNS
SETTINGS = ["lora_dropout", "lora_dtype", "quant_saves_input", "outputs_held", "shifted_logits", "quant_lm_head",
            "outputs_fp32", "loss_impl", "loss_chunks"]
Q, QOLD = {"base_quant": "nf4"}, {"base_quant": "nf4", "quant_saves_input": True}
QV16, ALL64 = {"lora_rank": 16, "lora_targets": "qv"}, {"lora_rank": 64, "lora_targets": "all_linear"}
FSDP = {"framework": "fsdp", "zero_stage": 3}
ADAPTERS16 = {"lora_dtype": "compute"}

# family -> [(model, seq_len, micro_batch, precision, fields)]; AdamW, flash attention throughout
FAMILY_CASES = {
    "qlora": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **Q}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, "base_quant": "nf4_nodq"}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q}),
        ("llama-400m-like", 2048, 4, "amp_bf16", {**ALL64, **Q}),
        ("llama-3.2-1b-like", 4096, 1, "bf16", {**QV16, **Q, "checkpointing": "full"}),
        ("qwen2.5-0.5b-like", 2048, 2, "bf16", {**QV16, **Q}),
    ],
    "qlora_old_bnb": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **QOLD}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **QOLD}),
        ("llama-400m-like", 2048, 4, "amp_bf16", {**ALL64, **QOLD}),
        ("llama-3.2-1b-like", 4096, 1, "bf16", {**QV16, **QOLD, "checkpointing": "full"}),
        ("qwen2.5-0.5b-like", 2048, 2, "bf16", {**QV16, **QOLD, "base_quant": "nf4_nodq"}),
    ],
    "lora_dropout": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, "lora_dropout": 0.05}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q, "lora_dropout": 0.1}),
        ("llama-400m-like", 2048, 4, "amp_bf16", {**ALL64, "lora_dropout": 0.05}),
        ("llama-400m-like", 2048, 4, "amp_bf16", {**ALL64, **QOLD, "lora_dropout": 0.05}),
    ],
    "outputs_held": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, "outputs_held": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **QOLD, "outputs_held": True, "lora_dropout": 0.05}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **QOLD, "outputs_held": True}),
    ],
    "shifted_logits": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, "shifted_logits": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, "shifted_logits": True, "outputs_held": True}),
        ("llama-400m-like", 2048, 4, "amp_bf16", {**ALL64, "shifted_logits": True, "outputs_held": True}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **Q, "lora_dropout": 0.1, "checkpointing": "full",
                                              "shifted_logits": True, "outputs_held": True}),
    ],
    "quant_lm_head": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **QOLD, "quant_lm_head": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **QOLD, "quant_lm_head": True, "outputs_held": True,
                                                  "lora_dropout": 0.05}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **Q, "quant_lm_head": True}),
    ],
    "outputs_fp32": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **ADAPTERS16, "outputs_fp32": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **ADAPTERS16, **QOLD, "outputs_fp32": True,
                                                  "outputs_held": True, "lora_dropout": 0.05}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **ADAPTERS16, "outputs_fp32": True, "loss_impl": "chunked",
                                                  "loss_chunks": 16, "lora_dropout": 0.05}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **ADAPTERS16, **QOLD, "outputs_fp32": True,
                                              "loss_impl": "chunked", "loss_chunks": 16, "quant_lm_head": True}),
    ],
    "lora_compute_dtype": [
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **ADAPTERS16}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q, **ADAPTERS16}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **ADAPTERS16, "lora_dropout": 0.05}),
        ("llama-3.2-1b-like", 4096, 1, "bf16", {**QV16, **Q, **ADAPTERS16, "checkpointing": "full"}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **Q, **ADAPTERS16, "lora_dropout": 0.1, "checkpointing": "full",
                                              "shifted_logits": True, "outputs_held": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q, **ADAPTERS16, "lora_dropout": 0.1, "n_gpus": 2}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **QOLD, **ADAPTERS16, "checkpointing": "full"}),
        ("llama-400m-like", 2048, 4, "bf16", {**ALL64, **QOLD, **ADAPTERS16, "outputs_held": True}),
    ],
    "lora_ddp": [
        ("llama-400m-like", 2048, 2, "bf16", {**QV16, "n_gpus": 2}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q, "n_gpus": 4}),
    ],
    "lora_fsdp": [
        ("llama-400m-like", 2048, 2, "bf16", {**ALL64, **FSDP, "n_gpus": 4}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**QV16, **FSDP, "n_gpus": 8}),
        ("llama-400m-like", 2048, 2, "bf16", {**ALL64, "framework": "fsdp", "zero_stage": 2, "n_gpus": 4}),
    ],
    "qlora_fsdp": [
        ("llama-400m-like", 2048, 2, "bf16", {**ALL64, **Q, **FSDP, "n_gpus": 4}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", {**ALL64, **Q, **FSDP, "n_gpus": 2}),
        ("tinyllama-1.1b-like", 4096, 1, "bf16", {**QV16, **Q, **FSDP, "n_gpus": 8, "checkpointing": "full"}),
        ("llama-400m-like", 2048, 2, "bf16", {**ALL64, **QOLD, **FSDP, "n_gpus": 4}),
    ],
}


def case_id(family: str, model: str, seq: int, mb: int, precision: str, f: dict) -> str:
    """e.g. ``qlora_tinyllama-1.1b-like_bf16_s2048_b2_lora16-qv_nf4``."""
    parts = [family, model, precision, f"s{seq}", f"b{mb}", f"lora{f['lora_rank']}-{f['lora_targets']}"]
    parts += [f["base_quant"]] if f.get("base_quant") else []
    parts += ["kept-input"] if f.get("quant_saves_input") else []
    parts += [f"drop{f['lora_dropout']}"] if f.get("lora_dropout") else []
    parts += ["adapters16"] if f.get("lora_dtype") == "compute" else []
    parts += ["held"] if f.get("outputs_held") else []
    parts += ["shifted"] if f.get("shifted_logits") else []
    parts += ["fp32out"] if f.get("outputs_fp32") else []
    parts += [f"chunked{f['loss_chunks']}"] if f.get("loss_impl") == "chunked" else []
    parts += ["qhead"] if f.get("quant_lm_head") else []
    parts += ["ckpt"] if f.get("checkpointing") == "full" else []
    if f.get("n_gpus"):
        parts += [f"{'fsdp' if f.get('framework') == 'fsdp' else 'ddp'}{f['n_gpus']}"]
        parts += [f"z{f['zero_stage']}"] if f.get("zero_stage") else []
    return "_".join(parts)


def reference_cases() -> list[tuple[str, str, dict]]:
    """(case_id, family, case) for every case."""
    out = []
    for family, cases in FAMILY_CASES.items():
        for model, seq, mb, precision, fields in cases:
            case = {"model": model, **MODELS[model], "seq_len": seq, "micro_batch": mb, "precision": precision,
                    "optimizer": "adamw", "attention": "flash", **fields}
            out.append((case_id(family, model, seq, mb, precision, fields), family, case))
    return out


def columns() -> list[str]:
    """The CSV header of qlora.csv: parallel.csv's, with ``SETTINGS`` after the layout and bitsandbytes' version."""
    cols = reference_parallel.columns()
    at = cols.index("zero_stage") + 1
    return [*cols[:at], *SETTINGS, *cols[at:], "bitsandbytes_version"]


def measure_row(cid: str, family: str, case: dict, device: str = "fake") -> dict:
    """One CSV row: reference_parallel's row (one GPU or one rank) and the bitsandbytes that ran it."""
    try:
        import bitsandbytes
    except ImportError as err:
        raise UserError(f"the qlora set needs bitsandbytes: pip install 'memsim[measure]' ({err})") from None
    row = reference_parallel.measure_row(cid, family, case, device)
    return {**row, "bitsandbytes_version": bitsandbytes.__version__}
