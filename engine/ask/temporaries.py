"""The temporaries bucket at the peak, by name: what `memsim explain` lists under "temporaries" (issue #21 item 7).

peak.stage_peak sums each phase's transient buffers into one number (their fixed part once per shape,
peak.stage_fixed), the fastest form for the kernels. This module
re-adds the same terms, each under its name and source, for the candidate peak the model picked: the same rank
(peak.peak's first, middle or last), the same phase and the same total. It is plain Python, called once per
explained configuration; tests/test_temporaries.py holds every itemization to the kernel's temp_bytes, so
a change to stage_peak that this module does not follow fails there. A peak it cannot match (none seen in the
tests) comes back as one "temporaries" part.
"""

from engine.inputs.codes import Phase
from engine.model.common import ceil_div
from engine.model.evaluation import eval_cast_bytes, eval_layer_bytes, eval_loss_bytes, evaluates
from engine.model.held import cast_source_bytes, held_graph_bytes, held_logits_bytes
from engine.model.loss import head_gradient_bytes, micro_batch_loss_bytes
from engine.model.peak import (
    accumulated_grad_bytes,
    buckets_bytes,
    embedding_grad_temp_bytes,
    forward_cast_bytes,
    grads_live_in_forward,
    rank_save_peak,
    save_peak,
    saved_cast_bytes,
    stage_fixed,
    stage_peak,
    stage_share,
)
from engine.model.pipeline import recv_buffer_bytes
from engine.model.sharding import fsdp, loss_prefetch_bytes, next_group_gather_bytes
from engine.model.split import rank_layers, stage_ranks
from engine.model.stage import layer_bytes, rank_layer_activation_bytes
from engine.model.temporaries import backward_workspace_bytes, tied_gradient_sum_bytes

# name -> where the buffer comes from
SOURCES = {
    "autocast weight casts": "torch.autocast's cached 16-bit copies (aten/src/ATen/autocast_mode.cpp cached_cast)",
    "gathered/dequantized weights": "ZeRO-3 / FSDP all-gathered blocks, a quantized base's dequantized weight "
                                    "(sharding.py, temporaries.py dequant_bytes)",
    "logits and loss": "the LM head's logits, their fp32 upcast (or the fp32 cast a wrapper returns, outputs_fp32) "
                       "and the loss's buffers (loss.py)",
    "LM-head gradient": "the logits' gradient into the head (loss.py head_gradient_bytes)",
    "gradient buckets": "DDP / DeepSpeed gradient buckets (temporaries.py ddp_bucket_bytes)",
    "pipeline receive buffers": "activations received from the previous stage (pipeline.py)",
    "held logits and graph": "the last micro-step's logits and graph a loop keeps (held.py, outputs_held), and this "
                             "step's 16-bit logits while a wrapper casts them (outputs_fp32)",
    "unsharded gradients (no_sync)": "FSDP's unsharded gradients every rank accumulates when only the last "
                                       "micro-batch syncs (grad_sync = last, peak.py accumulated_grad_bytes)",
    "layer backward workspace": "one block's gradient workspace (temporaries.py backward_workspace_bytes)",
    "recomputed activations": "one checkpointed block's activations, recomputed in backward (stage.py)",
    "prefetched blocks": "FSDP's next blocks gathered ahead in backward (sharding.py prefetch_bytes)",
    "reduce-scatter buffers": "one block's gradients on their way to the shards (sharding.py)",
    "loss backward": "the loss's gradient buffers and the head's prefetched shard (loss.py, sharding.py)",
    "embedding gradient": "the first stage's dense V x h embedding gradient (peak.py embedding_grad_temp_bytes)",
    "sharding buffers": "what ZeRO / FSDP holds when backward ends (sharding.py end_of_backward_bytes)",
    "tied-embedding gradient sum": "the tied embedding's two gradients summed (temporaries.py)",
    "optimizer step buffers": "the optimizer step's own buffers: foreach copies, fp32 upcasts (temporaries.py)",
    "next group gathered": "FSDP's next group gathered while a block reduce-scatters (sharding.py)",
    "evaluation loss": "an evaluation forward's logits, their fp32 upcast (or cast) and log-probs, and the final "
                       "hidden states for eval_micro_batch samples (evaluation.py eval_loss_bytes)",
    "evaluation layer": "one layer's forward during evaluation, bounded by what it keeps for backward in training "
                        "(evaluation.py eval_layer_bytes)",
    "tensor gathered to save": "the largest parameter or optimizer state, gathered whole on every "
                                                "rank on its way to rank 0's host memory (save_state_dict = full: "
                                                "save.py)",
    "unpartitioned weights at load": "the rest of the whole quantized base each GPU holds as the checkpoint loads, "
                                     "until ZeRO-3 partitions it (load.py)",
    "temporaries": "peak.py stage_peak (not itemized: tests/test_temporaries.py says where this happens)",
}


