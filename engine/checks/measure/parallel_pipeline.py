"""Pipeline parallelism: one rank's stages of ``torch.distributed.pipelining``, with the real schedules.

Each stage is a ``StageModule`` holding the Hugging Face modules of its part of the model (the embedding on
the first stage, its decoder layers, the final norm and the head on the last) and running them as the
model's own ``forward`` does (``create_causal_mask``, the rotary embedding, each ``DecoderLayer``); the last
stage's loss is transformers' ``ForCausalLMLoss`` (``model.loss_function``: logits upcast to fp32). The
stages run under ``PipelineStage`` with static shapes and the schedule ``pp_schedule`` names:

    1f1b         Schedule1F1B            one stage per rank
    gpipe        ScheduleGPipe           one stage per rank, all forwards then all backwards
    interleaved  ScheduleInterleaved1F1B vpp stages per rank: rank r holds stages r, r + pp, ..., r + (vpp-1)pp

``grad_accum`` is the number of micro-batches per step (CONFIG.md: micro-batches per pipeline flush), each of
``micro_batch`` samples. ``step(..., return_outputs=False)`` as torchtitan calls it, so the last stage keeps
no logits beyond each micro-batch's loss.

Layers per stage (``stage_layers``): ``pp_first_layers`` on the first stage and ``pp_last_layers`` on the
last (0 = as even as possible), the rest split evenly over the stages between, the earlier stages taking
one more when they do not divide (as ``numpy.array_split``).

The fake process group cannot carry the schedule's start-up vote (each stage sends whether its shapes are
static and reads the product back with ``.item()``); ``static_vote`` gives the answer every rank reaches when
all stages are built with static shapes, as here: ``InferenceMode.STATIC``.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from engine.errors import UserError

SCHEDULES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B"}


def _even(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def stage_layers(c: dict) -> list[int]:
    """Decoder layers on each of the pp * vpp stages, in stage order (see module docstring).

    Examples
    --------
    >>> stage_layers({"n_layers": 10, "pp": 4, "vpp": 1, "pp_first_layers": 0, "pp_last_layers": 0})
    [3, 3, 2, 2]
    >>> stage_layers({"n_layers": 10, "pp": 4, "vpp": 1, "pp_first_layers": 1, "pp_last_layers": 1})
    [1, 4, 4, 1]
    """
    stages, n = c["pp"] * c["vpp"], c["n_layers"]
    first, last = c["pp_first_layers"], c["pp_last_layers"]
    if not first and not last:
        return _even(n, stages)
    middle_n = n - first - last
    free_ends = (first == 0) + (last == 0)
    parts = stages - 2 + free_ends
    spread = _even(middle_n, parts) if parts else []
    head = [first] if first else [spread.pop(0)]
    tail = [last] if last else [spread.pop()]
    return head + spread + tail


def check(c: dict) -> None:
    """UserError for a pipeline layout the harness cannot run."""
    pp, vpp, m, sched = c["pp"], c["vpp"], c["grad_accum"], c["pp_schedule"]
    if c["tied_embeddings"]:
        raise UserError("pipeline parallelism is measured on untied embeddings (the embedding is on the first "
                        "stage, the head on the last)")
    if c["n_experts"]:
        raise UserError("pipeline parallelism is measured on dense models")
    if sched == "interleaved" and vpp < 2:
        raise UserError("pp_schedule='interleaved' needs vpp >= 2")
    if sched != "interleaved" and vpp != 1:
        raise UserError(f"vpp={vpp} needs pp_schedule='interleaved'")
    if sched == "1f1b" and m < pp:
        raise UserError(f"Schedule1F1B needs grad_accum (micro-batches per step) >= pp: {m} < {pp}")
    if sched == "interleaved" and m % max(1, m // pp):
        raise UserError("interleaved 1F1B needs grad_accum to be a multiple of its rounds (grad_accum // pp)")
    first, last = c["pp_first_layers"], c["pp_last_layers"]
    if first < 0 or last < 0 or first + last > c["n_layers"]:
        raise UserError(f"pp_first_layers={first} and pp_last_layers={last} do not fit n_layers={c['n_layers']}")
    layers = stage_layers(c)
    if sum(layers) != c["n_layers"]:
        raise UserError(f"pp_first_layers={first} + pp_last_layers={last} must be n_layers={c['n_layers']} "
                        "with two stages")
    if min(layers) < 1:
        raise UserError(f"n_layers={c['n_layers']} leaves a pipeline stage without a layer: {layers}")


def stage_indices(c: dict, rank: int) -> list[int]:
    """The stages rank ``rank`` holds: rank, rank + pp, ... (one per virtual stage)."""
    return [rank + v * c["pp"] for v in range(c["vpp"])]


class StageModule(torch.nn.Module):
    """One pipeline stage of a Hugging Face causal LM, run as the model's own forward runs those modules."""

    def __init__(self, model, lo: int, hi: int, first: bool, last: bool, autocast) -> None:
        super().__init__()
        base = model.model
        self.config = model.config
        self.embed_tokens = base.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(base.layers[lo:hi])
        self.rotary_emb = base.rotary_emb
        self.norm = base.norm if last else None
        self.lm_head = model.lm_head if last else None
        self._autocast = autocast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask

        with self._autocast():
            h = self.embed_tokens(x) if self.embed_tokens is not None else x
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            mask = create_causal_mask(config=self.config, inputs_embeds=h, attention_mask=None, cache=None,
                                      position_ids=pos)
            pe = self.rotary_emb(h, position_ids=pos)
            for layer in self.layers:
                h = layer(h, attention_mask=mask, position_embeddings=pe, position_ids=pos)
            if self.lm_head is not None:
                h = self.lm_head(self.norm(h))
        return h


