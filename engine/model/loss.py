"""The LM head and the loss: the tensors of t = s*b/cp tokens x V vocabulary entries that often set the peak.

    loss_impl       forward peak (inside the loss)              start of backward
    standard        logits B_c + fp32 copy + log-probs 4        log-probs + two fp32 gradients: 12·t·V
    standard, shifted_logits (transformers < 4.46)
                    fp32 logits + shifted copy + log-probs      the same (+ the fp32 logits if the loop holds them)
    standard, compiled  logits B_c (fused: no fp32 tensor)      logits and their gradient: 2·B_c·t·V
    chunked (n)     logits B_c + log-probs 4 + one fp32 chunk   the first chunk's gradients, or every chunk's
                                                                dlogits with three head-weight gradients
    fused_linear    head-weight and input gradients + one       the head-weight and input gradients
                    logits chunk of c tokens (no t·V tensor)

Sources: transformers/loss/loss_utils.py ForCausalLMLoss; torchtune modules/loss/ce_chunked_output_loss.py and
TransformerDecoder.chunked_output; liger-kernel ops/fused_linear_cross_entropy.py; Megatron
tensor_parallel/cross_entropy.py. Each term is measured in data/measured/RECIPES.md (loss_impl sections).
B_c is the compute dtype's size; vocabulary-parallel heads (TP) divide V. The tensors' functions take t, the
micro-batch's local tokens (activations.local_tokens), where the table above writes t: the workload's shape asks for
one token's worth where every step's loss is a whole multiple of it (loss_bytes_per_token), and a step multiplies
(step_loss_bytes).
"""

from typing import NamedTuple

from engine.catalogs.conventions import FRAMEWORK_DTENSOR_TP, FRAMEWORK_TORCH_PIPELINING
from engine.inputs.codes import LossImpl
from engine.model.activations import fused_kernels, local_tokens, stream_bytes
from engine.model.common import ceil_div, formula
from engine.model.params import has_dims
from engine.model.states import compute_bytes, trains, weight_bytes_per_param


@formula
def vocab_shards(c):
    """Ranks the logits are split over: t with Megatron's vocabulary-parallel loss or PyTorch's loss_parallel;
    1 under PyTorch's DTensor plan otherwise, whose head output is gathered on every rank (Replicate:
    data/measured/PARALLEL.md, tp: 12·s·b·V at the loss on every rank, not divided by t)."""
    if FRAMEWORK_DTENSOR_TP[c.framework] and not c.loss_parallel:
        return 1
    return c.tp


@formula
def logits_bytes(c, t):
    """The LM head's output, t·V in the compute dtype, over the vocabulary shards."""
    if not c.lm_head:
        return 0
    return ceil_div(compute_bytes(c) * t * c.vocab, vocab_shards(c))


@formula
def returned_logits_bytes(c, t):
    """The logits as the loss and the training loop see them: the compute dtype's, or fp32 under outputs_fp32,
    where the loop's wrapper casts the model's floating outputs to fp32 as it returns them (Lightning Fabric,
    fabric/wrappers.py _FabricModule.forward: `output = precision.convert_output(output)`; the true-half and
    bitsandbytes precision plugins convert to torch.get_default_dtype(), fp32: plugins/precision/half.py and
    bitsandbytes.py `convert_output`). The 16-bit logits die when the cast list replaces them. Not for a loss
    fused with the head or compiled with it (no logits are returned)."""
    if c.outputs_fp32 and not fused_kernels(c) and not loss_compiled(c) and c.loss_impl != LossImpl.FUSED_LINEAR:
        return fp32_logits_bytes(c, t)
    return logits_bytes(c, t)


@formula
def fp32_logits_bytes(c, t):
    if not c.lm_head:
        return 0
    return ceil_div(4 * t * c.vocab, vocab_shards(c))


@formula
def head_trains(c):
    """The LM head's weight gets a gradient (full training; LoRA freezes it)."""
    return c.lm_head and c.lora_rank == 0 and trains(c)


@formula
def head_weight_bytes(c, element_bytes):
    return ceil_div(element_bytes * c.vocab * c.d_model, c.tp)


