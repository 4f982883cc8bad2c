"""The memory model: small pure functions of one configuration record `c` (engine.inputs.vocabulary.RECORD).

Each function is compiled once with numba (`formula`), so the sweep kernel calls exactly the code the tests
call; `f.py_func` is the plain-Python reference of the same body. Bytes are int64; shards use `ceil_div`.

Symbols (as in the papers): s seq_len, b micro_batch, h d_model, a n_heads, g n_kv_heads, d head_dim,
f d_ff, V vocab, L n_layers, E n_experts, k top_k, t tp, p pp, c cp, e ep, N dp, P parameters.

    params.py       parameters per rank (TP/PP/EP split, most loaded stage), LoRA adapters
    states.py       weights, gradients, optimizer states (precision x optimizer x framework x ZeRO)
    activations.py  activations saved for backward (Korthikanti et al. 2022 generalised), pipeline in-flight
    temporaries.py  logits and loss, ZeRO-3 gathers, buckets, optimizer-step buffers, recompute
    overhead.py     CUDA context, cuBLAS workspaces, the NCCL communicators of each framework's groups, slack
    nccl.py         one NCCL communicator's device memory, from NCCL's source
    peak.py         the phased peak, fits, bottleneck, validity
"""

import engine

engine._configure_numba()  # numba's cache directory and threading layer, before the first njit(cache=True) below
from engine.model.common import ceil_div, formula  # noqa: F401
