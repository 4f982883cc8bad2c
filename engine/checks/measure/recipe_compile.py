"""What ``torch.compile`` keeps for backward: the forward graph Inductor's partitioner makes, traced, not run.

Example:
    memsim measure --compiled llama-400m-like_bf16_adamw_flash_s2048_b4
    memsim measure --compiled '{"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128}' --seq-len 64

Why no measured peak: a compiled model runs Inductor-generated kernels whose buffers are allocated by generated
code (``empty_strided``) that a fake tensor cannot run and the dispatcher-level tracker cannot see, and dynamo
refuses to trace while a non-infra TorchDispatchMode is active (torch/_dynamo/convert_frame.py: "non-infra torch
dispatch mode present, this is not supported today in torch.compile"), so ``recipes.check`` refuses
``compile=true``. What compile changes most, the tensors saved for backward, is decided before any kernel exists:
``torch._inductor.compile_fx.compile_fx`` traces the joint forward+backward graph with AOTAutograd (Inductor's
decompositions, joint-graph passes) and splits it with ``min_cut_rematerialization_partition``; the forward
graph's extra outputs are exactly the saved tensors. This module runs that real code on one transformer block (and
on the LM head with transformers' loss) of the dims in a case, with CUDA's autocast, dropout and SDPA choices
(``cuda_semantics``), stops at Inductor's ``inner_compile`` (no code generated or run), and reports the saved
tensors' bytes per token, each storage counted once, parameters and the graph's own inputs left out.

Under ``checkpointing = selective_op`` the block is wrapped as torchtitan wraps it before compiling it
(``checkpoint_wrapper`` with its op policy: recipe_checkpoint.py), and Inductor's partition honours the policy's
tags: the ops it must recompute are recomputed, and of those it must save, only what backward reads is saved.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from engine.checks.measure.build import build_model, transformer_blocks
from engine.checks.measure.case import resolve
from engine.checks.measure.cuda_semantics import cuda_semantics
from engine.checks.measure.train import HALF_DTYPE, autocast_context

SEQ_LEN = 256  # tokens a block or the head is traced on (per_token traces twice as many too)


class _Stop(Exception):
    """Raised from ``inner_compile`` once the forward graph is captured: nothing is generated or run."""


def saved_by_partition(fn, args: tuple, kwargs: dict, attention: str, precision: str) -> list[tuple]:
    """(name, shape, dtype, bytes) of each new storage the compiled ``fn`` saves for backward."""
    rows: list[tuple] = []

    def inner(gm, example_inputs, **kw):
        if kw.get("is_backward"):
            return gm.forward
        key = lambda v: v.untyped_storage()._cdata
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        names = dict(zip(placeholders, dynamo_inputs))  # AOT's primals are dynamo's graph inputs, in order
        is_param = lambda n: "_parameters_" in names.get(n, "") or "_buffers_" in names.get(n, "")
        tensors = [n for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)]
        params = {key(n.meta["val"]) for n in tensors if is_param(n)}
        inputs = {key(n.meta["val"]): names.get(n, n.name) for n in tensors if not is_param(n)}
        seen = set(params)
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        for node in outputs[1:]:  # the first output is the user output (one tensor here), the rest are saved
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or key(val) in seen:
                continue
            seen.add(key(val))
            name = f"input {inputs[key(val)]}" if key(val) in inputs else node.name
            rows.append((name, tuple(val.shape), str(val.dtype).replace("torch.", ""), val.untyped_storage().nbytes()))
        raise _Stop()

    from torch._inductor.compile_fx import compile_fx

    def backend(gm, inputs):
        dynamo_inputs[:] = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        return compile_fx(gm, inputs, inner_compile=inner)

    dynamo_inputs: list[str] = []
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, fullgraph=True)  # a graph break would run the rest eagerly
    with cuda_semantics(attention), autocast_context(precision, "cpu"):
        try:
            compiled(*args, **kwargs)
        except Exception as e:  # dynamo wraps the backend's exception
            if not isinstance(e, _Stop) and "_Stop" not in repr(e):
                raise
    return rows


def refusal(case: dict) -> str | None:
    """Why ``case``'s block cannot be traced here, or None: the trace compiles one plain block of the model, with no
    recomputation or with torchtitan's op policy (transformers' own checkpointing breaks dynamo's graph), and no
    LoRA or quantized base."""
    c = resolve(case)
    if c["checkpointing"] not in ("none", "selective_op"):
        return f"--compiled traces checkpointing none or selective_op, not {c['checkpointing']}"
    if c.get("lora_rank", 0) or c.get("base_quant", "none") != "none":
        return "--compiled traces a block without LoRA or a quantized base"
    return None


@contextlib.contextmanager
def hub_kernel_hooks_removed(module: torch.nn.Module):
    """For the duration, the modules of ``module`` run their own forward rather than the ``kernels`` package's
    wrapper around it (transformers' hub-kernel decorators): the wrapper sets a context variable on every call,
    a side effect dynamo refuses inside the checkpoint's higher-order op ("HOP: Unsafe side effect"). With no hub
    kernel loaded the wrapper calls the forward unchanged."""
    wrapped = {}
    for m in module.modules():
        forward = type(m).forward
        hooked = getattr(getattr(forward, "__code__", None), "co_name", "") == "new_forward"
        if hooked and hasattr(forward, "__wrapped__"):
            wrapped.setdefault(type(m), (forward, "forward" in vars(type(m))))
    for cls, (forward, _) in wrapped.items():
        cls.forward = forward.__wrapped__
    try:
        yield
    finally:
        for cls, (forward, own) in wrapped.items():
            if own:
                cls.forward = forward
            else:  # it was inherited: inherit it again
                del cls.forward


def checkpointed_as_torchtitan(block: torch.nn.Module) -> torch.nn.Module:
    """``block`` wrapped as torchtitan's SelectiveAC wraps a block under ``selective_op``: ``checkpoint_wrapper``
    with the op policy and ``early_stop=False`` (recipe_checkpoint.py)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from engine.checks.measure.recipe_checkpoint import _context_fn, save_ops

    return checkpoint_wrapper(block, context_fn=functools.partial(_context_fn, save_ops()), preserve_rng_state=True,
                              early_stop=False)


def block_saved(case: dict, seq_len: int = SEQ_LEN) -> tuple[list[tuple], int]:
    """What the compiled first transformer block of ``case`` saves, and the token count it ran on (under
    ``selective_op``, the block checkpointed as torchtitan checkpoints it)."""
    c = resolve({**case, "n_layers": 1, "vocab": 256, "seq_len": seq_len, "micro_batch": 1})
    dtype = HALF_DTYPE.get(c["precision"], torch.float32)
    model = build_model(c, dtype)
    block = transformer_blocks(model)[0]
    residual = torch.float32 if c["precision"] not in HALF_DTYPE else dtype
    x = torch.randn(1, seq_len, c["d_model"], dtype=residual, requires_grad=True)
    kwargs = {}
    if c["ffn_type"] == "swiglu":
        pos = torch.arange(seq_len)[None]
        kwargs = {"position_embeddings": model.model.rotary_emb(x, pos), "attention_mask": None, "position_ids": pos}
    if c["checkpointing"] != "selective_op":
        return saved_by_partition(block, (x,), kwargs, c["attention"], c["precision"]), seq_len
    with hub_kernel_hooks_removed(block):
        saved = saved_by_partition(checkpointed_as_torchtitan(block), (x,), kwargs, c["attention"], c["precision"])
    return saved, seq_len


def head_loss_saved(case: dict, seq_len: int = SEQ_LEN) -> tuple[list[tuple], int]:
    """What the compiled LM head + transformers' causal-LM loss saves (the logits path), per ``seq_len`` tokens."""
    c = resolve({**case, "seq_len": seq_len, "micro_batch": 1})
    dtype = HALF_DTYPE.get(c["precision"], torch.float32)
    head = torch.nn.Linear(c["d_model"], c["vocab"], bias=False, dtype=dtype)
    from transformers.loss.loss_utils import ForCausalLMLoss

    residual = torch.float32 if c["precision"] not in HALF_DTYPE else dtype
    h = torch.randn(1, seq_len, c["d_model"], dtype=residual, requires_grad=True)
    labels = torch.randint(0, c["vocab"], (1, seq_len))

    def head_loss(h):
        return ForCausalLMLoss(head(h), labels, vocab_size=c["vocab"])

    return saved_by_partition(head_loss, (h,), {}, c["attention"], c["precision"]), seq_len


def per_token(part, case: dict, seq_len: int = SEQ_LEN) -> tuple[float, int]:
    """(bytes per token, fixed bytes) saved by ``part`` (``block_saved`` or ``head_loss_saved``), from two sequence
    lengths: the fixed part is what does not grow with tokens (autocast's weight casts). The rotary cos/sin a block
    is given are left out (one pair serves every block). Exact when nothing saved grows as s x s (flash attention);
    with eager or math attention the slope holds an s-dependent term."""
    def total(s):
        return sum(r[3] for r in part(case, s)[0] if "position_embeddings" not in r[0])

    one, two = total(seq_len), total(2 * seq_len)
    slope = (two - one) / seq_len
    return slope, round(one - slope * seq_len)


def report(case: dict, seq_len: int = SEQ_LEN) -> str:
    """The saved tensors of one compiled block and of the compiled head + loss of ``case``, and their bytes per
    token (``per_token``, from ``seq_len`` and twice as many tokens)."""
    lines = []
    for title, part in (("block", block_saved), ("head + loss", head_loss_saved)):
        rows, tokens = part(case, seq_len)
        lines.append(f"{title}: saved for backward under torch.compile (Inductor partition), {tokens} tokens")
        lines += [f"  {name:<24}{shape!s:<24}{dtype:<10}{n:>14,} B" for name, shape, dtype, n in rows]
        slope, fixed = per_token(part, case, seq_len)
        lines.append(f"  {tokens} and {2 * tokens} tokens: {slope:,.2f} B/token + {fixed:,} B fixed (weight casts)")
    return "\n".join(lines)
