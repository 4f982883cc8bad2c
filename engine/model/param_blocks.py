"""The step's parameter-shaped blocks, and the freed blocks of forward and backward they can or cannot go into.

Backward makes each parameter's gradient, and a foreach optimizer step one state-sized buffer per parameter
(torch/optim/adamw.py `_multi_tensor_adamw`: `torch._foreach_sqrt(device_exp_avg_sqs)`): blocks the size of a
weight matrix, in the gradient's or the state's dtype. The caching allocator puts a request in the smallest free
block of its stream at least as large, splitting it, and makes a new segment only where none is
(c10/cuda/CUDACachingAllocator.cpp `get_free_block`, `alloc_block`). So these blocks reuse what forward and backward
freed, the saved activations and the loss's blocks, only where those are as large: a layer's activation blocks, or
the 20 MiB segments requests of 1 to 10 MiB share (`kLargeBuffer`, `kMinLargeAlloc`), take the matrices no larger
than them; the loss's blocks (the fp32 logits, the 16-bit logits, a chunk) and autocast's 16-bit copy of the
head's weight take the rest, each as many as fit, the largest first (the embedding's, then the FFN's, then
attention's), in the order the first step makes them: the gradients, the optimizer's states (torch.zeros_like in
`_init_group`), the step's buffers. What finds no freed block makes segments of its own, and from the second step on
every kind of block goes back to the free blocks of its own size (best fit), so the reserve holds the forward's and
backward's blocks and these segments side by side; but a state that settled in a freed block holds it for good, and
the next forward's blocks then split the homeless gradients' and buffers' segments, free by then, so those count
once.

Seen in the replayed traces (data/measured/PARALLEL.md, "One stream: the step's blocks beside the forward's"):
GPT-2 1.5B under autocast at 1,024 tokens reserves 37.69 GiB for a 29.01 GiB peak, 8.8 GiB of it the forward's
free segments at the optimizer step; Llama-3.2-1B dims with a chunked loss 28.29 GiB for 23.02; one-GPU full
fine-tunes of Llama 3.1 8B, Llama 3.2 3B and Qwen2.5 7B were 9-14% below their replays (data/measured/
full_finetune_cases.csv).

Under FSDP2 the parameters, gradients and states are shards (dim 0 over the d = dp * cp ranks) and the sharded
gradients live in the reduce-scatter stream's pool (streams.py); what each group's backward makes on the default
stream is its reduce-scatter input, the group's unsharded gradients in the reduce dtype (_fsdp_collectives.py
`foreach_reduce`): the root group's (embedding, final norm, head) is often the largest block of the step, and with the
optimizer on the host no state settles in the freed blocks to make it count once (the traced FSDP2 steps with
offload: PARALLEL.md).

Modelled where the picture is that simple: no tensor parallelism (TP's gathered inputs and DTensor's
redistributions are blocks not listed here), parameters whole on the rank (each pipeline stage with its own layers,
the first with the embedding, the last with the head and the loss's blocks) or sharded by FSDP2 on one stage
(ZeRO-1/2 and DeepSpeed keep their gradients in buckets and partitions of their own), dense layers, full training
with torch.optim, the default allocator (expandable segments grow their free tail instead of making a segment per
block).
"""

from engine.catalogs.conventions import (
    FRAMEWORK_TORCH_OPTIMIZER,
    OPTIMIZER_FACTORED,
    OPTIMIZER_STATE_BITS,
    OPTIMIZER_STATES,
    STEP_STATE_SIZED,
)
from engine.inputs.codes import FFN, ActFn, Allocator, Attn, LossImpl
from engine.model.activations import autocast, ffn_bytes, fused_kernels, local_tokens, stream_bytes
from engine.model.common import ceil_div, formula
from engine.model.loss import (
    compiled_loss,
    fp32_logits_bytes,
    head_gradient_bytes,
    logits_bytes,
    loss_block_bytes,
)
from engine.model.overhead import allocator_slack_bytes
from engine.model.params import has_dims, head_dim, kv_heads, layer_params, n_moe_layers, norm_params
from engine.model.sharding import accumulates_unsharded, fsdp, reduce_bytes_per_param, split_groups
from engine.model.states import (
    compute_bytes,
    grad_bytes_per_param,
    is_amp,
    offloads_optimizer,
    state_bytes,
    trains,
)

