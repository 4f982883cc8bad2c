"""Memory outside PyTorch's caching allocator (engine/model/overhead.py, engine/model/nccl.py): hand-worked cases
from NCCL's source (data/golden/OVERHEADS.md), and monotonicity: more process groups, channels or NVLS never less."""

import pytest

from engine.model.nccl import GATHERS, P2P_ONLY, REDUCES, SCALARS, communicator_bytes
from engine.model.overhead import nccl_bytes, overhead_bytes
from tests.support import config

MiB = 2**20
H100_CONTEXT = 629_145_600  # data/overheads.toml [hopper]
H100_CUBLAS = 2 * (32 + 1) * MiB  # two handles x (cuBLAS 32 MiB + cuBLASLt 1 MiB)

# One H100 communicator of 8 local ranks, in MiB:
#   init  (3 + 3 x pow2Up(24) = 99 allocations) x 2 MiB = 198; NVLS peer arrays and credits (16 + 1) x 2 MiB = 34
#   ring  24 channels x (10 MiB receive + 2 MiB send) = 288
#   NVLS  8 local ranks x 16 channels x 2 x 8 steps x 128 KiB = 8 x 32 = 256
H100_INIT, H100_RING, H100_NVLS8 = (198 + 34) * MiB, 288 * MiB, 256 * MiB


def test_one_gpu_holds_the_context_and_the_cublas_workspaces_only():
    c = config(model="llama-3.1-8b", n_gpus=1)
    assert nccl_bytes(c) == 0
    assert overhead_bytes(c) == H100_CONTEXT + H100_CUBLAS == 698_351_616


def test_fsdp_on_one_h100_node_is_one_communicator_with_ring_and_nvls():
    # torchtitan: dp_shard = 8 is the world, so the seed broadcast and FSDP share one communicator
    c = config(model="llama-3.1-8b", n_gpus=8, zero_stage=3, framework="fsdp")
    assert nccl_bytes(c) == H100_INIT + H100_RING + H100_NVLS8 == 776 * MiB
    assert overhead_bytes(c) == H100_CONTEXT + H100_CUBLAS + 776 * MiB


def test_a100_pair_has_no_nvls():
    # 198 MiB init + 24 channels x 12 MiB ring = 486 MiB (NVLS is a Hopper feature)
    c = config(model="llama-3.1-8b", n_gpus=2, zero_stage=3, gpu="a100-sxm-80gb")
    assert nccl_bytes(c) == (198 + 288) * MiB


def test_geforce_cards_keep_nccl_buffers_in_host_memory():
    # rtx-4090: one GPU per node in the catalog, no P2P: 2 channels across the "network" without GPUDirect RDMA;
    # only the init arrays stay: (3 + 3 x 2) x 2 MiB = 18 MiB
    c = config(model="llama-3.1-8b", n_gpus=2, zero_stage=3, gpu="rtx-4090")
    assert nccl_bytes(c) == 18 * MiB


def test_megatron_tp8_dp2_on_two_nodes():
    # world, 16 ranks, 8 local: 24 channels, 6 of the 48 sides through the network:
    #   232 init + 42 x 6 MiB + 6 x 10 MiB = 544 MiB
    # TP, 8 local ranks, all-reduce (no SP): 232 + 288 + 256 = 776 MiB
    # DP, 2 ranks 8 apart, one per node: 4 channels; init (3 + 3 x 4) x 2 = 30 MiB, ring 8 sides x 10 MiB = 80 MiB,
    #   the tree as much again (all-reduce across nodes): 190 MiB
    c = config(model="llama-3.1-8b", n_gpus=16, tp=8, zero_stage=0, framework="megatron")
    assert nccl_bytes(c) == (544 + 776 + 190) * MiB


def test_expert_all_to_all_connects_every_peer_on_all_its_channels():
    # Mixtral on 8 H100, ep 8: the world (FSDP) 776 MiB; the ep group: init 232 + 7 peers x 32 channels x 12 MiB
    # = 2920 MiB (NVIDIA/nccl#1685: an all-to-all on 8 x H100 added ~3.3 GB); experts' dp x cp / ep = 1: none
    c = config(model="mixtral-8x7b", n_gpus=8, ep=8, zero_stage=3)
    assert nccl_bytes(c) == (776 + 232 + 7 * 32 * 12) * MiB


def test_nccl_buffer_bytes_overrides_each_communicator():
    c = config(model="llama-3.1-8b", n_gpus=16, tp=8, zero_stage=0, framework="megatron", nccl_buffer_bytes=MiB)
    assert nccl_bytes(c) == 3 * MiB  # world, tp, dp


def test_nvls_disabled_drops_its_buffers():
    c = config(model="llama-3.1-8b", n_gpus=8, zero_stage=3, nccl_nvls_bytes=0)
    assert nccl_bytes(c) == (198 + 288) * MiB


@pytest.mark.parametrize("framework", ["pytorch", "fsdp", "deepspeed", "megatron"])
@pytest.mark.parametrize("extra", [dict(tp=2), dict(pp=2), dict(cp=2), dict(tp=2, pp=2), dict(pp=4, vpp=2)])
def test_another_parallel_dimension_never_lowers_nccl_memory(framework, extra):
    base = dict(model="llama-3.1-8b", n_gpus=8, zero_stage=1, framework=framework)
    factor = extra.get("tp", 1) * extra.get("pp", 1) * extra.get("cp", 1)
    more = {**base, **extra, "n_gpus": 8 * factor}
    assert nccl_bytes(config(**more)) >= nccl_bytes(config(**base))


@pytest.mark.parametrize("framework", ["pytorch", "deepspeed", "megatron"])
def test_expert_parallelism_never_lowers_nccl_memory(framework):
    base = dict(model="mixtral-8x7b", n_gpus=16, zero_stage=1, framework=framework)
    assert nccl_bytes(config(**base, ep=4)) >= nccl_bytes(config(**base))


@pytest.mark.parametrize("n, stride", [(2, 1), (8, 1), (8, 8), (64, 1), (16, 2)])
def test_a_heavier_use_never_costs_less(n, stride):
    c = config(model="llama-3.1-8b", n_gpus=64)
    costs = [communicator_bytes(c, n, stride, use, 0) for use in (P2P_ONLY, SCALARS, GATHERS, REDUCES)]
    assert costs == sorted(costs) and costs[0] > 0
    assert communicator_bytes(c, n, stride, SCALARS, 2) >= costs[1]  # p2p peers add


@pytest.mark.parametrize("field, low, high", [("nccl_channels", 8, 24), ("nccl_p2p_channels", 8, 32),
                                              ("nccl_nvls_bytes", 0, 32 * MiB), ("nccl_connection_bytes", 0, 12 * MiB)])
def test_more_channels_or_bigger_buffers_never_cost_less(field, low, high):
    base = dict(model="mixtral-8x7b", n_gpus=16, ep=4, tp=2, zero_stage=3)
    assert nccl_bytes(config(**base, **{field: low})) <= nccl_bytes(config(**base, **{field: high}))


def test_a_communicator_of_one_rank_costs_nothing():
    c = config(model="llama-3.1-8b", n_gpus=8)
    assert communicator_bytes(c, 1, 1, REDUCES, 0) == 0