@formula
def loss_forward_bytes(c, t):
    """Loss tensors at their forward peak (inside the loss), logits included.

    standard, HF ForCausalLMLoss: logits in the compute dtype, logits.float() (a copy unless already fp32),
    then log_softmax's fp32 output, which it saves: 10 bytes per token and vocabulary entry in bf16 (measured).
    Megatron: 16-bit logits and one fp32 copy, exponentiated in place and saved.
    chunked: every chunk's logits (the list lives until `del logits`) and log-probs, one chunk's fp32 copy.
    outputs_fp32: the logits are fp32 already (returned_logits_bytes): no upcast copy.
    fused_linear: see fused_linear_forward_bytes.
    """
    if not has_dims(c) or not c.lm_head:
        return 0
    if c.loss_impl == LossImpl.FUSED_LINEAR:
        return fused_linear_forward_bytes(c, t)
    if fused_kernels(c):
        return logits_bytes(c, t) + fp32_logits_bytes(c, t)
    if loss_compiled(c):  # the compiled cross-entropy keeps the 16-bit logits (all chunks') and two fp32 scalars
        return logits_bytes(c, t) + 8 * t
    if shifted_loss(c):  # the model's fp32 logits, their shifted copy and the log-probs
        return 3 * fp32_logits_bytes(c, t)
    upcast = 0 if compute_bytes(c) == 4 or c.outputs_fp32 else fp32_logits_bytes(c, t)
    if c.loss_impl == LossImpl.CHUNKED:
        upcast = ceil_div(upcast, c.loss_chunks)
    return returned_logits_bytes(c, t) + upcast + fp32_logits_bytes(c, t)


@formula
def loss_backward_bytes(c, t):
    """Loss tensors at the start of backward, the usual peak.

    standard: the saved fp32 log-probs, the nll gradient and log_softmax's input gradient, 12 bytes per token
    and vocabulary entry (measured: the peak op is _log_softmax_backward_data); the logits themselves are gone
    once the training loop drops the outputs, except with PyTorch before 1.11 (softmax_saves_input), whose
    log_softmax node keeps its fp32 input: 16 bytes. Megatron computes the gradient in place in its saved buffer,
    then casts it to 16 bits.
    chunked: autograd runs every chunk's cross-entropy backward before any chunk's head backward (the loss
    nodes are the newest), so the larger of the first chunk's (all log-probs, two fp32 chunk gradients) and
    all chunks' dlogits, the first two consumed, beside three V·h head-weight gradients at the first sum.
    fused_linear: the input gradient computed in the forward (the head-weight one is head_gradient_bytes).
    """
    if not has_dims(c) or not c.lm_head:
        return 0
    if c.loss_impl == LossImpl.FUSED_LINEAR:
        return t * c.d_model * stream_bytes(c)
    if fused_kernels(c):
        return fp32_logits_bytes(c, t) + (logits_bytes(c, t) if compute_bytes(c) != 4 else 0)
    if c.loss_parallel and c.tp > 1 and FRAMEWORK_DTENSOR_TP[c.framework]:
        # torch.distributed.tensor.parallel.loss_parallel: its backward keeps the shifted logits and makes
        # zeros_like, exp and add, four fp32 (s·b, V/t) tensors (PARALLEL.md, tp_loss_parallel).
        return 4 * fp32_logits_bytes(c, t)
    if compiled_loss(c):
        return 2 * logits_bytes(c, t)
    if c.loss_impl == LossImpl.CHUNKED:
        n = c.loss_chunks
        first_chunk = fp32_logits_bytes(c, t) + 2 * ceil_div(fp32_logits_bytes(c, t), n)
        if loss_compiled(c):  # compiled: every chunk's 16-bit logits and the first chunk's 16-bit gradient
            first_chunk = logits_bytes(c, t) + ceil_div(logits_bytes(c, t), n)
        weight_grads = 3 * head_weight_bytes(c, compute_bytes(c)) if head_trains(c) else 0
        all_dlogits = ceil_div(returned_logits_bytes(c, t) * max(n - 2, 0), n) + weight_grads
        return max(first_chunk, all_dlogits)
    if c.softmax_saves_input:  # PyTorch < 1.11: log_softmax's node keeps its fp32 input until its backward has run
        return 4 * fp32_logits_bytes(c, t)
    return 3 * fp32_logits_bytes(c, t)