LARGE_BUFFER_BYTES = 20 << 20  # kLargeBuffer: the segment requests of 1 to 10 MiB share (CUDACachingAllocator.cpp)


@formula
def modelled(c):
    """Where the parameter-shaped blocks are worked out (module docstring): whole on one rank (DDP included; each
    pipeline stage its own layers, the first its embedding, the last its head and loss), or sharded by FSDP2 on one
    stage with every micro-batch's gradients reduced."""
    whole = c.zero_stage == 0 and not offloads_optimizer(c)
    sharded = fsdp(c) and not accumulates_unsharded(c) and c.pp == 1
    return (has_dims(c) and c.tp == 1 and (whole or sharded) and n_moe_layers(c) == 0
            and c.lora_rank == 0 and trains(c) and FRAMEWORK_TORCH_OPTIMIZER[c.framework]
            and not c.optimizer_in_backward and c.allocator == Allocator.CACHING)


@formula
def reduce_scatter_inputs(c):
    """FSDP2's reduce-scatter inputs, made on the default stream at the end of each group's backward
    (_fsdp_collectives.py foreach_reduce: the group's unsharded gradients in the reduce dtype, freed once the
    reduce-scatter has copied them out): the root group's (embedding, final norm and head; under split groups the
    larger of the embedding's and the head's) and one block's, in bytes."""
    element = reduce_bytes_per_param(c)
    embedding = c.vocab * c.d_model
    head = embedding if c.lm_head and not c.tied_embeddings else 0
    root = max(embedding, head + norm_params(c)) if split_groups(c) else embedding + head + norm_params(c)
    return element * root, element * layer_params(c, False)


@formula
def activation_block_bytes(c):
    """The largest block a layer's forward keeps for one micro-batch, at least the 20 MiB segment the smaller ones
    share: the FFN's intermediate (in fp32 where GPT-2's gelu_new runs under autocast, activations.py), the
    residual stream, or with eager or math attention one layer's fp32 scores."""
    tokens = local_tokens(c)
    ffn = 4 if c.act_fn == ActFn.GELU_NEW and autocast(c) and not fused_kernels(c) else ffn_bytes(c)
    block = max(tokens * c.d_ff * ffn, tokens * c.d_model * stream_bytes(c), LARGE_BUFFER_BYTES)
    if c.attention != Attn.FLASH:
        block = max(block, c.micro_batch * c.n_heads * ceil_div(c.seq_len, c.cp) * c.seq_len * 4)
    return block


@formula
def into_blocks(size, count, block, blocks):
    """`count` blocks of `size` (> 0) placed in `blocks` free blocks of `block` bytes, as many in each as fit: (how
    many are left, how many free blocks are left). The two cases that need no division come first: the step's
    homeless blocks are a chain of these placements, each waiting on the last one's divisions."""
    if blocks == 0 or count == 0 or block < size:  # none fits: block // size == 0
        return count, blocks
    if block >= count * size:  # all of them in the first block
        return 0, blocks - 1
    per_block = block // size
    used = min(blocks, ceil_div(count, per_block))
    return count - min(count, used * per_block), blocks - used


