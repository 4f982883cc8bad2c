"""What the GPU holds beside the live tensors: driver context, library workspaces, NCCL, allocator slack.

overhead_bytes = cuda_context + cublas_workspace + the NCCL communicators the framework's process groups create,
each as engine/model/nccl.py derives it from NCCL's source. The per-GPU values (CUDA context by architecture and
driver era, cuBLAS/cuBLASLt workspaces, NCCL channels and buffers by link) come from data/overheads.toml, with their
sources, through the record's GPU attributes. A process group costs GPU memory only once it runs an NCCL operation
(PyTorch creates the communicator lazily, at the group's first collective), so each framework below counts the
groups a training step uses, not every group it creates; gloo (CPU) groups cost none. Ranks are laid out tp, cp,
dp, pp from the innermost (Megatron's order; torchtitan's mesh [pp, dp_replicate, dp_shard, cp, tp] read from the
right). The derivation, the public measurements it is checked against, and what is unknown:
data/golden/OVERHEADS.md.
"""

from engine.inputs.codes import Framework, Precision
from engine.model.common import ceil_div, formula
from engine.model.nccl import GATHERS, P2P_ONLY, REDUCES, SCALARS, communicator_bytes

# PyTorch's caching allocator keeps freed blocks and splits large segments (c10/cuda/CUDACachingAllocator.cpp:
# 2 MiB rounding for blocks > 1 MiB, 20 MiB segments for mid-size requests). What it reserves beyond the live
# peak grows with the bytes that churn within a step (activations, temporaries), not with the states, which are
# allocated once. 1/16 of the churn (6.25%) was first read off the HF BERT-large nvidia-smi rows; the traced steps
# replayed through the allocator model bear it out where no larger block decides the reserve: 30 single-GPU and
# recipe steps replayed with expandable segments, 2.3% off at the median, -0.2% signed
# (`python -m engine.checks.reserved --expandable 30`; data/measured/PARALLEL.md).
SLACK_DENOMINATOR = 16
# transformers' loss makes three fp32 blocks of the loss block's size: the upcast logits, log_softmax's output and its
# gradient (modeling_llama.py's loss_function -> F.cross_entropy; the replayed segments, PARALLEL.md). Beyond the one
# allocator_slack_bytes keeps, the other two can be cut again after the first optimizer step (loss_recut_bytes).
LOSS_BLOCKS_RECUT = 2


@formula
def pipeline_peers(c):
    """Stages a pipeline rank sends to and receives from: the previous and the next (one of each at the ends; the
    most loaded middle stage has two), and two whenever virtual stages wrap the last rank round to the first."""
    return 1 if c.pp == 2 and c.vpp == 1 else 2


@formula
def data_parallel_use(c):
    """ZeRO >= 1 / FSDP all-gathers parameters and reduce-scatters gradients; DDP (stage 0) all-reduces them."""
    return GATHERS if c.zero_stage >= 1 else REDUCES


@formula
def tensor_parallel_use(c):
    """TP all-gathers and reduce-scatters with sequence parallelism, all-reduces without it (Megatron's f/g,
    arXiv:2205.05198 sec. 4.2.2; DTensor's SequenceParallel / RowwiseParallel)."""
    return GATHERS if c.sp else REDUCES