@formula
def shifted_loss(c):
    """transformers before 4.46 (shifted_logits), e.g. modeling_llama.py at v4.38.0, LlamaForCausalLM.forward:
    `logits = self.lm_head(hidden_states); logits = logits.float()`, then with labels
    `shift_logits = logits[..., :-1, :].contiguous()` and CrossEntropyLoss on its flattened view; the output
    carries the fp32 logits. The 16-bit logits die at the upcast, the shifted copy when the forward returns (the
    log-probs are what log_softmax saves), so the forward's loss peak is three fp32 tensors of (s-1)·b·V, taken
    here as s·b·V; a loop that drops the output has the same backward as later versions, and one that holds it
    (outputs_held) holds fp32 logits (held.py). From 4.46 the model returns its 16-bit logits and
    loss_utils.ForCausalLMLoss upcasts them, still copying the shifted fp32 logits until transformers #36607
    (2025-03) shifted the labels instead: that era's forward (16-bit logits, fp32 copy, shifted copy, log-probs:
    14 B per token and entry) is not modelled. Traced: data/measured/qlora.csv, family shifted_logits."""
    return (c.shifted_logits and c.loss_impl == LossImpl.STANDARD and c.lm_head and not fused_kernels(c)
            and not loss_compiled(c))


@formula
def loss_compiled(c):
    """torch.compile covers the loss with its fp32 upcast (compile and compile_loss). torchtitan compiles its loss
    with the blocks since torchtitan/components/loss.py (build_cross_entropy_loss); before 2025 its train.py left
    loss_fn eager ("TODO: compiling loss function causes CUDA errors"), and torchtune's decoder upcasts the
    logits in its eager output layer (`self.output(h).float()`), outside what it compiles."""
    return c.compile and c.compile_loss


@formula
def compiled_loss(c):
    """torch.compile over the standard loss (torchtitan compiles the loss with the blocks, compile.components;
    the HF Trainer compiles the model's forward, loss included; torchtune's compiled chunked loss: the chunked
    branches). Derived from Inductor's partition of the head and transformers' loss, traced by
    engine/checks/measure/recipe_compile.py (data/measured/RECIPES.md, compile): the fused kernels never
    materialize the fp32 copy nor the log-probs; the forward keeps the 16-bit logits and two fp32 scalars per
    token (max, log-sum-exp), and the backward's fused kernel writes one 16-bit gradient of the logits beside
    them. Buffers inside the kernels are not known without running Inductor's code."""
    return loss_compiled(c) and c.loss_impl == LossImpl.STANDARD


@formula
def fused_linear_chunk_tokens(c, t):
    """Liger's chunk: the next power of two of t / ceil(V/h) tokens, at most t (a logits chunk of about t·h)."""
    target = ceil_div(t, ceil_div(c.vocab, c.d_model))
    chunk = 1
    while chunk < target:
        chunk *= 2
    return min(chunk, t)


@formula
def fused_linear_forward_bytes(c, t):
    """Liger's fused linear cross-entropy in the forward: the input gradient (t·h, the hidden states' dtype)
    and the loss per token, one logits chunk in the compute dtype (a new one per chunk under autocast, the
    previous alive while it is made), and the head weight's 16-bit casts under autocast (one cached, one per
    chunk for W.t()) or the fp32 weight-gradient product per chunk (fp32). The head-weight gradient is
    head_gradient_bytes."""
    h = c.d_model
    chunk = fused_linear_chunk_tokens(c, t)
    fixed = t * h * stream_bytes(c) + 4 * t
    logits_chunk = ceil_div(chunk * c.vocab * compute_bytes(c), vocab_shards(c))
    if weight_bytes_per_param(c) != compute_bytes(c):  # autocast: fp32 weight, 16-bit matmuls
        return fixed + 2 * logits_chunk + 2 * head_weight_bytes(c, compute_bytes(c))
    if compute_bytes(c) == 4:
        return fixed + logits_chunk + head_weight_bytes(c, 4)
    return fixed + logits_chunk


