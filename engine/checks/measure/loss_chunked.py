"""torchtune's chunked cross-entropy: the LM head applied per token chunk, each chunk upcast on its own.

As torchtune 0.6 runs it (torchtune/modules/transformer.py ``TransformerDecoder.chunked_output`` and
torchtune/modules/loss/ce_chunked_output_loss.py ``CEWithChunkedOutputLoss``, the recipe's ``_loss_step``):

    h = norm(decoder(tokens))                                     # [b, s, d]
    logits = [output(chunk) for chunk in h.chunk(n, dim=1)]       # n tensors [b, s/n, V], all kept
    labels = [t.reshape(-1) for t in labels.chunk(n, dim=1)]
    total = sum(F.cross_entropy(l.reshape(-1, V).float(), t, reduction="sum") for l, t in zip(logits, labels))
    loss = total / (labels != ignore_index).sum()
    del logits                                                    # "free outputs otherwise it peaks backward memory"

So the half-precision logits are whole (``n`` chunks alive until the loss is computed) but only one chunk at
a time is upcast to fp32; each chunk's fp32 log-softmax is kept for backward (``log_softmax`` saves its
output), so all ``n`` of them are alive when backward starts. The functions below are that code, with the
model's head passed in (a Hugging Face ``lm_head``) instead of torchtune's ``TransformerDecoder.output``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def chunked_output(h: torch.Tensor, head: torch.nn.Module, n: int) -> list[torch.Tensor]:
    """``TransformerDecoder.chunked_output``: the head applied to ``h.chunk(n, dim=1)``."""
    return [head(chunk) for chunk in h.chunk(n, dim=1)]


def compute_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``CEWithChunkedOutputLoss.compute_cross_entropy``: upcast one chunk to fp32, summed CE."""
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")


def chunked_ce(logits: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """``CEWithChunkedOutputLoss.forward``: mean CE over the non-ignored tokens, one chunk at a time."""
    n = len(logits)
    total_elements = (labels != IGNORE_INDEX).sum()
    label_chunks = [t.reshape(-1) for t in labels.chunk(n, dim=1)]
    logit_chunks = [t.reshape(-1, t.size(-1)) for t in logits]
    total_loss = 0.0
    for logit_chunk, label_chunk in zip(logit_chunks, label_chunks):
        total_loss += compute_cross_entropy(logit_chunk, label_chunk)
    return total_loss / total_elements


def loss(h: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor, n: int, returned=lambda x: x) -> torch.Tensor:
    """The recipe's loss step after the decoder: chunked head, chunked CE, then ``del`` of the logits.
    ``returned``: what the training loop's wrapper does to the chunks the model returns (train.returned: Lightning
    Fabric's cast to fp32, as LitGPT runs its chunked head and loss)."""
    logits = returned(chunked_output(h, head, n))
    value = chunked_ce(logits, labels)
    del logits
    return value
