"""Loading the checkpoint: what a GPU holds before the first step, where that is more than any step holds.

The caching allocator never returns a segment to the driver unless the cache is emptied, so a load that holds more
than the step sets the reserve (what nvidia-smi shows) for the whole run, and must itself fit. One such load is
modelled, with its sources:

    QLoRA under DeepSpeed ZeRO-3 (frameworks.toml quantized_load_whole): transformers builds a quantized model without
    deepspeed.zero.Init (modeling_utils.py, PreTrainedModel.get_init_context: zero.Init only `if not is_quantized`,
    a quantized model on the meta device, bitsandbytes quantizing each weight onto its GPU as it loads), so every
    rank holds the whole quantized base; deepspeed.initialize then partitions it (runtime/engine.py
    _configure_distributed_model: no parameter has a ds_id, `self.module.to(self.device)`; zero/stage3.py partitions
    each parameter, freeing its full tensor) and nothing empties the cache after (no empty_cache in ZeRO-3's
    initialization). Read in transformers 5.25.0 and DeepSpeed's main of 2026-08 (the same in transformers 4.39 and
    DeepSpeed 0.14, which PEFT's published 70B QLoRA run used; DeepSpeed issues #5617, #5660 report it).

The step then reuses the freed blocks where its requests fit them, and where they do not the allocator frees cached
blocks and retries before it reports out of memory: the run's reserve is the larger of the load's and the step's,
not their sum. The load's own reserve is its allocation: every quantized weight and its absmax are whole 512-byte
multiples and the large ones whole 2 MiB multiples (CUDACachingAllocator.cpp round_size), each in its own segment.
"""

from engine.catalogs.conventions import FRAMEWORK_QUANTIZED_LOAD_WHOLE
from engine.model.common import formula
from engine.model.split import lora_params_per_gpu
from engine.model.states import adapter_weight_bytes_per_param, quantized_base, whole_frozen_base_bytes


@formula
def loads_whole(c):
    """Every rank holds the whole quantized base before ZeRO-3 partitions it (above)."""
    return c.zero_stage >= 3 and quantized_base(c) and FRAMEWORK_QUANTIZED_LOAD_WHOLE[c.framework]


@formula
def load_bytes(c):
    """What one GPU holds when the load peaks (0 where the load holds no more than the step's weights): the
    whole frozen base and the LoRA adapters beside it, before deepspeed.initialize partitions them."""
    if not loads_whole(c):
        return 0
    return whole_frozen_base_bytes(c) + adapter_weight_bytes_per_param(c) * lora_params_per_gpu(c)
