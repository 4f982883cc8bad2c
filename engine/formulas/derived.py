"""Quantities every later formula needs, computed once per configuration and kept on the record.

The parameter split of the most loaded rank and the resident model states do not depend on the workload
(seq_len, micro_batch, recomputation), so the sweep kernel derives them only when an axis they depend on
changes; the reference path derives them for every configuration. Same code either way.
"""

from engine.formulas.common import formula
from engine.formulas.params import block_params_per_gpu, params_per_gpu, trainable_params_per_gpu
from engine.formulas.states import device_grad_bytes, device_optimizer_bytes, device_weight_bytes


@formula
def derive(c):
    """Fill the record's rank_* fields (engine.config.DERIVED_FIELDS) from its inputs."""
    c.rank_params = params_per_gpu(c)
    c.rank_trainable_params = trainable_params_per_gpu(c)
    c.rank_block_params = block_params_per_gpu(c)
    c.rank_weight_bytes = device_weight_bytes(c)
    c.rank_grad_bytes = device_grad_bytes(c)
    c.rank_optimizer_bytes = device_optimizer_bytes(c)
