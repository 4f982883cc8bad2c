"""Quantities every later formula needs, computed once per configuration and kept on the record.

The parameter split of the most loaded rank and the resident model states do not depend on the workload
(seq_len, micro_batch, recomputation), so the sweep kernel derives them only when an axis they depend on
changes; the reference path derives them for every configuration. Same code either way.
"""

from engine.model.activations import (
    head_bytes_per_token,
    replicated_bytes_per_token,
    scores_bytes_per_key,
    split_bytes_per_token,
    stream_bytes,
)
from engine.model.common import formula
from engine.model.params import n_moe_layers
from engine.model.peak import layout_reason
from engine.model.split import (
    block_params_per_gpu,
    params_per_gpu,
    trainable_params_per_gpu,
)
from engine.model.states import (
    device_grad_bytes,
    device_optimizer_bytes,
    device_weight_bytes,
    host_bytes,
)
from engine.model.temporaries import (
    autocast_cache_bytes,
    ddp_bucket_bytes,
    dequant_bytes,
    optimizer_step_bytes,
    zero3_gather_bytes,
    zero3_grad_bytes,
)


@formula
def derive_layout(c, dp_mode):
    """dp = n_gpus / (tp*pp*cp) unless given (dp_mode 0); n_gpus = dp*tp*pp*cp when only dp is (1);
    both given (2): kept, and a mismatch makes the row invalid (CONFIG.md, Parallel layout)."""
    group = c.tp * c.pp * c.cp
    if dp_mode == 0:
        if c.n_gpus == 0:
            c.n_gpus = group
        c.dp = max(1, c.n_gpus // group)
    elif dp_mode == 1:
        c.n_gpus = c.dp * group


@formula
def derive(c):
    """Fill the record's rank_* fields (engine.inputs.vocabulary.DERIVED_FIELDS): the parameter split, the model states,
    the buffers that depend on them and the per-token activation terms, none of which the workload
    (seq_len, micro_batch, grad_accum, GPU, headroom) changes."""
    c.rank_params = params_per_gpu(c)
    c.rank_trainable_params = trainable_params_per_gpu(c)
    c.rank_block_params = block_params_per_gpu(c)
    c.rank_weight_bytes = device_weight_bytes(c)
    c.rank_grad_bytes = device_grad_bytes(c)
    c.rank_optimizer_bytes = device_optimizer_bytes(c)
    c.rank_host_bytes = host_bytes(c)
    c.rank_cast_bytes = autocast_cache_bytes(c)
    c.rank_gather_bytes = zero3_gather_bytes(c) + dequant_bytes(c)
    c.rank_reduce_bytes = zero3_grad_bytes(c)
    c.rank_step_bytes = optimizer_step_bytes(c)
    c.rank_bucket_bytes = ddp_bucket_bytes(c)
    c.rank_stream_bytes = stream_bytes(c)
    c.rank_replicated_per_token = replicated_bytes_per_token(c)
    c.rank_split_per_token = split_bytes_per_token(c, False)
    c.rank_moe_split_per_token = split_bytes_per_token(c, True) if n_moe_layers(c) > 0 else 0
    c.rank_scores_per_key = scores_bytes_per_key(c)
    c.rank_head_per_token = head_bytes_per_token(c)
    c.rank_layout_reason = layout_reason(c).value
