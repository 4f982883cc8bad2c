"""The device memory NCCL holds for one communicator on one rank, from what NCCL's source allocates.

Read from NVIDIA/nccl v2.30.7 (src/...); the behaviour described holds since NCCL 2.22 (connections made lazily, at
the first collective of each algorithm: NCCL_RUNTIME_CONNECT=1, src/init.cc) with cuMem allocations (auto-enabled
since 2.19: NCCL_CUMEM_ENABLE, src/misc/cudawrap.cc), what PyTorch >= 2.5 ships. A communicator holds:

    init     at ncclCommInitRank: 3 small device arrays per channel and 3 per communicator, each its own cuMem
             allocation and so one 2 MiB granule; the NVLS peer arrays and credits where NVLS is possible
    ring     at the first ring collective: one send and one receive connection per channel
    tree     at the first tree all-reduce (across nodes): as many connections again
    nvls     at the first NVLS collective inside a node: the NVLink SHARP buffers, per local rank of the group
    p2p      at the first send/recv with a peer: a connection on each of the peer's channels; a shared pool across
             the network

The GPU's side (channels, one connection's bytes, the NVLS buffer per local rank) is in the record, from
data/overheads.toml; the constants NCCL fixes are here. Symbols: n ranks, L of them on one node (NVLink domain),
C ring channels, P channels per peer. The derivation and its checks: data/golden/OVERHEADS.md.
"""

from engine.model.common import ceil_div, formula

MiB = 1 << 20
GRANULE = 2 * MiB  # cuMem's minimum allocation granularity and CUDA_IPC_MIN (src/include/comm.h): every device
# allocation NCCL makes through ncclCuMemAlloc (src/include/alloc.h) is rounded up to it
INIT_ALLOCATIONS = 3  # devCommAndChans, rankToLocalRank (src/init.cc devCommSetup), ceColl sequence (src/ce_coll.cc)
CHANNEL_ALLOCATIONS = 3  # per channel: shared devPeers, devPeers, devRingUserRanks (src/channel.cc initChannel)
NVLS_CHANNEL_BYTES = 2 * 8 * 128 * 1024  # 2 MiB per NVLS channel and head: reduce + broadcast x NCCL_STEPS 8 x
# NCCL_NVLS_CHUNKSIZE 128 KiB (src/transport/nvls.cc ncclNvlsBufferSetup)
MAX_NVLS_CHANNELS = 32  # NVLS_NCHANNELS_SM100 (src/transport/nvls.cc), the most any architecture uses
NET_CONNECTION_BYTES = 20 * MiB  # a ring channel's connection through the network with GPUDirect RDMA: send side
# LL128 + SIMPLE = 8.69 MiB -> 10 MiB, receive side LL + LL128 + SIMPLE = 9.19 MiB -> 10 MiB, each aligned to
# CUDA_IPC_MIN (src/transport/net.cc sendProxyConnect / recvProxyConnect, NCCL_NET_MAP_DEVMEM)
NET_P2P_POOL_BYTES_PER_CHANNEL = 2 * 16 * 128 * 1024  # send/recv through the network share one pool per direction:
# p2p channels x NCCL_SHARED_STEPS 16 x NCCL_P2P_NET_CHUNKSIZE 128 KiB (src/transport/net.cc sharedNetBuffersInit)
NET_CHANNELS_PER_LOCAL_RANK = 4  # a ring across nodes gets ~2 searched channels per 400 Gb/s NIC (one NIC per GPU),
# doubled (src/graph/search.cc speed arrays, src/graph/connect.cc "Duplication"): 8 coll channels for 2 GPUs per
# node on 2 nodes (NVIDIA/nccl#1189 log)


@formula
def pow2_up(x):
    """The smallest power of 2 >= x (NCCL's pow2Up; 0 stays 0)."""
    p = 1
    while p < x:
        p *= 2
    return p if x > 0 else 0


