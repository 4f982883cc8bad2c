"""What one dense layer keeps for backward under torch.compile (compile = true), per token.

Derived from the source, not measured: no peak of a compiled step can be measured on fake tensors
(data/measured/RECIPES.md, compile). What compile changes most is decided before any kernel exists and is traced
from the real code by engine/checks/measure/recipe_compile.py: AOTAutograd traces the block's joint graph with
Inductor's decompositions and min_cut_rematerialization_partition (torch/_functorch/partitioners.py) splits it;
the forward graph's extra outputs are the saved tensors. The partitioner recomputes pointwise chains in backward
and keeps matmul outputs, so a block keeps: its input (residual stream dtype), each norm's statistics and its
16-bit output once (shared by the projections it feeds, autocast casts included), the attention kernel's q, k,
v, output and logsumexp, the out-projection's output (the residual is recomputed from it), the FFN's up
projections' outputs and the down projection's input, and the residual dropouts' 1-byte masks.

Traced per token (B_c = 2): Llama block B_r·h + B_c·(3h + 2·a·d + 2·g·d + 3f) + 4a + 8 (llama-400m bf16 33,352,
amp_bf16 35,400; tinyllama GQA 59,528), GPT-2 block B_c·(8h + 2f) + 2h + 4a + 8 (gpt2-355m bf16 34,888).
MoE layers keep their eager set (not traced), and so do LoRA's and QLoRA's blocks (not traced: the adapters' inputs
and r-wide outputs, bitsandbytes' autograd functions). Symbols as in selective_op.py.
"""

from engine.inputs.codes import FFN, Attn, Norm
from engine.model.common import formula
from engine.model.params import head_dim, kv_heads
from engine.model.states import compute_bytes


@formula
def compiled_norm_stats_bytes(c, stream):
    """A norm's saved statistics: RMSNorm's fp32 rsqrt; LayerNorm's mean and rstd in the stream's dtype."""
    return 2 * stream if c.norm_type == Norm.LAYERNORM else 4


@formula
def compiled_replicated_bytes_per_token(c, stream, dropout):
    """Kept terms that stay whole under tensor parallelism: the block input, the two norms' outputs and
    statistics, the out-projection's output, the residual dropout masks."""
    h = c.d_model
    masks = 2 * h if dropout else 0
    return stream * h + compute_bytes(c) * 3 * h + 2 * compiled_norm_stats_bytes(c, stream) + masks


@formula
def compiled_split_bytes_per_token(c, ffn_inner):
    """Kept terms tensor parallelism splits: q, k, v and the attention output (and flash's logsumexp), the FFN's
    up projections' outputs and the down projection's input."""
    a, g, d = c.n_heads, kv_heads(c), head_dim(c)
    lse = 4 * a if c.attention == Attn.FLASH else 0
    ffn = (3 if c.ffn_type == FFN.SWIGLU else 2) * ffn_inner
    return compute_bytes(c) * (2 * a * d + 2 * g * d + ffn) + lse


@formula
def compiled_scores_bytes_per_key(c, dropout):
    """The s^2 terms per token and key outside flash: the softmax's probabilities (its input is recomputed) and
    the attention dropout's mask."""
    if c.attention == Attn.FLASH:
        return 0
    return c.n_heads * (compute_bytes(c) + (1 if dropout else 0))
