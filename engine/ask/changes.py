"""The single changes `memsim explain` tries on a configuration that does not fit: layout and recomputation, then
the training-recipe knobs (CONFIG.md "Training recipe") and cheaper training methods. Each is a (what to say, the
changed inputs) pair; explain evaluates them in one batch and keeps those that lower the peak."""

from engine.catalogs.conventions import FRAMEWORK_FUSED_KERNELS
from engine.inputs.codes import (
    Allocator,
    Attn,
    Ckpt,
    Framework,
    GradSync,
    LossImpl,
    Offload,
    Optimizer,
    OptimizerImpl,
    Precision,
    SaveStateDict,
)


def variants(case: dict, rec) -> list[tuple[str, dict]]:
    """Changes worth trying, each as (what to say, the changed case)."""
    out = []
    if rec.zero_stage < 3 and rec.dp * rec.cp > 1:
        out.append((f"ZeRO stage {rec.zero_stage + 1}", {"zero_stage": rec.zero_stage + 1}))
    if rec.checkpointing == Ckpt.NONE:
        out.append(("selective activation recomputation", {"checkpointing": "selective"}))
    if rec.checkpointing != Ckpt.FULL:
        out.append(("full activation recomputation", {"checkpointing": "full"}))
    if rec.attention != Attn.FLASH:
        out.append(("flash attention", {"attention": "flash"}))
    if rec.micro_batch > 1:
        mb = rec.micro_batch // 2
        out.append((f"micro-batch {mb} (grad_accum x2 keeps the batch)", {"micro_batch": mb, "grad_accum": rec.grad_accum * 2}))
    if rec.eval_micro_batch > 1:
        emb = rec.eval_micro_batch // 2
        out.append((f"evaluation micro-batch {emb} (per_device_eval_batch_size)", {"eval_micro_batch": emb}))
    if rec.dp % 2 == 0:
        out.append((f"tensor parallel {rec.tp * 2} on the same GPUs", {"tp": rec.tp * 2, "dp": rec.dp // 2}))
    if rec.tp > 1 and not rec.sp:
        out.append(("sequence parallel", {"sp": True}))
    out += offload_variants(rec)
    out.append((f"{rec.n_gpus * 2} GPUs with ZeRO-3", {"n_gpus": rec.n_gpus * 2, "dp": 0, "zero_stage": 3}))
    return out + recipe_variants(rec)


def offload_variants(rec) -> list[tuple[str, dict]]:
    """Offload wherever it can run (ZeRO-Offload needs ZeRO >= 1, which on one replica shards nothing; ZeRO-Infinity's
    offloaded parameters need ZeRO-3): the optimizer states, then the parameters too."""
    out = []
    if rec.offload == Offload.NONE:
        if rec.zero_stage >= 1:
            out.append(("offload the optimizer to host RAM", {"offload": "optimizer"}))
        else:
            out.append(("offload the optimizer to host RAM (ZeRO-1 + ZeRO-Offload)",
                        {"offload": "optimizer", "zero_stage": 1}))
    if rec.offload != Offload.OPTIMIZER_PARAMS:
        out.append(("offload the optimizer and parameters to host RAM (ZeRO-3 + ZeRO-Infinity)",
                    {"offload": "optimizer_params", "zero_stage": 3}))
    return out


def recipe_variants(rec) -> list[tuple[str, dict]]:
    """The training-recipe knobs (CONFIG.md "Training recipe") and cheaper training methods worth trying."""
    out = []
    if rec.framework == Framework.PYTORCH and rec.zero_stage > 0 and rec.precision in (Precision.AMP_BF16,
                                                                                        Precision.AMP_FP16):
        out.append(("FSDP2 with a MixedPrecisionPolicy (16-bit gathers, no autocast weight copies)",
                    {"framework": "fsdp"}))
    if rec.grad_sync == GradSync.LAST and rec.grad_accum > 1:
        out.append(("sync the gradients every micro-batch (accelerate's sync_each_batch=True)", {"grad_sync": "every"}))
    if rec.allocator == Allocator.CACHING:  # the caching allocator's own advice when it runs out of memory
        out.append(("expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                    {"allocator": "expandable"}))
    if rec.save_state_dict == SaveStateDict.FULL:
        out.append(("save sharded checkpoints (torch.distributed.checkpoint; accelerate's SHARDED_STATE_DICT)",
                    {"save_state_dict": "sharded"}))
    if rec.optimizer_impl != OptimizerImpl.FUSED:
        out.append(("the fused optimizer step (torch.optim fused=True)", {"optimizer_impl": "fused"}))
    if not rec.optimizer_in_backward and rec.grad_accum == 1:  # each parameter steps as its gradient is made:
        # nothing accumulates (torchtune refuses gradient accumulation with optimizer_in_bwd)
        out.append(("the optimizer step in backward (torchtune optimizer_in_bwd)", {"optimizer_in_backward": True}))
    if rec.loss_impl == LossImpl.STANDARD:
        out.append(("chunked cross-entropy (torchtune, 8 chunks)", {"loss_impl": "chunked", "loss_chunks": 8}))
    if rec.loss_impl != LossImpl.FUSED_LINEAR:
        out.append(("fused linear cross-entropy (Liger, Cut Cross-Entropy)", {"loss_impl": "fused_linear"}))
    if rec.checkpointing in (Ckpt.NONE, Ckpt.SELECTIVE):
        out.append(("op-level selective recomputation (torchtitan)", {"checkpointing": "selective_op"}))
    if not rec.compile and not FRAMEWORK_FUSED_KERNELS[rec.framework]:  # Inductor's partition of PyTorch's modules
        # keeps less for backward (compiled.py, selective_op.py), the loss too; as memsim plan searches it
        out.append((f"torch.compile (the blocks{' and the loss' if rec.compile_loss else ''})", {"compile": True}))
    if not rec.activation_offload:
        out.append(("activation offload to host RAM", {"activation_offload": True}))
    if rec.optimizer in (Optimizer.ADAM, Optimizer.ADAMW):
        out.append(("8-bit AdamW (bitsandbytes)", {"optimizer": "adamw_8bit"}))
    if rec.precision in (Precision.FP32, Precision.AMP_BF16, Precision.AMP_FP16):
        out.append(("pure bf16 (no fp32 master weights)", {"precision": "bf16"}))
    if rec.lora_rank == 0:
        out.append(("LoRA r=16 (trains adapters only)", {"lora_rank": 16}))
        out.append(("QLoRA r=16 (NF4 base, trains adapters only)", {"lora_rank": 16, "base_quant": "nf4"}))
    return out
