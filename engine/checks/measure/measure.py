"""``measure_case``: build, run two training steps under the tracker, report the measured step's peak."""

from __future__ import annotations

from contextlib import ExitStack

import torch

from engine.checks.measure import breakdown, parallel, recipes
from engine.checks.measure.build import build_model, transformer_blocks
from engine.checks.measure.case import resolve
from engine.checks.measure.cuda_semantics import (
    cpu_semantics,
    cuda_semantics,
    unpacked_sequences,
)
from engine.checks.measure.labels import ModuleLabels
from engine.checks.measure.tracker import LiveBytes
from engine.checks.measure.train import (
    HALF_DTYPE,
    host_state_tensors,
    make_optimizer,
    state_tensors,
    train_step,
)
from engine.errors import UserError

MEASURE_DEVICE = {"fake": "fake-cuda", "cpu-fake": "cpu-fake", "cpu": "cpu", "cuda": "cuda"}
MEASURED_STEP = 1


def versions() -> dict[str, str]:
    """torch / transformers / peft versions, as CSV columns."""
    import peft
    import transformers

    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "peft_version": peft.__version__}


def prepare(c: dict, device: str = "cpu", fake_mode=None):
    """(model, optimizer) for resolved case ``c``: precision applied, optimizer over trainable params.

    With ``fake_mode`` the model is built on the meta device and given fake CPU storage inside that
    mode (``module.to()`` cannot swap fake parameters, which peft needs), then re-tied.
    """
    dtype = HALF_DTYPE.get(c["precision"], torch.float32)
    if fake_mode is None:
        model = build_model(c, dtype).to(device)
    else:
        with torch.device("meta"):
            model = build_model(c, dtype)
        with fake_mode:
            model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
        getattr(model, "get_base_model", lambda: model)().tie_weights()
    model = recipes.wrap_model(model, c)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, make_optimizer(c["optimizer"], params)


def run_logged(c: dict, device: str = "fake") -> tuple[LiveBytes, dict[str, set[int]], torch.nn.Module]:
    """Two logged training steps of ``c``; returns the log, the role sets and the model.

    ``device``: ``'fake'`` (FakeTensorMode, CUDA semantics emulated), ``'cpu-fake'`` (FakeTensorMode,
    CPU semantics) or ``'cpu'`` (real CPU tensors: tiny models only).
    """
    if device != "fake" and c["attention"] == "flash" and c["dropout"] > 0:
        raise UserError(f"CPU's flash kernel has no dropout: measure attention='flash' with dropout "
                        f"{c['dropout']} on device='fake' (CUDA semantics)")
    with ExitStack() as stack:
        fake_mode = None
        if device in ("fake", "cpu-fake"):
            from torch._subclasses.fake_tensor import FakeTensorMode

            fake_mode = FakeTensorMode()
        model, opt = prepare(c, "cpu", fake_mode)
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        stack.enter_context(cuda_semantics(c["attention"]) if device == "fake" else cpu_semantics(c["attention"]))
        stack.enter_context(unpacked_sequences())
        stack.enter_context(recipes.step_context(c))
        lb = LiveBytes()
        for t in (*model.parameters(), *model.buffers()):
            lb.track(t, "weights")
        stack.enter_context(ModuleLabels(model, transformer_blocks(model), lb))
        with lb:
            train_step(model, opt, c, lb, "cpu")
            for t in host_state_tensors(opt):
                lb.record_of(t).host = True
            lb.step = MEASURED_STEP
            train_step(model, opt, c, lb, "cpu")
        roles = _roles(lb, model, opt)
    return lb, roles, model


def _roles(lb: LiveBytes, model: torch.nn.Module, opt) -> dict[str, set[int]]:
    """Record ids per role: weights, grads (``.grad`` now), optimizer state, autocast weight casts."""
    ids = lambda ts: {id(r) for r in map(lb.record_of, ts) if r is not None}
    weights = ids([*model.parameters(), *model.buffers()])
    grads = ids([p.grad for p in model.parameters() if p.grad is not None])
    casts = {id(r) for r in lb.records  # autocast's casts (forward, or a checkpoint recompute in backward)
             if r.op == "_to_copy" and r.phase != "optimizer" and r.src is not None and id(r.src) in weights}
    return {"weights": weights, "grads": grads, "optimizer": ids(state_tensors(opt)), "weight_casts": casts}


def summarize(lb: LiveBytes, roles: dict[str, set[int]], model: torch.nn.Module) -> dict:
    """The ``measured_*`` columns for the measured step of a logged run."""
    s = MEASURED_STEP
    start, end = lb.marks[f"step{s}"], lb.marks[f"end{s}"]
    tick = breakdown.peak(lb, start, end)[1]
    parts = breakdown.classify(breakdown.alive_at(lb, tick), lb, roles, s)
    params = list(model.parameters())
    return breakdown.measured_columns(lb, start, end, parts, breakdown.saved_for_backward(lb, roles, s),
                                      sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad))


def measure_case(case: dict, device: str = "fake") -> dict:
    """Measure the peak memory of two real training steps of ``case`` (a resolved configuration).

    Parameters
    ----------
    case : dict
        CONFIG.md names: the model dims (n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab,
        ffn_type, tied_embeddings, head_dim, norm_type, linear_bias, n_positions) and the workload,
        numerics and training-method fields; missing ones take ``case.DEFAULTS``.
    device : {'fake', 'cpu-fake', 'cpu', 'cuda'}
        'fake': FakeTensorMode with CUDA semantics emulated (no memory, no compute);
        'cpu-fake': FakeTensorMode with plain CPU semantics; 'cpu': real CPU tensors (tiny models);
        'cuda': real steps on the GPU, peaks from ``torch.cuda.max_memory_allocated/reserved``.

    Returns
    -------
    dict
        The resolved input fields plus the ``measured_*`` columns, ``measure_device`` and versions.

    Raises
    ------
    UserError
        An option no path measures (``parallel.check``, ``recipes.check``, fp8, a quantized base...) or
        dims transformers cannot build. Multi-GPU layouts and MoE models run one rank of a simulated world
        (``parallel_run.run_rank``; device='fake' only) and add the rank's anatomy columns.

    Examples
    --------
    >>> row = measure_case({"model": "tiny", "n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256,
    ...                     "vocab": 128, "ffn_type": "gelu", "seq_len": 32, "precision": "fp32",
    ...                     "optimizer": "sgd"})
    >>> row["measured_peak_phase"] in ("forward", "backward", "optimizer")
    True
    """
    if device not in MEASURE_DEVICE:
        raise UserError(f"unknown measure device {device!r}; accepted: {', '.join(MEASURE_DEVICE)}")
    c = resolve(case)
    if parallel.needs_world(c):
        if device != "fake":
            raise UserError(f"multi-GPU layouts and experts are measured on device='fake' (one rank of a simulated "
                            f"world), not {device!r}")
        from engine.checks.measure.parallel_run import run_rank
        from engine.checks.measure.parallel_summary import summarize as summarize_rank

        measured = summarize_rank(run_rank(c), c)
    elif device == "cuda":
        from engine.checks.measure.cuda_run import measure_on_cuda

        measured = measure_on_cuda(c)
    else:
        lb, roles, model = run_logged(c, device)
        measured = summarize(lb, roles, model)
    return {**c, **measured, "measure_device": MEASURE_DEVICE[device], **versions()}
