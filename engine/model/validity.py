"""Whether a configuration can run at all: the rules a layout must follow, as Invalid codes (0 = it can run).

The layout rules depend on the model, method and layout only (levels.rank_terms checks them once per layout);
the sequence rules on the sequence length too (levels.step_terms); the GPU's rule on what its hardware runs
(levels.gpu_terms; levels.device_terms puts the three together). A row that breaks one is kept, with its
reason, never dropped (CONFIG.md, Outputs: valid, invalid_reason).

Magnitude guards come first: before any byte is counted in 64-bit integers, a float upper bound of everything
the level will compute is checked against 2^62, and a configuration beyond it is invalid (TOO_LARGE), never a
wrapped number. The bounds dominate every term of the model by construction (coefficients at least as large
as the largest per-parameter and per-token byte counts); tests/test_overflow.py checks the kernel against exact
arithmetic on huge random configurations.
"""

from engine.inputs.codes import Invalid, Offload, PPSchedule, Precision, Quant
from engine.model.common import formula
from engine.model.params import has_dims, kv_heads
from engine.model.states import trains

LIMIT = 2.0**62  # bytes: beyond any GPU, and an int64 sum of a few such terms cannot wrap


@formula
def parameter_bound(c):
    """A float upper bound of the parameters the dims (or n_params) describe, LoRA adapters included."""
    h, r_q, r_kv = float(c.d_model), float(c.q_lora_rank), float(c.kv_lora_rank)
    x = h + r_q + r_kv  # every projection's input width, MLA's low ranks included
    a = float(max(c.n_heads, c.n_kv_heads, 1))
    d = float(max(c.head_dim, c.qk_rope_head_dim + c.v_head_dim + c.head_dim, 1)) + float(c.d_model)
    f = float(max(c.d_ff, c.moe_d_ff, 1))
    experts = 1.0 + c.n_experts + c.n_shared_experts
    layer = 8.0 * x * a * d + 4.0 * (h + 1.0) * f * experts + 8.0 * (h + a * d) + (h + 1.0) * c.n_experts
    lora = 16.0 * c.lora_rank * (x + a * d + f) * experts
    return float(c.n_layers) * (layer + lora) + 2.0 * (c.vocab + c.n_positions + 1.0) * h + float(c.n_params)


@formula
def model_magnitude_ok(c):
    """The model's parameters, at up to 64 bytes each, stay below 2^62 bytes: they can be counted in int64."""
    return 64.0 * parameter_bound(c) <= LIMIT


@formula
def layout_magnitude_reason(c):
    """TOO_LARGE when the model states (at most 64 bytes per parameter counted) or the GPU count could exceed
    2^62."""
    gpus = float(max(c.dp, 1)) * c.tp * c.pp * c.cp
    if not model_magnitude_ok(c) or gpus * max(c.ep, 1) > LIMIT:
        return Invalid.TOO_LARGE
    return Invalid.OK


@formula
def step_magnitude_reason(c):
    """TOO_LARGE when the step's activations and temporaries could exceed 2^62 bytes: tokens x layers in flight x
    per-token bytes (with the s^2 scores), the logits, the attention gradients, beside the model states."""
    s, b, h, a = float(c.seq_len), float(c.micro_batch), float(c.d_model), float(max(c.n_heads, 1))
    tokens = s * b
    d = float(max(c.head_dim, c.qk_rope_head_dim + c.v_head_dim + c.head_dim, 1)) + h
    f = float(max(c.d_ff, c.moe_d_ff, 1)) * (1.0 + max(c.top_k, 1) * max(c.capacity_factor, 1.0) + c.n_shared_experts)
    per_token = 64.0 * (h + a * d + f + c.n_experts + c.lora_rank) + 16.0 * a * s
    in_flight = float(c.n_layers) * max(float(c.grad_accum), float(c.pp) * (c.vpp + 1.0), 1.0)
    loss = 64.0 * tokens * (c.vocab + 1.0)
    scores_grad = 16.0 * b * a * s * s
    total = tokens * per_token * in_flight + loss + scores_grad + 64.0 * parameter_bound(c)
    return Invalid.TOO_LARGE if total > LIMIT else Invalid.OK


@formula
def layout_reason(c):
    """The rules the sequence length plays no part in."""
    if layout_magnitude_reason(c) != Invalid.OK:
        return Invalid.TOO_LARGE
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
    if not has_dims(c):  # n_params alone gives the states, never the peak: no row answers without it
        return Invalid.NO_DIMS
    return model_layout_reason(c)


@formula
def model_layout_reason(c):
    """Rules that need the model's dims: heads over TP, layers over PP stages, experts over EP; and no more
    leading dense layers than layers (DeepSeek's first_k_dense_replace: params.n_moe_layers would go negative)."""
    if c.first_dense_layers > c.n_layers:
        return Invalid.DENSE_LAYERS
    if c.n_heads % c.tp != 0:
        return Invalid.TP_HEADS
    if kv_heads(c) % c.tp != 0:
        return Invalid.TP_KV_HEADS
    if not pipeline_split_fits(c):
        return Invalid.PP_LAYERS
    if c.ep > 1 and c.n_experts % c.ep != 0:
        return Invalid.EP_EXPERTS
    if c.ep > 1 and (c.dp * c.cp) % c.ep != 0:
        return Invalid.EP_DP
    if c.n_experts > 0 and c.top_k > c.n_experts:
        return Invalid.TOP_K
    return Invalid.OK


@formula
def pipeline_split_fits(c):
    """Every one of the p·v virtual stages gets at least one layer, pp_first_layers and pp_last_layers included
    (split.virtual_stage_layers); with two stages, given counts add up to n_layers."""
    n, first, last = c.pp * c.vpp, c.pp_first_layers, c.pp_last_layers
    if n == 1:
        return True
    fixed = (1 if first > 0 else 0) + (1 if last > 0 else 0)
    rest = c.n_layers - first - last
    if n - fixed == 0:
        return rest == 0
    return rest >= n - fixed


@formula
def sequence_reason(c):
    """Rules on the sequence length: SP splits it over tp, load-balanced ring attention into 2 * cp chunks, a
    learned position table (GPT-2, BERT) holds n_positions rows; and the step's magnitude."""
    if step_magnitude_reason(c) != Invalid.OK:
        return Invalid.TOO_LARGE
    if c.sp and c.seq_len % c.tp != 0:
        return Invalid.SP_SEQ
    if c.cp > 1 and c.seq_len % (2 * c.cp) != 0:
        return Invalid.CP_SEQ
    if c.n_positions > 0 and c.seq_len > c.n_positions:  # a learned position table has no row past its end
        return Invalid.SEQ_POSITIONS
    return Invalid.OK


@formula
def gpu_reason(c):
    """What the GPU's hardware cannot run: fp8 matmuls without FP8 tensor cores (data/architectures.toml)."""
    if c.precision == Precision.FP8 and not c.fp8_tensor_cores:
        return Invalid.NO_FP8
    return Invalid.OK
