"""What one layer keeps for backward under PyTorch's selective activation checkpointing with torchtitan's op
policy (checkpointing = selective_op), per token.

torchtitan (torchtitan/distributed/activation_checkpoint.py, SelectiveAC): each block runs under
torch.utils.checkpoint with create_selective_checkpoint_contexts; the outputs of the ops in its save list are
kept, everything else is recomputed in backward: the attention kernels' outputs (flash: the output and its fp32
logsumexp; eager and the math path: the two bmm outputs, the scores and their product with v), every `addmm`
(a linear with a bias), and every other plain `mm` of the block (the 1st, 3rd, ...). Plus the block's input,
which the checkpoint keeps. Norms, rotary, activations, the gate·up product and the casts are recomputed.
Measured on real HF modules: data/measured/recipes.csv (knob selective_op), anatomy in RECIPES.md, e.g. a Llama
block with flash keeps B_r·h + B_c·(a·d + g·d + f + h) + B_c·a·d + 4·a per token (q, v, gate, down saved).

Under torch.compile (torchtitan compiles each checkpointed block), Inductor's partition honours the policy's tags
but saves only what backward reads: the block's last linear (the FFN's down projection; GPT-2's MLP c_proj), whose
output only the residual add reads, is kept by the eager policy's cache and not by the compiled graph. Traced with
`memsim measure --compiled` on a selective_op case (engine/checks/measure/recipe_compile.py), flash, per token:
Llama-3.2-1B dims 29,824 bf16 and 33,920 amp_bf16 (eager 33,920 and 38,016: B_c·h less), GPT-2 124M dims 15,408
(eager 16,944), Qwen2.5-0.5B dims 17,464 (its down projection is an even plain mm, recomputed: no change).
Dense layers only: an MoE layer's expert outputs are read by the router weights' gradient (not traced); and only
where nothing else reads the down projection's output (down_output_feeds_only_the_residual): not under a post-FFN
norm (Gemma 2 and 3, OLMo 2), whose backward reads it. What a compiled backward rebuilds is not traced:
stage.layer_bytes keeps the eager policy's recomputation.

Symbols: h d_model, a n_heads, g n_kv_heads, d head_dim, f d_ff, B_r the residual stream's bytes, B_c compute.
"""

from engine.inputs.codes import FFN, Attn, Bias
from engine.model.common import formula
from engine.model.params import head_dim, kv_heads
from engine.model.states import compute_bytes


@formula
def block_linears(c, ffn_inner):
    """The block's linears in call order (q, k, v, o, gate, up, down; a fused q/k/v or gate/up is one matmul, the
    other slots 0) as (output elements per token, has a bias, row-parallel) tuples."""
    h, a, g, d = c.d_model, c.n_heads, kv_heads(c), head_dim(c)
    qkv_bias = c.linear_bias != Bias.NONE
    all_bias = c.linear_bias == Bias.ALL
    if c.fused_projections:
        sizes = (a * d + 2 * g * d, 0, 0, h, (2 if c.ffn_type == FFN.SWIGLU else 1) * ffn_inner, 0, h)
    else:
        sizes = (a * d, g * d, g * d, h, ffn_inner, ffn_inner if c.ffn_type == FFN.SWIGLU else 0, h)
    biased = (qkv_bias, qkv_bias, qkv_bias, all_bias, all_bias, all_bias, all_bias)
    row_parallel = (False, False, False, True, False, False, True)  # o and down: their outputs are whole
    return sizes, biased, row_parallel


@formula
def policy_keeps(c, ffn_inner, j):
    """Whether the policy keeps linear j's output (block_linears' order): an addmm always, a plain mm when it is an
    odd-numbered one of the block's plain mm (the 1st, 3rd, ...), an absent slot never."""
    sizes, biased, _ = block_linears(c, ffn_inner)
    if sizes[j] == 0:
        return False
    if biased[j]:
        return True
    plain = 0
    for i in range(j + 1):
        if sizes[i] != 0 and not biased[i]:
            plain += 1
    return plain % 2 == 1


@formula
def kept_linear_outputs(c, ffn_inner):
    """The block's linear outputs the policy keeps, per token, as (column-parallel elements, row-parallel
    elements)."""
    sizes, _, row_parallel = block_linears(c, ffn_inner)
    column, row = 0, 0
    for i in range(7):
        if policy_keeps(c, ffn_inner, i):
            if row_parallel[i]:
                row += sizes[i]
            else:
                column += sizes[i]
    return column, row


@formula
def down_output_feeds_only_the_residual(c):
    """Whether nothing but the residual add reads the down projection's output: a pre-norm decoder (Falcon's
    parallel block, one norm, too). A norm after the FFN reads it in backward: Gemma 2's and 3's post-FFN norm
    (norms_per_layer = 4) and OLMo 2's (its RMSNorms follow attention and the FFN, none before; memsim knows OLMo 2
    by its q/k norm over all heads, models.toml); an encoder's post-LN (lm_head = false) is not traced, nor are
    LoRA's adapters on the projection."""
    return c.norms_per_layer <= 2 and not c.qk_norm_all_heads and c.lm_head and c.lora_rank == 0


@formula
def compiled_unsaved_bytes_per_token(c, ffn_inner):
    """What the policy keeps that a compiled block does not save, per token: the down projection's output, where
    the policy keeps it and only the residual add reads it (module docstring)."""
    if not down_output_feeds_only_the_residual(c) or not policy_keeps(c, ffn_inner, 6):
        return 0
    return compute_bytes(c) * c.d_model


@formula
def attention_kept_bytes_per_token(c):
    """The attention kernel's kept outputs per token (the s^2 scores apart): flash's output and fp32 logsumexp,
    or the weighted sum of the eager and math paths (the math path computes in fp32)."""
    a, d = c.n_heads, head_dim(c)
    if c.attention == Attn.FLASH:
        return compute_bytes(c) * a * d + 4 * a
    return attention_matmul_bytes(c) * a * d


@formula
def attention_matmul_bytes(c):
    return 4 if c.attention == Attn.SDPA_MATH else compute_bytes(c)


@formula
def selective_op_split_bytes_per_token(c, ffn_inner):
    """Kept terms tensor parallelism splits: the column-parallel linears' outputs and the attention's."""
    column, _ = kept_linear_outputs(c, ffn_inner)
    return compute_bytes(c) * column + attention_kept_bytes_per_token(c)


@formula
def selective_op_replicated_bytes_per_token(c, stream, ffn_inner):
    """Kept terms that stay whole under tensor parallelism: the block input (in the residual stream's dtype)
    and the row-parallel linears' outputs."""
    _, row = kept_linear_outputs(c, ffn_inner)
    return stream * c.d_model + compute_bytes(c) * row


@formula
def selective_op_scores_bytes_per_key(c):
    """The kept scores (the first bmm's output) per token and key: eager and the math path, not flash."""
    if c.attention == Attn.FLASH:
        return 0
    return attention_matmul_bytes(c) * c.n_heads
