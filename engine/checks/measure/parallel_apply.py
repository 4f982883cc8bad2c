"""How the harness applies a multi-GPU layout (parallel.py checks it first) to a built model, the way the framework
the layout names does it, with that framework's own code:

    layout (CONFIG.md)                               what runs
    framework=pytorch, zero_stage=0, dp>1            torch DistributedDataParallel (bucket_cap_mb,
                                                     gradient_as_bucket_view: harness columns)
    framework=fsdp, zero_stage=3 | 2                 FSDP2 ``fully_shard`` on every decoder block, then the root
                                                     (fsdp_groups=split: the embedding and [norm, head] too);
                                                     reshard_after_forward = (zero_stage == 3);
                                                     MixedPrecisionPolicy(bf16 params, fp32 reduce) for amp_bf16;
                                                     CPUOffloadPolicy for offload=optimizer_params
    ... with fsdp_wrap=fsdp1                         FSDP1 ``FullyShardedDataParallel`` as accelerate and fsdp_qlora
                                                     wrap it (apply_fsdp1; NO_SHARD at zero_stage 0), rank 0's host
                                                     copy brought to the device unit by unit (fsdp1_init.py)
    tp>1, tp_plan=dtensor                            ``parallelize_module`` with torchtitan's Llama plan
                                                     (Colwise q/k/v/gate/up, Rowwise o/down, vocab-parallel
                                                     embedding and head; SequenceParallel norms when sp;
                                                     sharded logits and ``loss_parallel`` when loss_parallel)
    tp>1, tp_plan=hf                                 transformers' own plan (``DistributedConfig(tp_size=t)``,
                                                     the model's ``base_model_tp_plan`` + ``_tp_plan``: logits
                                                     gathered on every rank)
    tp>1 with framework=fsdp, dp>1                   the DTensor plan on the "tp" mesh dim, FSDP2 on "dp" (2D)
    cp>1 (framework=fsdp)                            ``context_parallel`` (ring attention over SDPA) with FSDP2 over
                                                     dp*cp, as torchtitan shards over dp_shard_cp
    pp>1                                             ``torch.distributed.pipelining`` (parallel_pipeline.py)
    ep>1 (MoE, framework=fsdp)                       transformers' ``DistributedConfig(fsdp_size=dp, ep_size=ep)``:
                                                     experts sharded over ep with AllToAllEP token dispatch, FSDP2
                                                     plan over the dense modules and the expert replicas
"""

from __future__ import annotations

from engine.checks.measure.parallel import with_harness


def mixed_precision(c: dict):
    """FSDP2's MixedPrecisionPolicy for the case (``fsdp_param_dtype`` / ``fsdp_reduce_dtype``), or None."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    h = with_harness(c)
    if not h["fsdp_param_dtype"]:
        return None
    param = getattr(torch, h["fsdp_param_dtype"])
    reduce = getattr(torch, h["fsdp_reduce_dtype"]) if h["fsdp_reduce_dtype"] else None
    return MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)


def uses_autocast(c: dict) -> bool:
    """amp_* runs under torch.autocast unless FSDP2's MixedPrecisionPolicy does the casting (torchtitan)."""
    return c["precision"].startswith("amp") and not with_harness(c)["fsdp_param_dtype"]


def _fsdp_kwargs(c: dict) -> dict:
    from torch.distributed.fsdp import CPUOffloadPolicy

    kw = {"reshard_after_forward": c["zero_stage"] == 3}
    mp = mixed_precision(c)
    if mp is not None:
        kw["mp_policy"] = mp
    if c["offload"] == "optimizer_params":
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)  # pinned host memory needs a CUDA build
    return kw


def apply_fsdp(model, c: dict, mesh, blocks) -> None:
    """FSDP2 as the case says: each decoder block, then the root (``fsdp_wrap = blocks``); with
    ``fsdp_groups = split`` the embedding first and the final norm with the head after the blocks, the latter
    not resharded after forward, as torchtitan's apply_fsdp does since 83e6941 (its 'default' policy)."""
    from torch.distributed.fsdp import fully_shard

    kw = _fsdp_kwargs(c)
    split = c.get("fsdp_groups", "root") == "split"
    if split:
        fully_shard(model.get_input_embeddings(), mesh=mesh, **kw)
    for block in blocks:
        fully_shard(block, mesh=mesh, **kw)
    if split:
        head = [model.model.norm, model.get_output_embeddings()]
        fully_shard(head, mesh=mesh, **{**kw, "reshard_after_forward": False})
    fully_shard(model, mesh=mesh, **kw)