@formula
def local_ranks(c, n, stride):
    """L: ranks of a group of n, `stride` apart in the rank order, that share the first one's node (NVLink domain):
    groups are laid out innermost first (tp, cp, dp, pp: Megatron's order, torchtitan's mesh reversed)."""
    domain = c.nvlink_domain_gpus if c.nvlink_domain_gpus > 0 else c.gpus_per_node
    if domain <= 0:
        return n  # no node size known: one node
    return max(1, min(n, domain // stride))


@formula
def ring_channels(c, local, nodes):
    """C: channels of the communicator's rings. Inside a node the catalog's count (NCCL's topology search over
    NVLink or PCIe); across nodes the NICs bound it, NET_CHANNELS_PER_LOCAL_RANK per local rank."""
    if nodes == 1:
        return c.nccl_channels
    return min(c.nccl_channels, NET_CHANNELS_PER_LOCAL_RANK * local)


@formula
def init_bytes(c, local, channels):
    """At ncclCommInitRank (cuMem): (3 + 3 x pow2Up(C)) granules, the p2p channels being initialised up to
    pow2Up(C) (src/graph/paths.cc ncclTopoComputeP2pChannels); plus, where NVLS is possible (L >= 2 on an NVLink
    switch), one granule per NVLS channel for its peer array and one for the credits (src/transport/nvls.cc
    ncclNvlsSetup, src/channel.cc initNvlsChannel)."""
    total = (INIT_ALLOCATIONS + CHANNEL_ALLOCATIONS * pow2_up(channels)) * GRANULE
    if c.nccl_nvls_bytes > 0 and local >= 2:
        total += (min(ceil_div(c.nccl_nvls_bytes, NVLS_CHANNEL_BYTES), MAX_NVLS_CHANNELS) + 1) * GRANULE
    return total


@formula
def ring_bytes(c, local, nodes, channels):
    """One send and one receive connection per channel (src/transport/generic.cc ncclTransportRingConnect): 2C sides.
    Inside a node each side is half a P2P connection (catalog's nccl_connection_bytes); across nodes about 2C/L of
    the sides go through the network (a ring leaves and enters each node once per channel), 2C when L = 1. A GPU
    without P2P (SHM, no GPUDirect RDMA either) keeps its buffers in host memory."""
    sides = 2 * channels
    net_sides = 0
    if nodes > 1:
        net_sides = sides if local == 1 else min(sides, ceil_div(sides, local))
    net_side_bytes = NET_CONNECTION_BYTES // 2 if c.nccl_connection_bytes > 0 else 0
    return (sides - net_sides) * (c.nccl_connection_bytes // 2) + net_sides * net_side_bytes


@formula
def nvls_bytes(c, local, nodes, all_reduce):
    """NVLink SHARP buffers: L x the catalog's bytes per local rank (nHeads = L on one node). NCCL runs all-gather
    and reduce-scatter over NVLS inside a node only, all-reduce also across nodes (NVLS_TREE); src/graph/tuning.cc
    disables NVLS across nodes without CollNet, src/device/generate.py lists the collectives."""
    if c.nccl_nvls_bytes == 0 or local < 2 or (nodes > 1 and not all_reduce):
        return 0
    return local * c.nccl_nvls_bytes


@formula
def p2p_bytes(c, local, peers, channels):
    """send/recv: the first operation with a peer connects all its P channels (src/enqueue.cc, connectSend /
    connectRecv over p2pnChannelsPerPeer), a send and a receive side each when the traffic goes both ways (pipeline
    activations one way, their gradients back; all-to-all). Peers across the network share the net transport's
    pool instead (pow2Up(C) channels, both directions; GPUDirect RDMA)."""
    near = min(peers, local - 1)
    total = near * c.nccl_p2p_channels * c.nccl_connection_bytes
    if peers > near and c.nccl_connection_bytes > 0:
        total += pow2_up(channels) * NET_P2P_POOL_BYTES_PER_CHANNEL
    return total


# What a communicator is used for: each includes what the one before it connects.
P2P_ONLY = -1  # send/recv only (a 2-rank communicator PyTorch makes for an unbatched send/recv pair)
SCALARS = 0  # barriers, broadcasts, small all-reduces (loss, gradient norm): the ring
GATHERS = 1  # all-gather, reduce-scatter (FSDP, ZeRO, TP with SP, CP): the ring, NVLS inside a node
REDUCES = 2  # all-reduce of gradients or activations (DDP, TP without SP): ring, tree across nodes, NVLS


@formula
def communicator_bytes(c, n, stride, use, peers):
    """Device bytes one rank holds for one communicator of n ranks, `stride` apart: init + ring + tree + NVLS + p2p
    as its use connects them (`use` a kind above, `peers` it exchanges send/recv with). nccl_buffer_bytes > 0
    replaces the derivation for every communicator (a measured figure)."""
    if n < 2:
        return 0
    if c.nccl_buffer_bytes > 0:
        return c.nccl_buffer_bytes
    local = local_ranks(c, n, stride)
    nodes = ceil_div(n, local)
    channels = ring_channels(c, local, nodes)
    total = init_bytes(c, local, channels) + p2p_bytes(c, local, peers, channels)
    if use >= SCALARS:
        total += ring_bytes(c, local, nodes, channels)
    if use == REDUCES and nodes > 1:
        total += ring_bytes(c, local, nodes, channels)  # the tree's up and down connections, as many again
    if use >= GATHERS:
        total += nvls_bytes(c, local, nodes, use == REDUCES)
    return total
