"""``measure_case``: build, run two training steps under the tracker, report the measured step's peak."""

from __future__ import annotations

import torch

from engine.checks.measure import parallel
from engine.checks.measure.case import resolve
from engine.checks.measure.single_gpu import run_logged, summarize
from engine.errors import UserError

MEASURE_DEVICE = {"fake": "fake-cuda", "cpu-fake": "cpu-fake", "cpu": "cpu", "cuda": "cuda"}


def versions() -> dict[str, str]:
    """torch / transformers / peft versions, as CSV columns."""
    import peft
    import transformers

    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "peft_version": peft.__version__}


def resolve_for(case: dict, device: str) -> dict:
    """resolve(case), where torch.compile, which no fake tensor runs (recipes.COMPILE_REFUSAL), is accepted on a
    GPU (cuda_run.measure_compiled_on_cuda)."""
    from engine.checks.measure.recipes import COMPILE_REFUSAL

    try:
        return resolve(case)
    except UserError as err:
        if device != "cuda" or str(err) != COMPILE_REFUSAL:
            raise
    return {**resolve({**case, "compile": False}), "compile": True}


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
    c = resolve_for(case, device)
    if parallel.needs_world(c):
        if c["eval_micro_batch"] > 0:
            raise UserError("eval_micro_batch is measured on one GPU: the simulated world's step runs no evaluation")
        if device != "fake":
            raise UserError(f"multi-GPU layouts and experts are measured on device='fake' (one rank of a simulated "
                            f"world), not {device!r}")
        from engine.checks.measure.parallel_run import run_rank
        from engine.checks.measure.parallel_summary import summarize as summarize_rank

        measured = summarize_rank(run_rank(c), c)
    elif device == "cuda":
        from engine.checks.measure.cuda_run import measure_compiled_on_cuda, measure_on_cuda

        measured = measure_compiled_on_cuda(c) if c["compile"] else measure_on_cuda(c)
    else:
        lb, roles, model = run_logged(c, device)
        measured = summarize(lb, roles, model, c["allocator"])
    return {**c, **measured, "measure_device": MEASURE_DEVICE[device], **versions()}
