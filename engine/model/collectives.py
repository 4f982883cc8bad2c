"""Communication of one optimizer step: the bytes each parallel dimension's collectives move per rank, and the
bus bandwidth of the links they run over (step_work.py sums the bytes, gpu_rates.py turns the bandwidths into
seconds per byte).

Communication, by the ring algorithms of NCCL and its bus-bandwidth convention (nccl-tests doc/PERFORMANCE.md:
an all-reduce moves 2(n-1)/n of its buffer through each rank's link, an all-gather or reduce-scatter (n-1)/n):

    TP   an all-reduce of the layer's output after attention and after the FFN, forward and backward (Megatron-LM
         arXiv:1909.08053 sec. 3; with SP the same bytes as all-gather + reduce-scatter, arXiv:2205.05198
         sec. 4.2.2), again in full recompute; not overlapped (Megatron-LM's default)
    CP   ring attention passes K and V around the ring in forward, K, V, dK, dV in backward (arXiv:2310.01889),
         overlapped with the attention core (exposed: what the attention does not hide)
    EP   all-to-all dispatch and combine of the routed tokens, forward and backward (GShard arXiv:2006.16668),
         exposed
    PP   the activation and its gradient between adjacent stages, per micro-batch and virtual stage, exposed;
         the bubble (p-1)/(m·v) of the stage's time (arXiv:2104.04473 sec. 2.2)
    DP   ZeRO-0: gradient all-reduce once per step, behind the last micro-batch's backward (PyTorch DDP buckets,
         arXiv:2006.15704 sec. 3.2.3); ZeRO-1/2: reduce-scatter of the gradients and all-gather of the updated
         weights, behind that backward and the next forward (Megatron-LM --overlap-grad-reduce,
         --overlap-param-gather); ZeRO-3 / FSDP: each micro-batch gathers the weights for forward and again for
         backward and reduce-scatters the gradients, prefetched behind the compute of the layers before
         (FSDP arXiv:2304.11277 sec. 3.3; FSDP2 reshard_after_forward): exposed = what compute does not hide

Links: a group inside one NVLink domain runs at the intra-node bandwidth; a group across domains is limited by
its ranks' network links: a ring crosses each domain once per channel, and NCCL runs one channel per NIC, so the
group's bus bandwidth is its ranks per domain x the per-GPU network bandwidth, at most the intra-node one
(nccl-tests multi-node all_reduce on 8 x 400 Gb/s H100 nodes: 400-450 GB/s bus bandwidth). Mesh order as
Megatron-LM and torchtitan build it: TP innermost, then CP, then DP, PP outermost.
"""

from engine.inputs.codes import Ckpt, PPSchedule
from engine.model.common import formula
from engine.model.flops import recompute_attention_share, recompute_matmul_share
from engine.model.params import head_dim, kv_heads
from engine.model.sharding import accumulates_unsharded
from engine.model.states import compute_bytes, grad_bytes_per_param, trains

# --- from sources, not fitted --------------------------------------------------------------------------------
# Achieved over nominal link bandwidth of large NCCL collectives: nccl-tests all_reduce bus bandwidth 230-250 GB/s
# on 8 x A100 SXM (NVLink 3, 300 GB/s per direction), 400-450 GB/s across 8 x 400 Gb/s H100 nodes.
BUS_EFFICIENCY = 0.8
# A catalog node of one GPU without a network link is a desktop or workstation card (data/gpus.toml rtx-4090:
# "single-GPU desktop"): a job on several runs them in one host, where PCIe servers hold up to eight double-width
# cards, their collectives over each card's PCIe link (NCCL's P2P or, where the driver disables peer access as on
# GeForce cards, its shared-memory transport through the host). Without this the 2 x RTX 4090 of a QLoRA fine-tune
# had no time at all: its "other node" had no network in the catalog.
PCIE_HOST_GPUS = 8


# --- the bytes each collective moves ----------------------------------------------------------------------------


@formula
def ring(n, all_reduce):
    """Bytes per rank per buffer byte of a ring collective over n ranks: 2(n-1)/n all-reduce, else (n-1)/n."""
    share = (n - 1.0) / n
    return 2.0 * share if all_reduce else share


@formula
def tp_bytes(c, m, layers):
    """TP collectives of one micro-batch of m tokens: four per layer (two in forward, two in backward), two more
    where the forward runs again, of the m·h activation (arXiv:1909.08053 sec. 3)."""
    if c.tp == 1:
        return 0.0
    count = 4.0 + 2.0 * (1.0 / max(c.checkpoint_every, 1) if c.checkpointing == Ckpt.FULL else 0.0)
    return count * layers * m * c.d_model * compute_bytes(c) * ring(c.tp, True)


