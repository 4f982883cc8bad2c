"""LitGPT's own LoRA finetune step traced on fake tensors, with and without Lightning Fabric's fp32 outputs.

    git clone https://github.com/Lightning-AI/litgpt && git -C litgpt checkout 8641822
    python -m engine.checks.measure.litgpt_probe litgpt                    # phi-1_5, 1,044 tokens, micro-batch 1 and 4

LitGPT's resource tables (data/golden/hardware.csv, litgpt23-*) measured `torch.cuda.max_memory_allocated()` of
finetune/lora.py at lit-gpt 8641822, whose model, LoRA and loss code differ from transformers' (a fused q/k/v
projection with one LoRA and a zero-padded update, a partial rotary applied by concatenation, a chunked head).
The probe imports that code from a checkout (lit_gpt/model.py, lora.py, config.py and utils.py import only
torch beside Lightning; the Lightning names they import for loading and strategies are stubbed), builds the
table's configuration in bf16 on fake tensors (`lightning.Fabric(precision="bf16-true")` makes every parameter
bf16; the rotary cache is rebuilt in fp32 when train() sets the longest length), and runs two steps of
finetune/lora.py's loop: `logits = model(input_ids, lm_head_chunk_size=128)`, the last chunk shifted,
`chunked_cross_entropy`, backward, AdamW over the adapters. Fabric's wrapper then casts the model's floating
outputs to fp32 (fabric/wrappers.py `_FabricModule.forward`: `precision.convert_output(output)`, Lightning 2.1.0
`plugins/precision/half.py`): the probe runs the step with that cast (`outputs_fp32`, as the run had it) and
without it (the model called directly). It reports the peak of live bytes against the table and memsim.
Findings: data/measured/QLORA.md, "LitGPT through Lightning Fabric".
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

from engine.errors import UserError

GIB = 2**30
# (lit-gpt config name, memsim model, micro-batch, seq_len, hardware.csv case_id): the 2023 table's phi-1.5 rows
CASES = [("phi-1_5", "phi-1.5", 1, 1044, "litgpt23-phi-1.5-lora-bf16-mb1"),
         ("phi-1_5", "phi-1.5", 4, 1044, "litgpt23-phi-1.5-lora-bf16-mb4")]
LIGHTNING_STUBS = ["lightning", "lightning.fabric", "lightning.fabric.strategies", "lightning.fabric.utilities",
                   "lightning.fabric.utilities.load", "lightning_utilities", "lightning_utilities.core",
                   "lightning_utilities.core.imports"]


class _Requirement:
    """lightning_utilities' RequirementCache, stubbed as met: lit_gpt/__init__.py checks for lightning 2.1."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __bool__(self) -> bool:
        return True


def import_lit_gpt(checkout: Path):
    """lit_gpt's (GPT, Config, mark_only_lora_as_trainable, chunked_cross_entropy) from a checkout at 8641822."""
    if not (checkout / "lit_gpt" / "lora.py").is_file():
        raise UserError(f"{checkout} has no lit_gpt/lora.py: pass a LitGPT checkout at 8641822 (2023-10)")
    for name in LIGHTNING_STUBS:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["lightning"].Fabric = object
    sys.modules["lightning.fabric.strategies"].FSDPStrategy = object
    sys.modules["lightning.fabric.utilities.load"]._lazy_load = None
    sys.modules["lightning_utilities.core.imports"].RequirementCache = _Requirement
    tokenizer = types.ModuleType("lit_gpt.tokenizer")
    tokenizer.Tokenizer = object  # needs sentencepiece / tokenizers; the step does not use it
    sys.modules["lit_gpt.tokenizer"] = tokenizer
    # lit_gpt is the checkout's source tree, not an installed package (LitGPT of 2023 was never on PyPI under that
    # name): it is imported from the path the user gives, so it is named here, not in pyproject.toml
    sys.path.insert(0, str(checkout))
    lora = importlib.import_module("lit_gpt.lora")
    utils = importlib.import_module("lit_gpt.utils")
    return lora.GPT, lora.Config, lora.mark_only_lora_as_trainable, utils.chunked_cross_entropy


def traced_peak(lit, name: str, micro_batch: int, seq_len: int, outputs_fp32: bool) -> int:
    """Peak live bytes of the second of two LoRA steps (r 8, alpha 16, dropout 0.05 on q and v, the table's)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from engine.checks.measure import breakdown
    from engine.checks.measure.cuda_semantics import cuda_semantics
    from engine.checks.measure.tracker import LiveBytes

    GPT, Config, mark_only_lora_as_trainable, chunked_cross_entropy = lit
    config = Config.from_name(name, r=8, alpha=16, dropout=0.05, to_query=True, to_value=True)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # fabric.init_module() under bf16-true
    try:
        with torch.device("meta"):
            model = GPT(config)
    finally:
        torch.set_default_dtype(default)
    mark_only_lora_as_trainable(model)
    with FakeTensorMode():
        model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype))
        model.max_seq_length = seq_len  # train(): the rotary cache rebuilt in the default dtype, fp32
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4)
        lb = LiveBytes()
        for t in (*model.parameters(), *model.buffers()):
            lb.track(t, "weights")
        with cuda_semantics("flash"), lb:
            for step in range(2):
                lb.step = step
                lb.mark(f"step{step}")
                lb.phase = "forward"
                input_ids = torch.randint(0, config.vocab_size, (micro_batch, seq_len))
                logits = model(input_ids, lm_head_chunk_size=128)
                if outputs_fp32:  # Fabric's convert_output: each floating output to the default dtype
                    logits = [chunk.float() for chunk in logits]
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, input_ids[..., 1:])
                lb.phase = "backward"
                loss.backward()
                lb.phase = "optimizer"
                optimizer.step()
                optimizer.zero_grad()
                del logits, loss
                lb.mark(f"end{step}")
    return breakdown.peak(lb, lb.marks["step1"], lb.marks["end1"])[0]


def memsim_allocated(case_id: str) -> int:
    """memsim's allocated peak for the hardware row, with its extra inputs (outputs_fp32 among them)."""
    from engine.ask.evaluate import evaluate_cases
    from engine.checks.hardware import hardware_rows
    from engine.checks.validate import config_of

    row = next(r for r in hardware_rows() if r["case_id"] == case_id)
    return evaluate_cases([config_of(row)])[0]["allocated_peak_bytes"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.checks.measure.litgpt_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a LitGPT checkout at commit 8641822")
    args = parser.parse_args(argv)
    try:
        lit = import_lit_gpt(args.checkout)
    except UserError as err:
        print(f"litgpt_probe: error: {err}", file=sys.stderr)
        return 2
    from engine.checks.hardware import hardware_rows

    measured = {r["case_id"]: float(r["value_gib"]) * GIB for r in hardware_rows({"litgpt-2023"})}
    print(f"{'GiB':38s} measured   traced, model called   traced, Fabric's fp32   memsim")
    for name, _, micro_batch, seq_len, case_id in CASES:
        direct = traced_peak(lit, name, micro_batch, seq_len, outputs_fp32=False)
        fabric = traced_peak(lit, name, micro_batch, seq_len, outputs_fp32=True)
        m, ours = measured[case_id], memsim_allocated(case_id)
        shown = [f"{b / GIB:8.3f} ({100 * (b - m) / m:+5.1f}%)" for b in (direct, fabric, ours)]
        print(f"{case_id:38s} {m / GIB:8.3f}   " + "      ".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