@formula
def loss_block_bytes(c, t):
    """The loss's block whose size recurs every micro-step, as loss_forward_bytes and loss_backward_bytes make it:
    the fp32 logits (standard; under fused kernels, chunked too), the 16-bit logits of a compiled loss (one chunk's
    when chunked), one fp32 chunk (chunked), one logits chunk (fused_linear). overhead.py's allocator slack keeps
    one block of this size beyond the allocated peak."""
    if not has_dims(c) or not c.lm_head:
        return 0
    if c.loss_impl == LossImpl.FUSED_LINEAR:
        return ceil_div(fused_linear_chunk_tokens(c, t) * c.vocab * compute_bytes(c), vocab_shards(c))
    if fused_kernels(c):
        return fp32_logits_bytes(c, t)
    if c.loss_impl == LossImpl.CHUNKED:
        if loss_compiled(c):
            return ceil_div(logits_bytes(c, t), c.loss_chunks)
        return ceil_div(fp32_logits_bytes(c, t), c.loss_chunks)
    if compiled_loss(c):
        return logits_bytes(c, t)
    return fp32_logits_bytes(c, t)


class LossBytes(NamedTuple):
    """The loss's tensors for one micro-batch: at its forward peak, at the start of backward, and its block that
    recurs every micro-step (loss_forward_bytes, loss_backward_bytes, loss_block_bytes)."""

    forward: int
    backward: int
    block: int


NOT_PROPORTIONAL = LossBytes(-1, -1, -1)  # no bytes per token: each step works its loss out (step_loss_bytes)


@formula
def loss_bytes(c, t):
    """The micro-batch's LossBytes, worked out."""
    return LossBytes(loss_forward_bytes(c, t), loss_backward_bytes(c, t), loss_block_bytes(c, t))


@formula
def micro_batch_loss_bytes(c):
    """The LossBytes of the configuration's own micro-batch (its local tokens), worked out."""
    return loss_bytes(c, local_tokens(c))


@formula
def proportional_loss(c):
    """Whether each of the loss's tensors is a whole number of bytes per local token t, the same for every micro_batch
    and seq_len: a standard loss (neither chunked nor fused with the head), every branch of whose three functions
    above is a sum of whole multiples of logits_bytes, fp32_logits_bytes and t, with logits that split
    evenly over the vocabulary shards (B_c·V and 4·V divisible by them: logits_bytes is then exactly t·B_c·V/shards
    and fp32_logits_bytes t·4·V/shards, no rounding)."""
    shards = vocab_shards(c)
    return (c.loss_impl == LossImpl.STANDARD and compute_bytes(c) * c.vocab % shards == 0
            and 4 * c.vocab % shards == 0)


@formula
def loss_bytes_per_token(c):
    """The loss's bytes per local token where proportional_loss, else NOT_PROPORTIONAL: what the workload's shape
    keeps (levels.Shape) so that a step multiplies (step_loss_bytes) rather than works the loss out."""
    if not proportional_loss(c):
        return NOT_PROPORTIONAL
    return loss_bytes(c, 1)


@formula
def step_loss_bytes(c, per_token):
    """The micro-batch's LossBytes: the shape's bytes per token (loss_bytes_per_token) times its local tokens, or
    worked out where they are not proportional."""
    if per_token.forward < 0:  # NOT_PROPORTIONAL: no bytes can be negative
        return micro_batch_loss_bytes(c)
    t = local_tokens(c)
    return LossBytes(t * per_token.forward, t * per_token.backward, t * per_token.block)


@formula
def head_gradient_bytes(c):
    """fused_linear computes the head weight's gradient in the forward: it exists from the loss on, through
    the whole backward, before any other gradient (Liger saves grad_weight for backward)."""
    if not has_dims(c) or c.loss_impl != LossImpl.FUSED_LINEAR or not head_trains(c):
        return 0
    return head_weight_bytes(c, weight_bytes_per_param(c))


@formula
def pipeline_kept_loss_bytes(c, microbatches):
    """torch.distributed.pipelining's last stage keeps each micro-batch's output (the logits) until its backward,
    and under GPipe every micro-batch's loss with its saved log-probs (the loss backward of one of them is
    loss_backward_bytes): data/measured/PARALLEL.md, pp_1f1b and pp_gpipe at the last rank."""
    if c.pp == 1 or not FRAMEWORK_TORCH_PIPELINING[c.framework] or not has_dims(c) or not c.lm_head:
        return 0
    t = local_tokens(c)
    kept = microbatches * logits_bytes(c, t)
    if c.loss_impl == LossImpl.STANDARD and not loss_compiled(c):
        kept += (microbatches - 1) * fp32_logits_bytes(c, t)
    return kept