@contextmanager
def static_vote():
    """The schedule's start-up vote, answered as every rank answers it when all stages have static shapes."""
    from torch.distributed.pipelining import schedules, stage

    original = schedules._PipelineSchedule._warmup_p2p

    def _warmup_p2p(self, stages, has_backward, p2p_done):
        for st in stages:
            if stage.InferenceMode.needs_dynamic(st._user_meta, has_backward):
                raise UserError("a pipeline stage was built without static shapes")
            st._inference_mode = stage.InferenceMode.STATIC

    schedules._PipelineSchedule._warmup_p2p = _warmup_p2p
    try:
        yield
    finally:
        schedules._PipelineSchedule._warmup_p2p = original


def build_stages(model, c: dict, rank: int, materialize, autocast):
    """(stage modules, PipelineStage objects) of ``rank``; ``materialize(module)`` gives a stage its storage."""
    from torch.distributed.pipelining import PipelineStage

    layers = stage_layers(c)
    bounds = [sum(layers[:i]) for i in range(len(layers) + 1)]
    n_stages = len(layers)
    h, b, s, V = c["d_model"], c["micro_batch"], c["seq_len"], c["vocab"]
    # Between stages the residual stream: fp32 under amp (the embedding and the residual adds stay fp32), bf16 in
    # pure bf16; the head's logits: bf16 under amp_bf16 (autocast's matmul) and bf16.
    act_dtype = torch.bfloat16 if c["precision"] == "bf16" else torch.float32
    logit_dtype = torch.bfloat16 if c["precision"] in ("amp_bf16", "bf16") else torch.float32
    modules, stages = [], []
    for i in stage_indices(c, rank):
        first, last = i == 0, i == n_stages - 1
        mod = StageModule(model, bounds[i], bounds[i + 1], first, last, autocast)
        materialize(mod)
        act = lambda: torch.empty(b, s, h, dtype=act_dtype)
        inp = torch.randint(0, V, (b, s)) if first else act().requires_grad_()  # its gradient goes back a stage
        out = torch.empty(b, s, V, dtype=logit_dtype) if last else act()
        st = PipelineStage(mod, i, n_stages, torch.device("cpu"), input_args=(inp,), output_args=(out,),
                           output_grads=(None if last else act(),), input_grads=(None if first else act(),))
        st._runtime_validate = True  # every chunk's tensors checked against these shapes and dtypes
        stages.append(st)
        modules.append(mod)
    return modules, stages


def make_schedule(stages, c: dict, loss_fn):
    from torch.distributed import pipelining

    cls = getattr(pipelining, SCHEDULES[c["pp_schedule"]])
    target = stages if c["pp_schedule"] == "interleaved" else stages[0]
    return cls(target, c["grad_accum"], loss_fn=loss_fn)


@contextmanager
def chunk_phases(stages, lb):
    """Tell the tracker which micro-batch each forward and backward chunk is, and mark each micro-batch's first
    backward (its activations are those still alive then)."""
    saved = []
    for st in stages:
        fwd, bwd = st.forward_one_chunk, st.backward_one_chunk

        def forward_one_chunk(chunk, *args, _f=fwd, **kwargs):
            lb.phase, lb.micro, lb.layer, lb.module = "forward", chunk, None, ""
            return _f(chunk, *args, **kwargs)

        def backward_one_chunk(chunk, *args, _b=bwd, **kwargs):
            if f"backward{lb.step}.{chunk}" not in lb.marks:
                lb.mark(f"backward{lb.step}.{chunk}")
            lb.phase, lb.micro = "backward", chunk
            return _b(chunk, *args, **kwargs)

        st.forward_one_chunk, st.backward_one_chunk = forward_one_chunk, backward_one_chunk
        saved.append((st, fwd, bwd))
    try:
        yield
    finally:
        for st, fwd, bwd in saved:
            st.forward_one_chunk, st.backward_one_chunk = fwd, bwd


def run_schedule(schedule, stages, c: dict) -> None:
    """One schedule step (all micro-batches) as this rank runs it."""
    first = any(st.is_first for st in stages)
    last = any(st.is_last for st in stages)
    ids = torch.randint(0, c["vocab"], (c["micro_batch"] * c["grad_accum"], c["seq_len"]))
    kwargs = {"return_outputs": False}
    if last:
        kwargs |= {"target": ids, "losses": []}
    if first:
        schedule.step(ids, **kwargs)
    else:
        schedule.step(**kwargs)


def loss_function(model, c: dict, autocast):
    """transformers' causal-LM loss on a stage's logits (``ForCausalLMLoss``), under the step's autocast."""

    def loss_fn(logits, target):
        with autocast():
            return model.loss_function(logits=logits, labels=target, vocab_size=c["vocab"])

    return loss_fn


def no_autocast():
    return nullcontext()
