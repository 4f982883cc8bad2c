"""What three public peer tools would say for a memsim configuration record `c`.

Each function re-derives one tool's published formula in plain Python from its source (file, function and the
commit read are cited in the comments), maps memsim's record onto the tool's inputs, and returns bytes per GPU:

    deepspeed_zero_estimate(c)       DeepSpeed's ZeRO-2/3 model-state estimators, GPU side (+ _host: CPU side)
    megatron_theoretical(c)          Megatron-LM's theoretical memory: weights+optimizer, activations, total
    llm_analysis(c)                  cli99/llm-analysis training memory: weights, grads, states, activations

They are comparisons, not the memory model: plain Python (no numba), floats where the tools use floats, rounded
to int bytes once at the end. Symbols as in engine/formulas: s seq_len, b micro_batch, h d_model, a n_heads,
g n_kv_heads, d head_dim, f d_ff, V vocab, L n_layers, E n_experts, t tp, p pp, v vpp, e ep, N data-parallel
ranks, P parameters. docs/peers.md tabulates the three against memsim and explains every difference;
`python -m engine.checks.peers.table` prints that table.
"""

from engine.checks.peers.common import python_body, dp_size, n_gpus, record  # noqa: F401
from engine.checks.peers.deepspeed import (  # noqa: F401
    deepspeed_params,
    deepspeed_zero_estimate,
    deepspeed_zero_estimate_host,
)
from engine.checks.peers.llm_analysis import llm_analysis  # noqa: F401
from engine.checks.peers.megatron import megatron_padded_vocab, megatron_theoretical  # noqa: F401
from engine.model import params as _params  # noqa: F401
