"""Loading the checkpoint: what a GPU holds before the first step, where that is more than any step holds.

A load that holds more than the step must fit itself, and can set the reserve (what nvidia-smi shows) for the run.
One such load is modelled, with its sources:

    QLoRA under DeepSpeed ZeRO-3 (frameworks.toml quantized_load_whole): transformers builds a quantized model without
    deepspeed.zero.Init (modeling_utils.py, PreTrainedModel.get_init_context: zero.Init only `if not is_quantized`,
    a quantized model on the meta device; quantizer_bnb_4bit.py sets device_map to the current GPU), and
    bitsandbytes quantizes each weight on that GPU as it loads (integrations/bitsandbytes.py Bnb4bitQuantize:
    `Params4bit(value, ...).to(value.device)`, the 16-bit weight already there), so every rank holds the whole
    quantized base, neither TP nor PP splitting it yet; deepspeed.initialize then partitions it (runtime/engine.py
    _configure_distributed_model: no parameter has a ds_id, `self.module.to(self.device)`; zero/partition_parameters.py
    allocates each parameter's partition, copies into it and frees the full tensor). Read in transformers 5.25.0 and
    DeepSpeed's main of 2026-08; transformers 4.39 and DeepSpeed 0.14, which PEFT's published 70B QLoRA run used, do
    the same (DeepSpeed issues #5617, #5660 report it).

The reserve after it: ZeRO-3 empties the cache once the parameters are partitioned (stage3.py
_create_fp16_partitions_with_defragmentation -> zero/utils.py defragment, without parameter offload), but each
partition was allocated while the full tensors were live, so the allocator's best fit (CUDACachingAllocator.cpp
get_free_block) put most of them in the block a previous parameter's full tensor had just freed, and a segment that
holds a live block is not released: the load's segments stay reserved, about as large as the whole base. The step's
requests reuse their free parts where they fit, and where they do not the allocator frees what it can and retries
before it reports out of memory. So the run's reserve is taken as the larger of the load's and the step's, not their
sum (to be replayed from a GPU trace). The load's own reserve is its allocation: the large quantized weights are
whole 2 MiB multiples (round_size), each in its own segment.
"""

from engine.catalogs.conventions import FRAMEWORK_QUANTIZED_LOAD_WHOLE
from engine.model.common import formula
from engine.model.params import lora_params_per_layer, param_count
from engine.model.states import base_bytes, quantized_base, unquantized_model_params

# peft creates the LoRA adapters in fp32 (nn.Linear's default dtype); DeepSpeed casts them to 16 bits only in
# deepspeed.initialize (runtime/engine.py _cast_module_mixed_precision), after the load.
ADAPTER_LOAD_BYTES = 4


@formula
def loads_whole(c):
    """Every rank holds the whole quantized base before ZeRO-3 partitions it (above)."""
    return c.zero_stage >= 3 and quantized_base(c) and FRAMEWORK_QUANTIZED_LOAD_WHOLE[c.framework]


@formula
def load_bytes(c):
    """What one GPU holds when the load peaks (0 where the load holds no more than the step's weights): the whole
    quantized base of the model, the 16-bit copy of its largest linear weight being quantized, and the fp32 LoRA
    adapters."""
    if not loads_whole(c):
        return 0
    quantizing = 2 * c.d_model * max(c.d_ff, c.moe_d_ff)  # the last large weight on its way to 4 bits
    adapters = ADAPTER_LOAD_BYTES * c.n_layers * lora_params_per_layer(c)
    return base_bytes(c, param_count(c), unquantized_model_params(c)) + quantizing + adapters