@formula
def placed(size, count, largest_activation, room, b0, n0, b1, n1, b2, n2):
    """Place `count` blocks of `size`: into a layer's freed activation blocks where no larger than the largest, while
    their `room` (bytes) lasts, then into the free blocks b0 <= b1 <= b2 (n0, n1, n2 of them), smallest first.
    Returns the bytes that find no block, the room and the free blocks left."""
    if count == 0 or size == 0:
        return 0, room, n0, n1, n2
    if size <= largest_activation:
        taken = count if room >= count * size else room // size  # min(count, room // size), dividing only if less
        count, room = count - taken, room - taken * size
    count, n0 = into_blocks(size, count, b0, n0)
    count, n1 = into_blocks(size, count, b1, n1)
    count, n2 = into_blocks(size, count, b2, n2)
    return count * size, room, n0, n1, n2


@formula
def loss_blocks(c):
    """The blocks the loss frees before backward makes the gradients, as (bytes, count) x 3: transformers' loss, its
    fp32 logits, log_softmax's output and its gradient, and under 16-bit compute the logits themselves; a compiled
    loss its 16-bit logits (loss.loss_block_bytes); a chunked loss its chunks, one more than loss_chunks with the
    upcast of the one in hand; a loss fused with the head one chunk; and autocast's 16-bit copy of the head's weight,
    freed once the head's backward, the first, is done (none without an LM head)."""
    t = local_tokens(c)
    if c.loss_impl == LossImpl.STANDARD and not compiled_loss(c):  # PyTorch < 1.11: and log_softmax's kept input
        fp32_blocks = 4 if c.softmax_saves_input and not fused_kernels(c) else 3
        first, second = (fp32_logits_bytes(c, t), fp32_blocks), (logits_bytes(c, t) if compute_bytes(c) == 2 else 0, 1)
    elif c.loss_impl == LossImpl.CHUNKED:
        first, second = (loss_block_bytes(c, t), c.loss_chunks + 1), (0, 0)
    else:
        first, second = (loss_block_bytes(c, t), 1), (0, 0)
    cast = (2 * c.vocab * c.d_model if is_amp(c) and c.lm_head else 0, 1)
    return first, second, cast


@formula
def smallest_first(x, y, z):
    """Three (bytes, count) pairs ordered by bytes."""
    if x[0] > y[0]:
        x, y = y, x
    if y[0] > z[0]:
        y, z = z, y
    if x[0] > y[0]:
        x, y = y, x
    return x, y, z


@formula
def homeless_bytes(c, grads_transient, freed):
    """stage_homeless_bytes of the whole model on one stage."""
    return stage_homeless_bytes(c, grads_transient, freed, c.n_layers, True, True)