def forward_parts(c, r, rank, last, g):
    kept = recv_buffer_bytes(c, rank)
    parts = [("autocast weight casts", forward_cast_bytes(c, r, rank, last)),
             ("gathered/dequantized weights", r.gather_bytes)]
    if last:
        parts += [("logits and loss", micro_batch_loss_bytes(c).forward),
                  ("LM-head gradient", head_gradient_bytes(c))]
    return parts + [("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, False))),
                    ("pipeline receive buffers", kept),
                    ("unsharded gradients (no_sync)", accumulated_grad_bytes(c, r, rank))]


def held_forward_parts(c, r, rank, last, g):
    """outputs_held: the model's forward returned, its loss not begun (peak.stage_peak's model_t)."""
    held, graph = held_logits_bytes(c, last), held_graph_bytes(c, rank_layers(c, rank))
    parts = [p for p in forward_parts(c, r, rank, last, g) if p[0] not in ("logits and loss", "LM-head gradient")]
    return parts + [("held logits and graph", 2 * held + graph + cast_source_bytes(c, last))]


def backward_parts(c, r, rank, last, g):
    parts = [("gathered/dequantized weights", r.gather_bytes),
             ("autocast weight casts", saved_cast_bytes(c, r, rank, last))]
    if last:
        parts.append(("LM-head gradient", head_gradient_bytes(c)))
    one_layer = layer_bytes(c, r)
    freed = ceil_div(rank_layer_activation_bytes(c, r, one_layer, rank, 0), max(rank_layers(c, rank), 1))
    layer = [("layer backward workspace", backward_workspace_bytes(c)),
             ("recomputed activations", one_layer.recomputed), ("prefetched blocks", 2 * r.prefetch_bytes),
             ("reduce-scatter buffers", max(0, r.reduce_bytes - freed))]
    loss = [("loss backward", loss_prefetch_bytes(c, r) + micro_batch_loss_bytes(c).backward)] if last else []
    parts += layer if sum(b for _, b in layer) >= sum(b for _, b in loss) else loss
    return parts + [("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, True))),
                    ("pipeline receive buffers", recv_buffer_bytes(c, rank)),
                    ("held logits and graph", held_logits_bytes(c, last)),
                    ("unsharded gradients (no_sync)", accumulated_grad_bytes(c, r, rank))]


def end_of_backward_parts(c, r, rank, last):
    kept, held = recv_buffer_bytes(c, rank), held_logits_bytes(c, last)
    if c.optimizer_in_backward:
        return [("sharding buffers", r.end_bytes), ("optimizer step buffers", r.step_bytes),
                ("pipeline receive buffers", kept)]
    return [("sharding buffers", r.end_bytes), ("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, True))),
            ("tied-embedding gradient sum", tied_gradient_sum_bytes(c)), ("pipeline receive buffers", kept),
            ("held logits and graph", held + held_graph_bytes(c, rank_layers(c, rank)))]


def optimizer_parts(c, r, rank, last):
    return [("optimizer step buffers", stage_share(c, r, rank, r.step_bytes)),
            ("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, False))),
            ("pipeline receive buffers", recv_buffer_bytes(c, rank)),
            ("held logits and graph", held_logits_bytes(c, last) + held_graph_bytes(c, rank_layers(c, rank)))]


def eval_parts(c, r, rank, last):
    """An evaluation forward between steps (peak.eval_peak)."""
    layer, loss = eval_layer_bytes(c, r, layer_bytes(c, r)), eval_loss_bytes(c) if last else 0
    work = ("evaluation loss", loss) if loss >= layer else ("evaluation layer", layer)
    return [("autocast weight casts", stage_share(c, r, rank, eval_cast_bytes(c, r))),
            ("gathered/dequantized weights", r.gather_bytes),
            ("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, False))),
            ("pipeline receive buffers", recv_buffer_bytes(c, rank)),
            ("held logits and graph", held_logits_bytes(c, last) + held_graph_bytes(c, rank_layers(c, rank))), work]


def candidates(c, r, rank):
    """(phase, parts) of every peak stage_peak weighs for pipeline rank `rank`."""
    last, g = rank == c.pp - 1, grads_live_in_forward(c, rank)
    found = [(Phase.FORWARD, forward_parts(c, r, rank, last, g)), (Phase.BACKWARD, backward_parts(c, r, rank, last, g)),
             (Phase.BACKWARD, end_of_backward_parts(c, r, rank, last))]
    if c.outputs_held:
        found.append((Phase.FORWARD, held_forward_parts(c, r, rank, last, g)))
    if c.pp > 1 and not g and c.grad_accum > 1:  # the second backward and the end of the first stage's
        buckets = ("gradient buckets", stage_share(c, r, rank, r.bucket_bytes))
        found.append((Phase.BACKWARD, backward_parts(c, r, rank, last, g)))
        found.append((Phase.BACKWARD, [("pipeline receive buffers", recv_buffer_bytes(c, rank)),
                                       ("embedding gradient", embedding_grad_temp_bytes(c, rank)), buckets]))
    if not c.optimizer_in_backward:  # with it, the step runs in backward's hooks: end_of_backward_parts
        found.append((Phase.OPTIMIZER, optimizer_parts(c, r, rank, last)))
        if fsdp(c):
            found.append((Phase.BACKWARD, [("reduce-scatter buffers", r.reduce_bytes),
                                           ("next group gathered", next_group_gather_bytes(c, r)),
                                           ("pipeline receive buffers", recv_buffer_bytes(c, rank))]))
    if evaluates(c):
        found.append((Phase.EVAL, eval_parts(c, r, rank, last)))
    return found


def save_parts(c, r, rank):
    """A checkpoint's save between steps (peak.rank_save_peak)."""
    return [("tensor gathered to save", r.save_bytes),
            ("gradient buckets", stage_share(c, r, rank, buckets_bytes(c, r, False))),
            ("pipeline receive buffers", recv_buffer_bytes(c, rank)),
            ("held logits and graph",
             held_logits_bytes(c, rank == c.pp - 1) + held_graph_bytes(c, rank_layers(c, rank)))]


def named(parts) -> list[tuple[str, int]]:
    """Parts with the same name added up, largest first, zeros left out."""
    merged = {}
    for name, size in parts:
        merged[name] = merged.get(name, 0) + int(size)
    return sorted(((n, b) for n, b in merged.items() if b > 0), key=lambda nb: -nb[1])


def temporaries_at_peak(c, r) -> list[tuple[str, int]]:
    """The step's temp_bytes at its peak as named parts (largest first, zeros left out); they add up to it."""
    layer, loss = layer_bytes(c, r), micro_batch_loss_bytes(c)
    ranks = dict.fromkeys(stage_ranks(c) if c.pp > 1 else (0,))
    peaks = [(stage_peak(c, r, layer, loss, rank, True, stage_fixed(c, r, rank)), rank) for rank in ranks]
    best, rank = peaks[0]
    for p, k in peaks[1:]:
        if p.allocated_bytes > best.allocated_bytes:
            best, rank = p, k
    save = save_peak(c, r).allocated_bytes if r.save_bytes > 0 else 0
    if r.load_bytes > max(best.allocated_bytes, save):  # levels.step_terms: the load's peak is the run's
        return [("unpartitioned weights at load", int(r.load_bytes - r.columns.weight_bytes))]
    if save > best.allocated_bytes:  # ... or the save's
        rank = next(k for k in ranks if rank_save_peak(c, r, k).allocated_bytes == save)
        return named(save_parts(c, r, rank))
    for phase, parts in candidates(c, r, rank):
        if phase.value == best.phase and sum(int(size) for _, size in parts) == best.temp_bytes:
            return named(parts)
    return [("temporaries", int(best.temp_bytes))] if best.temp_bytes > 0 else []  # SOURCES["temporaries"]
