"""DeepSpeed's ZeRO-2/3 model-state estimators (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py),
re-derived in plain Python."""


from engine.checks.peers.common import python_body, n_gpus
from engine.inputs.codes import (
    Offload,
)
from engine.model import params as _params

# deepspeedai/DeepSpeed, read at 02aa38c3 (stage_1_and_2.py) and 007cca6a (stage3.py):
#   stage_1_and_2.py  estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node, num_nodes,
#                     cpu_offload, additional_buffer_factor=1.5)
#       offload:  gpu = 2P                         cpu = P * max(4 * total_gpus, 16) * 1.5
#       else:     gpu = 2P + int(18P / total_gpus) cpu = P * 4 * gpus_per_node * 1.5
#     Before PR #5099 (merged April 2024) the no-offload line read gpu = 4P + int(16P / total_gpus); the
#     estimator output printed in docs/code-docs/source/memory.rst (t5-3b: 15.93GB on 8 GPUs) is that one.
#   stage3.py  estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, ..., cpu_offload,
#              cpu_offload_params, zero_init=True, additional_buffer_factor=1.5)
#       params + optimizer offload:  gpu = 4*largest                       cpu = P * 18 / nodes * 1.5 (zero_init)
#       optimizer offload:           gpu = 4*largest + int(2P / total_gpus) cpu = P * 16 / nodes * 1.5 (zero_init)
#       none:                        gpu = 4*largest + int(18P / total_gpus) cpu = largest * 4 * gpus_per_node * 1.5
#     model_to_params(model): P counts shared tensors once; largest = max over modules of own params.
#   The *_all_live printers format gpu / 2**30 with '.2f' and call it 'GB'.


def deepspeed_params(c, with_head: bool = False) -> int:
    """P as the estimator counts it: `model_to_params(AutoModel.from_pretrained(...))`.

    The published runs (HF docs deepspeed.md, DeepSpeed memory.rst) load `AutoModel`, the base model without an
    LM head, so an untied head V*h is left out of memsim's count unless `with_head` (a CausalLM model passed to
    the estimator). T0_3B: 2,849,757,184 - 32128 * 2048 = 2,783,959,040, printed '2783M'. A tied head shares
    the embedding's storage, which model_to_params counts once, so nothing changes for tied models.
    """
    P = int(python_body(_params.param_count)(c))
    if c.lm_head and not c.tied_embeddings and not with_head:
        P -= c.vocab * c.d_model
    return P


def _zero2_gpu_bytes(P, total_gpus, offload, legacy):
    if offload:
        return 2 * P
    if legacy:  # before DeepSpeed PR #5099: 2 + 2 bytes of fp16 weights and grads, 16/N of fp32 states
        return 4 * P + int(16 * P / total_gpus)
    return 2 * P + int(18 * P / total_gpus)  # 2 fp16 weights; 18/N = 2 + 4 grads, 4 master, 8 Adam


def _zero3_gpu_bytes(P, largest, total_gpus, offload, offload_params):
    largest_layer_memory = 4 * largest  # fp16 params gathered + fp16 grads of the largest layer
    if offload and offload_params:
        return largest_layer_memory
    if offload:
        return largest_layer_memory + int(2 * P / total_gpus)
    return largest_layer_memory + int(18 * P / total_gpus)


def deepspeed_zero_estimate(c, with_head: bool = False, legacy_zero2: bool = False) -> int | None:
    """DeepSpeed's GPU bytes for params, gradients and optimizer states (None below ZeRO-2: no estimator).

    What the estimator assumes that memsim does differently: fp16/bf16 weights + Adam in fp32 whatever the record's
    precision and optimizer say; every GPU a ZeRO data-parallel rank (TP/PP ignored, P is the whole model); no
    activations, logits, buffers, communication buckets, prefetch beyond the largest layer, CUDA context or
    allocator slack; ZeRO-3's '4 * largest layer' is the single largest tensor (the embedding), not a block.
    `legacy_zero2` selects the ZeRO-2 formula before PR #5099, which the published DeepSpeed docs printed.
    """
    if c.zero_stage < 2:
        return None
    P, gpus = deepspeed_params(c, with_head), n_gpus(c)
    offload = c.offload != Offload.NONE
    if c.zero_stage == 2:
        return _zero2_gpu_bytes(P, gpus, offload, legacy_zero2)
    largest = int(python_body(_params.largest_layer_params)(c))
    return _zero3_gpu_bytes(P, largest, gpus, offload, c.offload == Offload.OPTIMIZER_PARAMS)


def deepspeed_zero_estimate_host(
    c, with_head: bool = False, gpus_per_node: int = 8, zero_init: bool = True
) -> int | None:
    """DeepSpeed's CPU bytes per node (the 'per CPU' column), additional_buffer_factor 1.5 as the printers use.

    Nodes are ceil(n_gpus / gpus_per_node), equally filled. memsim's host_bytes is per GPU: divide by the GPUs
    of a node to compare.
    """
    if c.zero_stage < 2:
        return None
    total = n_gpus(c)
    nodes = -(-total // gpus_per_node)
    per_node, abf = total // nodes, 1.5
    P, offload = deepspeed_params(c, with_head), c.offload != Offload.NONE
    if c.zero_stage == 2:
        return int(P * (max(4 * total, 16) if offload else 4 * per_node) * abf)
    largest = int(python_body(_params.largest_layer_params)(c))
    if not offload:
        return int((largest if zero_init else P) * 4 * per_node * abf)
    states = 18 if c.offload == Offload.OPTIMIZER_PARAMS else 16  # + fp32 params, or fp16 params stay on GPU
    return int(P * (states / nodes if zero_init else max(4 * per_node, states / nodes)) * abf)