@formula
def stage_homeless_bytes(c, grads_transient, freed, layers, first, last):
    """The bytes the step's parameter-shaped blocks add to the reserve beside forward's and backward's blocks (those
    holding `freed` bytes at their peak), 0 where not modelled, on a pipeline stage of `layers` layers (the `first`
    holds the embedding, the `last` the head and the loss's blocks). In the order the first step makes them: the
    gradients (made every step: `grads_transient`) take the freed blocks they fit, then the optimizer's states, then
    its step's state-sized buffers; what finds none makes segments of its own. A state that settled in a freed block
    holds it for good, so the next forward's blocks go where the homeless gradients and buffers were, which are free
    by then: those segments count once."""
    if not modelled(c):
        return 0
    grad = grad_bytes_per_param(c) if grads_transient and not fsdp(c) else 0  # FSDP's go to their own stream
    shards = c.dp * c.cp if fsdp(c) else 1  # FSDP2 shards every parameter on dim 0, and its states with it
    state = state_bytes(c) if OPTIMIZER_STATE_BITS[c.optimizer] == 0 else 1
    states, buffers = OPTIMIZER_STATES[c.optimizer] * (1 - OPTIMIZER_FACTORED[c.optimizer]), STEP_STATE_SIZED[
        c.optimizer, c.optimizer_impl]
    if offloads_optimizer(c) or c.paged:  # on the host, or in bitsandbytes' paged (managed) memory: not in the cache
        states, buffers = 0, 0
    h, a, g, d = c.d_model, c.n_heads, kv_heads(c), head_dim(c)
    ffn = (3 if c.ffn_type == FFN.SWIGLU else 2) * layers  # gate, up, down (or up, down): h x f each
    gate_up = 0  # Phi-3's fused gate_up_proj, one 2f x h matrix (fused_projections), beside the down projection
    if c.fused_projections and c.ffn_type == FFN.SWIGLU:
        ffn, gate_up = layers, layers
    # the embedding on the first stage, an untied head on the last (under a pipeline a tied one too: its own copy)
    head = 1 if last and c.lm_head and (not c.tied_embeddings or c.pp > 1) else 0
    embeddings = (1 if first else 0) + head
    grad_embeddings = embeddings - (1 if last and head_gradient_bytes(c) > 0 else 0)  # a fused loss: head's in forward
    if c.fused_projections:
        attention, attention_count, other, other_count = h * (a + 2 * g) * d, layers, h * a * d, layers
    else:
        attention, attention_count, other, other_count = h * a * d, 2 * layers, h * g * d, 2 * layers
    first_blocks, second, cast = loss_blocks(c)
    if not last:  # the loss and the head's cast are the last stage's
        first_blocks, second, cast = (0, 0), (0, 0), (0, 0)
    (b0, n0), (b1, n1), (b2, n2) = smallest_first(first_blocks, second, cast)  # best fit
    largest = activation_block_bytes(c)
    # the activation blocks' room: what forward and backward hold at their peak (`freed`, free by the optimizer
    # step) less the loss's blocks and the head's copy, counted as blocks of their own
    room = max(0, freed - b0 * n0 - b1 * n1 - b2 * n2)
    # by kind: the embedding's, the fused gate_up's, the FFN's, attention's (in the usual dims the largest first)
    numels = (c.vocab * h, 2 * h * c.d_ff, h * c.d_ff, attention, other)
    grad_counts = (grad_embeddings, gate_up, ffn, attention_count, other_count)
    counts = (embeddings, gate_up, ffn, attention_count, other_count)
    homeless = 0
    for k in range(5):
        left, room, n0, n1, n2 = placed(numels[k] * grad, grad_counts[k], largest, room, b0, n0, b1, n1, b2, n2)
        homeless += left
    if fsdp(c):  # the root's reduce-scatter input, and a block's, whose one segment every block reuses
        root, block = reduce_scatter_inputs(c)
        left, room, n0, n1, n2 = placed(block, 1, largest, room, b0, n0, b1, n1, b2, n2)
        homeless += left
        left, room, n0, n1, n2 = placed(root, 1, largest, room, b0, n0, b1, n1, b2, n2)
        homeless += left
    settled = 0  # the states that found a freed block (all of them, by kind)
    for k in range(5):
        shard = ceil_div(numels[k], shards) * state
        left, room, n0, n1, n2 = placed(shard, counts[k] * states, largest, room, b0, n0, b1, n1, b2, n2)
        settled += shard * counts[k] * states - left
    for k in range(5):
        shard = ceil_div(numels[k], shards) * state
        left, room, n0, n1, n2 = placed(shard, counts[k] * buffers, largest, room, b0, n0, b1, n1, b2, n2)
        homeless += left
    return max(0, homeless - settled)


@formula
def steady_reserved_bytes(c, allocated, churn, kept, grads_live, layers, first, last):
    """What the step reserves once every kind of block has segments of its own (module docstring), from the larger
    of its forward and backward peaks (`allocated`, `churn` of it activations and temporaries, `kept` the
    recomputation's pinned segments and FSDP's stream pools, `grads_live` whether the gradients outlive the step
    there) on a stage of `layers` layers, `first` and `last` or not: that peak with its churn's slack, and the
    parameter-shaped blocks no freed block takes; 0 where none is homeless (or not modelled), and the step's reserve
    is then the usual one."""
    homeless = stage_homeless_bytes(c, not grads_live, churn, layers, first, last)
    if homeless == 0:
        return 0
    return allocated + allocator_slack_bytes(churn, 0, 0) + kept + homeless