@formula
def expert_bytes(c):
    """Expert parallelism: the all-to-all dispatch and combine exchange send/recv with every other rank of the ep
    group (ep - 1 peers), and the experts' gradients sync over the dp x cp / ep ranks holding the same experts
    (torchtitan's dp_shard_in_ep mesh with etp = tp; Megatron-core's expert data-parallel group)."""
    if c.ep <= 1 or c.n_experts == 0:
        return 0
    a2a = communicator_bytes(c, c.ep, c.tp, P2P_ONLY, c.ep - 1)
    return a2a + communicator_bytes(c, c.dp * c.cp // c.ep, c.tp * c.ep, data_parallel_use(c), 0)


@formula
def device_mesh_bytes(c):
    """PyTorch's DeviceMesh as torchtitan builds it (torchtitan/distributed/parallel_dims.py): the world group
    broadcasts the seed (set_determinism) and barriers; dp_shard_cp runs FSDP (or DDP), dp_cp the loss all-reduce
    (the same ranks), tp and cp their collectives, pp batched send/recv with the neighbouring stages
    (torch.distributed.pipelining, batch_isend_irecv on the pp group's communicator) and the gradient-norm
    all-reduce. A 1-D mesh over every rank is the default group (torch/distributed/device_mesh.py), so a group as
    large as the world is the world's communicator."""
    world = c.n_gpus
    world_use, world_peers, total = SCALARS, 0, 0
    if c.dp * c.cp == world:
        world_use = max(world_use, data_parallel_use(c))
    else:
        total += communicator_bytes(c, c.dp * c.cp, c.tp, data_parallel_use(c), 0)
    if c.tp == world:
        world_use = max(world_use, tensor_parallel_use(c))
    else:
        total += communicator_bytes(c, c.tp, 1, tensor_parallel_use(c), 0)
    if c.cp < world:
        total += communicator_bytes(c, c.cp, c.tp, GATHERS, 0)  # torch CP: K/V all-gathered (rotate_method)
    if c.pp == world:
        world_peers = pipeline_peers(c)
    else:
        total += communicator_bytes(c, c.pp, c.tp * c.cp * c.dp, SCALARS, pipeline_peers(c))
    return total + communicator_bytes(c, world, 1, world_use, world_peers) + expert_bytes(c)


@formula
def megatron_bytes(c):
    """Megatron-core's groups that run NCCL in a step (megatron/core/parallel_state.py initialize_model_parallel,
    each a torch.distributed.new_group, so never the default group's communicator): the world (barriers in
    megatron/training), TP, data-parallel-with-CP (gradient reduce-scatter or all-reduce, the distributed
    optimizer's all-gather), CP (Transformer Engine's ring attention: send/recv with the neighbouring CP ranks),
    PP (p2p_communication.py: batch_isend_irecv with the neighbouring stages), the model-parallel group (gradient
    norm), the embedding group (first and last stage: tied embedding gradients), the TP-DP-CP amax group (fp8),
    and the expert groups. The gloo groups are on the CPU."""
    total = communicator_bytes(c, c.n_gpus, 1, SCALARS, 0)
    total += communicator_bytes(c, c.tp, 1, tensor_parallel_use(c), 0)
    total += communicator_bytes(c, c.dp * c.cp, c.tp, data_parallel_use(c), 0)
    total += communicator_bytes(c, c.cp, c.tp, P2P_ONLY, min(2, c.cp - 1))
    total += communicator_bytes(c, c.pp, c.tp * c.cp * c.dp, P2P_ONLY, pipeline_peers(c))
    if c.tp > 1 and c.pp > 1:
        total += communicator_bytes(c, c.tp * c.pp, 1, SCALARS, 0)
    if c.pp > 1 and c.tied_embeddings:
        total += communicator_bytes(c, 2, c.tp * c.cp * c.dp * (c.pp - 1), REDUCES, 0)
    if c.precision == Precision.FP8:
        total += communicator_bytes(c, c.tp * c.dp * c.cp, 1, SCALARS, 0)
    return total + expert_bytes(c)


@formula
def deepspeed_bytes(c):
    """DeepSpeed: ZeRO runs on the data-parallel group, the world itself without model parallelism (deepspeed.comm
    init; deepspeed/runtime/zero); with Megatron-DeepSpeed's mpu, TP and data-parallel groups beside the world.
    The pipeline engine sends with torch.distributed send/recv (deepspeed/runtime/pipe/p2p.py), and PyTorch makes a
    2-rank communicator for each pair of ranks that exchange unbatched send/recv (ProcessGroupNCCL, key
    "lowRank:highRank")."""
    if c.tp == 1 and c.pp == 1 and c.cp == 1:
        total = communicator_bytes(c, c.n_gpus, 1, data_parallel_use(c), 0)
    else:
        total = communicator_bytes(c, c.n_gpus, 1, SCALARS, 0)
        total += communicator_bytes(c, c.tp, 1, tensor_parallel_use(c), 0)
        total += communicator_bytes(c, c.dp * c.cp, c.tp, data_parallel_use(c), 0)
    if c.pp > 1:
        total += pipeline_peers(c) * communicator_bytes(c, 2, c.tp * c.cp * c.dp, P2P_ONLY, 1)
    return total + expert_bytes(c)


@formula
def nccl_bytes(c):
    """The NCCL communicators of the framework's process groups on one rank (none on one GPU)."""
    if c.n_gpus < 2:
        return 0
    if c.framework == Framework.MEGATRON:
        return megatron_bytes(c)
    if c.framework == Framework.DEEPSPEED:
        return deepspeed_bytes(c)
    return device_mesh_bytes(c)  # pytorch, fsdp: DeviceMesh / torchtitan


@formula
def overhead_bytes(c):
    """overhead_bytes: CUDA context + cuBLAS/cuBLASLt workspaces + NCCL communicators (data/golden/OVERHEADS.md).

    The cuBLAS workspaces are really inside the caching allocator's reserved memory (CublasHandlePool.cpp); they
    stay here until the allocated peak carries them, which leaves device_peak_bytes unchanged."""
    return c.cuda_context_bytes + c.cublas_workspace_bytes + nccl_bytes(c)


@formula
def loss_recut_bytes(c, states_bytes, freed_bytes, loss_block_bytes):
    """Loss-sized blocks cut again because the optimizer states settled in the loss's freed segments.

    torch.optim creates its states at the first step (AdamW's exp_avg and exp_avg_sq: torch.zeros_like in
    torch/optim/adamw.py _init_group), after backward has freed the loss's blocks and the saved activations; each
    state goes to the smallest free block that fits (CUDACachingAllocator.cpp get_free_block), so once the freed
    activations and the rest of their segments (`freed_bytes`) are full, the states fill the loss's segments, which
    they keep for the whole run. The next step's loss then makes its blocks in new segments: transformers' loss
    makes three fp32 blocks of this size (the upcast logits, log_softmax's output and its gradient), one of which
    allocator_slack_bytes keeps already, so up to LOSS_BLOCKS_RECUT more. The first `loss_block_bytes` of states
    fill the block already kept. None when the optimizer steps in backward: its states are made in each parameter's
    gradient hook, the loss's next blocks then count in the allocated peak. Seen in the replayed traces' segments at
    the reserved peak (data/measured/PARALLEL.md, "One stream: a loss-sized block cut up")."""
    if c.optimizer_in_backward or loss_block_bytes == 0:
        return 0
    return min(max(0, states_bytes - freed_bytes - loss_block_bytes), LOSS_BLOCKS_RECUT * loss_block_bytes)


@formula
def allocator_slack_bytes(churn_bytes, loss_block_bytes, recut_bytes):
    """reserved - allocated on the default stream: the caching allocator's rounding and fragmentation on churning bytes,
    or, when larger, one more block of the loss's largest size (loss.loss_block_bytes) and the blocks the optimizer
    states made it cut again (loss_recut_bytes). That block is made and freed in every micro-step; blocks that
    outlive it (a layer's checkpointed input, the next step's activations) settle in its freed segment (the
    allocator splits the smallest free block that fits, CUDACachingAllocator.cpp get_free_block), so the next one
    finds no free block large enough and a new segment is made: the replayed traces reserve whole segments of the
    step's largest transient sizes again (data/measured/PARALLEL.md, "One stream: a loss-sized block cut up"). With
    expandable segments the free tail of the stream's one segment grows by what the request lacks, and the replays
    reserve about 1/16 of the churn alone (levels.step_terms passes no block)."""
    return max(ceil_div(churn_bytes, SLACK_DENOMINATOR), loss_block_bytes + recut_bytes)
