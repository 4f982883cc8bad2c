"""What a training loop holds from its last micro-step into the next (outputs_held).

LitGPT's finetune loops (finetune/lora.py at 8641822, litgpt/finetune/lora.py at 5895df10) bind the model's
output to a name, ``logits = model(input_ids, lm_head_chunk_size=128)``, that lives until the next iteration binds
it again, after the next forward has returned. The logits, and through their grad_fn the whole autograd graph,
stay alive through backward, the optimizer step and the next forward. Backward frees the graph's saved tensors but
not what its nodes hold as attributes: a quantized base's kept inputs (activations.quant_kept). Measured:
data/measured/qlora.csv, family outputs_held; LitGPT's own model code traced the same way, data/measured/QLORA.md.
"""

from engine.inputs.codes import LossImpl
from engine.model.activations import local_tokens
from engine.model.common import formula
from engine.model.loss import fp32_logits_bytes, logits_bytes, returned_logits_bytes, shifted_loss
from engine.model.stage import quant_kept_layer_bytes


@formula
def held_logits_bytes(c, last):
    """The last stage's logits as the model returned them (none for a loss fused with the head; fp32 from a
    transformers before 4.46, shifted_logits; fp32 as Lightning Fabric returns them, outputs_fp32), held through
    the step when outputs_held."""
    if not c.outputs_held or not last or c.loss_impl == LossImpl.FUSED_LINEAR:
        return 0
    t = local_tokens(c)
    return fp32_logits_bytes(c, t) if shifted_loss(c) else returned_logits_bytes(c, t)


@formula
def cast_source_bytes(c, last):
    """The model's own 16-bit logits while the loop's wrapper casts them (outputs_fp32): all its chunks stay alive
    until the cast list replaces them, beside the held logits of the last micro-step; with outputs_held that moment
    is the forward's peak (traced: data/measured/qlora.csv, outputs_fp32 family, the held row peaks at _to_copy)."""
    if not last:
        return 0
    t = local_tokens(c)
    return 0 if returned_logits_bytes(c, t) == logits_bytes(c, t) else logits_bytes(c, t)


@formula
def held_graph_bytes(c, layers):
    """The last micro-step's graph at the end of the next forward: what its nodes hold beyond the saved tensors
    backward freed (the kept quantized inputs of the rank's layers)."""
    return layers * quant_kept_layer_bytes(c) if c.outputs_held else 0
