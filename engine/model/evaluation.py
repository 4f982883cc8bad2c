"""An evaluation forward between optimizer steps (eval_micro_batch): the phase that sets many runs' peak.

The HF Trainer evaluates after an optimizer step (Trainer._inner_training_loop: `model.zero_grad()` after
`optimizer.step()`, then `_maybe_log_save_evaluate` -> `evaluation_loop` -> `prediction_step`): `model.eval()`,
`torch.no_grad()`, the loss context (autocast under amp) and a forward with labels over
`per_device_eval_batch_size` samples, 8 by default whatever the training micro-batch. Nothing is saved for
backward, so what is live beside the persistent states (peak.eval_peak) is:

    autocast's weight casts     its cache takes every fp32 leaf that requires grad, in no_grad too
                                (aten/src/ATen/autocast_mode.cpp cached_cast), as in a training forward
    FSDP's gathered groups      as in a training forward
    the larger of               one layer's forward, bounded by what it keeps for backward in training without
                                recomputation (the evaluated layer frees as it goes: its live set never exceeds it)
                                the loss at its forward peak, beside the final hidden states the model's forward
                                still holds (last stage)

each for eval_micro_batch samples of seq_len tokens. Assumed: the Trainer keeps no logits across the evaluation
loop (its `evaluate()` asks for the loss alone when no compute_metrics is given); with compute_metrics and no
eval_accumulation_steps it gathers every batch's logits on the GPU, which is not modelled. Traced: data/measured/recipes.csv, knob eval (at the loss:
16-bit logits, their fp32 upcast and the fp32 log-probs, 10 B per token and vocabulary entry, and the hidden states).
"""

from engine.model.activations import kept_scores_bytes_per_key, local_tokens, stream_bytes
from engine.model.common import ceil_div, formula
from engine.model.loss import loss_forward_bytes
from engine.model.params import n_moe_layers
from engine.model.stage import attention_scores_bytes_per_token, full_layer_bytes


@formula
def evaluates(c):
    return c.eval_micro_batch > 0


@formula
def eval_scaled(c, nbytes):
    """nbytes of one training micro-batch, for eval_micro_batch samples instead (each term is linear in the batch)."""
    return ceil_div(nbytes * c.eval_micro_batch, c.micro_batch)


@formula
def eval_layer_bytes(c, r, layer):
    """One layer's forward during evaluation: what it would keep for backward without recomputation, scores
    included (an MoE layer's where the model has them; `layer`: stage.layer_bytes), but what only an autograd node
    keeps under PyTorch before 1.11, the softmax's input (softmax_saves_input: no node under torch.no_grad)."""
    moe = n_moe_layers(c) > 0
    whole = layer.moe_whole if moe else layer.dense_whole
    kept = kept_scores_bytes_per_key(c) * ceil_div(c.seq_len, c.cp) * c.cp
    if kept > 0:
        scores = attention_scores_bytes_per_token(c, r)
        whole -= full_layer_bytes(c, r, moe, scores) - full_layer_bytes(c, r, moe, scores - kept)
    return eval_scaled(c, whole)


@formula
def eval_loss_bytes(c):
    """The loss at its forward peak (loss.loss_forward_bytes) and the final hidden states, the head's input."""
    hidden = stream_bytes(c) * local_tokens(c) * c.d_model
    return eval_scaled(c, loss_forward_bytes(c, local_tokens(c)) + hidden)


@formula
def eval_work_bytes(c, r, layer, last):
    """The larger of one layer's evaluation forward and, on the last stage, the loss's."""
    return max(eval_layer_bytes(c, r, layer), eval_loss_bytes(c) if last else 0)


@formula
def eval_cast_bytes(c, r):
    """autocast's weight casts during evaluation: a trained model's, as in its training forward (r.cast_bytes). A
    LoRA base is frozen, so autocast caches none of it (the fp32 adapters' few casts are left out)."""
    return r.cast_bytes if c.lora_rank == 0 else 0


@formula
def eval_segment_bytes(c):
    """What an evaluation adds to the caching allocator's reserve: its loss blocks, eval_micro_batch / micro_batch
    times the training loss's, fit no block the training step cached, so each takes a segment of its own, and the
    training step's segments stay cached beside them (traced evaluations replayed: data/measured/RECIPES.md)."""
    if c.eval_micro_batch <= c.micro_batch:
        return 0
    return eval_scaled(c, loss_forward_bytes(c, local_tokens(c)))
