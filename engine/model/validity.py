"""Whether a configuration can run at all: the rules a layout must follow, as Invalid codes (0 = it can run).

The layout rules depend on the model, method and layout only (levels.rank_terms checks them once per layout);
the sequence rules on the sequence length too (levels.step_terms). A row that breaks one is kept, with its
reason, never dropped (CONFIG.md, Outputs: valid, invalid_reason).
"""

from engine.inputs.codes import Invalid, Offload, PPSchedule, Quant
from engine.model.common import formula
from engine.model.params import has_dims, kv_heads
from engine.model.states import trains


@formula
def layout_reason(c):
    """The rules the sequence length plays no part in."""
    if c.n_gpus != c.dp * c.tp * c.pp * c.cp:
        return Invalid.GPUS_LAYOUT
    if c.vpp > 1 and (c.pp_schedule != PPSchedule.INTERLEAVED or c.pp == 1):
        return Invalid.VPP_SCHEDULE
    if c.lora_rank == 0 and c.base_quant != Quant.NONE and trains(c):
        return Invalid.QUANT_FULL_TRAINING
    if (c.offload != Offload.NONE and c.zero_stage == 0) or (
        c.offload == Offload.OPTIMIZER_PARAMS and c.zero_stage < 3
    ):
        return Invalid.OFFLOAD_ZERO
    if c.zero_stage > 0 and c.dp * c.cp == 1 and c.offload == Offload.NONE:
        return Invalid.ZERO_ONE_REPLICA
    if not has_dims(c):
        return Invalid.OK if c.tp == 1 and c.pp == 1 else Invalid.NO_DIMS
    return model_layout_reason(c)


@formula
def model_layout_reason(c):
    """Rules that need the model's dims: heads over TP, layers over PP stages, experts over EP."""
    if c.n_heads % c.tp != 0:
        return Invalid.TP_HEADS
    if kv_heads(c) % c.tp != 0:
        return Invalid.TP_KV_HEADS
    if c.n_layers % (c.pp * c.vpp) != 0:
        return Invalid.PP_LAYERS
    if c.ep > 1 and c.n_experts % c.ep != 0:
        return Invalid.EP_EXPERTS
    if c.ep > 1 and (c.dp * c.cp) % c.ep != 0:
        return Invalid.EP_DP
    if c.n_experts > 0 and c.top_k > c.n_experts:
        return Invalid.TOP_K
    return Invalid.OK


@formula
def sequence_reason(c):
    """Rules on the sequence length: SP splits it over tp, load-balanced ring attention into 2 * cp chunks."""
    if c.sp and c.seq_len % c.tp != 0:
        return Invalid.SP_SEQ
    if c.cp > 1 and c.seq_len % (2 * c.cp) != 0:
        return Invalid.CP_SEQ
    return Invalid.OK