def apply_fsdp1(model, c: dict, blocks):
    """FSDP1 (``FullyShardedDataParallel``, the API behind accelerate's and the HF Trainer's FSDP, llama-recipes and
    Answer.AI's fsdp_qlora) as those wrap a model (``fsdp_wrap = fsdp1``): each decoder block, and each leaf
    module with a trainable weight (LoRA's A and B: FSDP1 without use_orig_params needs one requires_grad per
    flat parameter; peft's fsdp_auto_wrap_policy, fsdp_qlora's get_wrapping_policy), then the root;
    ``use_orig_params=False``, ``limit_all_gathers=True``; FULL_SHARD at zero_stage 3, SHARD_GRAD_OP at 2, NO_SHARD
    at 0 (fsdp_qlora's 'ddp');
    MixedPrecision from the case's fsdp_param_dtype / fsdp_reduce_dtype; CPUOffload for offload=optimizer_params
    (its copies: fsdp1_init.py).
    Returns the wrapped root, the module the step calls."""
    import functools

    import torch
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import _or_policy, lambda_auto_wrap_policy, transformer_auto_wrap_policy

    h = with_harness(c)
    block_types = {type(b) for b in blocks}
    trainable_leaf = lambda m: (not list(m.children()) and getattr(m, "weight", None) is not None  # noqa: E731
                                and m.weight.requires_grad)
    policy = functools.partial(_or_policy, policies=[
        functools.partial(lambda_auto_wrap_policy, lambda_fn=trainable_leaf),
        functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=block_types)])
    mp = None
    if h["fsdp_param_dtype"]:
        param = getattr(torch, h["fsdp_param_dtype"])
        reduce = getattr(torch, h["fsdp_reduce_dtype"]) if h["fsdp_reduce_dtype"] else param
        mp = MixedPrecision(param_dtype=param, reduce_dtype=reduce, buffer_dtype=param)
    strategy = {3: ShardingStrategy.FULL_SHARD, 2: ShardingStrategy.SHARD_GRAD_OP}.get(c["zero_stage"],
                                                                                      ShardingStrategy.NO_SHARD)
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=policy, use_orig_params=False,
                limit_all_gathers=True, device_id=torch.device("cpu"), mixed_precision=mp,
                cpu_offload=CPUOffload(offload_params=c["offload"] == "optimizer_params"))


def apply_ddp(model, c: dict):
    """torch DDP over the world, with the case's bucket size and gradient_as_bucket_view (see ``ddp_hooks``)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    h = with_harness(c)
    ddp = DDP(model, bucket_cap_mb=h["ddp_bucket_cap_mb"], gradient_as_bucket_view=h["ddp_grad_as_bucket_view"],
              init_sync=False)
    ddp.register_comm_hook(None, _allreduce_hook)
    ddp.reducer = _NoRebuild(ddp.reducer)
    return ddp


def _allreduce_hook(process_group, bucket):
    """DDP's default all-reduce (``default_hooks.allreduce_hook``: divide in place, all-reduce in place), returning
    the bucket itself: the fake process group's future carries no value for the reducer to read back."""
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    buf = bucket.buffer()
    buf.div_(dist.get_world_size(group))
    dist.all_reduce(buf, group=group, async_op=True)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


class _NoRebuild:
    """DDP's reducer without the bucket rebuild of the second iteration.

    ``Reducer::rebuild_buckets`` re-orders the buckets by gradient-ready order and broadcasts the new order from
    rank 0 in a CPU int tensor it fills element by element, which a fake tensor cannot hold. The buckets then
    keep their construction-time assignment (parameters in reverse registration order, DDP's own guess of the
    ready order): the same bucket bytes in total, allocated at construction, freed never.
    """

    def __init__(self, reducer) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def tp_layer_plan(c: dict, block) -> dict:
    """torchtitan's per-block Llama plan (parallelize_llama.apply_tp), on the Hugging Face module names."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    out = Shard(1) if c["sp"] else Replicate()
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(output_layouts=out),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=out)}
    if c["sp"]:
        plan |= {"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                 "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                 desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                 "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))}
    return plan


def apply_tp(model, c: dict, mesh, blocks) -> None:
    """torchtitan's TP (+SP, + loss parallel) plan with ``parallelize_module`` on the Hugging Face Llama modules."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

    for block in blocks:
        parallelize_module(block, mesh, tp_layer_plan(c, block))
    sp, lp = c["sp"], c["loss_parallel"]
    embed_out = Shard(1) if sp else Replicate()
    top = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=embed_out),
           "lm_head": ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(),
                                      output_layouts=Shard(-1) if lp else Replicate(), use_local_output=not lp)}
    if sp:
        top["model.norm"] = SequenceParallel()
    parallelize_module(model, mesh, top)


def hf_distribute(model, c: dict):
    """transformers' own distribution (``from_pretrained(distributed_config=...)``: ``prepare_distribute_model``
    then ``maybe_distribute_model``), for tp_plan='hf' (TP) and for expert parallelism (EP + FSDP2)."""
    from transformers.distributed import DistributedConfig

    if c["ep"] > 1:
        dc = DistributedConfig(fsdp_size=c["dp"], ep_size=c["ep"], ep_implementation="all_to_all",
                               fsdp_mixed_precision=bool(with_harness(c)["fsdp_param_dtype"]))
    else:
        dc = DistributedConfig(tp_size=c["tp"])
    cls = type(model)
    dc, _, mesh_manager = cls.prepare_distribute_model(dc)
    return cls.maybe_distribute_model(model, dc, mesh_manager)