@formula
def cp_bytes(c, m, layers):
    """Ring attention of one micro-batch of m tokens per rank: each rank receives the other ranks' K and V in
    forward, K, V and sends dK, dV in backward (3x), per layer (arXiv:2310.01889)."""
    if c.cp == 1:
        return 0.0
    kv = 2.0 * kv_heads(c) * head_dim(c) / c.tp * m * compute_bytes(c)
    return (3.0 + recompute_attention_share(c)) * layers * kv * (c.cp - 1.0)


@formula
def ep_bytes(c, m, moe):
    """Expert-parallel all-to-alls of one micro-batch of m tokens: dispatch and combine of each routed copy of a
    token, in forward and backward, per MoE layer (GShard arXiv:2006.16668)."""
    if c.ep == 1 or c.n_experts == 0:
        return 0.0
    routed = m * c.top_k * c.capacity_factor * c.d_model * compute_bytes(c)
    count = 4.0 + 2.0 * recompute_matmul_share(c)
    return count * moe * routed * ring(c.ep, False)


@formula
def pp_bytes(c, m):
    """Point-to-point of one micro-batch: the activation forward, its gradient backward, per virtual stage; each
    TP rank sends its 1/t (Megatron-LM's scatter/gather, arXiv:2104.04473 sec. 4.1; with SP the activation is
    split already)."""
    if c.pp == 1:
        return 0.0
    v = c.vpp if c.pp_schedule == PPSchedule.INTERLEAVED else 1
    return 2.0 * max(v, 1) * m * c.d_model * compute_bytes(c) / c.tp


@formula
def dp_bytes(c, r):
    """Data-parallel collectives of one optimizer step over dp·cp ranks, and the share of the compute they hide
    behind (the module docstring). ZeRO-3 gathers every micro-batch and reduce-scatters every micro-batch's
    gradients, or the last one's alone where the others ran under no_sync (grad_sync = last)."""
    n = c.dp * c.cp
    if n == 1:
        return 0.0, 0.0
    grads = float(grad_bytes_per_param(c)) * r.trainable_params if trains(c) else 0.0
    if c.zero_stage == 3:
        gathers = 2.0 * compute_bytes(c) * r.params
        syncs = 1 if accumulates_unsharded(c) else c.grad_accum  # grad_sync = last: one reduce-scatter a step
        return (c.grad_accum * gathers + syncs * grads) * ring(n, False), 1.0
    if c.zero_stage == 0:
        return grads * ring(n, True), 2.0 / 3.0 / c.grad_accum
    updated = float(compute_bytes(c)) * r.trainable_params if trains(c) else 0.0
    return (grads + updated) * ring(n, False), 1.0 / c.grad_accum


# --- the links ---------------------------------------------------------------------------------------------------


@formula
def nvlink_domain(c):
    """GPUs that reach each other over the intra-node link: the catalog's NVLink domain (an NVL72 rack's 72),
    else the node's GPUs; a desktop card (a catalog node of one GPU and no network link: rtx-4090) shares its host
    with up to PCIE_HOST_GPUS others over PCIe, the intra-node link its catalog entry gives."""
    if c.nvlink_domain_gpus > 0:
        return c.nvlink_domain_gpus
    if c.gpus_per_node <= 1 and c.inter_node_bytes_per_s <= 0:
        return PCIE_HOST_GPUS
    return max(c.gpus_per_node, 1)


@formula
def group_bytes_per_s(c, inner, size):
    """Bus bandwidth of a collective over `size` ranks placed `inner` apart (the product of the mesh dims inside
    it): the intra-node link inside one NVLink domain, else its ranks per domain x the network link."""
    domain = nvlink_domain(c)
    if inner * size <= domain:
        return BUS_EFFICIENCY * c.intra_node_bytes_per_s
    per_domain = max(1, min(size, domain // inner))
    network = per_domain * c.inter_node_bytes_per_s
    if c.intra_node_bytes_per_s > 0:
        network = min(network, c.intra_node_bytes_per_s)
    return BUS_EFFICIENCY * network


@formula
def p2p_bytes_per_s(c):
    """Pipeline sends between adjacent stages: the intra-node link when the whole pipeline sits in one NVLink
    domain, else each rank's own network link."""
    if c.tp * c.cp * c.dp * c.pp <= nvlink_domain(c):
        return BUS_EFFICIENCY * c.intra_node_bytes_per_s
    return BUS_EFFICIENCY * c.inter_node_bytes_per_s
